"""The service under load, against the batch pipeline on the same PDFs and the same model server, in one run.

    python benchmarks/serve_load.py [--clients 8] [--docs 24] [--jobs 1000] [--latency-jobs 40] [--workers 2]

One ``transformers serve`` of the tiny model (the embedded default) is started here and shared: the batch
pipeline and the service both reach it as ``server=external``, with the same convert settings and worker
threads. The documents are the bundled sample PDFs and generated ones of 1 to 8 pages (text on each page).

- **Throughput**: the batch pipeline converts all ``--docs`` documents into a fresh workspace; then
  ``--clients`` concurrent clients submit the same documents to the service (a fresh workspace), each
  long-polling its jobs. Pages/s of each is counted from the workspace's own records (each item's done marker
  says when it was claimed and finished): pages over the span from the first claim to the last finish, so
  neither start-up counts. The service's figure is also given as a share of the batch pipeline's.
- **Latency of a one-page job**: ``--latency-jobs`` one-page PDFs submitted one after another to the idle
  service; from the submission to the status that says done (long-polled), median and p95; and the same
  through ``POST /v1/convert``.
- **A long run**: ``--jobs`` one-page jobs by the clients, the service's resident memory (its own process,
  not the model server's) sampled after every tenth of them, the time of a submission (which rewrites the
  workspace's gzipped index) over the first and the last hundred.
- **Lost or twice**: every job submitted must end done, its item with one done marker and one result, and
  the service's log must say each item was converted once.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
TOKEN = "serve-load-token"


def pdf(pages: int, label: str) -> bytes:
    from reportlab.lib.pagesizes import LETTER
    from reportlab.pdfgen.canvas import Canvas

    out = io.BytesIO()
    canvas = Canvas(out, pagesize=LETTER)
    for n in range(1, pages + 1):
        canvas.setFont("Helvetica", 14)
        for line in range(12):
            canvas.drawString(72, 700 - 22 * line, f"{label}, page {n}, line {line + 1}: the quick brown fox.")
        canvas.showPage()
    canvas.save()
    return out.getvalue()


def documents(count: int) -> list[tuple[str, bytes]]:
    bundled = sorted(glob.glob(os.path.join(ROOT, "data", "sample", "eval", "pdfs", "*.pdf")))
    docs = [(os.path.basename(path), open(path, "rb").read()) for path in bundled[: count // 2]]
    docs += [(f"generated_{n}.pdf", pdf(1 + n % 8, f"document {n}")) for n in range(count - len(docs))]
    return docs


def model_server(log_dir: str):
    from olmocr.config import build, compose

    cfg = compose("pipeline", [])
    server = build(cfg.server, model=build(cfg.model))
    server.start(os.path.join(log_dir, "server.log"))
    return server


def pages_per_second(workspace: str) -> tuple[float, int, int]:
    """Pages over the span from the first claim to the last finish, from the done markers; and the items."""
    done = [json.load(open(path)) for path in glob.glob(os.path.join(workspace, "done", "*.json"))]
    pages = sum(record["counts"].get("pages", 0) for record in done)
    span = max(r["finished"] for r in done) - min(r["claimed"] for r in done)
    return pages / span, pages, len(done)


def call(url: str, method: str = "GET", body: bytes | None = None, content_type: str = "application/pdf"):
    request = urllib.request.Request(url, data=body, method=method, headers={"Authorization": f"Bearer {TOKEN}"})
    if body is not None:
        request.add_header("Content-Type", content_type)
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.loads(answer.read())


def until_done(base: str, job: str) -> dict:
    while (state := call(f"{base}/v1/jobs/{job}?wait=30"))["status"] not in ("done", "failed", "cancelled"):
        pass
    return state


def service(workspace: str, log: str, server, workers: int) -> tuple[subprocess.Popen, str]:
    from olmocr.pipeline.server import free_port

    port = free_port("127.0.0.1")
    env = dict(os.environ, OLMOCR_LOAD_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "olmocr.serve", f"workspace={workspace}", f"port={port}",
                             "token_env=OLMOCR_LOAD_TOKEN", f"workers={workers}", "max_waiting=100000",
                             *external(server), f"hydra.run.dir={workspace}_run"], cwd=ROOT, env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if call(f"{base}/ready")["status"] == "ready":
                return proc, base
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the service stopped: {open(log).read()[-3000:]}") from None
        time.sleep(0.2)
    raise SystemExit("the service was not ready in 120 s")


def external(server) -> list[str]:
    return ["server=external", f"server.url={server.url}", f"server.model_name={server.model}"]


def submit_all(base: str, docs: list[tuple[str, bytes]], clients: int, on_submit=None) -> list[dict]:
    """Each client submits its share and long-polls its jobs; the final states, in any order."""
    states, lock = [], threading.Lock()

    def client(share):
        jobs = []
        for name, data in share:
            began = time.perf_counter()
            jobs.append(call(f"{base}/v1/jobs?filename={name}", "POST", data)["id"])
            if on_submit is not None:
                on_submit(time.perf_counter() - began)
        for job in jobs:
            state = until_done(base, job)
            with lock:
                states.append(state)

    threads = [threading.Thread(target=client, args=(docs[n::clients],)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return states


def rss_mb(pid: int) -> float:
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


def lost_or_twice(workspace: str, states: list[dict], log: str) -> tuple[int, int]:
    from collections import Counter

    lost = sum(state["status"] != "done" for state in states)
    converted = Counter(line.split("item ")[1].split()[0] for line in open(log) if " converted in " in line)
    jobs = [json.load(open(path)) for path in glob.glob(os.path.join(workspace, "jobs", "*.json"))]
    lost += sum(not os.path.exists(os.path.join(workspace, "done", f"{job['item']}.json")) for job in jobs)
    return lost, sum(n - 1 for n in converted.values() if n > 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--docs", type=int, default=24)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--latency-jobs", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="serve_load_")
    server = model_server(tmp)
    try:
        docs = documents(args.docs)
        folder = os.path.join(tmp, "pdfs")
        os.makedirs(folder)
        for name, data in docs:
            open(os.path.join(folder, name), "wb").write(data)

        batch = os.path.join(tmp, "batch")
        began = time.perf_counter()
        subprocess.run([sys.executable, "-m", "olmocr.pipeline", f"workspace={batch}", f"pdfs=[{folder}/*.pdf]",
                        f"workers={args.workers}", "progress=false", *external(server), f"hydra.run.dir={batch}_run"],
                       cwd=ROOT, check=True, capture_output=True)
        batch_wall = time.perf_counter() - began
        batch_rate, batch_pages, batch_items = pages_per_second(batch)

        workspace, log = os.path.join(tmp, "served"), os.path.join(tmp, "service.log")
        proc, base = service(workspace, log, server, args.workers)
        try:
            states = submit_all(base, docs, args.clients)
            served_rate, served_pages, served_items = pages_per_second(workspace)

            one = pdf(1, "one page")
            job_s, convert_s = [], []
            for _ in range(args.latency_jobs):
                began = time.perf_counter()
                until_done(base, call(f"{base}/v1/jobs", "POST", one)["id"])
                job_s.append(time.perf_counter() - began)
                began = time.perf_counter()
                call(f"{base}/v1/convert", "POST", one)
                convert_s.append(time.perf_counter() - began)

            submit_s, memory = [], [(0, rss_mb(proc.pid))]
            step = max(args.jobs // 10, 1)
            for start in range(0, args.jobs, step):
                batch_docs = [(f"one_{n}.pdf", one) for n in range(start, min(start + step, args.jobs))]
                states += submit_all(base, batch_docs, args.clients, on_submit=submit_s.append)
                memory.append((start + len(batch_docs), rss_mb(proc.pid)))
            lost, twice = lost_or_twice(workspace, states, log)
        finally:
            proc.terminate()
            proc.wait(60)
    finally:
        server.stop()

    def quantile(values, q):
        return sorted(values)[min(int(q * len(values)), len(values) - 1)]

    print(f"documents: {len(docs)} ({batch_pages} pages), {args.clients} clients, {args.workers} worker threads, "
          f"the tiny model behind one transformers serve")
    print(f"batch pipeline: {batch_rate:.2f} pages/s ({batch_items} items; {batch_wall:.1f} s with start-up)")
    print(f"service:        {served_rate:.2f} pages/s ({served_items} jobs, {served_pages} pages) = "
          f"{served_rate / batch_rate:.2f}x the batch pipeline")
    print(f"one-page job, submitted to done (long-polled), {len(job_s)} jobs: median {statistics.median(job_s):.2f} s, "
          f"p95 {quantile(job_s, 0.95):.2f} s")
    print(f"one page through POST /v1/convert: median {statistics.median(convert_s):.2f} s, "
          f"p95 {quantile(convert_s, 0.95):.2f} s")
    print("service RSS (MB) after jobs: " + ", ".join(f"{n}: {mb:.0f}" for n, mb in memory))
    first, last = submit_s[:100], submit_s[-100:]
    print(f"a submission (the index rewritten): median {statistics.median(first) * 1000:.0f} ms over the first "
          f"{len(first)}, {statistics.median(last) * 1000:.0f} ms over the last {len(last)} "
          f"(of {len(submit_s)}; the workspace then held {args.docs + args.latency_jobs * 2 + args.jobs} jobs)")
    print(f"jobs lost: {lost}; items converted twice: {twice}")


if __name__ == "__main__":
    main()
