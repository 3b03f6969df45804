"""Hooks into uvicorn's HTTP protocol (as pinned), for the service (``olmocr.serve``): a request's head must arrive
within a time limit. uvicorn calls the app only once a request's head is complete and has no limit on how long that
takes (its keep-alive timeout runs only between requests), so a client that opens connections and sends their
headers a byte at a time holds them open for ever; the body, which the app reads, is timed by the app."""

from __future__ import annotations

import json

from olmocr.private import Hook

PROTOCOL = "uvicorn.protocols.http.httptools_impl.HttpToolsProtocol"
HOOKS = {
    "connection_made": Hook(f"{PROTOCOL}.connection_made", ("self", "transport"),
                            "a connection's first request head is timed from when the connection is made"),
    "on_headers_complete": Hook(f"{PROTOCOL}.on_headers_complete", ("self",),
                                "the head is complete: its timer stops before the app is called"),
    "on_response_complete": Hook(f"{PROTOCOL}.on_response_complete", ("self",),
                                 "the next request's head on a kept-alive connection is timed from the last answer"),
    "connection_lost": Hook(f"{PROTOCOL}.connection_lost", ("self", "exc"), "a closed connection's timer stops"),
}


def timed_protocol(head_timeout_s: float):
    """uvicorn's httptools protocol whose connections are answered 408 (one JSON error, then closed) when a request's
    head is not complete ``head_timeout_s`` after the connection was made or its last answer was sent."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    body = json.dumps({"error": f"the request's headers did not arrive within {head_timeout_s:g} s "
                                "(header_timeout_s)"}).encode()
    answer = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
              b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))

    class TimedHead(HttpToolsProtocol):
        head_timer = None

        def _time_head(self) -> None:
            self._stop_head()
            self.head_timer = self.loop.call_later(head_timeout_s, self._head_late)

        def _stop_head(self) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None

        def _head_late(self) -> None:
            self.head_timer = None
            if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
                self.transport.write(answer)
                self.transport.close()

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._time_head()

        def on_headers_complete(self) -> None:
            self._stop_head()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._time_head()

        def connection_lost(self, exc) -> None:
            self._stop_head()
            super().connection_lost(exc)

    return TimedHead
