"""The worker loop: claim an item, process it, write its result, mark it done, next — in as many
threads as ``workers`` says, until no item is left. SIGTERM and SIGINT give the claims back at once.

Two kinds of failure. An item's own (its processing raised) counts against it: after ``max_failures``
it is given up. A failure from outside the item (storage or credentials, the network, the model server,
a tool missing on this machine: :func:`transient`) never counts: the item goes back to the queue as it
was, to be tried again after a wait, and the worker process counts such failures in a row: past a few
it pauses, with growing waits, and when they have lasted ``give_up_after_s`` it stops with their cause
(:class:`Breaker`) rather than burn through the queue. The store failing while a result is written is
waited out with the claim held, so the work is not lost.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from olmocr.errors import UserError
from olmocr.faults import gist
from olmocr.pipeline.failures import Cancelled, OutputRefused, StopWork, transient
from olmocr.pipeline.queue import ITEMS_PER_PART, Item, LeaseKeeper, WorkQueue, queued_anything, worker_name
from olmocr.pipeline.workspace import Workspace

log = logging.getLogger("olmocr.pipeline")


@dataclass
class Output:
    """What a processor makes of one item: the JSONL written to ``results/``, counts for the done
    marker that the stats command adds up (documents, pages, fallback_pages, input_tokens, …), and other
    files of the workspace (name → bytes: markdown, lists of bad documents). The worker writes them all,
    side files first, each tried again while the store does not answer: a finished conversion is never
    redone because one of its writes failed."""

    result: bytes
    counts: dict[str, int] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)


Processor = Callable[[Item], Output]


class Breaker:
    """Failures from outside the items, in a row, across the threads of a worker process. From the
    ``pause_after``-th on, each asks the worker to pause (``wait_s``, doubling up to ``wait_max_s``); once
    they have gone on for ``give_up_after_s``, :meth:`failed` raises StopWork naming the cause. Any item
    done resets it."""

    def __init__(self, pause_after: int = 3, give_up_after_s: float = 900.0, wait_s: float = 15.0,
                 wait_max_s: float = 600.0):
        self.pause_after, self.give_up_after_s = pause_after, give_up_after_s
        self.wait_s, self.wait_max_s = wait_s, wait_max_s
        self.lock = threading.Lock()
        self.streak, self.since = 0, 0.0

    def ok(self) -> None:
        with self.lock:
            self.streak = 0

    def failed(self, exc: BaseException, what: str, began: float | None = None) -> float:
        """Count a failure of ``what`` (an item, the workspace); the seconds to pause before going on. ``began``:
        when the failed request was made (time.monotonic), for a request to storage, which its client's timeouts
        bound: a streak that starts with a request that hung for its whole budget starts when it was made, so
        give_up_after_s holds for a hung endpoint as for a refusing one; and when one more such request, hanging as
        long, would end past give_up_after_s, the worker stops now rather than that long after it."""
        with self.lock:
            now = time.monotonic()
            if self.streak == 0:
                self.since = now if began is None else min(began, now)
            self.streak += 1
            streak, lasted = self.streak, now - self.since
        cause = gist(exc)
        took = 0.0 if began is None else now - began
        if lasted + took >= self.give_up_after_s:
            ahead = f", and one more request would take it past {self.give_up_after_s:g} s" if lasted < self.give_up_after_s else ""
            raise StopWork(f"nothing could be done for {lasted:.0f} s{ahead} ({streak} failures in a row from outside "
                           f"the items, queue.give_up_after_s={self.give_up_after_s:g}); the last, on {what}: {cause}")
        if streak < self.pause_after:
            return 0.0
        # A pause never outlasts give_up_after_s: the worker stops when that is spent, not a long pause later.
        wait = min(self.wait_s * 2 ** (streak - self.pause_after), self.wait_max_s, self.give_up_after_s - lasted)
        log.warning("%d failures in a row from outside the items (the last, on %s: %s): pausing up to %.0f s", streak,
                    what, cause, wait)
        return wait


PROBE_S = 2.0  # how often a paused worker looks whether the store answers again


def when_answering(call: Callable, breaker: Breaker, what: str):
    """``call()``, waited out while the store does not answer (as ``breaker`` says, up to its
    ``give_up_after_s``), so a worker starting in a brownout starts late rather than not at all; a refusal
    of the credentials, or a path that cannot be a workspace, raises at once. Through a pause the call is
    tried again every PROBE_S (a failure is counted, and said, once a pause), so it goes on within seconds
    of the store answering again."""
    from olmocr.faults import misplaced, refused, store_errors

    paused_until = 0.0
    while True:
        began = time.monotonic()
        try:
            return call()
        except store_errors() as exc:
            if refused(exc) or misplaced(exc):
                raise
            now = time.monotonic()
            if now >= paused_until:
                log.warning("%s did not answer (%s: %s)", what, type(exc).__name__, exc)
                paused_until = now + max(breaker.failed(exc, what, began), 1.0)
            time.sleep(min(PROBE_S, paused_until - now))


@dataclass
class WorkReport:
    done: int = 0  # items this process finished
    duplicates: int = 0  # finished here after another worker had already finished them
    lost: int = 0  # claims taken over while this process stalled (result dropped)
    failed: int = 0  # the processor raised: a failure of the item's own
    cancelled: int = 0  # stopped between pages: the item was cancelled
    unavailable: int = 0  # given back after a failure from outside the item
    taken_over: int = 0  # expired claims of other workers taken over
    released: int = 0  # claims given back on a signal
    counts: Counter = field(default_factory=Counter)
    seconds: float = 0.0


class _Progress:
    def __init__(self, total: int | None, enabled: bool):
        from tqdm import tqdm

        self.start = time.perf_counter()
        self.bar = tqdm(total=total, unit="item", desc="items", disable=not enabled, dynamic_ncols=True)
        self.lock = threading.Lock()

    def update(self, report: WorkReport) -> None:
        with self.lock:
            self.bar.update(1)
            rate = report.counts.get("pages", 0) / max(time.perf_counter() - self.start, 1e-9)
            self.bar.set_postfix(pages_s=f"{rate:.2f}", failed=report.failed, taken_over=report.taken_over,
                                 refresh=False)


@dataclass
class _Shared:
    """What the worker threads of a process share."""

    keeper: LeaseKeeper
    breaker: Breaker
    stop: threading.Event
    report: WorkReport
    progress: _Progress
    lock: threading.Lock = field(default_factory=threading.Lock)
    wake: threading.Condition = field(default_factory=threading.Condition)
    errors: list[BaseException] = field(default_factory=list)
    lingering: bool = False  # said that this process waits on other workers' claims
    serving: bool = False  # a service's workers: nothing left is no reason to stop (run_workers' until)


def _work(queue: WorkQueue, process: Processor, shared: _Shared, linger: bool, poll_s: float) -> None:
    try:
        _loop(queue, process, shared, linger, poll_s)
    except BaseException as exc:  # noqa: BLE001 - the processor cannot go on, or nothing could be done for
        # too long: stop every worker; the caller raises it
        shared.errors.append(exc)
        shared.stop.set()


def _loop(queue: WorkQueue, process: Processor, shared: _Shared, linger: bool, poll_s: float) -> None:
    from olmocr.faults import store_errors

    keeper, stop, report, lock, wake = shared.keeper, shared.stop, shared.report, shared.lock, shared.wake
    while not stop.is_set():
        began = time.monotonic()
        try:
            claim = queue.claim_next()
        except store_errors() as exc:
            log.warning("the workspace did not answer (%s: %s)", type(exc).__name__, exc)
            _pause_until_answering(queue, shared, exc, "the workspace", began)
            continue
        if claim is None:
            if not shared.serving and (not linger or queue.outstanding == 0):
                return
            # Others hold the rest: look again when a thread here finishes one, when the first of their
            # claims would expire, or after poll_s (they may finish), to take over the claim of any worker
            # that died; but spend at most half the time looking.
            wait = min(poll_s, queue.next_expiry - time.time() + 0.05)
            with lock:
                if not shared.lingering and queue.outstanding:  # said once a process, when its waiting begins
                    shared.lingering = True
                    expiry = queue.next_expiry - time.time()
                    log.info("%d item(s) held by other workers or waiting to be tried again: waiting until they are "
                             "done, to take over any whose claim expires%s (queue.linger=false stops now)",
                             queue.outstanding, f" (the next in {max(expiry, 0):.0f} s)" if expiry < 1e9 else "")
            with wake:
                wake.wait(max(wait, queue.look_s, 0.05))
            continue
        keeper.hold(queue, claim)
        try:
            output = process(claim.item)
            first = _finish(queue, claim, output, shared)
        except StopWork:
            raise  # the keeper gives the claim back with the others
        except Exception as exc:  # noqa: BLE001 - one item's failure must not end the worker
            if stop.is_set() or _failed(queue, claim, exc, shared) is STOPPED:
                return  # the keeper gives the claim back with the others
            continue
        if first is None:
            return  # stopped while the store did not answer: the keeper gives the claim back with the others
        keeper.drop(claim)
        shared.breaker.ok()
        with lock:
            report.taken_over += claim.took_over is not None
            if claim.taken:
                report.lost += 1
            elif first:
                report.done += 1
                report.counts.update(output.counts)
            else:
                report.duplicates += 1
        if first:
            shared.progress.update(report)
        with wake:
            wake.notify_all()


def _failed(queue: WorkQueue, claim, exc: Exception, shared: _Shared):
    """The item's processing (or writing its outputs) raised ``exc``: a cancelled item is given up; a failure of
    the item's own counts against it; one from outside it gives it back uncounted and pauses the worker as the
    breaker says. STOPPED when the worker stops before the workspace takes the claim back."""
    if isinstance(exc, Cancelled):
        log.info("item %s cancelled: %s", claim.item.id, exc)
        give_back = functools.partial(queue.release, claim, error=str(exc), cancelled=True)
        if _stored(give_back, queue, shared, f"giving item {claim.item.id} up") is STOPPED:
            return STOPPED
        shared.keeper.drop(claim)
        with shared.lock:
            shared.report.cancelled += 1
        with shared.wake:  # threads lingering on it look again: it is given up
            shared.wake.notify_all()
        return None
    outside = transient(exc)
    error = f"{type(exc).__name__}: {exc}"
    log.warning("item %s failed (%s); %s", claim.item.id, error,
                "back to the queue, not counted against it" if outside else "released for another attempt")
    # Given back as soon as the workspace answers (not left to expire with its lease); until then the keeper renews
    # it, and gives it back with the others if the worker stops.
    give_back = functools.partial(queue.release, claim, error=error, transient=outside)
    if _stored(give_back, queue, shared, f"giving item {claim.item.id} back") is STOPPED:
        return STOPPED
    shared.keeper.drop(claim)
    with shared.lock:
        shared.report.failed += not outside
        shared.report.unavailable += outside
    with shared.wake:
        shared.wake.notify_all()
    if outside:
        shared.stop.wait(shared.breaker.failed(exc, f"item {claim.item.id}"))
    return None


def _finish(queue: WorkQueue, claim, output: Output, shared: _Shared) -> bool | None:
    """The item's files, then ``queue.complete``, tried again while the store does not answer (the lease
    keeper renews the claim meanwhile, once the store is back). None when the worker stops first. A file the
    store refuses while it takes another write in the same folder is refused for its name, which the item gave
    it: :class:`OutputRefused`, the item's own failure."""
    from olmocr.faults import no_space, refused, store_errors

    pending = dict(output.files)

    def write_all() -> bool:
        for name in list(pending):
            try:
                queue.ws.store.write(name, pending[name])
            except store_errors() as exc:
                folder = name.split("/", 1)[0]
                if no_space(exc) or refused(exc) or not queue.ws.store.takes(folder):
                    raise
                # The store takes other writes: either it refuses this name, or it was away for a moment and is
                # back (an outage ending between the two writes). The file once more tells them apart; taken for
                # the item's fault too soon, its pages would be converted again.
                try:
                    queue.ws.store.write(name, pending[name])
                except store_errors() as again:
                    if no_space(again) or refused(again) or not queue.ws.store.takes(folder):
                        raise
                    why = again.strerror if isinstance(again, OSError) and again.strerror else gist(again)
                    shown = name if len(name) <= 120 else f"{name[:100]}…{name[-19:]}"
                    raise OutputRefused(f"the workspace does not take the item's {shown} ({why}), though it takes "
                                        f"other writes in {folder}/") from again
            del pending[name]  # written: not again
        return queue.complete(claim, output.result, output.counts, outputs=list(output.files))

    first = _stored(write_all, queue, shared, f"writing the outputs of item {claim.item.id}")
    return None if first is STOPPED else first


STOPPED = object()  # what _stored returns when the worker stops first


def _stored(call: Callable, queue: WorkQueue, shared: _Shared, what: str):
    """``call()``'s value, tried again while the workspace does not answer; STOPPED when the worker stops
    first."""
    from olmocr.faults import store_errors

    while True:
        try:
            return call()
        except store_errors() as exc:
            log.warning("%s failed (%s: %s); trying again", what, type(exc).__name__, exc)
            if not _pause_until_answering(queue, shared, exc, "the workspace"):
                return STOPPED


def _pause_until_answering(queue: WorkQueue, shared: _Shared, exc: BaseException, what: str,
                           began: float | None = None) -> bool:
    """Count ``exc`` (the workspace failing ``what``) and pause as the breaker says while the workspace does
    not answer, looking every PROBE_S, so work resumes within seconds of the storage coming back; False when
    the worker stops. The look is one cheap read, or after a full disk (which still answers reads) one small
    write."""
    from olmocr.faults import no_space, store_errors

    seconds = max(shared.breaker.failed(exc, what, began), 1.0)
    look = queue.ws.sign_in if no_space(exc) else functools.partial(queued_anything, queue.ws)
    deadline = time.monotonic() + seconds
    while not shared.stop.wait(min(PROBE_S, max(0.0, deadline - time.monotonic()))):
        if time.monotonic() >= deadline:
            return True
        try:
            look()
            return True
        except store_errors():
            pass
    return False


EXIT_GRACE_S = 5.0


def _give_back(keeper: LeaseKeeper) -> None:
    """Every claim still held given back, waiting at most EXIT_GRACE_S for a store that does not answer (what is
    not given back by then expires in its lease: ``keeper.unreleased`` counts it)."""
    held = sum(not claim.lost.is_set() for _, claim in keeper.held())
    done = threading.Event()
    giving = threading.Thread(target=lambda: (keeper.release_all(), done.set()), name="give-back", daemon=True)
    giving.start()
    if not done.wait(EXIT_GRACE_S):
        keeper.unreleased = held  # the store did not answer in time: none is known to be back
        log.warning("giving back %d claim(s) did not finish in %.0f s: they expire in their lease", held, EXIT_GRACE_S)


def _exit_now(signum: int) -> None:
    log.warning("%s: threads still busy after %.0f s; exiting now", signal.Signals(signum).name, EXIT_GRACE_S)
    logging.shutdown()
    os._exit(128 + signum)


def run_workers(workspace: Workspace, process: Processor, *, workers: int = 1, replica: int = 0,
                lease_s: float = 300.0, max_failures: int = 3, retry_wait_s: float = 15.0,
                retry_wait_max_s: float = 600.0, pause_after: int = 3, give_up_after_s: float = 900.0,
                linger: bool = True, poll_s: float | None = None, progress: bool = True,
                until: threading.Event | None = None, nudged: threading.Event | None = None) -> WorkReport:
    """Work on ``workspace`` until every item is done (or given up). With ``linger``, a worker whose
    peers still hold items waits for them, and takes over any claim whose holder died; without it, it
    stops as soon as nothing is claimable. With ``until`` (a service's workers), it works on what is added
    while it runs, looking every ``poll_s``, until ``until`` is set; an item under way then is given back.
    ``nudged``, set by whoever added work (the service, on a submission): idle workers look at once (within
    0.2 s) rather than at their next poll."""
    if workers < 1:
        raise UserError(f"workers: must be at least 1, got {workers}")
    report = WorkReport()
    breaker = Breaker(pause_after, give_up_after_s, retry_wait_s, retry_wait_max_s)
    queues = when_answering(lambda: [
        WorkQueue(workspace, f"replica{replica}@{worker_name()}/{i}", lease_s=lease_s, max_failures=max_failures,
                  retry_wait_s=retry_wait_s, retry_wait_max_s=retry_wait_max_s) for i in range(workers)],
        breaker, "the workspace")
    remaining = when_answering(queues[0].remaining, breaker, "the workspace")
    unread = len(queues[0].unread)  # live parts read when the workers reach them: a count of items is not known
    log.info("%s: %d worker thread(s) on %s, %d of %d items not done%s", queues[0].worker.rsplit("/", 1)[0],
             workers, workspace.root, remaining, len(queues[0].items),
             f" in the first live part, and {unread} more part(s) of up to {ITEMS_PER_PART} items" if unread else "")
    shared = _Shared(LeaseKeeper(lease_s).start(), breaker, threading.Event(), report,
                     _Progress(None if unread else remaining, progress),
                     serving=until is not None)
    threads = [threading.Thread(target=_work, name=f"worker-{i}", daemon=True,
                                args=(q, process, shared, linger, poll_s or min(lease_s / 4, 30.0)))
               for i, q in enumerate(queues)]

    def on_signal(signum, frame):
        shared.stop.set()
        report.released = shared.keeper.release_all()
        log.warning("%s: gave back %d claim(s); stopping", signal.Signals(signum).name, report.released)
        # A thread blocked in a read (a hung mount, a stalled connection) would hold the exit for ever:
        # the process ends after EXIT_GRACE_S whatever its threads are doing (its server goes with it).
        timer = threading.Timer(EXIT_GRACE_S, _exit_now, (signum,))
        timer.daemon = True  # a process that ends in time does not wait for it
        timer.start()
        raise SystemExit(128 + signum)

    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    start = time.perf_counter()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():  # short joins, so the main thread runs signal handlers
                thread.join(0.2)
                if until is not None and until.is_set() and not shared.stop.is_set():
                    shared.stop.set()
                    with shared.wake:
                        shared.wake.notify_all()
                if nudged is not None and nudged.is_set():
                    nudged.clear()
                    with shared.wake:
                        shared.wake.notify_all()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        _give_back(shared.keeper)
        shared.progress.bar.close()
    if shared.errors:
        error = shared.errors[0]
        if isinstance(error, StopWork):
            error.unreleased = shared.keeper.unreleased
        raise error
    report.seconds = time.perf_counter() - start
    return report
