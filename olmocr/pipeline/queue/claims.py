"""Exactly-once work claims over a workspace, with nothing but the store's conditional writes.

An item is claimed by *creating* ``claims/<id>.json`` (fails if it exists) with the worker's id and an
expiry. The holder renews the claim before it expires by *replacing* it on the tag it last wrote; a
claim whose expiry has passed (its worker died or stalled) is taken over by replacing it on the tag the
taker read, which only one taker can do. The output goes to ``results/output_<id>.jsonl`` first and then
the done marker is created (once): a crash between the two re-does the item and overwrites the same
result, never adds a second. A holder whose claim has less than half a lease left renews it once more
before finishing, so a worker that lost its claim while stalled drops its output instead.

A claim stays while its index part is live: an item whose claim exists has been claimed, so creating claims for
the items a listing showed unclaimed needs no other check, and costs two requests (the create and a read of the
claim, below) when another worker got there first. Per item that is three writes: claim, result, done marker
(plus renewals of long items). Once every item of a part is done (or cancelled), the worker that sees it writes
the part's summary, ``parts/<part>.json`` (every done marker's record in one object), and then removes the part's
claims and done markers: what workers, stats and the service list holds live work only. A worker drawing free
items from a part looks for its summary after listing the claims, so a part finished meanwhile (its claims gone)
is never taken for unclaimed.

A claim whose item failed is released with a time before which nobody takes it (``retry_at``: a wait
that doubles with each failure, jittered, kept in the claim so every worker honours it). A failure of
the item's own (its processing raised) counts toward ``max_failures``, after which the item is given
up, shown by the stats command and put back by ``python -m olmocr.pipeline.requeue``; a failure from
outside it (storage, credentials, network, model server, a missing tool: ``transient``) never does.

A conditional write whose answer was lost (a connection reset after the store wrote it, then a retry
that the store refuses because the object is there now) is recognised by reading back what it wrote:
claims, their rewrites and done markers each hold the writer's id and times, so equal bytes are ours.
Clocks: expiries are compared with the reader's clock, so machines' clocks must agree to well within
the lease (NTP does this).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field

from olmocr.errors import UserError
from olmocr.pipeline.queue.index import Index, Item, of
from olmocr.pipeline.queue.names import CLAIMS, DONE, claim_name, done_name, ids
from olmocr.pipeline.queue.names import summary_name
from olmocr.pipeline.queue.parts import claim_body, compact, listed_parts
from olmocr.pipeline.workspace import Workspace

log = logging.getLogger("olmocr.pipeline")


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def anything_left(workspace: Workspace) -> bool:
    """Is any item of ``workspace`` neither done nor given up (work for a worker now or once a claim expires)?
    Lists the finished parts and the index, then reads the live parts from the lowest, with one listing of the done
    markers, and stops at the first open item that is not given up."""
    index = Index(workspace.store)
    done = None
    listed, finished = listed_parts(index)
    for part in (p for p in listed if p not in finished):
        items = index.load(part) or []
        if items and done is None:
            done = ids(workspace.store.list(DONE))
        for item in items:
            if item.id in done:
                continue
            claim = workspace.store.read(claim_name(item.id))
            if claim is None or not claim_body(claim.data).get("given_up"):
                return True
        index.forget(part)
    return False


@dataclass
class Claim:
    item: Item
    tag: str
    body: dict
    took_over: str | None = None  # the worker whose expired claim this one replaced
    lost: threading.Event = field(default_factory=threading.Event)  # set once it is no longer ours
    taken: bool = False  # lost to another worker (not released or finished by its holder)
    lock: threading.Lock = field(default_factory=threading.Lock)
    finished: dict | None = None  # the done marker's record, once complete() made it


def check_queue(retry_wait_s: float, retry_wait_max_s: float) -> None:
    """What the ``queue`` schema's bounds cannot say, checked before a server starts or an item is claimed."""
    if retry_wait_max_s < retry_wait_s:
        raise UserError(f"queue.retry_wait_max_s: must be at least retry_wait_s ({retry_wait_s}), got "
                        f"{retry_wait_max_s}")


class WorkQueue:
    """One worker's view of a workspace's queue. Workers share nothing but the store; a process's
    worker threads each hold their own queue (and may share one ``LeaseKeeper``)."""

    def __init__(self, workspace: Workspace, worker: str, lease_s: float = 300.0, max_failures: int = 3,
                 retry_wait_s: float = 15.0, retry_wait_max_s: float = 600.0):
        if lease_s <= 0:
            raise UserError(f"lease_s: must be positive, got {lease_s}")
        self.ws, self.store = workspace, workspace.store
        self.worker, self.lease_s, self.max_failures = worker, lease_s, max_failures
        self.retry_wait_s, self.retry_wait_max_s = retry_wait_s, retry_wait_max_s
        self.rng = random.Random()
        self.index = Index(self.store)
        self.items: dict[str, Item] = {}  # the items of the live parts read
        listed, self.finished = listed_parts(self.index)  # finished: parts whose summary is written, never read
        self.unread: list[int] = [p for p in listed if p not in self.finished]  # live parts listed, not read yet
        # (read from the lowest, when needed)
        self._free: deque[str] = deque()
        self._open: set[int] = set()  # live parts that had unclaimed items at the last listing
        self._all_claimed = False  # every live item claimed at the last listing (claims stay while a part lives)
        # Quickest listing and create seen: what each costs the store, without the waits behind other
        # requests that a busy store adds to both.
        self._listing_s = self._create_s = float("inf")
        self._misses = 0
        self._done: set[str] = set()  # items seen done (done stays done)
        self.look_s = 0.0  # how long the last look for expired claims took
        self.next_expiry = float("inf")  # the earliest expiry among the claims that look read
        self.given_up: set[str] = set()
        self.outstanding = 0  # items neither done nor given up, as of the last look
        self._read_next()

    def _sync_index(self) -> bool:
        """List the index parts added since the last look (read when needed); True when there were any."""
        new = self.index.refresh(skip=self.finished, read=False)
        self.unread += new
        return bool(new)

    def _read_next(self) -> int | None:
        """Read the lowest live part not read yet; its number (None: none left)."""
        while self.unread:
            part = self.unread.pop(0)
            items = None if part in self.finished else self.index.load(part)
            if items is not None:
                self.items.update((item.id, item) for item in items)
                self._open.add(part)
                return part
        return None

    def _part_finished(self, part: int) -> None:
        """``part``'s summary is written: its items leave this worker's view (and memory)."""
        self.finished.add(part)
        self._open.discard(part)
        for item in self.index.parts.get(part, []):
            self.items.pop(item.id, None)
            self._done.discard(item.id)
            self.given_up.discard(item.id)
        self.index.forget(part)

    def remaining(self) -> int:
        """Items of the live parts read so far not done yet (``unread``: the live parts not read yet)."""
        return len(set(self.items) - ids(self.store.list(DONE)))

    def _body(self, item: Item, **extra) -> dict:
        now = time.time()
        return {"worker": self.worker, "claimed": now, "expires": now + self.lease_s, "failures": 0, **of(item), **extra}

    SPREAD = 2  # the lowest live parts with unclaimed items that workers draw from

    def _list_unclaimed(self) -> None:
        """List the claims, then take the unclaimed items of one of the lowest live parts (drawn at random among
        ``SPREAD``; the next part not read yet is read when those read have none), in id order (ids are hashes: a
        random order every worker shares) from a random start. Workers finish parts in order, so finished parts
        leave the listings early; they walk a part from different starts, so each claims a run of consecutive items
        and runs into another's only where that one started. The drawn part's summary is looked for after the
        listing: a part finished meanwhile has no claims left, and its items are not free."""
        began = time.monotonic()
        claimed = ids(self.store.list(CLAIMS))
        by_part: dict[int, list[str]] = {}
        for part in sorted(self._open):
            free = [item.id for item in self.index.parts.get(part, []) if item.id not in claimed]
            if free:
                by_part[part] = free
        self._free = deque()
        while True:
            while not by_part and self.unread:
                part = self._read_next()
                if part is not None and (free := [i.id for i in self.index.parts[part] if i.id not in claimed]):
                    by_part[part] = free
            if not by_part:
                break
            part = self.rng.choice(sorted(by_part)[:self.SPREAD])
            if self.store.exists(summary_name(part)):
                by_part.pop(part)
                self._part_finished(part)
                continue
            self._free = deque(sorted(by_part[part]))
            self._free.rotate(self.rng.randrange(len(self._free)))
            break
        self._open = set(by_part)
        self._all_claimed = not by_part and not self.unread
        self._listing_s, self._misses = min(self._listing_s, time.monotonic() - began), 0

    def claim_next(self) -> Claim | None:
        """Claim an item that is neither done nor held by a live worker; None when there is none now."""
        listed = False
        while True:
            # Creates that failed (others claimed those items since the listing) cost time; once they
            # cost as much as a listing, list again (listings grow with the live work, failed creates do
            # not: this keeps the waste within twice the least possible).
            if not self._free or self._misses * self._create_s >= self._listing_s:
                if listed and not self._free and self._all_claimed:
                    break
                if self._sync_index() or not self._all_claimed:
                    self._list_unclaimed()
                    listed = True
                    continue
                break  # every item was claimed and none was added since
            item = self.items[self._free.popleft()]
            body = self._body(item)
            name, data = claim_name(item.id), json.dumps(body).encode()
            began = time.monotonic()
            tag = self.store.create(name, data)
            self._create_s = min(self._create_s, time.monotonic() - began)
            if tag is None:
                tag = self._ours(name, data)  # created, but the answer was lost and the retry refused
            if tag is not None and self.store.exists(summary_name(item.part)):
                # Free at the listing, the item may have been claimed and finished since, and its part compacted:
                # the compaction took the claims and done markers that said so (its summary is written before it
                # removes any). Not ours to convert again.
                self.store.delete(name)
                self._part_finished(item.part)
                self._free = deque(i for i in self._free if i in self.items)
                continue
            if tag is not None:
                return Claim(item, tag, body)
            self._misses += 1
            self._free.rotate(self.rng.randrange(len(self._free) or 1))  # into another worker's run: jump
        began = time.monotonic()
        try:
            return self._take_over()
        finally:
            self.look_s = time.monotonic() - began

    LIST_DONE_ABOVE = 50  # items to check: more than this, list the done markers; else look at each

    def _take_over(self) -> Claim | None:
        """Every item is claimed: take over one whose claim expired (its worker died or stalled)."""
        held = [i for i in self.items if i not in self._done and i not in self.given_up]
        listed = len(held) > self.LIST_DONE_ABOVE
        if listed:
            self._done |= ids(self.store.list(DONE))
            held = [i for i in held if i not in self._done]
            self._compact_done()
            held = [i for i in held if i in self.items]
        self.outstanding, self.next_expiry, learned = len(held), float("inf"), False
        self.rng.shuffle(held)
        for item_id in held:
            if item_id not in self.items:  # its part finished while this look went on
                self.outstanding -= 1
                continue
            if not listed and self.store.exists(done_name(item_id)):
                self._done.add(item_id)
                self.outstanding -= 1
                learned = True
                continue
            name = claim_name(item_id)
            current = self.store.read(name)
            if current is None:  # its part finished since the listing (claims go with the summary)
                part = self.items[item_id].part
                if self.store.exists(summary_name(part)):
                    self.outstanding -= sum(1 for i in self.index.parts.get(part, []) if i.id in held)
                    self._part_finished(part)
                continue
            held_by = claim_body(current.data)
            if held_by.get("given_up"):
                self.given_up.add(item_id)
                self.outstanding -= 1
                continue
            free_at = max(held_by.get("expires", 0.0), held_by.get("retry_at", 0.0))  # held, or waiting to be retried
            if free_at > time.time():
                self.next_expiry = min(self.next_expiry, free_at)
                continue
            body = self._body(self.items[item_id], failures=held_by.get("failures", 0),
                              transient_failures=held_by.get("transient_failures", 0))
            tag = self.store.replace(name, json.dumps(body).encode(), current.tag)
            if tag is None:
                continue
            if self.store.exists(done_name(item_id)):  # its stalled holder finished after all
                self._done.add(item_id)
                continue
            if not held_by:
                log.warning("claimed %s in place of its unreadable claim (damaged from outside)", item_id)
                return Claim(self.items[item_id], tag, body)
            if held_by.get("expires") == 0.0:  # given back (a failure, a signal, pipeline.repair), not expired
                log.info("claimed %s again (given back by %s)", item_id, held_by.get("worker"))
                return Claim(self.items[item_id], tag, body)
            log.info("took over %s from %s (claim expired)", item_id, held_by.get("worker"))
            return Claim(self.items[item_id], tag, body, took_over=held_by.get("worker"))
        if learned:
            # Items seen done one by one: the part whose last two items finished at once, each worker's listing
            # showing the other's still open, is finished with nobody having compacted it. This look does.
            self._compact_done()
        return None

    def _compact_done(self) -> None:
        """Compact every live part whose items this worker has all seen done (or given up: a compaction reads
        whether those were cancelled) after a listing of the done markers."""
        for part, items in list(self.index.parts.items()):
            if part in self.finished:
                continue
            left = [item for item in items if item.id not in self._done]
            if all(item.id in self.given_up for item in left) and compact(self.store, part, items, self._done):
                self._part_finished(part)

    def _ours(self, name: str, data: bytes) -> str | None:
        """The tag of ``name`` when it holds exactly ``data``: a conditional write of ours whose answer was lost.
        None when the object is another writer's."""
        current = self.store.read(name)
        return current.tag if current is not None and current.data == data else None

    def _rewrite(self, claim: Claim, **changes) -> bool:
        with claim.lock:
            if claim.lost.is_set():
                return False
            body = {**claim.body, **changes}
            name, data = claim_name(claim.item.id), json.dumps(body).encode()
            tag = self.store.replace(name, data, claim.tag) or self._ours(name, data)
            if tag is None:
                claim.taken = True
                claim.lost.set()
                return False
            claim.tag, claim.body = tag, body
            return True

    def renew(self, claim: Claim) -> bool:
        """Push the expiry a lease ahead; False (and ``claim.lost`` set) when someone else holds it now."""
        return self._rewrite(claim, expires=time.time() + self.lease_s)

    def retry_wait(self, attempt: int) -> float:
        """Seconds before an item that failed ``attempt`` times is tried again: doubling from ``retry_wait_s``
        up to ``retry_wait_max_s``, times a random 0.5-1 so the workers of an outage do not return together."""
        return min(self.retry_wait_s * 2 ** (attempt - 1), self.retry_wait_max_s) * self.rng.uniform(0.5, 1.0)

    def release(self, claim: Claim, error: str | None = None, transient: bool = False, cancelled: bool = False) -> None:
        """Give the item back: at once (a stopping worker), or after a failure (``error``) once its wait is
        over; a failure of the item's own counts toward ``max_failures``, a ``transient`` one does not. A
        ``cancelled`` item is given up, never tried again."""
        changes: dict = {"expires": 0.0}
        if cancelled:
            changes.update(given_up=True, cancelled=True, error=(error or "cancelled")[:500])
        elif error is not None:
            key = "transient_failures" if transient else "failures"
            changes[key] = claim.body.get(key, 0) + 1
            attempts = changes[key] + claim.body.get("failures" if transient else "transient_failures", 0)
            changes.update(error=error[:500], retry_at=time.time() + self.retry_wait(attempts))
            if not transient:
                changes["given_up"] = changes[key] >= self.max_failures
        self._rewrite(claim, **changes)
        with claim.lock:
            claim.lost.set()  # ours no more

    def complete(self, claim: Claim, result: bytes, counts: dict, outputs: list[str] | None = None) -> bool:
        """Write the result, then the done marker (with ``outputs``: the other objects the item's run wrote, which
        its retirement removes). False when the claim was lost first (the result is dropped) or another worker
        finished the item first. The item that finishes its part compacts it."""
        # More than half a lease left: nobody can have taken it over (that needs it expired).
        if claim.lost.is_set() or (claim.body["expires"] - time.time() < self.lease_s / 2
                                   and not self.renew(claim)):
            log.warning("claim on %s lost before it finished (expired while this worker stalled); result "
                        "dropped, the new holder finishes it", claim.item.id)
            return False
        self.store.write(self.ws.result_name(claim.item.id), result)
        if claim.finished is None:  # the same record when a complete() is tried again
            claim.finished = {"id": claim.item.id, "part": claim.item.part, "worker": self.worker, "claimed": claim.body["claimed"],
                              "finished": time.time(), "pdfs": len(claim.item.pdfs),
                              "pages_estimated": claim.item.pages, "took_over": claim.took_over, "counts": counts,
                              # what the result must be, for pipeline.repair to tell a damaged one
                              "result_bytes": len(result), "result_sha1": hashlib.sha1(result).hexdigest(),
                              "outputs": sorted(outputs or [])}
        name, data = done_name(claim.item.id), json.dumps(claim.finished).encode()
        first = (self.store.create(name, data) or self._ours(name, data)) is not None
        with claim.lock:
            claim.lost.set()  # finished: the keeper stops renewing it
        if first:
            self._finished_one(claim.item)
        return first

    def _finished_one(self, item: Item) -> None:
        """``item`` is done: when its part may be finished now (every item of it claimed at this worker's last
        listing), list the done markers, and compact the part if every item of it is done. A store that fails
        here leaves the compaction to the next look."""
        from olmocr.faults import store_errors

        self._done.add(item.id)
        items = self.index.parts.get(item.part, [])
        try:
            if item.part not in self._open and any(i.id not in self._done for i in items):
                self._done |= ids(self.store.list(DONE))
            if items and all(i.id in self._done for i in items) and compact(self.store, item.part, items, self._done):
                self._part_finished(item.part)
        except store_errors() as exc:
            log.warning("compacting part %d failed (%s): the next look does it", item.part, exc)


class LeaseKeeper:
    """Renews a process's claims every third of a lease, from one thread."""

    def __init__(self, lease_s: float):
        self.lease_s = lease_s
        self._held: dict[int, tuple[WorkQueue, Claim]] = {}
        self.unreleased = 0  # claims release_all could not give back (the store did not answer): they expire
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def hold(self, queue: WorkQueue, claim: Claim) -> None:
        with self._lock:
            self._held[id(claim)] = (queue, claim)

    def drop(self, claim: Claim) -> None:
        with self._lock:
            self._held.pop(id(claim), None)

    def held(self) -> list[tuple[WorkQueue, Claim]]:
        with self._lock:
            return list(self._held.values())

    def _loop(self) -> None:
        from olmocr.faults import store_errors

        while not self._stop.wait(self.lease_s / 3):
            for queue, claim in self.held():
                try:
                    if not queue.renew(claim) and claim.taken:
                        log.warning("claim on %s lost: another worker took it over", claim.item.id)
                except store_errors() as exc:  # the store is unreachable for now; the next round tries again
                    log.warning("renewing the claim on %s failed: %s", claim.item.id, exc)

    def release_all(self) -> int:
        """Give back every claim still held (a stopping worker); returns how many. A claim the store does not
        take back now (it is unreachable) expires after its lease instead."""
        from olmocr.faults import store_errors

        self._stop.set()
        released = 0
        for queue, claim in self.held():
            if not claim.lost.is_set():
                try:
                    queue.release(claim)
                    released += 1
                except store_errors() as exc:
                    self.unreleased += 1
                    log.warning("giving back the claim on %s failed (%s): it expires in its lease", claim.item.id, exc)
        return released
