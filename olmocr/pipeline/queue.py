"""Exactly-once work claims over a workspace, with nothing but the store's conditional writes.

An item is claimed by *creating* ``claims/<id>.json`` (fails if it exists) with the worker's id and an
expiry. The holder renews the claim before it expires by *replacing* it on the tag it last wrote; a
claim whose expiry has passed (its worker died or stalled) is taken over by replacing it on the tag the
taker read, which only one taker can do. The output goes to ``results/output_<id>.jsonl`` first and then
the done marker is created (once): a crash between the two re-does the item and overwrites the same
result, never adds a second. A holder whose claim has less than half a lease left renews it once more
before finishing, so a worker that lost its claim while stalled drops its output instead.

Claims are never deleted: an item whose claim exists has been claimed, so creating claims for the
items a listing showed unclaimed needs no other check, and costs two requests (the create and a read
of the claim, below) when another worker got there first. Per item that is three writes: claim, result, done marker (plus renewals of long items).

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
from olmocr.pipeline.workspace import CANCELLED, CLAIMS, DONE, INDEX, PROGRESS, Item, Workspace

log = logging.getLogger("olmocr.pipeline")


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _ids(names: list[str]) -> set[str]:
    return {n[:-5] for n in names if n.endswith(".json")}


def claim_body(data: bytes) -> dict:
    """A claim's body; empty for one that is not a JSON object (damaged from outside: the next worker replaces
    it as an expired claim, so it is neither given up nor cancelled)."""
    try:
        body = json.loads(data)
    except ValueError:
        return {}
    times = ("expires", "retry_at", "claimed")
    return body if isinstance(body, dict) and all(isinstance(body.get(t, 0.0), (int, float)) for t in times) else {}


def anything_left(workspace: Workspace) -> bool:
    """Is any item of ``workspace`` neither done nor given up (work for a worker now or once a claim expires)?
    Reads the index and lists the done markers, then stops at the first open item that is not given up."""
    done = _ids(workspace.store.list(DONE))
    for item in workspace.items():
        if item.id in done:
            continue
        claim = workspace.store.read(workspace.claim_name(item.id))
        if claim is None or not claim_body(claim.data).get("given_up"):
            return True
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
        self.items: dict[str, Item] = {}
        self._index_version: str | None = None
        self._free: deque[str] = deque()
        self._all_claimed = False  # at the last listing; claims are never deleted, so it stays true
        # Quickest listing and create seen: what each costs the store, without the waits behind other
        # requests that a busy store adds to both.
        self._listing_s = self._create_s = float("inf")
        self._misses = 0
        self._done: set[str] = set()  # items seen done (done stays done)
        self.look_s = 0.0  # how long the last look for expired claims took
        self.next_expiry = float("inf")  # the earliest expiry among the claims that look read
        self.given_up: set[str] = set()
        self.outstanding = 0  # items neither done nor given up, as of the last look
        self._sync_index()

    def _sync_index(self) -> bool:
        """Pick up items added to the index since it was last read; True when there were any."""
        version = self.store.version(INDEX)
        if version == self._index_version:
            return False
        items, _ = self.ws.read_index()
        self.items, self._index_version = {item.id: item for item in items}, version
        return True

    def remaining(self) -> int:
        """Items not done yet."""
        return len(set(self.items) - _ids(self.store.list(DONE)))

    def _body(self, **extra) -> dict:
        now = time.time()
        return {"worker": self.worker, "claimed": now, "expires": now + self.lease_s, "failures": 0, **extra}

    def _list_unclaimed(self) -> None:
        """List the claims; the items without one, in id order (ids are hashes: a random order every worker
        shares) from a random start. Workers walk the order from different starts, so each claims a run of
        consecutive items and runs into another's only where that one started."""
        began = time.monotonic()
        claimed = _ids(self.store.list(CLAIMS))
        self._free = deque(sorted(i for i in self.items if i not in claimed))
        self._free.rotate(self.rng.randrange(len(self._free) or 1))
        self._all_claimed = not self._free
        self._listing_s, self._misses = min(self._listing_s, time.monotonic() - began), 0

    def claim_next(self) -> Claim | None:
        """Claim an item that is neither done nor held by a live worker; None when there is none now."""
        listed = False
        while True:
            # Creates that failed (others claimed those items since the listing) cost time; once they
            # cost as much as a listing, list again (listings grow with the workspace, failed creates do
            # not: this keeps the waste within twice the least possible).
            if not self._free or self._misses * self._create_s >= self._listing_s:
                if listed and not self._free:
                    break
                if self._sync_index() or not self._all_claimed:
                    self._list_unclaimed()
                    listed = True
                    continue
                break  # every item was claimed and none was added since
            item = self.items[self._free.popleft()]
            body = self._body()
            name, data = self.ws.claim_name(item.id), json.dumps(body).encode()
            began = time.monotonic()
            tag = self.store.create(name, data)
            self._create_s = min(self._create_s, time.monotonic() - began)
            if tag is None:
                tag = self._ours(name, data)  # created, but the answer was lost and the retry refused
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
            self._done |= _ids(self.store.list(DONE))
            held = [i for i in held if i not in self._done]
        self.outstanding, self.next_expiry = len(held), float("inf")
        self.rng.shuffle(held)
        for item_id in held:
            if not listed and self.store.exists(self.ws.done_name(item_id)):
                self._done.add(item_id)
                self.outstanding -= 1
                continue
            name = self.ws.claim_name(item_id)
            current = self.store.read(name)
            if current is None:
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
            body = self._body(failures=held_by.get("failures", 0), transient_failures=held_by.get("transient_failures", 0))
            tag = self.store.replace(name, json.dumps(body).encode(), current.tag)
            if tag is None:
                continue
            if self.store.exists(self.ws.done_name(item_id)):  # its stalled holder finished after all
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
        return None

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
            name, data = self.ws.claim_name(claim.item.id), json.dumps(body).encode()
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

    def complete(self, claim: Claim, result: bytes, counts: dict) -> bool:
        """Write the result, then the done marker. False when the claim was lost first (the result is
        dropped) or another worker finished the item first."""
        # More than half a lease left: nobody can have taken it over (that needs it expired).
        if claim.lost.is_set() or (claim.body["expires"] - time.time() < self.lease_s / 2
                                   and not self.renew(claim)):
            log.warning("claim on %s lost before it finished (expired while this worker stalled); result "
                        "dropped, the new holder finishes it", claim.item.id)
            return False
        self.store.write(self.ws.result_name(claim.item.id), result)
        if claim.finished is None:  # the same record when a complete() is tried again
            claim.finished = {"id": claim.item.id, "worker": self.worker, "claimed": claim.body["claimed"],
                              "finished": time.time(), "pdfs": len(claim.item.pdfs),
                              "pages_estimated": claim.item.pages, "took_over": claim.took_over, "counts": counts,
                              # what the result must be, for pipeline.repair to tell a damaged one
                              "result_bytes": len(result), "result_sha1": hashlib.sha1(result).hexdigest()}
        name, data = self.ws.done_name(claim.item.id), json.dumps(claim.finished).encode()
        first = (self.store.create(name, data) or self._ours(name, data)) is not None
        with claim.lock:
            claim.lost.set()  # finished: the keeper stops renewing it
        return first


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


@dataclass(frozen=True)
class ItemState:
    """Where an item stands, from the queue's own objects (:func:`item_state`)."""

    state: str  # queued, running, cancelling, done, failed (given up) or cancelled
    pages_done: int = 0  # while running: as its worker last wrote it
    counts: dict | None = None  # done: the done marker's counts
    error: str | None = None  # failed: why; queued again after a failure: the last failure


def item_state(workspace: Workspace, item: str) -> ItemState:
    """The state of ``item``: done once its done marker exists; with no claim, queued; a claim given up is failed
    (or cancelled); a live claim is running (cancelling once asked to stop); a claim given back after a failure,
    to be tried again, is queued with that failure. A claim damaged from outside is a running item's: the next
    worker replaces it."""
    store = workspace.store
    done = store.read(workspace.done_name(item))
    if done is not None:
        return ItemState("done", counts=json.loads(done.data).get("counts", {}))
    claim = store.read(workspace.claim_name(item))
    if claim is None:
        return ItemState("queued")
    body = claim_body(claim.data)
    if body.get("cancelled"):
        return ItemState("cancelled", error=body.get("error"))
    if body.get("given_up"):
        return ItemState("failed", error=body.get("error"))
    if body and body.get("expires", 0.0) == 0.0:  # given back: after a failure, or by a worker that stopped
        return ItemState("cancelling" if cancel_asked(workspace, item) else "queued", error=body.get("error"))
    return ItemState("cancelling" if cancel_asked(workspace, item) else "running", _pages_done(workspace, item),
                     error=body.get("error"))


def _pages_done(workspace: Workspace, item: str) -> int:
    found = workspace.store.read(f"{PROGRESS}/{item}.json")
    try:
        pages = json.loads(found.data)["pages_done"] if found is not None else 0
    except (ValueError, KeyError, TypeError):
        return 0
    return pages if isinstance(pages, int) else 0


def unclaimed(workspace: Workspace) -> list[str]:
    """The items no worker has claimed yet, in the order they were queued: one listing of the claims."""
    claimed = _ids(workspace.store.list(CLAIMS))
    return [item.id for item in workspace.items() if item.id not in claimed]


def cancel(workspace: Workspace, item: str, why: str = "cancelled before it started") -> None:
    """Cancel ``item``, whatever it is doing: the cancel is written first (a worker converting it sees it within
    its ``watch_s`` and stops); an item nobody holds now (never claimed, given back to be tried again, or its
    claim expired) is given up at once, so no worker takes it again. A finished item stays as it is."""
    store = workspace.store
    store.write(f"{CANCELLED}/{item}.json", json.dumps({"at": time.time()}).encode())
    name, done = workspace.claim_name(item), workspace.done_name(item)
    for _ in range(20):  # a conditional write lost to a worker's claim or renewal: read again
        if store.exists(done):
            return
        current = store.read(name)
        held = {} if current is None else claim_body(current.data)
        if held.get("given_up") or (held and held.get("expires", 0.0) > time.time()):
            return  # finished, or a live holder that stops at its next look
        body = {"worker": "cancelled", "claimed": time.time(), "failures": 0, **held, "expires": 0.0,
                "given_up": True, "cancelled": True, "error": why}
        data = json.dumps(body).encode()
        if (store.create(name, data) if current is None else store.replace(name, data, current.tag)) is not None:
            return


def cancel_asked(workspace: Workspace, item: str) -> bool:
    return workspace.store.exists(f"{CANCELLED}/{item}.json")


def note_progress(workspace: Workspace, item: str, pages_done: int) -> None:
    """The pages of ``item`` its worker has converted so far (read by :func:`item_state`)."""
    workspace.store.write(f"{PROGRESS}/{item}.json", json.dumps({"pages_done": pages_done, "at": time.time()}).encode())


def forget_marks(workspace: Workspace, item: str) -> None:
    """Remove what an item's run left beside its claim and done marker (its progress and cancel)."""
    for name in (f"{PROGRESS}/{item}.json", f"{CANCELLED}/{item}.json"):
        workspace.store.delete(name)


def requeue(workspace: Workspace, items: list[str] | None = None) -> list[str]:
    """Put given-up items (those named, or all) back in the queue: their failure counts cleared, free to claim
    at once; the last error stays as ``previous_error``. A cancelled item is given up for good (whoever
    cancelled it has been told so): never put back, and naming one is an error. Returns the ids put back."""
    claimed = _ids(workspace.store.list(CLAIMS))
    wanted = sorted(set(items)) if items else sorted(claimed)
    unknown = [i for i in wanted if i not in claimed]
    if unknown:
        raise UserError(f"items: {', '.join(unknown)} never claimed in {workspace.root}: nothing to put back")
    if items:
        named = workspace.store.read_many([workspace.claim_name(i) for i in wanted])
        refused = [i for i in wanted if claim_body(named.get(workspace.claim_name(i), b"")).get("cancelled")]
        if refused:
            raise UserError(f"items: {', '.join(refused)} cancelled in {workspace.root}: a cancelled item is not "
                            f"put back (nothing was)")
    back, cancelled = [], []
    for item in wanted:
        name = workspace.claim_name(item)
        while True:  # rewritten only on the tag read, so a worker's concurrent write is never lost
            current = workspace.store.read(name)
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
