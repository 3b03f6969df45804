"""What the service, stats, requeue and repair ask of the queue: an item's state, the items waiting, a cancel, the
progress a worker notes, given-up items put back, and a survey of the whole queue."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from olmocr.errors import UserError
from olmocr.pipeline.queue.index import Index, Item, _decode, of
from olmocr.pipeline.queue.names import CLAIMS, LEGACY_INDEX, PARTS, part_of, cancel_name, claim_name, done_name, ids, part_name
from olmocr.pipeline.queue.names import progress_name, summary_name
from olmocr.pipeline.queue.parts import claim_body, compact, read_summary
from olmocr.pipeline.workspace import Workspace

log = logging.getLogger("olmocr.pipeline")


@dataclass(frozen=True)
class ItemState:
    """Where an item stands, from the queue's own objects (:func:`item_state`)."""

    state: str  # queued, running, cancelling, done, failed (given up) or cancelled
    pages_done: int = 0  # while running: as its worker last wrote it
    counts: dict | None = None  # done: the done marker's counts
    error: str | None = None  # failed: why; queued again after a failure: the last failure
    finished: float | None = None  # done: when (as its worker's clock said)


def part_of_item(workspace: Workspace, item: str) -> int:
    """The index part that holds ``item``, for a caller that did not keep it (reads the live parts of the index)."""
    from olmocr.pipeline.queue.parts import listed_parts

    index = Index(workspace.store)
    listed, finished = listed_parts(index)
    for part in listed:
        if part not in finished and any(i.id == item for i in index.load(part) or []):
            return part
    for part in sorted(finished):  # finished: its summary names it
        if _from_summary(read_summary(workspace.store, part), item) is not None:
            return part
    return 0


def item_state(workspace: Workspace, item: str, part: int | None = None) -> ItemState:
    """The state of ``item`` (of index part ``part``): done once its done marker exists; with no claim, queued unless
    its part is finished (then as its summary says); a claim given up is failed (or cancelled); a live claim is
    running (cancelling once asked to stop); a claim given back after a failure, to be tried again, is queued with
    that failure. A claim damaged from outside is a running item's: the next worker replaces it."""
    store = workspace.store
    done = store.read(done_name(item))
    if done is not None:
        record = json.loads(done.data)
        return ItemState("done", counts=record.get("counts", {}), finished=record.get("finished"))
    claim = store.read(claim_name(item))
    if claim is None:
        part = part_of_item(workspace, item) if part is None else part
        return _from_summary(read_summary(store, part), item) or ItemState("queued")
    body = claim_body(claim.data)
    if body.get("cancelled"):
        return ItemState("cancelled", error=body.get("error"))
    if body.get("given_up"):
        return ItemState("failed", error=body.get("error"))
    if body and body.get("expires", 0.0) == 0.0:  # given back: after a failure, or by a worker that stopped
        return ItemState("cancelling" if cancel_asked(workspace, item) else "queued", error=body.get("error"))
    return ItemState("cancelling" if cancel_asked(workspace, item) else "running", _pages_done(workspace, item),
                     error=body.get("error"))


def _from_summary(summary: dict | None, item: str) -> ItemState | None:
    """The state a finished part's summary gives ``item``; None when the summary does not name it."""
    if summary is None:
        return None
    for record in summary.get("done", []):
        if isinstance(record, dict) and record.get("id") == item:
            return ItemState("done", counts=record.get("counts", {}), finished=record.get("finished"))
    for entry in summary.get("cancelled", []):
        if entry.get("id") == item:
            return ItemState("cancelled", error=entry.get("error"))
    for entry in summary.get("failed", []):
        if entry.get("id") == item:
            return ItemState("failed", error=entry.get("error"))
    if summary.get("retired"):
        return ItemState("retired")
    return None


def _pages_done(workspace: Workspace, item: str) -> int:
    found = workspace.store.read(progress_name(item))
    try:
        pages = json.loads(found.data)["pages_done"] if found is not None else 0
    except (ValueError, KeyError, TypeError):
        return 0
    return pages if isinstance(pages, int) else 0


class Waiting:
    """The items no worker has claimed yet, in the order they were queued (a service's queue position and its
    ``max_waiting``). Kept between looks: each lists the index parts added since the last, the claims, and the
    summaries of parts from the oldest that looks waiting on (a part finished since has no claims left, and is not
    waiting): what it reads grows with live work, not with the workspace's history."""

    def __init__(self, workspace: Workspace):
        self.store = workspace.store
        self.index = Index(self.store)

    def items(self) -> list[str]:
        self.index.refresh()
        claimed = ids(self.store.list(CLAIMS))
        free = {part: [item.id for item in items if item.id not in claimed] for part, items in self.index.parts.items()}
        looking = sorted(part for part, left in free.items() if left)
        if looking:
            after = "" if looking[0] == 0 else summary_name(looking[0] - 1).split("/", 1)[1]
            for part in map(part_of, self.store.list_after(PARTS, after)):
                if part is not None and part in free:
                    free.pop(part)
                    self.index.forget(part)  # finished: never waiting again
        for part in [part for part, left in free.items() if not left]:
            # Every item claimed: claims stay while a part lives, so none of it waits again.
            free.pop(part)
            self.index.forget(part)
        return [item for part in sorted(free) for item in free[part]]


def unclaimed(workspace: Workspace) -> list[str]:
    """The items no worker has claimed yet, in the order they were queued (one look of :class:`Waiting`)."""
    return Waiting(workspace).items()


def part_items(workspace: Workspace, part: int) -> list[Item]:
    """The items of index part ``part`` (none once retired)."""
    name = LEGACY_INDEX if part == 0 else part_name(part)
    found = workspace.store.read(name)
    return [] if found is None else _decode(found.data, part, workspace.store.url(name))


def cancel(workspace: Workspace, item: str, part: int | None = None, why: str = "cancelled before it started") -> None:
    """Cancel ``item`` (of index part ``part``), whatever it is doing: the cancel is written first (a worker
    converting it sees it within its ``watch_s`` and stops); an item nobody holds now (never claimed, given back to
    be tried again, or its claim expired) is given up at once, so no worker takes it again, and its part compacted
    when that finished it. A finished item stays as it is."""
    store = workspace.store
    part = part_of_item(workspace, item) if part is None else part
    items = part_items(workspace, part)
    store.write(cancel_name(item), json.dumps({"at": time.time()}).encode())
    name, done = claim_name(item), done_name(item)
    for _ in range(20):  # a conditional write lost to a worker's claim or renewal: read again
        if store.exists(done) or store.exists(summary_name(part)):
            return
        current = store.read(name)
        held = {} if current is None else claim_body(current.data)
        if held.get("given_up") or (held and held.get("expires", 0.0) > time.time()):
            return  # finished, or a live holder that stops at its next look
        body = {"worker": "cancelled", "claimed": time.time(), "failures": 0,
                **next((of(i) for i in items if i.id == item), {"part": part}), **held, "expires": 0.0,
                "given_up": True, "cancelled": True, "error": why}
        data = json.dumps(body).encode()
        if (store.create(name, data) if current is None else store.replace(name, data, current.tag)) is not None:
            compact(store, part, items)
            return


def cancel_asked(workspace: Workspace, item: str) -> bool:
    return workspace.store.exists(cancel_name(item))


def note_progress(workspace: Workspace, item: str, pages_done: int) -> None:
    """The pages of ``item`` its worker has converted so far (read by :func:`item_state`)."""
    workspace.store.write(progress_name(item), json.dumps({"pages_done": pages_done, "at": time.time()}).encode())


def requeue(workspace: Workspace, items: list[str] | None = None) -> list[str]:
    """Put given-up items (those named, or all) back in the queue: their failure counts cleared, free to claim
    at once; the last error stays as ``previous_error``. A cancelled item is given up for good (whoever
    cancelled it has been told so): never put back, and naming one is an error. Returns the ids put back."""
    claimed = ids(workspace.store.list(CLAIMS))
    wanted = sorted(set(items)) if items else sorted(claimed)
    unknown = [i for i in wanted if i not in claimed]
    if unknown:
        raise UserError(f"items: {', '.join(unknown)} never claimed in {workspace.root}: nothing to put back")
    if items:
        named = workspace.store.read_many([claim_name(i) for i in wanted])
        refused = [i for i in wanted if claim_body(named.get(claim_name(i), b"")).get("cancelled")]
        if refused:
            raise UserError(f"items: {', '.join(refused)} cancelled in {workspace.root}: a cancelled item is not "
                            f"put back (nothing was)")
    back, cancelled = [], []
    for item in wanted:
        name = claim_name(item)
        while True:  # rewritten only on the tag read, so a worker's concurrent write is never lost
            current = workspace.store.read(name)
            if current is None:  # its part finished since the listing
                break
            body = claim_body(current.data)
            if body.get("cancelled"):
                cancelled.append(item)
                break
            if not body.get("given_up"):
                if items:
                    log.warning("%s is not given up%s: left as it is", item, "" if body else " (its claim is unreadable)")
                break
            body.update(given_up=False, failures=0, transient_failures=0, expires=0.0, retry_at=0.0,
                        previous_error=body.pop("error", None))
            if workspace.store.replace(name, json.dumps(body).encode(), current.tag) is not None:
                back.append(item)
                break
    if cancelled:
        log.info("%d cancelled item(s) left as they are", len(cancelled))
    return back


def done_items(workspace: Workspace) -> dict[str, tuple[int, bytes]]:
    """Every done item whose part has not been retired: id -> (its part, its done record as written), from the live
    done markers and the finished parts' summaries."""
    from olmocr.pipeline.queue.names import DONE
    from olmocr.pipeline.queue.parts import listed_parts

    store = workspace.store
    index = Index(store)
    listed, finished = listed_parts(index)
    for part in listed:
        if part not in finished:
            index.load(part)
    parts = {item.id: item.part for item in index.items()}
    live = sorted(i for i in ids(store.list(DONE)) if i in parts)
    markers = store.read_many([done_name(i) for i in live])
    out = {i: (parts[i], markers[done_name(i)]) for i in live if done_name(i) in markers}
    for part in sorted(finished):
        summary = read_summary(store, part)
        if summary is not None and summary.get("retired"):
            continue
        records = {r["id"]: r for r in (summary or {}).get("done", []) if isinstance(r, dict) and isinstance(r.get("id"), str)}
        cancelled = {c.get("id") for c in (summary or {}).get("cancelled", []) if isinstance(c, dict)}
        for item in part_items(workspace, part):
            if item.id in records:
                out.setdefault(item.id, (part, json.dumps(records[item.id]).encode()))
            elif item.id not in cancelled:  # the summary lost its record (damaged from outside): not one
                out.setdefault(item.id, (part, b""))
    return out


def put_back(workspace: Workspace, item: str, part: int, why: str) -> None:
    """A done ``item`` (of ``part``) made free to convert again at once (pipeline.repair found what it left
    damaged): its done marker removed and its claim given back (rewritten only on the tag read). An item of a
    finished part first brings its part back to life: the other items' claims and done markers are written again
    from the summary, then the summary removed."""
    store = workspace.store
    summary = read_summary(store, part)
    if summary is None and store.exists(summary_name(part)):  # not a summary (damaged): what it kept is lost
        store.delete(summary_name(part))
    if summary is not None and not summary.get("retired"):
        for record in summary.get("done", []):
            other = record.get("id") if isinstance(record, dict) else None
            if not isinstance(other, str) or other == item:
                continue
            store.create(claim_name(other), json.dumps({"worker": record.get("worker"), "claimed":
                                                        record.get("claimed", 0.0), "expires": 0.0,
                                                        "failures": 0}).encode())
            store.create(done_name(other), json.dumps(record).encode())
        for entry in summary.get("cancelled", []):
            store.create(claim_name(entry["id"]), json.dumps({"worker": "cancelled", "claimed": 0.0, "expires": 0.0,
                                                              "failures": 0, "given_up": True, "cancelled": True,
                                                              "error": entry.get("error")}).encode())
        body = {"worker": "repair", "claimed": time.time(), "expires": 0.0, "retry_at": 0.0, "failures": 0,
                "transient_failures": 0, "given_up": False, "repaired": why}
        store.create(claim_name(item), json.dumps(body).encode())
        store.delete(summary_name(part))
        return
    store.delete(done_name(item))
    name = claim_name(item)
    while True:  # a claim rewritten only on the tag read
        current = store.read(name)
        if current is None:
            return  # never claimed (a marker written by hand): free already
        try:
            body = json.loads(current.data)
            body = body if isinstance(body, dict) else {}
        except ValueError:
            body = {}
        body.update(expires=0.0, retry_at=0.0, given_up=False, failures=0, transient_failures=0, repaired=why)
        if store.replace(name, json.dumps(body).encode(), current.tag) is not None:
            return
