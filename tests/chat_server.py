"""A real local HTTP server that speaks the OpenAI chat-completions protocol and answers as a test scripts
it, recording every request (temperature, the image it was sent)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from PIL import Image

GOOD = "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\nis_diagram: False\n---\n"


def good(text: str) -> dict:
    return answer(GOOD + text)


def rotated(correction: int) -> dict:
    return answer(GOOD.replace("is_rotation_valid: True", "is_rotation_valid: False")
                  .replace("rotation_correction: 0", f"rotation_correction: {correction}") + "sideways text")


def answer(text: str, finish_reason: str = "stop", status: int = 200) -> dict:
    return {"text": text, "finish_reason": finish_reason, "status": status}


UNPARSEABLE = answer("no front matter here")
DROP = {"status": None}  # the connection is closed without an answer
CUT_OFF = answer(GOOD + "cut off", finish_reason="length")
SERVER_ERROR = answer("", status=500)


def pixels_key(image: Image.Image) -> str:
    return hashlib.sha1(image.convert("RGB").tobytes()).hexdigest()[:12]


class Request:
    def __init__(self, body: dict):
        self.body = body
        self.temperature = body["temperature"]
        parts = body["messages"][0]["content"]
        if isinstance(parts, str):  # a text-only request (a server check), no page
            parts = [{"type": "text", "text": parts}]
        self.text = next(p["text"] for p in parts if p["type"] == "text")
        url = next((p["image_url"]["url"] for p in parts if p["type"] == "image_url"), None)
        self.image = None
        if url is not None:
            assert url.startswith("data:image/png;base64,")
            self.image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
            self.image.load()

    def is_check(self) -> bool:
        from olmocr.pipeline.convert import CHECK_PAGE_COLOUR

        return self.image is not None and self.image.convert("RGB").getcolors(1) == [
            (self.image.width * self.image.height, CHECK_PAGE_COLOUR)]


class ChatServer:
    """``script(request) -> answer dict`` decides each reply; default: the next of ``answers`` in order
    (the last one repeats). ``checks``: the answer to the pipeline's check page (its start check, and the look it
    takes when the server refuses a page), or ``checks(n)`` for the n-th check (from 0)."""

    def __init__(self, answers: list[dict] | None = None, script: Callable[[Request], dict] | None = None,
                 api_key: str | None = None, checks: dict | None = None):
        self.requests: list[Request] = []
        # The pipeline's start check (its one page of a flat colour) is answered with ``checks`` (default:
        # as any page) and kept apart, so scripts and counts are about the real pages.
        self.checks: list[Request] = []
        self.check_answer = checks
        self.lock = threading.Lock()
        self.answers = list(answers or [good("hello")])
        self.script = script or self._next
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _refused(self) -> bool:
                """Without the server's key (when it has one): 401, as an API that checks keys answers."""
                if api_key is None or self.headers.get("Authorization") == f"Bearer {api_key}":
                    return False
                self._send(401, {"error": "invalid api key"})
                return True

            def do_GET(self):
                if self.path != "/health" and self._refused():
                    return
                self._send(200, {"status": "ok"} if self.path == "/health" else {"data": []})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self._refused():
                    return
                request = Request(body)
                with server.lock:
                    if request.is_check():
                        server.checks.append(request)
                        reply = server.check_answer or good("")
                        if callable(reply):
                            reply = reply(len(server.checks) - 1)
                    else:
                        server.requests.append(request)
                        reply = server.script(request)
                if reply.get("delay_s"):  # a server that takes this long to answer (or never, for the client)
                    time.sleep(reply["delay_s"])
                if reply["status"] is None:
                    self.close_connection = True
                    return
                if reply["status"] != 200:
                    self._send(reply["status"], {"error": reply.get("text") or "scripted failure"})
                    return
                self._send(200, {"choices": [{"index": 0, "finish_reason": reply["finish_reason"],
                                              "message": {"role": "assistant", "content": reply["text"]}}],
                                 "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _next(self, request: Request) -> dict:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
