"""The work queue under load, and in bad weather: items processed twice, items never finished and
claims per second of this project's queue and, in the same run against the same local S3 server,
olmocr 0.4.27's (its published ``WorkQueue`` with the S3 backend, installed into a throwaway venv here).

    python benchmarks/workqueue.py [--items 300] [--workers 8] [--runs 3] [--work-ms 20]
                                   [--faults 0.1 --outage 60] [--upstream-venv DIR] [--no-upstream]

Each run starts a fresh S3 server (moto, one request at a time, conditional writes atomic as on S3),
then for each queue: a fresh workspace of ``items`` one-PDF items, ``workers`` worker processes that
claim an item, "process" it for ``work_ms`` (a sleep, so the queue is what is measured), log it and
mark it done, until their queue is empty. A duplicate is an item processed more than once (GPU work
paid twice); a lost item is one without its done marker when the workers have finished (the run ends
without it). Claims/s: items processed per second from the first worker being ready to the last item.
The queues alternate within each run, so both see the same load.

With ``--faults RATE`` the workers reach S3 through a proxy that faults that share of requests (connection
resets before and after the server did the request, 500, 503 SlowDown, 1-3 s stalls:
``tests/support/faultproxy.py``), and ``--outage S`` makes S3 unreachable for S seconds once a third of the
items are processed. Each queue is run as its own worker loop runs it: this project's worker
(``run_workers``: failures go back to the queue to wait), and olmocr 0.4.27's pipeline loop (an error while
processing or marking done is logged and the item left; an error while getting work ends the worker). A
worker process that exits with an error is started again, up to ``--restarts`` times, as a cluster would.
Given up: items this queue stopped trying (olmocr 0.4.27 has no such state); wall: from the first worker
being ready to the last one's exit.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter

from upstream import upstream_or_skip

# What its work queue imports (olmocr.s3_utils); the rest of its dependencies are not needed here.
UPSTREAM_DEPS = ["boto3", "zstandard", "google-cloud-storage", "requests", "tqdm"]


def pdf_paths(items: int) -> list[str]:
    return [f"s3://bench/pdfs/doc_{i:05d}.pdf" for i in range(items)]


# --- worker processes (run by this script with --role; import only what their queue needs) -------------

def ours_worker(workspace: str, work_ms: float, log: str, faulty: bool) -> None:
    from olmocr.pipeline.worker import Output, run_workers
    from olmocr.pipeline.workspace import Workspace

    with open(log, "a", buffering=1) as out:
        def process(item):
            time.sleep(work_ms / 1000)
            out.write(f"{item.id} {time.time()}\n")
            return Output(b"", {"documents": len(item.pdfs)})

        ws = Workspace(workspace)
        out.write(f"ready {time.time()}\n")
        if faulty:  # short leases and waits, as for a benchmark-sized run; lingering to wait out the retries
            run_workers(ws, process, lease_s=10, retry_wait_s=1, retry_wait_max_s=5, give_up_after_s=900,
                        progress=False)
        else:
            run_workers(ws, process, lease_s=120, linger=False, progress=False)


def upstream_worker(workspace: str, work_ms: float, log: str, faulty: bool) -> None:
    import boto3
    from olmocr.work_queue import S3Backend, WorkQueue  # olmocr 0.4.27's, in its own venv

    async def main():
        queue = WorkQueue(S3Backend(boto3.client("s3"), workspace))
        await queue.initialize_queue()
        with open(log, "a", buffering=1) as out:
            out.write(f"ready {time.time()}\n")
            # Its pipeline's worker loop: get_work outside the try, processing and mark_done inside it.
            while (item := await queue.get_work()) is not None:
                try:
                    await asyncio.sleep(work_ms / 1000)
                    out.write(f"{item.hash} {time.time()}\n")
                    await queue.mark_done(item)
                except Exception as exc:  # noqa: BLE001 - as its pipeline does: log and go on
                    print(f"item {item.hash}: {exc}", file=sys.stderr)

    asyncio.run(main())


def upstream_populate(workspace: str, items: int) -> None:
    import boto3
    from olmocr.work_queue import S3Backend, WorkQueue

    asyncio.run(WorkQueue(S3Backend(boto3.client("s3"), workspace)).populate_queue(pdf_paths(items), 1))


# --- the benchmark ---------------------------------------------------------------------------------------

def processed_lines(folder: str) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    ready, processed = [], []
    for path in glob.glob(os.path.join(folder, "*.log")):
        for line in open(path):
            key, when = line.split()
            (ready if key == "ready" else processed).append((key, float(when)))
    return ready, processed


def measure(python: str, role: str, workspace: str, args, folder: str, env: dict, proxy=None) -> dict:
    """Run the workers to the end (each slot started again when it fails, up to ``args.restarts`` times);
    with a ``proxy``, take S3 away for ``args.outage`` s once a third of the items are processed."""
    os.makedirs(folder)

    def start(slot: int, attempt: int) -> subprocess.Popen:
        command = [python, __file__, "--role", role, "--workspace", workspace, "--work-ms", str(args.work_ms),
                   "--log", os.path.join(folder, f"worker{slot}.log"), *(["--faults", str(args.faults)] if proxy else [])]
        err = open(os.path.join(folder, f"worker{slot}.{attempt}.err"), "w")
        return subprocess.Popen(command, env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=err)

    slots = {k: (start(k, 0), 0) for k in range(args.workers)}
    crashes, outage_at = [], None
    while slots:
        time.sleep(0.2)
        for slot, (proc, attempt) in list(slots.items()):
            if proc.poll() is None:
                continue
            del slots[slot]
            if proc.returncode != 0:
                lines = open(os.path.join(folder, f"worker{slot}.{attempt}.err")).read().strip().splitlines()
                crashes.append(lines[-1] if lines else f"exit code {proc.returncode}")
                if attempt < args.restarts:
                    slots[slot] = (start(slot, attempt + 1), attempt + 1)
        if proxy is not None and args.outage and outage_at is None and len(processed_lines(folder)[1]) >= args.items / 3:
            proxy.outage(args.outage)
            outage_at = time.time()
    end = time.time()
    if not proxy and crashes:
        raise RuntimeError(f"{role} worker failed: {crashes[0]}")
    ready, processed = processed_lines(folder)
    counts = Counter(key for key, _ in processed)
    span = max(when for _, when in processed) - min(when for _, when in ready)
    return {"processed": len(processed), "items": len(counts), "duplicates": sum(n - 1 for n in counts.values()),
            "claims_s": len(counts) / span, "wall_s": end - min(when for _, when in ready), "crashes": crashes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work-ms", type=float, default=20.0)
    parser.add_argument("--faults", type=float, default=0.0, help="share of S3 requests that meet a fault")
    parser.add_argument("--outage", type=float, default=0.0, help="seconds without S3, a third of the way in")
    parser.add_argument("--restarts", type=int, default=3, help="times a failed worker process is started again")
    parser.add_argument("--upstream-venv", help="reuse (or create) this venv for olmocr 0.4.27")
    parser.add_argument("--no-upstream", action="store_true")
    parser.add_argument("--role", choices=["ours", "upstream", "upstream-populate"], help=argparse.SUPPRESS)
    parser.add_argument("--workspace", help=argparse.SUPPRESS)
    parser.add_argument("--log", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "ours":
        return ours_worker(args.workspace, args.work_ms, args.log, args.faults > 0)
    if args.role == "upstream":
        return upstream_worker(args.workspace, args.work_ms, args.log, args.faults > 0)
    if args.role == "upstream-populate":
        return upstream_populate(args.workspace, args.items)

    queues = {"ours": sys.executable}
    scratch = tempfile.mkdtemp(prefix="workqueue-bench-")
    try:
        run_all(args, queues, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # the throwaway venv too, unless --upstream-venv kept it


def finished(server, name: str, workspace: str) -> tuple[int, int | None]:
    """Items with a done marker, and items given up (None: the queue has no such state)."""
    from olmocr.pipeline.stats import workspace_stats
    from olmocr.pipeline.workspace import Workspace
    from olmocr.utils.io import Access, filesystem

    if name == "ours":
        stats = workspace_stats(Workspace(workspace, Access(endpoint=server.endpoint)))
        return stats["done"], stats["given_up"]
    fs = filesystem(workspace, Access(endpoint=server.endpoint))
    return len(fs.ls(f"{workspace}/done_flags", refresh=True)) if fs.exists(f"{workspace}/done_flags") else 0, None


def run_all(args, queues: dict[str, str], scratch: str) -> None:
    from olmocr.pipeline import queue
    from olmocr.pipeline.workspace import Workspace

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from support.faultproxy import FaultProxy  # the test tools, tests/support/
    from support.s3server import S3Server

    python = upstream_or_skip(args.no_upstream, args.upstream_venv, scratch, UPSTREAM_DEPS, "olmocr.work_queue")
    if python is not None:
        queues["olmocr-0.4.27"] = python
    faulty = args.faults > 0 or args.outage > 0
    results: dict[str, list[dict]] = {name: [] for name in queues}
    for run in range(args.runs):
        server = S3Server().start()
        env = {**os.environ, **server.environment()}
        os.environ.update(server.environment())
        server.make_bucket("bench")
        for name, python in queues.items():
            workspace = f"s3://bench/{name}-{run}"
            if name == "ours":
                queue.add(Workspace(workspace), pdf_paths(args.items), pages_per_group=1, sample=0)
                role = "ours"
            else:
                subprocess.run([python, __file__, "--role", "upstream-populate", "--workspace", workspace,
                                "--items", str(args.items)], env=env, check=True, capture_output=True, cwd=scratch)
                role = "upstream"
            # The same faults for each queue: a proxy with the same seed, in front of the same server.
            proxy = FaultProxy(server.endpoint, rate=args.faults, stall_s=(1.0, 3.0), seed=run).start() if faulty else None
            result = measure(python, role, workspace, args, os.path.join(scratch, f"{name}-{run}"),
                             {**env, "AWS_ENDPOINT_URL": proxy.endpoint} if proxy else env, proxy)
            if proxy:
                result["faults"] = sum(proxy.faulted().values())
                proxy.stop()
            done, result["given_up"] = finished(server, name, workspace)
            result["lost"] = args.items - done
            results[name].append(result)
            print(f"run {run} {name:<14} {result['claims_s']:7.1f} claims/s  {result['duplicates']:3d} duplicates  "
                  f"{result['lost']:3d} lost  {'-' if result['given_up'] is None else result['given_up']:>3} given up  "
                  f"{result['wall_s']:6.1f} s wall" + (f"  {result['faults']} faults met, {len(result['crashes'])} worker "
                                                       f"exits on errors" if faulty else ""), flush=True)
            for line in sorted(set(result["crashes"]))[:3]:
                print(f"    a worker exited: {line[:160]}")
        server.stop()
    weather = f", {args.faults:.0%} of S3 requests faulted" if args.faults else ""
    weather += f", a {args.outage:g} s outage" if args.outage else ""
    print(f"\n{args.workers} workers, {args.items} items, {args.work_ms:g} ms of work per item, {args.runs} runs{weather}")
    print(f"{'queue':<14} {'claims/s':>9} {'duplicates':>16} {'lost':>12} {'given up':>12} {'wall s':>8}")
    for name, rows in results.items():
        print(f"{name:<14} {statistics.median(r['claims_s'] for r in rows):9.1f} "
              f"{' '.join(str(r['duplicates']) for r in rows):>16} {' '.join(str(r['lost']) for r in rows):>12} "
              f"{' '.join('-' if r['given_up'] is None else str(r['given_up']) for r in rows):>12} "
              f"{statistics.median(r['wall_s'] for r in rows):8.1f}")
    if len(results) == 2:
        ours, theirs = (statistics.median(r["claims_s"] for r in rows) for rows in results.values())
        print(f"claims/s: {ours / theirs:.2f}x olmocr 0.4.27's")


if __name__ == "__main__":
    main()
