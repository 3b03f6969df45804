"""A local chat-completions endpoint for the pipeline benchmarks: ready at once, and every request
answered with one valid page (front matter and a line of text), so no model is measured."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWER = json.dumps({
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": (
        "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\n"
        "is_diagram: False\n---\nA page, read.")}}],
    "usage": {"prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1010}}).encode()


def serve(on_request: Callable[[bytes], None]) -> str:
    """Start the endpoint on 127.0.0.1 (a daemon thread); ``on_request(body)`` runs for each chat request
    before it is answered. Its base URL (…/v1)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _reply(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # /health, /v1/models: ready
            self._reply(b'{"status": "ok", "data": [{"id": "stub"}]}')

        def do_POST(self):
            on_request(self.rfile.read(int(self.headers["Content-Length"])))
            self._reply(ANSWER)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/v1"
