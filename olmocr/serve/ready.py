"""``GET /ready``: whether the service can convert now, asked of the model server with a real page (a line of
text rendered and presented by the pipeline's own steps, sent as any page is), at most once every ``every_s``."""

from __future__ import annotations

import asyncio
import io
import threading
import time

PROBE_TEXT = "The service is ready."


def probe_page() -> bytes:
    """A PNG of one line of text, the page the probe sends."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (448, 112), "white")
    ImageDraw.Draw(image).text((16, 44), PROBE_TEXT, fill="black")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


class Readiness:
    """Set ``converter`` once the workers' model server is up; None while it starts (or with no workers here,
    when ready means the workspace answers). ``check()`` says (ready, why)."""

    def __init__(self, workspace, workers: int, every_s: float = 10.0, timeout_s: float = 60.0):
        self.workspace, self.workers = workspace, workers
        self.every_s, self.timeout_s = every_s, timeout_s
        self.converter = None
        self.stopped: str | None = None  # why the workers stopped, when they did
        self._lock = threading.Lock()
        self._last: tuple[float, bool, str] | None = None

    def check(self) -> tuple[bool, str]:
        with self._lock:  # one probe at a time; callers meanwhile wait for its answer
            # A ready answer holds for every_s; a server not ready yet is asked again within a second.
            if self._last is not None and time.monotonic() - self._last[0] < (self.every_s if self._last[1] else 1.0):
                return self._last[1], self._last[2]
            ready, why = self._probe()
            self._last = (time.monotonic(), ready, why)
            return ready, why

    def _probe(self) -> tuple[bool, str]:
        from olmocr.faults import store_errors
        from olmocr.pipeline.convert import error_gist
        from olmocr.pipeline.queue import queued_anything

        if self.stopped is not None:
            return False, f"the service's workers stopped: {self.stopped}"
        try:
            queued_anything(self.workspace)
        except store_errors() as exc:
            return False, f"the workspace does not answer ({type(exc).__name__}: {exc})"
        if not self.workers:
            return True, "accepting jobs (no workers here: batch workers on the workspace convert them)"
        converter = self.converter
        if converter is None:
            return False, "the model server is starting"
        data = probe_page()
        sample = {"pdf_path": "ready.png", "page": 1, "image_bytes": data, "num_pages": 1, "page_size": (448.0, 112.0)}
        began = time.monotonic()
        try:
            result = converter.run(asyncio.wait_for(converter.convert(sample, None, None), self.timeout_s))
        except TimeoutError:
            return False, f"the model server did not answer a page in {self.timeout_s:g} s"
        if result.server_fault is not None or not result.answered:
            server = converter.server
            return False, (f"{server.name} at {server.url} did not answer a page: "
                           f"{error_gist(result.server_fault or 'no answer')}")
        return True, f"the model server answered a page in {time.monotonic() - began:.1f} s"
