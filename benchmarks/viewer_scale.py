"""The document viewer at scale: wall time and peak memory of ``python -m olmocr.report.viewer`` over a
synthetic workspace of --documents documents, against the same over --baseline documents, and how long
its index takes to open in chromium (when chromium and chromedriver are installed).

    python benchmarks/viewer_scale.py [--documents 10000] [--baseline 100] [--pdfs 50] [--repeats 3]

The workspace is written here, no model involved: --pdfs three-page PDFs that the documents take turns
at as their source (so page images, files named by source and page, are rendered once per PDF page: the
figures are of the index and the 10,000 document pages, not of poppler), results JSONL as the pipeline
writes it (1 to 3 pages a document, some from the text layer), and 1% of the documents in the
workspace's bad/ list. Prints medians of --repeats runs, each viewer run in a fresh process and
a fresh output dir.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

RESULTS_PER_FILE = 500  # documents per results file, as a workspace's items write them


def make_pdfs(folder: str, count: int) -> list[str]:
    from reportlab.lib.pagesizes import LETTER
    from reportlab.pdfgen.canvas import Canvas

    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(count):
        path = os.path.join(folder, f"source_{i:04d}.pdf")
        canvas = Canvas(path, pagesize=LETTER, invariant=1)
        for page in range(3):
            canvas.setFont("Helvetica", 14)
            canvas.drawString(72, 700, f"Source {i}, page {page + 1}")
            canvas.showPage()
        canvas.save()
        paths.append(path)
    return paths


def make_workspace(root: str, documents: int, pdfs: list[str], seed: int = 0) -> None:
    rng = random.Random(seed)
    os.makedirs(os.path.join(root, "results"), exist_ok=True)
    os.makedirs(os.path.join(root, "bad"), exist_ok=True)
    out = None
    for n in range(documents):
        if n % RESULTS_PER_FILE == 0:
            if out:
                out.close()
            out = open(os.path.join(root, "results", f"output_{n // RESULTS_PER_FILE:05d}.jsonl"), "w")
        pages = rng.randint(1, 3)
        texts = [f"Document {n}, page {p}: " + " ".join(rng.choice(("table", "word", "page", "text", "| a | b |"))
                                                        for _ in range(60)) for p in range(1, pages + 1)]
        spans, at = [], 0
        for p, text in enumerate(texts, start=1):
            spans.append([at, at + len(text) + 1, p])
            at += len(text) + 1
        fallback = [rng.random() < 0.1 for _ in texts]
        doc = {"id": f"{n:040x}", "text": "\n".join(texts), "source": "olmocr",
               "metadata": {"Source-File": pdfs[n % len(pdfs)], "model": "synthetic",
                            "pdf-total-pages": pages, "total-input-tokens": 900 * pages,
                            "total-output-tokens": 200 * pages, "total-fallback-pages": sum(fallback)},
               "attributes": {"pdf_page_numbers": spans, "primary_language": ["en"] * pages,
                              "is_rotation_valid": [True] * pages, "rotation_correction": [0] * pages,
                              "is_table": [False] * pages, "is_diagram": [False] * pages, "is_fallback": fallback}}
        out.write(json.dumps(doc) + "\n")
    out.close()
    with open(os.path.join(root, "bad", "item_0.jsonl"), "w") as fh:
        for n in range(max(1, documents // 100)):
            fh.write(json.dumps({"source": f"/data/broken_{n}.pdf", "status": "bad", "reason": "unreadable_pdf",
                                 "detail": "Stream has ended unexpectedly"}) + "\n")


def run_viewer(workspace: str, out: str, longest_side: int) -> tuple[float, float]:
    """Wall seconds and peak resident memory (MiB) of one viewer run in a fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "olmocr.report.viewer", f"results={workspace}",
                             f"longest_side={longest_side}", f"hydra.run.dir={out}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"viewer failed ({proc.returncode}): {proc.stderr.read()[-2000:]}")
    return time.perf_counter() - start, usage.ru_maxrss / 1024


def open_seconds(index: str) -> float | None:
    """Seconds from navigation to the load event of the index in headless chromium; None without it."""
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (binary and driver):
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    browser = webdriver.Chrome(service=Service(driver), options=options)
    try:
        browser.get(f"file://{index}")
        timing = browser.execute_script("const t = performance.getEntriesByType('navigation')[0];"
                                        "return [t.startTime, t.loadEventEnd];")
        return (timing[1] - timing[0]) / 1000
    finally:
        browser.quit()


def measure(label: str, workspace: str, scratch: str, repeats: int, longest_side: int) -> dict:
    walls, peaks, opens = [], [], []
    for r in range(repeats):
        out = os.path.join(scratch, f"{label}_{r}")
        wall, peak = run_viewer(workspace, out, longest_side)
        walls.append(wall)
        peaks.append(peak)
        seconds = open_seconds(os.path.join(out, "index.html"))
        if seconds is not None:
            opens.append(seconds)
        index_mib = os.path.getsize(os.path.join(out, "index.html")) / 2**20
        pages = len(os.listdir(os.path.join(out, "docs")))
        shutil.rmtree(out)
    return {"wall": statistics.median(walls), "peak": statistics.median(peaks),
            "open": statistics.median(opens) if opens else None, "index_mib": index_mib, "pages": pages}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--baseline", type=int, default=100)
    parser.add_argument("--pdfs", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--longest-side", type=int, default=300, help="page images, pixels")
    args = parser.parse_args()
    if args.baseline < 1 or args.documents < args.baseline:
        sys.exit("--documents must be at least --baseline, and --baseline at least 1")
    with tempfile.TemporaryDirectory() as scratch:
        pdfs = make_pdfs(os.path.join(scratch, "pdfs"), args.pdfs)
        rows = {}
        for label, count in (("baseline", args.baseline), ("large", args.documents)):
            workspace = os.path.join(scratch, f"ws_{label}")
            make_workspace(workspace, count, pdfs)
            rows[label] = measure(label, workspace, scratch, args.repeats, args.longest_side)
            row = rows[label]
            opened = f"{row['open']:.2f} s" if row["open"] is not None else "not measured (no chromium)"
            print(f"{count:>7} documents: {row['wall']:.1f} s, peak RSS {row['peak']:.0f} MiB, "
                  f"{row['pages']} document pages, index {row['index_mib']:.1f} MiB opens in {opened}")
    ratio = rows["large"]["peak"] / rows["baseline"]["peak"]
    print(f"peak RSS {args.documents} vs {args.baseline} documents: {ratio:.2f}x; "
          f"wall per document {rows['large']['wall'] / args.documents * 1000:.1f} ms "
          f"({rows['baseline']['wall'] / args.baseline * 1000:.1f} ms at {args.baseline}); median of {args.repeats}")


if __name__ == "__main__":
    main()
