"""DPO learns: on an easy preference, the chosen-over-rejected reward margin and accuracy rise in a
short CPU run, against the same run at lr 0.

    python benchmarks/dpo_learning.py [--steps 30] [--seeds 0 1] [--lr 1e-3]

Pairs on the bundled training pages: chosen reads the page once and stops; rejected runs on, repeating
itself (what the eos reward punishes in GRPO). Each seed trains the tiny model twice from the same start
(`+experiment=dpo_tiny`, in-process): with the given learning rate, and with lr 0, where policy and
reference stay equal (margin 0, accuracy 0). Prints the mean margin and accuracy per window of 10 steps,
per seed, and the medians over seeds of the last window.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

from olmocr.config import PROJECT_ROOT, compose
from olmocr.train.__main__ import run


def write_pairs(path: str) -> str:
    from olmocr.data.bench_prompts import bench_pages

    pages, _ = bench_pages(os.path.join(PROJECT_ROOT, "data", "sample", "train"))
    with open(path, "w") as fh:
        for page in pages:
            text = "---\nprimary_language: en\nis_rotation_valid: True\n---\nThe page, read once."
            fh.write(json.dumps({"page_id": page["page_id"], "pdf_path": page["pdf_path"], "page": page["page"],
                                 "chosen": text, "rejected": text + " The page, read once." * 8}) + "\n")
    return path


def train(tmp: str, pairs: str, seed: int, lr: float, steps: int) -> tuple[list[float], list[float]]:
    out = os.path.join(tmp, f"seed{seed}_lr{lr}")
    run(compose("train", ["+experiment=dpo_tiny", f"data.train=[{pairs}]", "scheduler=constant", f"optimizer.lr={lr}",
                          f"seed={seed}", f"trainer.max_duration.value={steps}", "checkpoint.interval=null",
                          "trainer.eval_interval=null", "checkpoint.keep_best=null", "callbacks.plots=null",
                          "callbacks.console.interval=1000"]), out)
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    rows = [r for r in rows if r["kind"] == "train"]
    return [r["train/rewards/margins"] for r in rows], [r["train/rewards/accuracies"] for r in rows]


def windows(values: list[float], size: int = 10) -> list[float]:
    return [statistics.mean(values[i:i + size]) for i in range(0, len(values), size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        pairs = write_pairs(os.path.join(tmp, "pairs.jsonl"))
        for seed in args.seeds:
            results.append((seed, train(tmp, pairs, seed, args.lr, args.steps), train(tmp, pairs, seed, 0.0, args.steps)))
    print(f"\nper 10 steps ({args.steps} steps of 2 pairs, lr {args.lr:g} vs lr 0): reward margin | accuracy",
          file=sys.stdout)
    for seed, (margin, accuracy), (margin0, accuracy0) in results:
        for label, m, a in ((f"lr {args.lr:<7g}", margin, accuracy), ("lr 0      ", margin0, accuracy0)):
            print(f"seed {seed} {label} " + " ".join(f"{v:6.3f}" for v in windows(m)) + "  | "
                  + " ".join(f"{v:4.2f}" for v in windows(a)))
    last = {name: statistics.median(windows(r[i][j])[-1] for r in results)
            for name, i, j in (("margin", 1, 0), ("accuracy", 1, 1), ("margin_lr0", 2, 0), ("accuracy_lr0", 2, 1))}
    first = statistics.median(windows(r[1][0])[0] for r in results)
    print(f"median over seeds, last window: margin {last['margin']:.3f} (first window {first:.3f}; lr 0: "
          f"{last['margin_lr0']:.3f}), accuracy {last['accuracy']:.2f} (lr 0: {last['accuracy_lr0']:.2f})")


if __name__ == "__main__":
    main()
