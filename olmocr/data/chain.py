"""The ordered list of per-sample steps, built from the ``data.steps`` config."""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Callable, Mapping

from olmocr.data.steps import BuildPrompt, Reject, Step
from olmocr.errors import UserError
from olmocr.formats.prompts import MARKDOWN
from olmocr.utils.jsonl import mend, read_rows


class Pipeline:
    def __init__(self, steps: Mapping[str, Step]):
        self.steps = dict(steps)

    def __call__(self, sample: dict) -> dict:
        for name, step in self.steps.items():
            try:
                sample = step(sample)
            except Reject as reject:
                reject.step = name
                raise
        return sample

    @property
    def answer(self) -> str:
        """What a model prompted by these steps writes after its front matter (its prompt step's ``answer``:
        markdown, or blocks); markdown where no step prompts."""
        return next((step.answer for step in self.steps.values() if isinstance(step, BuildPrompt)), MARKDOWN)

    def __repr__(self) -> str:
        return "Pipeline(\n" + "".join(f"  {name}: {step!r}\n" for name, step in self.steps.items()) + ")"


AFTER_KEY = "_after_"


def step_order(steps: Mapping) -> list[str]:
    """Enabled step names in pipeline order: config order, except that a step with ``_after_: <name>``
    runs right after that step (several steps after one anchor keep their config order)."""
    enabled = [name for name, cfg in steps.items() if cfg is not None]
    order = [name for name in enabled if not steps[name].get(AFTER_KEY)]
    pending = [name for name in enabled if steps[name].get(AFTER_KEY)]
    last_follower: dict[str, str] = {}
    while pending:
        placed = [name for name in pending if steps[name][AFTER_KEY] in order]
        if not placed:
            name = pending[0]
            raise UserError(f"data.steps.{name}._after_: {steps[name][AFTER_KEY]!r} is not an enabled step "
                            f"(enabled: {', '.join(enabled)})")
        for name in placed:
            anchor = steps[name][AFTER_KEY]
            order.insert(order.index(last_follower.get(anchor, anchor)) + 1, name)
            last_follower[anchor] = name
            pending.remove(name)
    return order


def build_pipeline(steps: Mapping, **runtime) -> Pipeline:
    """Instantiate ``steps`` (name → ``_target_`` config, ``None`` to disable) in :func:`step_order`.

    ``runtime`` holds objects that configs cannot express (the model's processor); a step receives one
    when its constructor takes a parameter of that name.
    """
    from olmocr.config import build

    built = {name: build(steps[name], **runtime) for name in step_order(steps)}
    return Pipeline(built)


class RejectReport:
    """Counts rejected samples by reason and appends one JSON line per rejection to a report file.

    Lines are written with O_APPEND in one call, so DataLoader workers may share the file.
    """

    def __init__(self, path: str | None = None):
        self.path = path
        self.counts: Counter = Counter()
        self._lock = threading.Lock()
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            mend(path)  # a resumed run's lines must not run on from one its interruption cut short

    def __getstate__(self) -> dict:  # copied with the dataset transform that holds it, when datasets derives one
        return {key: value for key, value in self.__dict__.items() if key != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def add(self, item: Mapping, reject: Reject) -> None:
        with self._lock:
            self.counts[reject.reason] += 1
        if self.path:
            line = json.dumps({"md": item.get("md_path"), "pdf": item.get("pdf_path"), "source": item.get("source"),
                               "step": getattr(reject, "step", None), "reason": reject.reason,
                               "detail": reject.detail}, ensure_ascii=False) + "\n"
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    def file_counts(self) -> Counter:
        """Counts over every process that wrote to the report file."""
        counts: Counter = Counter()
        if self.path and os.path.exists(self.path):
            for row in read_rows(self.path):
                counts[row["reason"]] += 1
        return counts


class MadeWhenRead:
    """A dataset transform: the row of ``items[index]``, made by ``make`` when the trainer reads it (in its loader
    workers), not up front, where every page of a large set rendered at once held tens of GB before the first step.
    An item a step rejects is reported once (per process) and the next item that makes a row stands in: a page
    that fails costs its render, not the run."""

    def __init__(self, items: list[dict], make: Callable[[dict], dict], report: RejectReport):
        self.items, self.make, self.report = items, make, report
        self.rejected: set[int] = set()

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        rows = [self.row(index) for index in batch["index"]]
        return {key: [row[key] for row in rows] for key in rows[0]}

    def row(self, index: int) -> dict:
        for offset in range(len(self.items)):
            at = (index + offset) % len(self.items)
            if at in self.rejected:
                continue
            try:
                return self.make(self.items[at])
            except Reject as exc:
                self.rejected.add(at)
                self.report.add(self.items[at], exc)
        where = self.report.path or "the log"
        raise UserError(f"data: no row could be made of {len(self.items)} items (the reasons: {where})")
