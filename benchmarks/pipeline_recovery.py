"""What storage outages cost the batch pipeline: the same conversion fault-free and with S3 taken away
(by default 15 s, then 60 s), in the same run; extra wall time per second of outage, and documents
converted twice or lost.

    python benchmarks/pipeline_recovery.py [--pdfs 40] [--pages-per-item 2] [--page-s 4] [--workers 2]
                                           [--outages 15,60] [--runs 2]

The workspace and the PDFs (bundled sample pages, one-page PDFs) are on a local S3 server (moto), reached
through ``tests/support/faultproxy.py``, which takes S3 away for each outage: the first once a fifth of the pages are
answered, each next one once another fifth are answered after the previous ended (by progress, not by the clock:
the outages meet the same stage of the work however busy the machine is). Wall times run from a run's first S3
request to its end (an interpreter's start is no part of recovery). Pages go to a chat
server that answers a valid page after ``--page-s`` seconds (a model's time; no model is measured) and
counts requests per page image: a page asked for again after it was answered is a page converted twice.
Each run converts fault-free first, then with the outages, each in a fresh workspace; one worker process
of ``--workers`` threads, the default queue settings. Extra time / outage time is what recovery costs: 1.0
is the outage itself and nothing more.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

from chat_stub import serve

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class PageServer:
    """Answers each chat request after ``page_s`` seconds; counts answered requests per page image."""

    def __init__(self, page_s: float):
        self.page_s = page_s
        self.answered: Counter = Counter()
        self.count = 0  # answers since the server started
        self.lock = threading.Lock()
        self.url = serve(self._paced)

    def _paced(self, body: bytes) -> None:
        image = next(part["image_url"]["url"] for part in json.loads(body)["messages"][0]["content"]
                     if isinstance(part, dict) and part.get("type") == "image_url")
        time.sleep(self.page_s)
        with self.lock:
            self.answered[hashlib.sha1(image.encode()).hexdigest()] += 1
            self.count += 1

    def take(self) -> Counter:
        with self.lock:
            answered, self.answered = self.answered, Counter()
        return answered


def upload(endpoint: str, count: int) -> list[str]:
    """``count`` bundled sample PDFs (distinct pages) at s3://corpus/pdfs/."""
    import s3fs

    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True)
    fs.mkdir("corpus")
    sources = sorted(glob.glob(os.path.join(ROOT, "data", "sample", "*", "pdfs", "*.pdf")))[:count]
    if len(sources) < count:
        raise SystemExit(f"--pdfs: the sample data has {len(sources)} PDFs, asked for {count}")
    for path in sources:
        fs.put_file(path, f"corpus/pdfs/{os.path.basename(path)}")
    return [f"s3://corpus/pdfs/{os.path.basename(path)}" for path in sources]


def convert(args, name: str, pdfs: list[str], server: PageServer, proxy, env: dict, scratch: str,
            outages: list[float]) -> dict:
    """One pipeline run on a fresh workspace with outages of these many seconds."""
    run_dir = os.path.join(scratch, f"{name}-run")
    command = [sys.executable, "-m", "olmocr.pipeline", f"workspace=s3://corpus/{name}", "pdfs=[s3://corpus/pdfs]",
               "server=external", f"server.url={server.url}", "server.model_name=paced", "work=ocr",
               "convert=default", f"workers={args.workers}", f"pages_per_group={args.pages_per_item}",
               "progress=false", f"hydra.run.dir={run_dir}"]
    refused_before = proxy.faulted()["outage"]
    every = max(1, round(len(pdfs) / 5))
    began = []
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def take_away() -> None:
        seen = sum(proxy.counts.values())
        while sum(proxy.counts.values()) == seen and proc.poll() is None:  # started: its first S3 request
            time.sleep(0.01)
        began.append(time.perf_counter())
        answered = server.count
        for seconds in outages:
            while server.count < answered + every and proc.poll() is None:
                time.sleep(0.01)
            if proc.poll() is not None:
                return
            proxy.outage(seconds)
            while proxy.down and proc.poll() is None:
                time.sleep(0.01)
            answered = server.count

    watcher = threading.Thread(target=take_away, daemon=True)
    watcher.start()
    out, _ = proc.communicate()
    wall = time.perf_counter() - (began or [time.perf_counter()])[0]
    watcher.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: the pipeline failed: {out[-3000:]}")
    answered = server.take()
    summary = json.load(open(os.path.join(run_dir, "run_info.json")))["summary"]["work"]
    return {"wall_s": wall, "pages_twice": sum(1 for n in answered.values() if n > 1),
            "documents": summary["counts"].get("documents", 0), "lost": len(pdfs) - summary["counts"].get("documents", 0),
            "items_back": summary["unavailable"], "refused": proxy.faulted()["outage"] - refused_before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pdfs", type=int, default=40)
    parser.add_argument("--pages-per-item", type=int, default=2)
    parser.add_argument("--page-s", type=float, default=4.0, help="seconds the chat server takes for a page")
    parser.add_argument("--workers", type=int, default=2, help="worker threads (one process)")
    parser.add_argument("--outages", default="15,60", help="seconds of each outage, in order")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    lengths = [float(s) for s in args.outages.split(",") if s.strip()]
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from support.faultproxy import FaultProxy  # the test tools, tests/support/
    from support.s3server import S3Server

    scratch = tempfile.mkdtemp(prefix="pipeline-recovery-")
    s3 = S3Server().start()
    proxy = FaultProxy(s3.endpoint, rate=0.0).start()
    server = PageServer(args.page_s)
    try:
        os.environ.update(s3.environment())
        pdfs = upload(s3.endpoint, args.pdfs)
        env = {**os.environ, "AWS_ENDPOINT_URL": proxy.endpoint, "PYTHONPATH": ROOT}
        rows = []
        for run in range(args.runs):
            free = convert(args, f"free{run}", pdfs, server, proxy, env, scratch, [])
            faulted = convert(args, f"faulted{run}", pdfs, server, proxy, env, scratch, lengths)
            ratio = (faulted["wall_s"] - free["wall_s"]) / sum(lengths)
            rows.append({"free": free, "faulted": faulted, "ratio": ratio})
            print(f"run {run}: fault-free {free['wall_s']:.1f} s, with outages of {args.outages} s "
                  f"{faulted['wall_s']:.1f} s: extra / outage {ratio:.2f}; pages converted twice "
                  f"{faulted['pages_twice']}, documents lost {faulted['lost']}, items given back "
                  f"{faulted['items_back']}, S3 requests refused in the outages {faulted['refused']}", flush=True)
    finally:
        proxy.stop()
        s3.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n{args.pdfs} one-page PDFs in items of {args.pages_per_item}, {args.page_s:g} s a page, "
          f"{args.workers} worker threads, workspace and PDFs on S3, {os.cpu_count()} cores, median of {args.runs}")
    print(f"fault-free {statistics.median(r['free']['wall_s'] for r in rows):.1f} s, with outages "
          f"{statistics.median(r['faulted']['wall_s'] for r in rows):.1f} s ({sum(lengths):g} s of outage): "
          f"extra / outage {statistics.median(r['ratio'] for r in rows):.2f}; pages converted twice "
          f"{max(r['faulted']['pages_twice'] for r in rows)}, documents lost {max(r['faulted']['lost'] for r in rows)} "
          f"(the worst run)")


if __name__ == "__main__":
    main()
