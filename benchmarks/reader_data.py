"""How long the reader's SFT waits for its pages: +experiment=read_tiny as it was (every page rendered by poppler in
the training process) against as it is (renders kept in data.render_cache, a loader worker preparing the next
batch while the step runs), on the same pages, machine and steps, in one run.

    python benchmarks/reader_data.py [--out outputs/reader_data] [--steps 300] [--repeats 1]

Pages: scripts/reading_pages.sh (made once under --out). Each configuration trains --steps steps from random
weights in a run dir of its own, no evals; printed per configuration: the median of --repeats wall times of the
training command, and the median share of each logged step spent waiting for data. ``kept, first read`` starts
from an empty cache (a recipe's first run, which renders every page once); ``kept`` from the cache that run
filled (every later run on the same pages: the blind control, a rerun, another recipe).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train(out: str, name: str, steps: int, overrides: list[str]) -> tuple[float, float]:
    run = os.path.join(out, "runs", name)
    shutil.rmtree(run, ignore_errors=True)
    command = [sys.executable, "-m", "olmocr.train", "+experiment=read_tiny", f"paths.reading={out}/pages",
               f"trainer.max_duration.value={steps}", "trainer.eval_interval=null", "checkpoint.keep_best=null",
               f"checkpoint.interval={steps}", "eval=null", "callbacks.plots=null", f"hydra.run.dir={run}",
               *overrides]
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    waits = [r["perf/data_wait_percent"] for r in rows if "perf/data_wait_percent" in r]
    return wall, statistics.median(waits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "outputs", "reader_data"))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--pages", type=int, default=3000, help="training pages of each kind")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    env = {**os.environ, "TRAIN_PAGES": str(args.pages), "LINES_PAGES": str(args.pages // 2), "HELDOUT_PAGES": "8",
           "PAIRS_PAGES": "8", "PYTHON": sys.executable}
    subprocess.run(["bash", "scripts/reading_pages.sh", f"{out}/pages"], cwd=ROOT, check=True, env=env,
                   stdout=subprocess.DEVNULL)
    cache = os.path.join(out, "renders")
    configs = [
        ("rendered each read, no worker", ["data.render_cache=null", "trainer.num_workers=0"], False),
        ("kept, first read", [f"data.render_cache={cache}"], True),
        ("kept", [f"data.render_cache={cache}"], False),
    ]
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in configs}
    for _ in range(args.repeats):
        for name, overrides, empty in configs:
            if empty:
                shutil.rmtree(cache, ignore_errors=True)
            figures[name].append(train(out, name.replace(" ", "_").replace(",", ""), args.steps, overrides))
    before = statistics.median(w for w, _ in figures[configs[0][0]])
    print(f"read_tiny, {args.steps} steps of 8 pages, {os.cpu_count()} cores; median of {args.repeats}")
    print(f"{'pages':<32}{'wall s':>9}{'x before':>10}{'data wait %':>13}")
    for name, runs in figures.items():
        wall = statistics.median(w for w, _ in runs)
        print(f"{name:<32}{wall:>9.1f}{before / wall:>10.2f}{statistics.median(d for _, d in runs):>13.1f}")


if __name__ == "__main__":
    main()
