"""A finished part: compacted into one summary, then (once old enough) retired with everything its items left.

``parts/<part>.json`` is created once every item of the part is done or cancelled, holding every done marker's record
(and each cancelled item's reason; a part retired by ``retire_item`` counts its given-up items finished too, each
with its error); then the part's claims and done markers are removed. Whoever sees a part finish
writes it (a worker after its last item, or a worker's look); two writing at once both find the same summary, and a
summary written before its deletions finished is compacted again by the next look (deleting what is gone is
nothing). Retirement (``retire``) removes what each item of a part finished longer ago than its age left: its
result, the files its worker listed in the done record (markdown, page text, lists of bad documents), its progress
and cancel marks; the summary is rewritten with the part's totals only, which stats counts as retired; then its index
part goes (the highest stays, whose number the next addition counts from, until a higher one is there). So the
index's oldest part is the oldest not retired: looks list ``parts/`` from it, at a cost that follows the parts since
the oldest live one, not every part ever finished. The summaries stay (a few hundred bytes a part): a claim made from
a listing older than its part's end finds its part's summary and lets go.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import dataclass

from olmocr.pipeline.queue.index import Index
from olmocr.pipeline.queue.names import DONE, INDEX, PART_DIGITS, PARTS, cancel_name, claim_name, done_name, ids, part_name, part_of
from olmocr.pipeline.queue.names import progress_name, summary_name, totals_name

log = logging.getLogger("olmocr.pipeline")

CHECK_NOT_DONE = 64  # items of a part not done yet whose claims a compaction reads to see if they were cancelled


def finished_parts(store, listed) -> set[int]:
    """The finished parts (their summary is there) from the lowest of ``listed``, the parts an index listing
    showed: ``parts/`` is listed from that one on (a thousand parts a request), so a look pays for the parts since
    the oldest still in the index, not for every part ever finished (a part below it is retired, its index part
    gone). Part 0, a workspace made before parts, is looked for alone."""
    listed = set(listed)
    found = set()
    if numbered := [p for p in listed if p]:
        found = {p for p in map(part_of, store.list_after(PARTS, f"{min(numbered):0{PART_DIGITS}d}")) if p is not None}
    if 0 in listed and store.exists(summary_name(0)):
        found.add(0)
    return found


def listed_parts(index: Index) -> tuple[list[int], set[int]]:
    """The parts ``index``'s listing shows now (none read: those new to it, in order) and the finished ones among
    them (:func:`finished_parts`)."""
    listed = index.refresh(read=False)
    return listed, finished_parts(index.store, listed)


def read_summary(store, part: int) -> dict | None:
    found = store.read(summary_name(part))
    if found is None:
        return None
    try:
        summary = json.loads(found.data)
    except ValueError:
        return None
    return summary if isinstance(summary, dict) else None


def claim_body(data: bytes) -> dict:
    """A claim's body; empty for one that is not a JSON object (damaged from outside: the next worker replaces
    it as an expired claim, so it is neither given up nor cancelled)."""
    try:
        body = json.loads(data)
    except ValueError:
        return {}
    times = ("expires", "retry_at", "claimed")
    return body if isinstance(body, dict) and all(isinstance(body.get(t, 0.0), (int, float)) for t in times) else {}


def compact(store, part: int, items: list, done: set[str] | None = None, given_up: bool = False) -> bool:
    """Write ``part``'s summary and remove its claims and done markers when each of its ``items`` is done or
    cancelled (with ``given_up``, or given up: a part being retired, whose failures no one will requeue); ``done``:
    the ids a listing of ``done/`` just showed (None: listed here). False when it is not finished yet."""
    ids_ = [item.id for item in items]
    if not ids_:  # a part retired, or none read: nothing to compact
        return False
    if store.exists(summary_name(part)):
        _forget(store, part, items)  # a compaction cut short: finish its deletions
        return True
    if done is None:
        done = ids(store.list(DONE))
    not_done = [i for i in ids_ if i not in done]
    if len(not_done) > CHECK_NOT_DONE:
        return False
    claims = store.read_many([claim_name(i) for i in not_done])
    cancelled, failed = {}, {}
    for item in not_done:
        body = claim_body(claims.get(claim_name(item), b""))
        if body.get("cancelled"):
            cancelled[item] = body.get("error")
        elif given_up and body.get("given_up"):
            failed[item] = body.get("error")
        else:
            return False
    markers = store.read_many([done_name(i) for i in ids_ if i not in cancelled and i not in failed])
    records = []
    for item in ids_:
        if item in cancelled or item in failed:
            continue
        data = markers.get(done_name(item))
        if data is None:  # removed since the listing (pipeline.repair put it back): not finished
            return False
        try:
            records.append(json.loads(data))
        except ValueError:
            return False  # damaged: pipeline.repair's to put back, not a summary's to keep
    finished = max([r.get("finished", 0.0) for r in records if isinstance(r, dict)] or [time.time()])
    summary = {"part": part, "items": len(ids_), "finished": finished, "compacted": time.time(), "done": records,
               "cancelled": [{"id": i, "error": e} for i, e in cancelled.items()],
               "failed": [{"id": i, "error": e} for i, e in failed.items()], "retired": None}
    store.create(summary_name(part), json.dumps(summary).encode())  # None: another worker wrote the same
    _forget(store, part, items)
    log.info("part %d finished: %d item(s) compacted into %s", part, len(ids_), summary_name(part))
    return True


def _forget(store, part: int, items: list) -> None:
    """What a finished part's summary stands in for: its totals' name, then each item's done marker and claim."""
    store.delete(totals_name(part, len(items), sum(item.pages for item in items)))
    for item in items:  # the done marker first: until the claim goes too, the item reads as claimed
        store.delete(done_name(item.id))
        store.delete(claim_name(item.id))


@dataclass
class Retired:
    parts: int = 0
    items: int = 0


def retire(workspace, older_than_s: float, now: float | None = None) -> Retired:
    """Retire every finished part whose last item finished more than ``older_than_s`` ago."""
    store, now = workspace.store, time.time() if now is None else now
    retired = Retired()
    listed, finished = listed_parts(Index(store))
    for part in sorted(finished):
        summary = read_summary(store, part)
        if summary is None or summary.get("retired") or now - summary.get("finished", now) < older_than_s:
            continue
        retired.items += retire_part(workspace, part, summary)
        retired.parts += 1
    _raise_floor(store, listed)
    if retired.parts:
        log.info("%d item(s) of %d part(s) finished more than %.4g h ago retired", retired.items, retired.parts,
                 older_than_s / 3600)
    return retired


def retire_item(workspace, part: int) -> int:
    """Retire the part of one item (a service's job is one part), now, when it is finished; the items retired."""
    if part == 0:  # the whole index of a workspace made before parts: retired by retire() once old, not by one item
        return 0
    summary = read_summary(workspace.store, part)
    if summary is None:  # given up (a job that failed) never compacts on its own: retiring it is its end
        items = Index(workspace.store).load(part)
        if items is None or not compact(workspace.store, part, items, given_up=True):
            return 0
        summary = read_summary(workspace.store, part)
    retired = 0 if summary is None or summary.get("retired") else retire_part(workspace, part, summary)
    _raise_floor(workspace.store, map(part_of, workspace.store.list(INDEX)))
    return retired


def retire_part(workspace, part: int, summary: dict) -> int:
    """Remove what ``part``'s items left and keep only its totals; the number of items retired."""
    store = workspace.store
    records = [r for r in summary.get("done", []) if isinstance(r, dict)]
    counts = Counter()
    for record in records:
        counts.update(record.get("counts") or {})
        names = [workspace.result_name(record.get("id", "")), *record.get("outputs", [])]
        for name in names:
            store.delete(name)
    ended = [c["id"] for c in summary.get("cancelled", []) + summary.get("failed", [])]
    for item in [r.get("id", "") for r in records] + ended:
        store.delete(progress_name(item))
        store.delete(cancel_name(item))
    totals = {"part": part, "items": summary.get("items", 0), "finished": summary.get("finished"),
              "compacted": summary.get("compacted"), "retired": time.time(), "done_items": len(records),
              "cancelled_items": len(summary.get("cancelled", [])), "failed_items": len(summary.get("failed", [])),
              "counts": dict(counts),
              "first_claimed": min((r.get("claimed", 0.0) for r in records), default=None)}
    store.write(summary_name(part), json.dumps(totals).encode())
    # Its index part last: a part whose index is gone is retired (listings of finished parts start above it).
    if _index_goes(store, part):
        store.delete(part_name(part))
    return summary.get("items", 0)


def _raise_floor(store, listed) -> None:
    """Remove the index parts, at the bottom of the index, of parts retired while they were the highest (one is
    higher now): the index's oldest part is then the oldest not retired, where listings of finished parts start
    (else one job retired with no other queued would hold that floor down for good). A look: one summary read."""
    for part in sorted(p for p in listed if p):  # None: not a part's name
        summary = read_summary(store, part)
        if not (summary and summary.get("retired")) or not _index_goes(store, part):
            return
        store.delete(part_name(part))


def _index_goes(store, part: int) -> bool:
    """Whether a retired part's index part is removed: all but the highest (the next addition's number is counted
    from it) and part 0 (the whole index of a workspace made before parts, at the workspace's root)."""
    return part != 0 and store.exists(part_name(part + 1))
