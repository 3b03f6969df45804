"""Item processors for the queue tests, importable by worker subprocesses (PYTHONPATH=tests)."""

from __future__ import annotations

import json
import time

from olmocr.pipeline.worker import Output
from olmocr.pipeline.queue import Item


class Slow:
    """One line per PDF after ``seconds``: an item that stays claimed long enough to interrupt."""

    def __init__(self, seconds: float = 1.0):
        self.seconds = seconds

    def __call__(self, item: Item) -> Output:
        time.sleep(self.seconds)
        lines = "".join(json.dumps({"source": p, "item": item.id}) + "\n" for p in item.pdfs)
        return Output(lines.encode(), {"documents": len(item.pdfs), "pages": len(item.pdfs)})


class Failing:
    def __call__(self, item: Item) -> Output:
        raise RuntimeError(f"cannot convert {item.pdfs[0]}")


def done_records(ws) -> dict[str, dict]:
    """The done record of every done item, as the queue keeps it (a live done marker, or its finished part's
    summary), by item id."""
    import olmocr.pipeline.queue as wq

    return {item: json.loads(data) for item, (_, data) in wq.done_items(ws).items() if data}
