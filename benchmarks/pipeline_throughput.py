"""Pages per second of the batch pipeline itself: rendering, prompting, the client and writing, against a
chat server that answers at once (so no model is measured), on real multi-page PDFs; and, in the same
run against the same server, olmocr 0.4.27's pipeline (``--server`` pointed at it; installed into a
throwaway venv here, skipped with a message when it cannot be); and ours with ``filter=olmocr``, whose
decision is also timed per document on its own.

    python benchmarks/pipeline_throughput.py [--pdfs 12] [--pages-per-pdf 10] [--runs 3]
                                             [--upstream-venv DIR] [--no-upstream]

The PDFs are the bundled synthetic pages (text, tables, equations, figures) bound into multi-page
documents. Each run converts them all with each pipeline in a fresh workspace (the pipelines alternate,
so both see the same machine). Pages/s is counted by the server, from the first page request to the
last; wall is the whole command, start-up and writing included. A GPU that reads ~4.5 pages/s (one
H100 with olmOCR 2) is fed when the pipeline alone does clearly more than that.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from upstream import upstream_or_skip

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What its pipeline module imports (with --server, nothing of vLLM or torch runs).
UPSTREAM_DEPS = ["boto3", "zstandard", "google-cloud-storage", "requests", "tqdm", "httpx", "huggingface_hub",
                 "pillow", "pypdf", "lingua-language-detector", "pyyaml", "ftfy", "orjson", "pypdfium2", "smart_open"]
GPU_PAGES_S = 4.5
ANSWER = json.dumps({
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": (
        "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\n"
        "is_diagram: False\n---\nA page, read at once.")}}],
    "usage": {"prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1010}}).encode()


class InstantServer:
    """Answers every chat request at once with a valid page; counts requests and their times."""

    def __init__(self):
        self.times: list[float] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _reply(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # /health, /v1/models: ready
                self._reply(b'{"status": "ok", "data": [{"id": "instant"}]}')

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                server.times.append(time.perf_counter())
                self._reply(ANSWER)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def window(self) -> tuple[int, float]:
        times, self.times = self.times, []
        return len(times), (times[-1] - times[0]) if len(times) > 1 else float("nan")


def make_corpus(folder: str, pdfs: int, pages_per_pdf: int) -> int:
    """``pdfs`` documents of ``pages_per_pdf`` pages each, bound from the bundled sample pages."""
    from pypdf import PdfReader, PdfWriter

    sources = sorted(glob.glob(os.path.join(ROOT, "data", "sample", "*", "pdfs", "*.pdf")))
    os.makedirs(folder)
    k = 0
    for d in range(pdfs):
        writer = PdfWriter()
        for _ in range(pages_per_pdf):
            writer.add_page(PdfReader(sources[k % len(sources)]).pages[0])
            k += 1
        with open(os.path.join(folder, f"doc_{d:03d}.pdf"), "wb") as fh:
            writer.write(fh)
    return pdfs * pages_per_pdf


def ours(corpus: str, workspace: str, url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "olmocr.pipeline", f"workspace={workspace}", f"pdfs=[{corpus}]", "work=ocr",
            "convert=default", "server=external", f"server.url={url}", "server.model_name=instant",
            "progress=false", f"hydra.run.dir={workspace}-run", *extra]


def filter_cost(corpus: str) -> tuple[int, float, float]:
    """The pages of the documents filter=olmocr keeps, the first decision's seconds (the language models
    load) and the median of the others."""
    sys.path.insert(0, ROOT)
    from olmocr.formats.pdf import pdf_info
    from olmocr.pipeline.filter import DocumentFilter

    decide, kept, times = DocumentFilter(), 0, []
    for path in sorted(glob.glob(os.path.join(corpus, "*.pdf"))):
        data = open(path, "rb").read()
        start = time.perf_counter()
        dropped = decide(path, data)
        times.append(time.perf_counter() - start)
        kept += 0 if dropped else pdf_info(path, data).num_pages
    return kept, times[0], statistics.median(times[1:] or times)


def theirs(python: str, corpus: str, workspace: str, url: str) -> list[str]:
    return [python, "-m", "olmocr.pipeline", workspace, "--pdfs", *sorted(glob.glob(os.path.join(corpus, "*.pdf"))),
            "--server", url, "--model", "instant"]


def measure(command: list[str], server: InstantServer, pages: int, cwd: str, env: dict) -> dict:
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{command[2]} failed: {(proc.stderr or proc.stdout).strip()[-2000:]}")
    requests, span = server.window()
    if requests != pages:
        raise RuntimeError(f"{' '.join(command[:3])}: {requests} page requests for {pages} pages")
    return {"pages_s": requests / span, "wall_s": wall, "wall_pages_s": pages / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pdfs", type=int, default=12)
    parser.add_argument("--pages-per-pdf", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--upstream-venv", help="reuse (or create) this venv for olmocr 0.4.27")
    parser.add_argument("--no-upstream", action="store_true")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="pipeline-bench-")
    try:
        run_all(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # the throwaway venv too, unless --upstream-venv kept it


def run_all(args, scratch: str) -> None:
    pages = make_corpus(os.path.join(scratch, "corpus"), args.pdfs, args.pages_per_pdf)
    corpus = os.path.join(scratch, "corpus")
    kept_pages, first_s, each_s = filter_cost(corpus)
    server = InstantServer()
    env = {**os.environ, "PYTHONPATH": ROOT}
    # name → (command for a workspace, where it runs, its environment, the pages it sends)
    pipelines = {"ours": (lambda ws: ours(corpus, ws, server.url), ROOT, env, pages),
                 "ours+filter": (lambda ws: ours(corpus, ws, server.url, "filter=olmocr"), ROOT, env, kept_pages)}
    python = upstream_or_skip(args.no_upstream, args.upstream_venv, scratch, UPSTREAM_DEPS, "olmocr.pipeline")
    if python is not None:
        # From the scratch folder, where this checkout's olmocr package cannot shadow its own.
        pipelines["olmocr-0.4.27"] = (lambda ws: theirs(python, corpus, ws, server.url), scratch,
                                      {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, pages)
    results: dict[str, list[dict]] = {name: [] for name in pipelines}
    for run in range(args.runs):
        for name, (command, cwd, environment, sent) in pipelines.items():
            result = measure(command(os.path.join(scratch, f"{name}-{run}")), server, sent, cwd, environment)
            results[name].append(result)
            print(f"run {run} {name:<14} {result['pages_s']:6.2f} pages/s  (whole command {result['wall_s']:5.1f} s, "
                  f"{result['wall_pages_s']:.2f} pages/s)", flush=True)
    print(f"\n{pages} pages ({args.pdfs} PDFs x {args.pages_per_pdf}), rendered at 1288 px, {os.cpu_count()} cores, "
          f"median of {args.runs} runs")
    print(f"{'pipeline':<14} {'pages/s':>8} {'whole command pages/s':>22}")
    medians = {}
    for name, rows in results.items():
        medians[name] = statistics.median(r["pages_s"] for r in rows)
        print(f"{name:<14} {medians[name]:8.2f} {statistics.median(r['wall_pages_s'] for r in rows):22.2f}")
    print(f"ours: {medians['ours'] / GPU_PAGES_S:.2f}x the ~{GPU_PAGES_S} pages/s one H100 reads")
    print(f"filter=olmocr: {each_s * 1000:.1f} ms per document (median; the first {first_s:.2f} s, loading the "
          f"language models), {pages - kept_pages} of {pages} pages filtered out; "
          f"pages/s with it on: {medians['ours+filter'] / medians['ours']:.2f}x off")
    if "olmocr-0.4.27" in medians:
        print(f"pages/s: {medians['ours'] / medians['olmocr-0.4.27']:.2f}x olmocr 0.4.27's")


if __name__ == "__main__":
    main()
