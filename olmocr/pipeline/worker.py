"""The worker loop: claim an item, process it, write its result, mark it done, next — in as many
threads as ``workers`` says, until no item is left. SIGTERM and SIGINT give the claims back at once."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from olmocr.pipeline.queue import LeaseKeeper, WorkQueue, worker_name
from olmocr.pipeline.workspace import Item, Workspace

log = logging.getLogger("olmocr.pipeline")


@dataclass
class Output:
    """What a processor makes of one item: the JSONL written to ``results/``, and counts for the done
    marker that the stats command adds up (documents, pages, fallback_pages, input_tokens, …)."""

    result: bytes
    counts: dict[str, int] = field(default_factory=dict)


Processor = Callable[[Item], Output]


class StopWork(RuntimeError):
    """Raised by a processor that cannot go on with any item (its model server is gone): the claim is
    given back without counting a failure against the item, every worker stops, the run fails."""


@dataclass
class WorkReport:
    done: int = 0  # items this process finished
    duplicates: int = 0  # finished here after another worker had already finished them
    lost: int = 0  # claims taken over while this process stalled (result dropped)
    failed: int = 0  # the processor raised
    taken_over: int = 0  # expired claims of other workers taken over
    released: int = 0  # claims given back on a signal
    counts: Counter = field(default_factory=Counter)
    seconds: float = 0.0


class _Progress:
    def __init__(self, total: int, enabled: bool):
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


def _work(queue: WorkQueue, keeper: LeaseKeeper, process: Processor, stop: threading.Event, linger: bool,
          poll_s: float, report: WorkReport, lock: threading.Lock, progress: _Progress,
          errors: list[BaseException], wake: threading.Condition) -> None:
    try:
        _loop(queue, keeper, process, stop, linger, poll_s, report, lock, progress, wake)
    except BaseException as exc:  # noqa: BLE001 - the store failed or the processor cannot go on: stop
        # every worker; the caller raises it
        errors.append(exc)
        stop.set()


def _loop(queue: WorkQueue, keeper: LeaseKeeper, process: Processor, stop: threading.Event, linger: bool,
          poll_s: float, report: WorkReport, lock: threading.Lock, progress: _Progress,
          wake: threading.Condition) -> None:
    while not stop.is_set():
        claim = queue.claim_next()
        if claim is None:
            if not linger or queue.outstanding == 0:
                return
            # Others hold the rest: look again when a thread here finishes one, when the first of their
            # claims would expire, or after poll_s (they may finish), to take over the claim of any worker
            # that died; but spend at most half the time looking.
            wait = min(poll_s, queue.next_expiry - time.time() + 0.05)
            with wake:
                wake.wait(max(wait, queue.look_s, 0.05))
            continue
        keeper.hold(queue, claim)
        try:
            output = process(claim.item)
        except StopWork:
            keeper.drop(claim)
            queue.release(claim)
            raise
        except Exception as exc:  # noqa: BLE001 - one item's failure must not end the worker
            keeper.drop(claim)
            if stop.is_set():
                return
            log.warning("item %s failed (%s: %s); released for another attempt", claim.item.id,
                        type(exc).__name__, exc)
            queue.release(claim, error=f"{type(exc).__name__}: {exc}")
            with lock:
                report.failed += 1
            with wake:
                wake.notify_all()
            continue
        try:
            first = queue.complete(claim, output.result, output.counts)
        finally:
            keeper.drop(claim)
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
            progress.update(report)
        with wake:
            wake.notify_all()


def run_workers(workspace: Workspace, process: Processor, *, workers: int = 1, replica: int = 0,
                lease_s: float = 300.0,
                max_failures: int = 3, linger: bool = True, poll_s: float | None = None,
                progress: bool = True) -> WorkReport:
    """Work on ``workspace`` until every item is done (or given up). With ``linger``, a worker whose
    peers still hold items waits for them, and takes over any claim whose holder died; without it, it
    stops as soon as nothing is claimable."""
    if workers < 1:
        raise ValueError(f"workers: must be at least 1, got {workers}")
    report, lock, stop, errors = WorkReport(), threading.Lock(), threading.Event(), []
    wake = threading.Condition()
    queues = [WorkQueue(workspace, f"replica{replica}@{worker_name()}/{i}", lease_s=lease_s, max_failures=max_failures)
              for i in range(workers)]
    remaining = queues[0].remaining()
    log.info("%s: %d worker thread(s) on %s, %d of %d items not done", queues[0].worker.rsplit("/", 1)[0], workers,
             workspace.root, remaining, len(queues[0].items))
    bar = _Progress(remaining, progress)
    keeper = LeaseKeeper(lease_s).start()
    threads = [threading.Thread(target=_work, name=f"worker-{i}", daemon=True,
                                args=(q, keeper, process, stop, linger, poll_s or min(lease_s / 4, 30.0), report,
                                      lock, bar, errors, wake))
               for i, q in enumerate(queues)]

    def on_signal(signum, frame):
        stop.set()
        report.released = keeper.release_all()
        log.warning("%s: gave back %d claim(s); stopping", signal.Signals(signum).name, report.released)
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
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        keeper.release_all()
        bar.bar.close()
    if errors:
        raise errors[0]
    report.seconds = time.perf_counter() - start
    return report
