"""``python -m olmocr.pipeline.export`` at scale: wall time and peak memory over a synthetic workspace of --items
items' page results, against the same over --baseline items.

    python benchmarks/export_scale.py [--items 200] [--baseline 10] [--pages 500] [--chars 2000] [--repeats 3]

Each item's ``pages/output_<item>.jsonl`` holds --pages page results of --chars characters (documents of 10
pages, as the pipeline writes them with work.page_results=true); one page in a hundred was read by the model
and is cut out of its one-page PDF, the others fell back to the text layer and are counted, so the figures are
of reading the page results, not of poppler. The export reads one item's file at a time: its memory should not
grow with the workspace. Prints medians of --repeats runs, each in a fresh process and a fresh output folder.
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

from olmocr.config import PROJECT_ROOT

PAGE_PDF = os.path.join(PROJECT_ROOT, "data", "sample", "eval", "pdfs", "synth_s0_01000.pdf")  # one page
WORDS = "page table text word column figure caption header".split()


def make_workspace(root: str, items: int, pages: int, chars: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    os.makedirs(os.path.join(root, "pages"))
    os.makedirs(os.path.join(root, "pdfs"))
    for item in range(items):
        lines = []
        for n in range(pages):
            source = os.path.join(root, "pdfs", f"doc_{item:05d}_{n // 10:03d}.pdf")
            read = n % 100 == 0
            if read:
                os.link(PAGE_PDF, source)
            text = " ".join(rng.choice(WORDS) for _ in range(chars // 6))
            lines.append(json.dumps({"source": source, "page": n % 10 + 1 if not read else 1, "text": text,
                                     "primary_language": "en", "is_rotation_valid": True, "rotation_correction": 0,
                                     "is_table": False, "is_diagram": False, "fallback": not read, "turned": 0,
                                     "input_tokens": 1000, "output_tokens": 500, "attempts": []}))
        with open(os.path.join(root, "pages", f"output_{item:05d}.jsonl"), "w") as fh:
            fh.write("\n".join(lines) + "\n")


def run_export(workspace: str, out: str, run_dir: str) -> tuple[float, float, dict]:
    """Wall seconds, peak resident memory (MiB) and the summary of one export in a fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "olmocr.pipeline.export", f"workspace={workspace}", f"out_dir={out}",
                             "progress=false", f"hydra.run.dir={run_dir}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"export failed: {proc.stderr.read()[-2000:]}")
    wall = time.perf_counter() - start
    with open(os.path.join(run_dir, "run_info.json")) as fh:
        summary = json.load(fh)["summary"]
    return wall, usage.ru_maxrss / 1024, summary


def measure(label: str, workspace: str, scratch: str, repeats: int) -> dict:
    walls, peaks = [], []
    for r in range(repeats):
        out, run_dir = os.path.join(scratch, f"out_{label}_{r}"), os.path.join(scratch, f"run_{label}_{r}")
        wall, peak, summary = run_export(workspace, out, run_dir)
        walls.append(wall)
        peaks.append(peak)
        shutil.rmtree(out)
        shutil.rmtree(run_dir)
    return {"wall": statistics.median(walls), "peak": statistics.median(peaks), "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--baseline", type=int, default=10)
    parser.add_argument("--pages", type=int, default=500, help="page results an item")
    parser.add_argument("--chars", type=int, default=2000, help="characters a page")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.baseline < 1 or args.items < args.baseline or args.pages < 10:
        sys.exit("--items must be at least --baseline, --baseline at least 1, --pages at least 10")
    rows = {}
    with tempfile.TemporaryDirectory() as scratch:
        for label, items in (("baseline", args.baseline), ("large", args.items)):
            workspace = os.path.join(scratch, f"ws_{label}")
            make_workspace(workspace, items, args.pages, args.chars)
            size = sum(os.path.getsize(os.path.join(workspace, "pages", n))
                       for n in os.listdir(os.path.join(workspace, "pages")))
            row = rows[label] = measure(label, workspace, scratch, args.repeats)
            s = row["summary"]
            print(f"{items:>6} items ({s['pages']} pages, {size / 2**20:.0f} MiB of page results): {row['wall']:.1f} s, "
                  f"peak RSS {row['peak']:.0f} MiB, {s['exported']} pages exported, {s['fallback']} fallback")
    print(f"peak RSS {args.items} vs {args.baseline} items: {rows['large']['peak'] / rows['baseline']['peak']:.2f}x; "
          f"wall per 1,000 pages {rows['large']['wall'] / rows['large']['summary']['pages'] * 1000:.2f} s; "
          f"median of {args.repeats}")


if __name__ == "__main__":
    main()
