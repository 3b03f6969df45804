"""An HTTP proxy that puts a bad network between S3 clients and a server, for tests and benchmarks.

    python tests/support/faultproxy.py --upstream http://127.0.0.1:9000 --port 9100 --rate 0.1
    AWS_ENDPOINT_URL=http://127.0.0.1:9100 python -m olmocr.pipeline workspace=s3://work/ws …

A share ``rate`` of requests (any method: reads, listings, plain and conditional writes) meets one fault,
drawn evenly from

* ``reset_before``: the connection is reset before the request reaches the server,
* ``reset_after``: the server did the request, then the connection is reset (the answer is lost: a
  create that succeeded looks failed to its client, whose retry then finds the object there),
* ``internal_error`` (500 InternalError) and ``slow_down`` (503 SlowDown), the server never seeing it,
* ``stall``: the request waits ``stall_s`` (a range) before it goes on,

and, only when asked for, ``access_denied`` (403 AccessDenied, as for the wrong credentials). ``methods``
keeps the faults to requests of some HTTP methods: ``access_denied`` on PUT, POST and DELETE alone is
read-only credentials; ``paths`` (a regular expression) to requests for some objects.

:meth:`FaultProxy.outage` takes the server away altogether for a while: every request in it is reset;
:meth:`FaultProxy.outage_when` does so from the first request of a kind for a given object on.
Faults are drawn from a seeded generator; ``counts`` says how many of each met which kind of request.
"""

from __future__ import annotations

import argparse
import http.client
import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from olmocr.errors import UserError

FAULTS = ("reset_before", "reset_after", "internal_error", "slow_down", "stall")
_ERRORS = {"internal_error": (500, "InternalError", "We encountered an internal error. Please try again."),
           "slow_down": (503, "SlowDown", "Please reduce your request rate."),
           "access_denied": (403, "AccessDenied", "Access Denied")}
KNOWN = (*FAULTS, "access_denied")  # refused as with the wrong credentials: never drawn unless asked for
# Hop-by-hop: about one connection, not the request; the proxy frames what it forwards itself.
_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "te", "upgrade"}


class _Reset(Exception):
    """Drop the client's connection with a TCP reset."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *args):
        super().__init__(*args)
        self.resets: set[socket.socket] = set()

    def shutdown_request(self, request):
        if request in self.resets:  # no FIN first: the client sees the reset itself
            self.resets.discard(request)
            request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return self.close_request(request)
        return super().shutdown_request(request)


def request_kind(method: str, headers) -> str:
    """What a request does, as S3 sees it: GET, HEAD, PUT, PUT if-none-match (a create), PUT if-match, …"""
    if method == "PUT" and headers.get("If-None-Match"):
        return "PUT if-none-match"
    if method == "PUT" and headers.get("If-Match"):
        return "PUT if-match"
    return method


class FaultProxy:
    def __init__(self, upstream: str, rate: float = 0.1, faults: tuple[str, ...] = FAULTS,
                 stall_s: tuple[float, float] = (1.0, 4.0), seed: int = 0, host: str = "127.0.0.1", port: int = 0,
                 cover: tuple[str, ...] = (), methods: tuple[str, ...] = (), paths: str | None = None):
        unknown = set(faults) - set(KNOWN)
        if unknown or not faults:
            raise UserError(f"faults: expected some of {', '.join(KNOWN)}, got {', '.join(faults) or 'none'}")
        if not 0 <= rate <= 1:
            raise UserError(f"rate: must be in [0, 1], got {rate}")
        target = urlsplit(upstream)
        if target.scheme != "http" or not target.hostname:
            raise UserError(f"upstream: expected http://host:port, got {upstream!r}")
        self.upstream = (target.hostname, target.port or 80)
        self.rate, self.faults, self.stall_s = rate, tuple(faults), stall_s
        # Request kinds (request_kind's names) whose first request is always faulted: a run that makes few of
        # them (If-Match rewrites) still meets a fault in one, whatever the draws.
        self.uncovered = set(cover)
        self.methods = set(methods)  # empty: every method
        self.paths = re.compile(paths) if paths else None  # None: every path
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.counts: Counter = Counter()  # (fault or "ok", request kind) -> requests
        self._down_until = 0.0
        self._armed: list[tuple[str, re.Pattern, float]] = []  # outage_when's, each to begin once
        self._server = _Server((host, port), self._handler())
        self.endpoint = f"http://{host}:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="faultproxy", daemon=True)

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def outage(self, seconds: float) -> None:
        """From now on, for ``seconds``, the server is unreachable."""
        with self.lock:
            self._down_until = time.monotonic() + seconds

    def outage_when(self, method: str, path: str, seconds: float) -> None:
        """The first ``method`` request whose path matches ``path`` (a regular expression) begins an outage of
        ``seconds``, itself included: a fault at a chosen point of a run, however fast the run. Each call arms
        one more such outage."""
        with self.lock:
            self._armed.append((method, re.compile(path), seconds))

    @property
    def down(self) -> bool:
        return time.monotonic() < self._down_until

    def _draw(self, kind: str, path: str) -> str:
        with self.lock:
            for armed in self._armed:
                if kind.split()[0] == armed[0] and armed[1].search(path):
                    self._down_until = time.monotonic() + armed[2]
                    self._armed.remove(armed)
                    break
            exposed = (not self.methods or kind.split()[0] in self.methods) and (
                self.paths is None or bool(self.paths.search(path)))
            fault = "outage" if self.down else "ok" if not exposed else (
                self.rng.choice(self.faults) if self.rng.random() < self.rate or kind in self.uncovered else "ok")
            if fault not in ("ok", "outage"):
                self.uncovered.discard(kind)
            self.counts[fault, kind] += 1
            return fault

    def faulted(self) -> Counter:
        """Faults met so far, by kind of fault (outage included)."""
        with self.lock:
            out: Counter = Counter()
            for (fault, _), n in self.counts.items():
                if fault != "ok":
                    out[fault] += n
            return out

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients expect
            upstream: http.client.HTTPConnection | None = None

            def log_message(self, *args):
                pass

            def handle(self):
                try:
                    super().handle()
                except _Reset:
                    self.server.resets.add(self.connection)
                except (ConnectionError, TimeoutError):
                    pass  # the client went away
                finally:
                    if self.upstream is not None:
                        self.upstream.close()

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = bytearray()
                    while size := int(self.rfile.readline().split(b";")[0], 16):
                        data += self.rfile.read(size)
                        self.rfile.readline()
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                        pass
                    return bytes(data)
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
                for attempt in range(2):  # a kept-alive upstream connection may have been closed by the server
                    if self.upstream is None:
                        self.upstream = http.client.HTTPConnection(*proxy.upstream, timeout=120)
                    try:
                        self.upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                        for name, value in self.headers.items():
                            if name.lower() not in _HOP and name.lower() != "content-length":
                                self.upstream.putheader(name, value)
                        self.upstream.putheader("Content-Length", str(len(body)))
                        self.upstream.endheaders(body)
                        answer = self.upstream.getresponse()
                        data = answer.read()
                        return answer.status, answer.reason, answer.getheaders(), data
                    except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
                        self.upstream.close()
                        self.upstream = None
                        if attempt:
                            raise
                raise AssertionError("unreachable")

            def _answer(self, status: int, reason: str, headers: list[tuple[str, str]], data: bytes) -> None:
                self.send_response_only(status, reason)
                for name, value in headers:
                    if name.lower() not in _HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                length = next((v for n, v in headers if n.lower() == "content-length"), None)
                # HEAD answers the size of what a GET would send, and sends nothing.
                self.send_header("Content-Length", length if self.command == "HEAD" and length else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                self.wfile.flush()

            def _error(self, fault: str) -> None:
                status, code, message = _ERRORS[fault]
                data = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}'
                        f"</Message></Error>").encode()
                self._answer(status, code, [("Content-Type", "application/xml")], data)

            def _serve(self) -> None:
                body = self._body()
                fault = proxy._draw(request_kind(self.command, self.headers), urlsplit(self.path).path)
                if fault in ("outage", "reset_before"):
                    raise _Reset
                if fault in _ERRORS:
                    return self._error(fault)
                if fault == "stall":
                    time.sleep(proxy.rng.uniform(*proxy.stall_s))
                answer = self._forward(body)
                if fault == "reset_after":
                    raise _Reset
                self._answer(*answer)

            def handle_expect_100(self):
                # Answered here at once, so the client sends its body without waiting; the server gets the
                # whole request.
                self.send_response_only(100)
                self.end_headers()
                return True

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _serve

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="the server behind the proxy: http://host:port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--rate", type=float, default=0.1, help="share of requests that meet a fault")
    parser.add_argument("--faults", default=",".join(FAULTS), help="comma-separated: " + ", ".join(KNOWN))
    parser.add_argument("--methods", default="", help="comma-separated HTTP methods that may meet a fault (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    proxy = FaultProxy(args.upstream, args.rate, tuple(filter(None, args.faults.split(","))), seed=args.seed,
                       host=args.host, port=args.port,
                       methods=tuple(m.upper() for m in filter(None, args.methods.split(",")))).start()
    print(f"AWS_ENDPOINT_URL={proxy.endpoint} ({args.rate:g} of requests faulted: {args.faults})", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        print(" ".join(f"{k}={v}" for k, v in sorted(proxy.faulted().items())))
        proxy.stop()


if __name__ == "__main__":
    main()
