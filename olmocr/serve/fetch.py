"""Documents a job names by URL, fetched by the service: ``http(s)://`` from the public internet only (never this
machine, its private networks or link-local addresses such as a cloud's metadata service, but for the networks
the config names), and ``s3://`` only under the prefixes the config lists (the service's credentials could otherwise
read anything they can for whoever calls it).

Where a name leads is checked when the connection is made, on the address actually connected to: a redirect, a
name that resolves to several addresses or one that resolves differently the second time reaches nothing the
first check would have refused."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated
from urllib.parse import quote, unquote, urljoin, urlsplit, urlunsplit

import httpcore

from olmocr.config import Positive, Range
from olmocr.errors import UserError
from olmocr.serve.documents import Refused

REDIRECTS = (301, 302, 303, 307, 308)


NAT64 = (ipaddress.ip_network("64:ff9b::/96"),)  # the well-known prefix: the low 32 bits are the IPv4 it reaches
UNROUTED_V6 = (ipaddress.ip_network("64:ff9b:1::/48"),)  # NAT64 for local use (RFC 8215): a private translator


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address leads to when it embeds one: IPv4-mapped (``::ffff:a.b.c.d``),
    IPv4-translated (``::ffff:0:a.b.c.d``), IPv4-compatible (``::a.b.c.d``), NAT64 (``64:ff9b::a.b.c.d``), 6to4
    (``2002:AABB:CCDD::``) and Teredo (its client)."""
    low = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if int(ip) >> 32 == 0xFFFF0000 or any(ip in net for net in NAT64):
        return low
    if int(ip) >> 32 == 0 and int(ip) > 1:  # ::a.b.c.d, not :: or ::1
        return low
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def reachable(address: str, allowed: tuple = ()) -> bool:
    """Whether the service may connect to an IP address: one on the public internet (not loopback, private,
    link-local, site-local, shared, reserved, multicast or unspecified), or one in the ``allowed`` networks. An
    IPv6 address that embeds an IPv4 one (mapped, translated, compatible, NAT64, 6to4, Teredo) is judged by that
    IPv4 address, where it leads."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if any(ip in network for network in allowed):
        return True
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = embedded_ipv4(ip)
        if embedded is not None:
            return reachable(str(embedded), allowed)
        if ip.is_site_local or any(ip in net for net in UNROUTED_V6):
            return False
    return ip.is_global and not ip.is_multicast


class CheckedNetwork(httpcore.SyncBackend):
    """httpcore's network, connecting only to addresses :func:`reachable` allows. The name is resolved here
    and the connection made to an address checked; TLS still verifies the certificate against the name."""

    def __init__(self, allowed: tuple = ()):
        self.allowed = allowed

    def connect_tcp(self, host: str, port: int, timeout=None, local_address=None, socket_options=None):
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise Refused(422, f"url: the host {host} does not resolve ({exc.strerror})") from None
        addresses = list(dict.fromkeys(info[4][0] for info in found))
        barred = [address for address in addresses if not reachable(address, self.allowed)]
        if barred:  # every address of the name, not only the one tried first: the next try may be another
            raise Refused(422, f"url: {host} is at {barred[0]}, a loopback, private or link-local address: this "
                               "service fetches only from the public internet and fetch.allow_networks")
        return super().connect_tcp(addresses[0], port, timeout, local_address, socket_options)


class Fetcher:
    """How the service fetches a document a job names (``fetch`` in conf/serve.yaml, built from these keys)."""

    def __init__(self, timeout_s: Positive = 60.0,
                 max_redirects: Annotated[int, Range(at_least=0, at_most=20)] = 5,
                 allow_networks: list[str] | None = None, s3_prefixes: list[str] | None = None,
                 concurrency: Annotated[int, Range(at_least=1)] = 8):
        """``timeout_s``: the whole fetch, redirects included. ``concurrency``: fetches under way at once, on
        threads of their own (never the threads that answer requests); a URL submitted while that many are under
        way is refused (503, Retry-After). ``allow_networks``: networks (CIDR, as
        10.1.0.0/16) a URL may lead to beside the public internet; loopback, private and link-local addresses are
        otherwise refused, since anyone who can call the service would reach what this machine can, a cloud's
        metadata service among it. ``s3_prefixes``: s3://bucket/prefix under which a job may name documents (read
        with the workspace's access); none: no s3:// URLs."""
        self.timeout_s, self.max_redirects, self.concurrency = timeout_s, max_redirects, concurrency
        self.s3_prefixes = tuple(s3_prefixes or ())
        self._busy, self._lock = 0, threading.Lock()
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="fetch")
        try:
            self.networks = tuple(ipaddress.ip_network(n, strict=False) for n in allow_networks or ())
        except ValueError as exc:
            raise UserError(f"fetch.allow_networks: {exc} (networks are written as 10.0.0.0/8 or fd00::/8)") from None

    async def fetch_apart(self, url: str, limit: int, access=None) -> tuple[bytes, str]:
        """:meth:`fetch` on the fetcher's own threads, answered within ``timeout_s`` (a name whose lookup hangs
        keeps its thread, not the request); Refused (503) while ``concurrency`` fetches are under way."""
        with self._lock:
            if self._busy >= self.concurrency:
                raise Refused(503, f"{self._busy} documents are being fetched, as many as this service fetches at "
                                   "once (fetch.concurrency); try again shortly", retry_after=5)
            self._busy += 1
        try:
            future = self._pool.submit(self.fetch, url, limit, access)
        except BaseException:
            self._done()
            raise
        future.add_done_callback(lambda _: self._done())
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.timeout_s + 1.0)
        except TimeoutError:
            raise Refused(422, f"url: {url} took longer than {self.timeout_s:g} s (fetch.timeout_s)") from None

    def _done(self) -> None:
        with self._lock:
            self._busy -= 1

    def fetch(self, url: str, limit: int, access=None) -> tuple[bytes, str]:
        """The document's bytes (at most ``limit``) and the last part of its path, for display."""
        url = checked_url(url)
        if urlsplit(url).scheme == "s3":
            return self._s3(url, limit, access)
        deadline = time.monotonic() + self.timeout_s
        with httpcore.ConnectionPool(network_backend=CheckedNetwork(self.networks), retries=0) as pool:
            for _ in range(self.max_redirects + 1):
                url = checked_url(url, redirected=True)
                found = self._get(pool, url, limit, deadline)
                if isinstance(found, bytes):
                    return found, _last_part(url)
                url = found
        raise Refused(422, f"url: more than {self.max_redirects} redirects (fetch.max_redirects)")

    def _get(self, pool: httpcore.ConnectionPool, url: str, limit: int, deadline: float) -> bytes | str:
        """The body, or where a redirect points."""
        left = max(deadline - time.monotonic(), 0.001)
        timeouts = {"connect": left, "read": left, "write": left, "pool": left}
        try:
            with pool.stream("GET", url, headers=[(b"User-Agent", b"olmocr-serve"), (b"Accept", b"*/*")],
                             extensions={"timeout": timeouts}) as response:
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers}
                if response.status in REDIRECTS and "location" in headers:
                    return urljoin(url, headers["location"])
                if response.status != 200:
                    raise Refused(422, f"url: {url} answered HTTP {response.status}")
                declared = headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise Refused(413, f"url: the document is {declared} bytes; this service takes at most {limit}")
                body = bytearray()
                for chunk in response.iter_stream():
                    body += chunk
                    if len(body) > limit:
                        raise Refused(413, f"url: the document is over {limit} bytes, the most this service takes")
                    if time.monotonic() > deadline:
                        raise Refused(422, f"url: {url} took longer than {self.timeout_s:g} s (fetch.timeout_s)")
                return bytes(body)
        except Refused:
            raise  # the address checked at connection
        except httpcore.TimeoutException:
            raise Refused(422, f"url: {url} took longer than {self.timeout_s:g} s (fetch.timeout_s)") from None
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol, ValueError) as exc:
            raise Refused(422, f"url: {url} could not be fetched ({type(exc).__name__}: {exc})") from None

    def _s3(self, url: str, limit: int, access) -> tuple[bytes, str]:
        from olmocr.pipeline.failures import Unavailable
        from olmocr.formats.document import DocumentError
        from olmocr.pipeline.inputs import read_document
        from olmocr.utils.io import filesystem

        if ".." in url.split("/") or not any(_under(url, prefix) for prefix in self.s3_prefixes):
            allowed = ", ".join(self.s3_prefixes) or "none (fetch.s3_prefixes is empty)"
            raise Refused(422, f"url: {url} is not under an s3:// prefix this service reads from: {allowed}")
        try:
            size = filesystem(url, access).size(url)
        except FileNotFoundError:
            raise Refused(422, f"url: {url} does not exist") from None
        except Exception as exc:  # noqa: BLE001 - the storage's own errors: credentials, network
            raise Refused(503, f"url: {url} cannot be read now ({type(exc).__name__}: {exc})") from None
        if size is not None and size > limit:  # refused before a byte of it is read
            raise Refused(413, f"url: the document is {size} bytes; this service takes at most {limit}")
        try:
            data = read_document(url, access)
        except DocumentError as exc:
            raise Refused(422, f"url: {exc}") from None
        except Unavailable as exc:
            raise Refused(503, f"url: {url} cannot be read now ({exc})") from None
        if len(data) > limit:
            raise Refused(413, f"url: the document is {len(data)} bytes; this service takes at most {limit}")
        return data, _last_part(url)


URL_SAFE = "/%:@!$&'()*+,;=?~-._#[]"  # what a URL may hold as it is; anything else is percent-encoded


def checked_url(url: str, redirected: bool = False) -> str:
    """``url`` as the service fetches it: http(s) or s3, a host that is a name or an address (an international name
    in its ASCII form), a port that is a number, characters outside ASCII in the path and query percent-encoded;
    Refused (422) saying what is wrong. ``redirected``: a redirect's target, said so."""
    said = f"redirected to {url[:200]}" if redirected else repr(url[:200])
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError as exc:
        raise Refused(422, f"url: {said} is not a URL ({exc})") from None
    scheme = parts.scheme.lower()
    if redirected and scheme not in ("http", "https"):
        raise Refused(422, f"url: {said}, not http(s)://")
    if scheme not in ("http", "https", "s3"):
        raise Refused(422, f"url: {said}: {scheme or 'no'} scheme; a job's url is http(s):// or s3://")
    if not host:
        raise Refused(422, f"url: {said} names no host")
    if scheme == "s3":
        return url
    try:
        ascii_host = host.encode("idna").decode("ascii") if not host.isascii() else host
    except UnicodeError as exc:
        raise Refused(422, f"url: {said}: the host is not a name ({exc})") from None
    if any(c in ascii_host for c in " \t\r\n/\\") or not ascii_host:
        raise Refused(422, f"url: {said}: the host is not a name")
    netloc = f"[{ascii_host}]" if ":" in ascii_host else ascii_host
    netloc += f":{port}" if port is not None else ""
    path = quote(parts.path, safe=URL_SAFE) or "/"
    query = quote(parts.query, safe=URL_SAFE)
    return urlunsplit((scheme, netloc, path, query, ""))


def _under(url: str, prefix: str) -> bool:
    prefix = prefix if prefix.endswith("/") else prefix + "/"
    return url.startswith(prefix)


def _last_part(url: str) -> str:
    return os.path.basename(unquote(urlsplit(url).path)) or "document"
