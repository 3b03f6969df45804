"""GRPO learns: the mean reward of an easy, learnable reward rises in a short CPU run.

    python benchmarks/grpo_learning.py [--steps 60] [--seeds 0 1] [--lr 5e-3]

The tiny model (random weights) starts out almost never ending a completion by itself within 16
tokens; the eos reward (conf/rewards/eos.yaml) pays 1 when it does. Each seed is trained twice from the
same start: with the given learning rate, and as the baseline with lr 0 (same sampling, no updates),
so the rise can be told from noise. Prints the mean reward per window of 10 steps and, per seed, the
first and last windows of both runs. Runs `python -m olmocr.train +experiment=grpo_tiny` in-process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

from olmocr.config import compose
from olmocr.train.__main__ import run


def rewards(out_dir: str) -> list[float]:
    rows = [json.loads(line) for line in open(os.path.join(out_dir, "metrics.jsonl"))]
    return [r["train/reward"] for r in rows if r["kind"] == "train"]


def train(tmp: str, seed: int, lr: float, steps: int) -> list[float]:
    out = os.path.join(tmp, f"seed{seed}_lr{lr}")
    cfg = compose("train", [
        "+experiment=grpo_tiny", "rewards=eos", "scheduler=constant", f"optimizer.lr={lr}", f"seed={seed}",
        "algo.num_generations=8", "algo.max_completion_length=16", "algo.beta=0", "trainer.batch_size=16",
        f"trainer.max_duration.value={steps}", "checkpoint.interval=null", "trainer.eval_interval=null",
        "checkpoint.keep_best=null", "callbacks.plots=null",
        "callbacks.console.interval=1000",
    ])
    run(cfg, out)
    return rewards(out)


def windows(values: list[float], size: int = 10) -> list[float]:
    return [statistics.mean(values[i:i + size]) for i in range(0, len(values), size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--lr", type=float, default=5e-3)
    args = parser.parse_args()
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            learned, control = train(tmp, seed, args.lr, args.steps), train(tmp, seed, 0.0, args.steps)
            summary.append((seed, windows(learned), windows(control)))
    print(f"\nmean eos reward per 10 steps ({args.steps} steps, 16 completions/step, lr {args.lr} vs lr 0)")
    for seed, learned, control in summary:
        print(f"seed {seed} lr {args.lr:<8g}" + " ".join(f"{v:5.2f}" for v in learned))
        print(f"seed {seed} lr 0       " + " ".join(f"{v:5.2f}" for v in control))
    last = statistics.median(s[1][-1] for s in summary)
    first = statistics.median(s[1][0] for s in summary)
    base = statistics.median(s[2][-1] for s in summary)
    print(f"median over seeds: first window {first:.3f}, last window {last:.3f}; baseline last window {base:.3f}"
          f" ({last / max(base, 1e-9):.1f}x)")


if __name__ == "__main__":
    main()
