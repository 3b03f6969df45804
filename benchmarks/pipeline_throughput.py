"""Pages per second of the batch pipeline itself: rendering, prompting, the client and writing, against a
chat server that answers at once (so no model is measured), on real multi-page PDFs; and, in the same
run against the same server, olmocr 0.4.27's pipeline (``--server`` pointed at it; installed into a
throwaway venv here, skipped with a message when it cannot be); and ours with ``filter=olmocr``, whose
decision is also timed per document on its own.

    python benchmarks/pipeline_throughput.py [--pdfs 12] [--pages-per-pdf 10] [--runs 3]
                                             [--upstream-venv DIR] [--no-upstream]
                                             [--engine vllm [--model-dir DIR] [--capacity-concurrency 64]]

``--engine vllm``: instead of the instant server, one real ``vllm serve`` (vLLM's CPU build here, the GPU
build on a CUDA machine), started once and shared by both pipelines (``filter=olmocr`` is left out). The
model it serves is the tiny model trained here for 80 steps (``python -m olmocr.train data=folder``) to
answer every page with one short, valid page, so that each page costs one request of a few dozen tokens
for both pipelines, as with a good model (a random model writes until ``max_tokens``: 8,000 tokens, eight
times a page). vLLM's own counters (``/metrics``) say how many requests each pipeline sent and how many
tokens the engine generated for them, and when. The server's chat template puts the instruction the model
was trained on in place of each request's own, so both pipelines' pages cost the engine the same tokens
(olmocr 0.4.27 words its instruction differently). The engine's capacity is measured in the same run: the
same pages, rendered and prompted by our inference steps, sent straight from an async client that keeps
``--capacity-concurrency`` requests in flight; each pipeline's pages/s is reported as a share of it.

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

from chat_stub import serve
from upstream import upstream_or_skip

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What its pipeline module imports (with --server, nothing of vLLM or torch runs).
UPSTREAM_DEPS = ["boto3", "zstandard", "google-cloud-storage", "requests", "tqdm", "httpx", "huggingface_hub",
                 "pillow", "pypdf", "lingua-language-detector", "pyyaml", "ftfy", "orjson", "pypdfium2", "smart_open"]
GPU_PAGES_S = 4.5


def start_check(body: bytes) -> bool:
    """Is this our pipeline's start check (one small page of a flat colour), not a page of the corpus?"""
    if len(body) > 65536:  # a rendered page is larger
        return False
    import base64
    import io

    from PIL import Image

    sys.path.insert(0, ROOT)
    from olmocr.pipeline.convert import CHECK_PAGE_COLOUR

    for part in json.loads(body)["messages"][0]["content"]:
        if isinstance(part, dict) and part.get("type") == "image_url":
            image = Image.open(io.BytesIO(base64.b64decode(part["image_url"]["url"].split(",", 1)[1]))).convert("RGB")
            return image.getcolors(1) == [(image.width * image.height, CHECK_PAGE_COLOUR)]
    return False


class InstantServer:
    """Answers every chat request at once with a valid page; counts page requests (not our pipeline's
    start check) and their times."""

    def __init__(self):
        self.times: list[float] = []
        self.url = serve(self._seen)

    def _seen(self, body: bytes) -> None:
        if not start_check(body):
            self.times.append(time.perf_counter())

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


def ours(corpus: str, workspace: str, url: str, *extra: str, model: str = "instant") -> list[str]:
    return [sys.executable, "-m", "olmocr.pipeline", f"workspace={workspace}", f"pdfs=[{corpus}]", "work=ocr",
            "convert=default", "server=external", f"server.url={url}", f"server.model_name={model}",
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


def theirs(python: str, corpus: str, workspace: str, url: str, model: str = "instant") -> list[str]:
    return [python, "-m", "olmocr.pipeline", workspace, "--pdfs", *sorted(glob.glob(os.path.join(corpus, "*.pdf"))),
            "--server", url, "--model", model]


def run_command(command: list[str], cwd: str, env: dict) -> None:
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} failed: {(proc.stderr or proc.stdout).strip()[-2000:]}")


def measure(command: list[str], server: InstantServer, pages: int, cwd: str, env: dict) -> dict:
    start = time.perf_counter()
    run_command(command, cwd, env)
    wall = time.perf_counter() - start
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
    parser.add_argument("--engine", choices=["instant", "vllm"], default="instant")
    parser.add_argument("--model-dir", help="--engine vllm: reuse (or train into) this folder for the served model")
    parser.add_argument("--capacity-concurrency", type=int, default=64, help="--engine vllm: requests in flight")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="pipeline-bench-")
    try:
        (run_engine if args.engine == "vllm" else run_all)(args, scratch)
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


ANSWER_MD = ("---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\n"
             "is_diagram: False\n---\nA page of text.\n")


def answering_model(folder: str) -> str:
    """The tiny model trained to answer every page with ``ANSWER_MD`` (made in ``folder`` unless a trained
    one is there already); its Hugging Face folder."""
    model = os.path.join(folder, "run", "checkpoints", "step_000080", "model")
    if os.path.exists(os.path.join(model, "config.json")):
        return model
    pairs = os.path.join(folder, "pairs")
    os.makedirs(pairs, exist_ok=True)
    for pdf in sorted(glob.glob(os.path.join(ROOT, "data", "sample", "train", "pdfs", "*.pdf"))):
        shutil.copy(pdf, pairs)
        with open(os.path.join(pairs, os.path.basename(pdf)[:-4] + ".md"), "w") as fh:
            fh.write(ANSWER_MD)
    start = time.perf_counter()
    run_command([sys.executable, "-m", "olmocr.train", "data=folder", f"data.roots=[{pairs}]", "eval.bench=null",
                     "callbacks.plots=null", "optimizer.lr=2e-2", "trainer.max_duration.value=80",
                     "checkpoint.interval=80", "trainer.eval_interval=80", "run_name=answering",
                     f"hydra.run.dir={os.path.join(folder, 'run')}"], ROOT, {**os.environ, "PYTHONPATH": ROOT})
    print(f"served model: the tiny model trained to answer every page, 80 steps in {time.perf_counter() - start:.0f} s")
    return model


def one_instruction_template(model: str, scratch: str) -> str:
    """The model's chat template with every request's instruction replaced by the one it was trained on
    (ours, v4): olmocr 0.4.27 words its instruction differently, and the tiny model only learnt to answer
    ours. Both pipelines' pages then cost the engine the same tokens."""
    sys.path.insert(0, ROOT)
    from olmocr.formats.prompts import build_prompt

    template = open(os.path.join(model, "chat_template.jinja")).read()
    instruction = "{% raw %}" + build_prompt("v4", "") + "{% endraw %}"
    replaced = template.replace("{{ part['text'] }}", instruction)
    if replaced == template:
        raise RuntimeError(f"{model}: its chat template has no {{{{ part['text'] }}}} to replace")
    path = os.path.join(scratch, "one_instruction.jinja")
    with open(path, "w") as fh:
        fh.write(replaced)
    return path


class EngineMeter:
    """vLLM's own counters, read from its ``/metrics`` every 0.2 s: requests finished and tokens generated,
    and when they last moved. ``window()`` gives what happened since the previous call."""

    NAMES = {"vllm:request_success_total": "requests", "vllm:generation_tokens_total": "tokens"}

    def __init__(self, base: str):
        self.url, self.samples, self.stop = base + "/metrics", [], threading.Event()
        self.mark = self.read()
        threading.Thread(target=self.poll, daemon=True).start()

    def read(self) -> dict:
        import urllib.request

        totals = {"requests": 0.0, "tokens": 0.0}
        for line in urllib.request.urlopen(self.url, timeout=30).read().decode().splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in self.NAMES:
                totals[self.NAMES[name]] += float(line.rsplit(" ", 1)[1])
        return totals

    def poll(self) -> None:
        while not self.stop.wait(0.2):
            self.samples.append((time.perf_counter(), self.read()))

    def window(self) -> dict:
        """Requests and tokens since the last call, and the seconds from the first change to the last."""
        samples, start = list(self.samples), self.mark
        moved = [t for (t, now), (_, before) in zip(samples[1:], samples) if now != before]
        end = samples[-1][1] if samples else start
        self.mark, self.samples = end, samples[-1:]
        span = (moved[-1] - moved[0]) if len(moved) > 1 else float("nan")
        return {"requests": end["requests"] - start["requests"], "tokens": end["tokens"] - start["tokens"],
                "span": span}


def page_requests(corpus: str, model: str) -> list[dict]:
    """Every page of the corpus as our pipeline sends it (rendered and prompted by the inference steps)."""
    sys.path.insert(0, ROOT)
    from omegaconf import OmegaConf

    from olmocr.config import compose
    from olmocr.data.chain import build_pipeline
    from olmocr.formats.pdf import pdf_info
    from olmocr.pipeline.convert import chat_messages, png_data_url

    convert = compose("pipeline", ["convert=default"]).convert
    steps = build_pipeline(OmegaConf.to_container(convert.steps))
    bodies = []
    for path in sorted(glob.glob(os.path.join(corpus, "*.pdf"))):
        for page in range(1, pdf_info(path).num_pages + 1):
            sample = steps({"pdf_path": path, "page": page})
            bodies.append({"model": model, "max_tokens": convert.max_tokens, "temperature": convert.temperatures[0],
                           "messages": chat_messages(sample["messages"], png_data_url(sample["image"]))})
    return bodies


def engine_alone(url: str, bodies: list[dict], concurrency: int) -> None:
    """``bodies`` sent straight to the engine, ``concurrency`` at a time."""
    import asyncio

    import httpx

    async def send_all() -> None:
        slots = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(timeout=600) as client:
            async def one(body):
                async with slots:
                    (await client.post(url + "/chat/completions", json=body)).raise_for_status()
            await asyncio.gather(*(one(body) for body in bodies))

    asyncio.run(send_all())


def run_engine(args, scratch: str) -> None:
    sys.path.insert(0, ROOT)
    from olmocr.models.source import HubModel
    from olmocr.pipeline.server import VllmServer

    pages = make_corpus(os.path.join(scratch, "corpus"), args.pdfs, args.pages_per_pdf)
    corpus = os.path.join(scratch, "corpus")
    model = answering_model(args.model_dir or os.path.join(scratch, "model"))
    server = VllmServer(HubModel(model, family="qwen2_5_vl"), cpu_kv_cache_gib=2,
                        extra_args=["--chat-template", one_instruction_template(model, scratch)])
    start = time.perf_counter()
    server.start(os.path.join(scratch, "vllm.log"))
    print(f"vllm serve ready in {time.perf_counter() - start:.0f} s")
    try:
        meter = EngineMeter(server.url.removesuffix("/v1"))
        bodies = page_requests(corpus, server.model)
        env = {**os.environ, "PYTHONPATH": ROOT}
        runs = {"engine alone": lambda ws: engine_alone(server.url, bodies, args.capacity_concurrency),
                "ours": lambda ws: run_command(ours(corpus, ws, server.url, model=server.model), ROOT, env)}
        python = upstream_or_skip(args.no_upstream, args.upstream_venv, scratch, UPSTREAM_DEPS, "olmocr.pipeline")
        if python is not None:
            clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            runs["olmocr-0.4.27"] = lambda ws: run_command(theirs(python, corpus, ws, server.url, server.model),
                                                               scratch, clean)
        instant = InstantServer()
        results: dict[str, list[dict]] = {name: [] for name in runs}
        alone = []
        for run in range(args.runs):
            # The pipeline's own pages/s on this machine, with no engine working beside it.
            alone.append(measure(ours(corpus, os.path.join(scratch, f"alone-{run}"), instant.url), instant, pages,
                                 ROOT, env)["pages_s"])
            print(f"run {run} {'ours, instant':<14} {alone[-1]:6.2f} pages/s (no engine working)", flush=True)
            for name, go in runs.items():
                meter.window()
                began, cpu = time.perf_counter(), cpu_seconds(server.pid)
                go(os.path.join(scratch, f"{name.replace(' ', '_')}-{run}"))
                wall = time.perf_counter() - began
                cores = (cpu_seconds(server.pid) - cpu) / wall
                time.sleep(0.5)  # the counters' last change is read
                seen = meter.window()
                row = {"pages_s": pages / seen["span"], "tokens_s": seen["tokens"] / seen["span"],
                       "requests_page": seen["requests"] / pages, "engine_cores": cores}
                results[name].append(row)
                print(f"run {run} {name:<14} {row['pages_s']:6.2f} pages/s  {row['tokens_s']:7.0f} output tokens/s  "
                      f"{row['requests_page']:.2f} requests a page  engine busy {cores:.2f} cores "
                      f"(whole command {wall:5.1f} s)", flush=True)
        meter.stop.set()
    finally:
        server.stop()
    print(f"\n{pages} pages ({args.pdfs} PDFs x {args.pages_per_pdf}) through one vllm serve of the tiny model, "
          f"{os.cpu_count()} cores, median of {args.runs} runs")
    print(f"{'':<14} {'pages/s':>8} {'output tokens/s':>16} {'requests a page':>16} {'engine cores':>13} "
          f"{'share of engine':>16}")
    medians = {name: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for name, rows in results.items()}
    capacity = medians["engine alone"]["pages_s"]
    for name, m in medians.items():
        print(f"{name:<14} {m['pages_s']:8.2f} {m['tokens_s']:16.0f} {m['requests_page']:16.2f} "
              f"{m['engine_cores']:13.2f} {m['pages_s'] / capacity:16.2f}")
    print(f"ours with no engine working beside it (instant server): {statistics.median(alone):.2f} pages/s")
    if "olmocr-0.4.27" in medians:
        print(f"ours: {medians['ours']['pages_s'] / medians['olmocr-0.4.27']['pages_s']:.2f}x olmocr 0.4.27's pages/s, "
              f"{medians['ours']['tokens_s'] / medians['olmocr-0.4.27']['tokens_s']:.2f}x its output tokens/s")


def cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by a process and everything it started."""
    import psutil

    total = 0.0
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total

if __name__ == "__main__":
    main()
