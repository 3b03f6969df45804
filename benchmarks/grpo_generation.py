"""GRPO step time with the colocated vLLM engine against transformers generation, same tiny model, pages and
group size (on CPU here: vLLM's CPU build; on a GPU machine, the GPU build).

    python benchmarks/grpo_generation.py [--steps 6] [--runs 3] [--generations 8] [--length 48]

Each run is `python -m olmocr.train +experiment=grpo_tiny` in a process of its own (the two backends
alternate, so both see the same machine), ``--steps`` steps of one page's group of ``--generations``
completions of up to ``--length`` tokens. The first step (the engine's start, vLLM's weight layout) is
reported apart; the step time is the median of the others, from trl's own ``train/step_time``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKENDS = ("transformers", "vllm_colocate")


def one_run(backend: str, out: str, steps: int, generations: int, length: int) -> dict:
    command = [sys.executable, "-m", "olmocr.train", "+experiment=grpo_tiny", f"algo.generation={backend}",
               f"algo.num_generations={generations}", f"algo.max_completion_length={length}",
               f"trainer.batch_size={generations}", f"trainer.max_duration.value={steps}",
               "checkpoint.interval=null", "trainer.eval_interval=null", "checkpoint.keep_best=null",
               "callbacks.plots=null", f"hydra.run.dir={out}"]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT})
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{backend}: {(proc.stderr or proc.stdout).strip()[-2000:]}")
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    times = [r["train/step_time"] for r in rows if r["kind"] == "train"]
    tokens = [r["train/completions/mean_length"] * generations for r in rows if r["kind"] == "train"]
    return {"first_s": times[0], "step_s": statistics.median(times[1:]), "wall_s": wall,
            "tokens_s": statistics.median(t / s for t, s in zip(tokens[1:], times[1:]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--length", type=int, default=48)
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps: at least 2 (the first step is reported apart)")
    results: dict[str, list[dict]] = {b: [] for b in BACKENDS}
    with tempfile.TemporaryDirectory(prefix="grpo-generation-") as scratch:
        for run in range(args.runs):
            for backend in BACKENDS:
                result = one_run(backend, os.path.join(scratch, f"{backend}-{run}"), args.steps, args.generations,
                                 args.length)
                results[backend].append(result)
                print(f"run {run} {backend:<14} step {result['step_s']:.3f} s  first step {result['first_s']:.1f} s  "
                      f"{result['tokens_s']:.0f} completion tokens/s  (whole command {result['wall_s']:.0f} s)",
                      flush=True)
    print(f"\nGRPO tiny, {args.generations} completions of up to {args.length} tokens per step, {args.steps} steps, "
          f"{os.cpu_count()} cores, median of {args.runs} runs")
    print(f"{'generation':<14} {'step s':>8} {'first step s':>13} {'tokens/s':>9} {'command s':>10}")
    medians = {}
    for backend, rows in results.items():
        medians[backend] = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        m = medians[backend]
        print(f"{backend:<14} {m['step_s']:8.3f} {m['first_s']:13.1f} {m['tokens_s']:9.0f} {m['wall_s']:10.0f}")
    ratio = medians["transformers"]["step_s"] / medians["vllm_colocate"]["step_s"]
    print(f"vllm_colocate steps: {ratio:.2f}x as fast as transformers generation")


if __name__ == "__main__":
    main()
