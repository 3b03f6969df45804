"""The work queue under load: items processed twice, items never processed, and claims per second of
this project's queue and, in the same run against the same local S3 server, olmocr 0.4.27's
(its published ``WorkQueue`` with the S3 backend, installed into a throwaway venv here).

    python benchmarks/workqueue.py [--items 300] [--workers 8] [--runs 3] [--work-ms 20]
                                   [--upstream-venv DIR] [--no-upstream]

Each run starts a fresh S3 server (moto, one request at a time, conditional writes atomic as on S3),
then for each queue: a fresh workspace of ``items`` one-PDF items, ``workers`` worker processes that
claim an item, "process" it for ``work_ms`` (a sleep, so the queue is what is measured), log it and
mark it done, until their queue is empty. A duplicate is an item processed more than once (GPU work
paid twice); a lost item was never processed. Claims/s: items processed per second from the first
worker being ready to the last item. The queues alternate within each run, so both see the same load.
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

def ours_worker(workspace: str, work_ms: float, log: str) -> None:
    from olmocr.pipeline.worker import Output, run_workers
    from olmocr.pipeline.workspace import Workspace

    with open(log, "a", buffering=1) as out:
        def process(item):
            time.sleep(work_ms / 1000)
            out.write(f"{item.id} {time.time()}\n")
            return Output(b"", {"documents": len(item.pdfs)})

        ws = Workspace(workspace)
        out.write(f"ready {time.time()}\n")
        run_workers(ws, process, workers=1, lease_s=120, linger=False, progress=False)


def upstream_worker(workspace: str, work_ms: float, log: str) -> None:
    import boto3
    from olmocr.work_queue import S3Backend, WorkQueue  # olmocr 0.4.27's, in its own venv

    async def main():
        queue = WorkQueue(S3Backend(boto3.client("s3"), workspace))
        await queue.initialize_queue()
        with open(log, "a", buffering=1) as out:
            out.write(f"ready {time.time()}\n")
            while (item := await queue.get_work()) is not None:
                await asyncio.sleep(work_ms / 1000)
                out.write(f"{item.hash} {time.time()}\n")
                await queue.mark_done(item)

    asyncio.run(main())


def upstream_populate(workspace: str, items: int) -> None:
    import boto3
    from olmocr.work_queue import S3Backend, WorkQueue

    asyncio.run(WorkQueue(S3Backend(boto3.client("s3"), workspace)).populate_queue(pdf_paths(items), 1))


# --- the benchmark ---------------------------------------------------------------------------------------

def measure(python: str, role: str, workspace: str, workers: int, work_ms: float, folder: str,
            env: dict) -> dict:
    os.makedirs(folder)
    procs = [subprocess.Popen([python, __file__, "--role", role, "--workspace", workspace, "--work-ms",
                               str(work_ms), "--log", os.path.join(folder, f"worker{k}.log")], env=env, cwd=folder,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for k in range(workers)]
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{role} worker failed: {err.strip()[-2000:]}")
    ready, processed = [], []
    for path in glob.glob(os.path.join(folder, "*.log")):
        for line in open(path):
            key, when = line.split()
            (ready if key == "ready" else processed).append((key, float(when)))
    counts = Counter(key for key, _ in processed)
    span = max(when for _, when in processed) - min(when for _, when in ready)
    return {"processed": len(processed), "items": len(counts),
            "duplicates": sum(n - 1 for n in counts.values()), "claims_s": len(counts) / span}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work-ms", type=float, default=20.0)
    parser.add_argument("--upstream-venv", help="reuse (or create) this venv for olmocr 0.4.27")
    parser.add_argument("--no-upstream", action="store_true")
    parser.add_argument("--role", choices=["ours", "upstream", "upstream-populate"], help=argparse.SUPPRESS)
    parser.add_argument("--workspace", help=argparse.SUPPRESS)
    parser.add_argument("--log", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "ours":
        return ours_worker(args.workspace, args.work_ms, args.log)
    if args.role == "upstream":
        return upstream_worker(args.workspace, args.work_ms, args.log)
    if args.role == "upstream-populate":
        return upstream_populate(args.workspace, args.items)

    queues = {"ours": sys.executable}
    scratch = tempfile.mkdtemp(prefix="workqueue-bench-")
    try:
        run_all(args, queues, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # the throwaway venv too, unless --upstream-venv kept it


def run_all(args, queues: dict[str, str], scratch: str) -> None:
    from olmocr.pipeline.workspace import Workspace
    from olmocr.utils.s3server import S3Server

    python = upstream_or_skip(args.no_upstream, args.upstream_venv, scratch, UPSTREAM_DEPS, "olmocr.work_queue")
    if python is not None:
        queues["olmocr-0.4.27"] = python
    results: dict[str, list[dict]] = {name: [] for name in queues}
    for run in range(args.runs):
        server = S3Server().start()
        env = {**os.environ, **server.environment()}
        os.environ.update(server.environment())
        server.make_bucket("bench")
        for name, python in queues.items():
            workspace = f"s3://bench/{name}-{run}"
            if name == "ours":
                Workspace(workspace).add(pdf_paths(args.items), pages_per_group=1, sample=0)
                role = "ours"
            else:
                subprocess.run([python, __file__, "--role", "upstream-populate", "--workspace", workspace,
                                "--items", str(args.items)], env=env, check=True, capture_output=True, cwd=scratch)
                role = "upstream"
            result = measure(python, role, workspace, args.workers, args.work_ms,
                             os.path.join(scratch, f"{name}-{run}"), env)
            result["lost"] = args.items - result["items"]
            results[name].append(result)
            print(f"run {run} {name:<14} {result['claims_s']:7.1f} claims/s  {result['duplicates']:3d} duplicates  "
                  f"{result['lost']:3d} lost", flush=True)
        server.stop()
    print(f"\n{args.workers} workers, {args.items} items, {args.work_ms:g} ms of work per item, {args.runs} runs")
    print(f"{'queue':<14} {'claims/s':>9} {'duplicates':>16} {'lost':>12}")
    for name, rows in results.items():
        print(f"{name:<14} {statistics.median(r['claims_s'] for r in rows):9.1f} "
              f"{' '.join(str(r['duplicates']) for r in rows):>16} {' '.join(str(r['lost']) for r in rows):>12}")
    if len(results) == 2:
        ours, theirs = (statistics.median(r["claims_s"] for r in rows) for rows in results.values())
        print(f"claims/s: {ours / theirs:.2f}x olmocr 0.4.27's")


if __name__ == "__main__":
    main()
