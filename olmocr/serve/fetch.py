"""Documents a job names by URL, fetched by the service: ``http(s)://`` from the public internet only (never this
machine, its private networks or link-local addresses such as a cloud's metadata service, but for the networks
the config names), and ``s3://`` only under the prefixes the config lists (the service's credentials could otherwise
read anything they can for whoever calls it).

Where a name leads is checked when the connection is made, on the address actually connected to: a redirect, a
name that resolves to several addresses or one that resolves differently the second time reaches nothing the
first check would have refused."""

from __future__ import annotations

import ipaddress
import os
import socket
import time
from typing import Annotated
from urllib.parse import unquote, urljoin, urlsplit

import httpcore

from olmocr.config import Positive, Range
from olmocr.errors import UserError
from olmocr.serve.documents import Refused

REDIRECTS = (301, 302, 303, 307, 308)


def reachable(address: str, allowed: tuple = ()) -> bool:
    """Whether the service may connect to an IP address: one on the public internet (not loopback, private,
    link-local, shared, reserved, multicast or unspecified), or one in the ``allowed`` networks. An IPv4
    address mapped into IPv6 is judged as itself."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (ip.is_global and not ip.is_multicast) or any(ip in network for network in allowed)


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
                 allow_networks: list[str] | None = None, s3_prefixes: list[str] | None = None):
        """``timeout_s``: the whole fetch, redirects included. ``allow_networks``: networks (CIDR, as
        10.1.0.0/16) a URL may lead to beside the public internet; loopback, private and link-local addresses are
        otherwise refused, since anyone who can call the service would reach what this machine can, a cloud's
        metadata service among it. ``s3_prefixes``: s3://bucket/prefix under which a job may name documents (read
        with the workspace's access); none: no s3:// URLs."""
        self.timeout_s, self.max_redirects = timeout_s, max_redirects
        self.s3_prefixes = tuple(s3_prefixes or ())
        try:
            self.networks = tuple(ipaddress.ip_network(n, strict=False) for n in allow_networks or ())
        except ValueError as exc:
            raise UserError(f"fetch.allow_networks: {exc} (networks are written as 10.0.0.0/8 or fd00::/8)") from None

    def fetch(self, url: str, limit: int, access=None) -> tuple[bytes, str]:
        """The document's bytes (at most ``limit``) and the last part of its path, for display."""
        scheme = urlsplit(url).scheme.lower()
        if scheme == "s3":
            return self._s3(url, limit, access)
        if scheme not in ("http", "https"):
            raise Refused(422, f"url: {scheme or 'no'} scheme; a job's url is http(s):// or s3://")
        deadline = time.monotonic() + self.timeout_s
        with httpcore.ConnectionPool(network_backend=CheckedNetwork(self.networks), retries=0) as pool:
            for _ in range(self.max_redirects + 1):
                if urlsplit(url).scheme.lower() not in ("http", "https"):
                    raise Refused(422, f"url: redirected to {url}, not http(s)://")
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
        except httpcore.TimeoutException:
            raise Refused(422, f"url: {url} took longer than {self.timeout_s:g} s (fetch.timeout_s)") from None
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
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


def _under(url: str, prefix: str) -> bool:
    prefix = prefix if prefix.endswith("/") else prefix + "/"
    return url.startswith(prefix)


def _last_part(url: str) -> str:
    return os.path.basename(unquote(urlsplit(url).path)) or "document"
