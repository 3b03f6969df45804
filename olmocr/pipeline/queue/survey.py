"""The whole queue at a look, for ``pipeline.stats`` and ``pipeline.repair``: the live parts' items, claims and done
markers, and the finished and retired parts' summaries. A summary and a done marker are each written once, so what
was read of them is remembered in a cache folder by listing tag: a later look lists them and reads only those new or
written again."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field

from olmocr.pipeline.queue.index import Index, Item
from olmocr.pipeline.queue.names import CLAIMS, DONE, PARTS, claim_name, ids, part_of
from olmocr.pipeline.queue.parts import claim_body

log = logging.getLogger("olmocr.pipeline")


def done_record(data: bytes) -> dict | None:
    """What stats needs of a done marker, or None when it is not one."""
    try:
        record = json.loads(data)
        return {"id": record.get("id"), "claimed": float(record["claimed"]), "finished": float(record["finished"]),
                "counts": dict(record.get("counts") or {}), "pages_estimated": record.get("pages_estimated")}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _summary(data: bytes) -> dict | None:
    """What stats needs of a part's summary: its items, its done records (done_record's), cancelled and retired."""
    try:
        summary = json.loads(data)
        if not isinstance(summary, dict):
            return None
        read = [done_record(json.dumps(d).encode()) for d in summary.get("done") or []]
        done = [r for r in read if r is not None]
        return {"items": int(summary.get("items", 0)), "done": done, "unreadable": len(read) - len(done), "cancelled": len(summary.get("cancelled") or []),
                "retired": summary.get("retired"), "done_items": int(summary.get("done_items", len(done))),
                "cancelled_items": int(summary.get("cancelled_items", len(summary.get("cancelled") or []))),
                "counts": dict(summary.get("counts") or {})}
    except (ValueError, TypeError, AttributeError):
        return None


class Remembered:
    """Objects of one folder as ``parse`` reads them, remembered in ``cache_dir`` (None: not at all) by each
    object's listing tag. At 100,000 done markers a look read 100,000 objects (24 s here from a local disk not yet
    cached, 6 s with this; on S3 or a parallel file system each read is a request)."""

    def __init__(self, store, cache_dir: str | None, kind: str, parse):
        self.store, self.parse = store, parse
        digest = hashlib.sha256(store.url("").encode()).hexdigest()[:16]
        self.path = os.path.join(os.path.expanduser(cache_dir), f"{kind}-{digest}.jsonl") if cache_dir else None

    def _load(self) -> tuple[dict[str, tuple[str, dict | None]], int]:
        known, lines = {}, 0
        try:
            with open(self.path, encoding="utf-8") as fh:
                for line in fh:
                    lines += 1
                    try:
                        name, tag, record = json.loads(line)
                        known[name] = (tag, record)
                    except (ValueError, TypeError):
                        continue  # a line a kill cut short: that object is read again
        except OSError:  # none yet (or unreadable): every object is read
            pass
        return known, lines

    def read(self, folder: str, names: set[str] | None = None) -> dict[str, dict | None]:
        """The record of each object in ``folder`` (whose name is in ``names``; None: every one), None for one
        ``parse`` cannot read."""
        tags = {name: tag for name, tag in self.store.tags(folder).items() if names is None or name in names}
        known, lines = self._load() if self.path else ({}, 0)
        current = {name: known[name] for name, tag in tags.items() if known.get(name, (None,))[0] == tag}
        fresh = [name for name in tags if name not in current]
        read = self.store.read_many([f"{folder}/{name}" for name in fresh])
        new = {name: (tags[name], self.parse(read[f"{folder}/{name}"])) for name in fresh if f"{folder}/{name}" in read}
        current.update(new)
        if self.path and new:
            # Most lines of objects gone or written again: the file is written anew.
            whole = lines + len(new) > 2 * len(current) + 1000
            self._remember(current if whole else new, whole)
        return {name: record for name, (_, record) in current.items()}

    def _remember(self, rows: dict[str, tuple[str, dict | None]], whole: bool) -> None:
        text = "".join(json.dumps([name, tag, record], separators=(",", ":")) + "\n" for name, (tag, record) in rows.items())
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            if whole:
                tmp = f"{self.path}.{os.getpid()}.tmp"
                with open(tmp, "w", encoding="utf-8") as fh:
                    fh.write(text)
                os.replace(tmp, self.path)
            else:
                with open(self.path, "a", encoding="utf-8") as fh:
                    fh.write(text)
        except OSError as exc:
            log.warning("cannot keep the records read in %s (%s): the next look reads them all again", self.path, exc)


@dataclass
class Survey:
    items: dict[str, Item]  # the live parts' items
    done: dict[str, dict | None]  # live items with a done marker: its record (None: unreadable)
    claims: dict[str, dict]  # live items claimed and not done: the claim's body
    summaries: dict[int, dict] = field(default_factory=dict)  # finished and retired parts: their summaries
    unreadable_summaries: int = 0


def survey(workspace, cache_dir: str | None = None) -> Survey:
    """Every live item with its done marker or claim, and every finished part's summary."""
    store = workspace.store
    read = Remembered(store, cache_dir, "parts", _summary).read(PARTS)
    summaries = {part_of(name): s for name, s in read.items() if part_of(name) is not None and s is not None}
    index = Index(store)
    index.refresh(skip=set(summaries))
    items = {item.id: item for item in index.items()}
    found = Remembered(store, cache_dir, "done", done_record).read(DONE, {f"{i}.json" for i in items})
    done = {name[:-5]: record for name, record in found.items()}
    held = [i for i in ids(store.list(CLAIMS)) if i in items and i not in done]
    claims = {name.rsplit("/", 1)[-1][:-5]: claim_body(data)
              for name, data in store.read_many([claim_name(i) for i in held]).items()}
    return Survey(items, done, claims, summaries, sum(1 for s in read.values() if s is None)
                  + sum(s["unreadable"] for s in summaries.values()))
