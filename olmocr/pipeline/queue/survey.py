"""The whole queue at a look, for ``pipeline.stats``: the live parts' totals, claims and done markers, and the
finished and retired parts' summaries. An index part, a summary and a done marker are each written once (a summary
once more when retired), so what was read of them is remembered in a cache folder by listing tag, and the names of
index parts and live parts' totals as listed: a later look lists the index and the totals from the last name it saw,
the summaries from the oldest part not retired, and the live done markers and claims, and reads only what is new
or written again."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field

from olmocr.errors import UserError
from olmocr.pipeline.queue.index import _decode
from olmocr.pipeline.queue.names import CLAIMS, DONE, INDEX, LEGACY_INDEX, PART_DIGITS, PARTS, TOTALS, claim_name, ids, part_of
from olmocr.pipeline.queue.names import totals_of
from olmocr.pipeline.queue.parts import claim_body

log = logging.getLogger("olmocr.pipeline")


def done_record(data: bytes) -> dict | None:
    """What stats needs of a done marker, or None when it is not one."""
    try:
        record = json.loads(data)
        return {"id": record.get("id"), "part": int(record.get("part") or 0), "claimed": float(record["claimed"]),
                "finished": float(record["finished"]),
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
                "failed_items": int(summary.get("failed_items", len(summary.get("failed") or []))),
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

    def read(self, folder: str, keep=None, floor: str | None = None, final=None) -> dict[str, dict | None]:
        """The record of each object in ``folder`` (whose name ``keep`` keeps; None: every one), None for one
        ``parse`` cannot read. ``floor``: objects named below it are written for good once ``final(record)``
        says so; a look lists from the floor the last look remembered (everything, the first time) and takes the
        remembered records below it as they are, so what it lists grows with the objects above the floor."""
        known, lines = self._load() if self.path else ({}, 0)
        remembered = self._floor() if floor is not None else ""
        start = min(floor, remembered) if floor is not None else ""
        tags = {name: tag for name, tag in self.store.tags(folder, start).items() if keep is None or keep(name)}
        current = {name: known[name] for name, tag in tags.items() if known.get(name, (None,))[0] == tag}
        below = [name for name in known if name <= start and (keep is None or keep(name))]
        # One that is not final yet (a look cut short) is read again.
        current.update((name, known[name]) for name in below if final is not None and final(known[name][1]))
        fresh = [name for name in tags if name not in current] + [name for name in below if name not in current]
        read = self.store.read_many([f"{folder}/{name}" if folder else name for name in fresh])
        new = {name: (tags.get(name) or known[name][0], self.parse(read[key])) for name in fresh
               if (key := f"{folder}/{name}" if folder else name) in read}
        current.update(new)
        kept = True
        if self.path and new:
            # Most lines of objects gone or written again: the file is written anew.
            whole = lines + len(new) > 2 * len(current) + 1000
            kept = self._remember(current if whole else new, whole)
        if self.path and floor is not None and kept and floor != remembered:
            self._write(f"{self.path}.floor", floor, whole=True)
        return {name: record for name, (_, record) in current.items()}

    def _floor(self) -> str:
        """The floor the last look listed from ("" when there is none: everything is listed)."""
        try:
            with open(f"{self.path}.floor", encoding="utf-8") as fh:
                return fh.read().strip()
        except (OSError, TypeError):
            return ""

    def _remember(self, rows: dict[str, tuple[str, dict | None]], whole: bool) -> bool:
        text = "".join(json.dumps([name, tag, record], separators=(",", ":")) + "\n" for name, (tag, record) in rows.items())
        return self._write(self.path, text, whole)

    def _write(self, path: str, text: str, whole: bool) -> bool:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if whole:
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "w", encoding="utf-8") as fh:
                    fh.write(text)
                os.replace(tmp, path)
            else:
                with open(path, "a", encoding="utf-8") as fh:
                    fh.write(text)
            return True
        except OSError as exc:
            log.warning("cannot keep the records read in %s (%s): the next look reads them all again", path, exc)
            return False


class Names:
    """The names of ``folder``, whose new names sort after its old ones (index parts, live parts' totals), each as
    ``parse`` reads it (None: not one of its names), remembered in ``cache_dir`` (None: not at all): a later look
    lists only the names after the last it saw and keeps those it saw before, less those :meth:`drop` drops (parts
    finished or retired since), so what it lists and parses follows what was added, not the live parts. With
    ``check``, the last name's tag is compared first (one request): a workspace made again at the same place, or that
    name gone, and everything is listed again."""

    def __init__(self, store, cache_dir: str | None, folder: str, parse, check: bool):
        self.store, self.folder, self.parse, self.check = store, folder, parse, check
        digest = hashlib.sha256(store.url("").encode()).hexdigest()[:16]
        self.path = os.path.join(os.path.expanduser(cache_dir), f"{folder}-names-{digest}.json") if cache_dir else None
        self.reset()
        try:
            with open(self.path, encoding="utf-8") as fh:
                kept = json.load(fh)
            self.last, self.tag, self.values = str(kept["last"]), kept["tag"], dict(kept["names"])
            self.changed = False
        except (OSError, TypeError, ValueError, KeyError):  # none yet, or unreadable: everything is listed
            pass
        # What was remembered is of another workspace made at the same place since, or its last name went.
        self.stale = bool(self.last) and check and store.version(f"{folder}/{self.last}") != self.tag
        if self.stale:
            self.reset()

    def reset(self) -> None:
        self.last, self.tag, self.values, self.changed = "", None, {}, True

    def list(self) -> dict:
        """Every name remembered or listed now, and what ``parse`` read of it."""
        new = self.store.list_after(self.folder, self.last)
        if new:
            self.values.update((name, value) for name in new if (value := self.parse(name)) is not None)
            self.last, self.tag, self.changed = new[-1], None, True
        return self.values

    def drop(self, gone) -> None:
        """Forget the names whose value ``gone`` says is gone for good."""
        dropped = [name for name, value in self.values.items() if gone(value)]
        for name in dropped:
            del self.values[name]
        self.changed = self.changed or bool(dropped)

    def save(self) -> None:
        if not self.path or not self.last or not self.changed:
            return
        try:
            if self.check and self.tag is None:
                self.tag = self.store.version(f"{self.folder}/{self.last}")
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = f"{self.path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({"last": self.last, "tag": self.tag, "names": self.values}, fh)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("cannot keep the names listed in %s (%s): the next look lists them all again", self.path, exc)


def _totals(data: bytes) -> dict | None:
    """What stats needs of an index part: its items and their estimated pages (an index part is written once, so
    this is remembered for good)."""
    try:
        items = _decode(data, 0, "")
    except UserError:
        return None
    return {"items": len(items), "pages": sum(item.pages for item in items)}


@dataclass
class Survey:
    parts: dict[int, dict]  # the live parts: their items and estimated pages (_totals)
    done: dict[str, dict | None]  # live items with a done marker: its record (None: unreadable)
    claims: dict[str, dict]  # live items claimed and not done: the claim's body (its item's part, pages, PDFs)
    summaries: dict[int, dict] = field(default_factory=dict)  # finished and retired parts: their summaries
    unreadable_summaries: int = 0
    unreadable_parts: int = 0


def survey(workspace, cache_dir: str | None = None) -> Survey:
    """Every live part's totals, every live done marker and claim, and every finished part's summary. Index parts,
    totals' names, done markers and summaries are remembered in ``cache_dir``: what a later look reads and lists
    grows with what changed and with the live done markers and claims, not with the parts queued."""
    store = workspace.store
    # The index's last name checked (one request), the live parts' totals trusted with it: same workspace.
    index_names = Names(store, cache_dir, INDEX, lambda name: part_of(name) or None, check=True)
    totals_names = Names(store, cache_dir, TOTALS, totals_of, check=False)
    if index_names.stale:
        totals_names.reset()
    indexed = list(index_names.list().values())
    # A part below the oldest in the index is retired (its index part goes last), its summary written for good:
    # remembered, it is not listed again, so a later look lists the parts since the oldest one a look saw live.
    floor = f"{min(indexed):0{PART_DIGITS}d}" if indexed else ""
    # (A workspace made again at the same place: everything listed again, its floor too.)
    read = Remembered(store, cache_dir, "parts", _summary).read(PARTS, floor="" if index_names.stale else floor,
                                                                final=lambda s: bool(s and s["retired"]))
    summaries = {part_of(name): s for name, s in read.items() if part_of(name) is not None and s is not None}
    index_names.drop(lambda part: (summaries.get(part) or {}).get("retired"))
    indexed = list(index_names.values.values())
    # A live part's totals are in a name its adder wrote: listed, not read. A part without one (its adder was
    # refused that write, or it was queued before totals were written) is read, once.
    totals_names.list()
    totals_names.drop(lambda totals: totals[0] in summaries)
    named = {t[0]: {"items": t[1], "pages": t[2]} for t in totals_names.values.values()}
    unnamed = {p for p in indexed if p not in summaries and p not in named}
    listed = Remembered(store, cache_dir, "index", _totals).read(INDEX, keep=lambda name: part_of(name) in unnamed
                                                                 ) if unnamed else {}
    if 0 not in summaries:  # a workspace made before parts: its whole index, at its root
        listed.update(Remembered(store, cache_dir, "legacy", _totals).read("", keep=lambda name: name == LEGACY_INDEX))
    parts = {0 if name == LEGACY_INDEX else part_of(name): t for name, t in listed.items() if t is not None}
    parts.update(named)
    # A part's done markers and claims go after its summary is written: those still there are not counted twice.
    found = Remembered(store, cache_dir, "done", done_record).read(DONE)
    done = {name[:-5]: record for name, record in found.items() if record is None or record["part"] not in summaries}
    held = [i for i in ids(store.list(CLAIMS)) if i not in done and f"{i}.json" not in found]
    claims = {name.rsplit("/", 1)[-1][:-5]: body for name, data in store.read_many([claim_name(i) for i in held]).items()
              if (body := claim_body(data)).get("part", 0) not in summaries}
    index_names.save()
    totals_names.save()
    return Survey(parts, done, claims, summaries, sum(1 for s in read.values() if s is None)
                  + sum(s["unreadable"] for s in summaries.values()), sum(1 for t in listed.values() if t is None))
