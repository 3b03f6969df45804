"""What the held-out bench eval costs: per page, on CPU, for the tiny model; and its share of a tiny SFT run.

    python benchmarks/bench_eval.py [--repeats 3] [--steps 40] [--eval-interval 20]

Per page: the bundled eval bench (8 pages, every test) decoded by the tiny model (48 new tokens, pages at
256 px, one batch) and scored, in process, ``--repeats`` times; the median split into decoding (render,
generate, judge) and writing + scoring. The baseline in the same run: one training step's forward and
backward on the same pages' SFT samples, per page. Share of a run: the tiny SFT run (``--steps`` steps,
an eval every ``--eval-interval``) with the bench eval and without it (``eval.bench=null``), median wall times
of ``--repeats`` runs each; the share is 1 - without / with.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

from olmocr.config import build, compose
from olmocr.train.__main__ import run

COMMON = ["data.steps.render.longest_side=256", "checkpoint.interval=null", "callbacks.console.interval=1000"]


def per_page(repeats: int, tmp: str) -> dict:
    from olmocr.data.dataset import build_datasets, sources
    from olmocr.train.collate import Collator
    from olmocr.train.trainer import Trainer
    from omegaconf import OmegaConf

    cfg = compose("train", COMMON)
    source = build(cfg.model)
    processor, model = source.load_processor(), source.load_model()
    evaluator = build(cfg.eval.bench, output_dir=tmp).load()
    decoder = evaluator.decoder(model, processor, torch.device("cpu"))
    pages = len(evaluator.pages)
    decode, score = [], []
    for repeat in range(repeats):
        start = time.perf_counter()
        results = evaluator.decode(decoder, evaluator.pages, 1)
        middle = time.perf_counter()
        evaluator.write_and_score(repeat, results, middle - start)
        decode.append((middle - start) / pages)
        score.append((time.perf_counter() - middle) / pages)
    # Baseline: a training step's forward + backward over the same pages' SFT samples.
    data = OmegaConf.to_container(cfg.data, resolve=True)
    _, evals, _ = build_datasets(*sources(data), data["steps"], processor=processor)
    samples = [s for s in (evals["synth"][i] for i in range(len(evals["synth"]))) if s is not None]
    batch = Collator(processor.tokenizer.pad_token_id)(samples)
    trainer = Trainer.__new__(Trainer)
    trainer.model, trainer.device, trainer.autocast_dtype = model.train(), torch.device("cpu"), None
    step = []
    for _ in range(repeats):
        start = time.perf_counter()
        trainer.loss_sum(batch).backward()
        step.append((time.perf_counter() - start) / len(samples))
        model.zero_grad(set_to_none=True)
    return {"pages": pages, "decode": statistics.median(decode), "score": statistics.median(score),
            "train_step": statistics.median(step)}


def run_wall(tmp: str, name: str, overrides: list[str]) -> float:
    start = time.perf_counter()
    run(compose("train", COMMON + overrides), os.path.join(tmp, name))
    return time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--eval-interval", type=int, default=20)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cost = per_page(args.repeats, tmp)
        total = cost["decode"] + cost["score"]
        print(f"bench eval of the tiny model on CPU, {cost['pages']} pages, median of {args.repeats}:")
        print(f"{'part':<12}{'ms/page':>10}")
        print(f"{'decode':<12}{1000 * cost['decode']:>10.1f}")
        print(f"{'score':<12}{1000 * cost['score']:>10.1f}")
        print(f"{'total':<12}{1000 * total:>10.1f}")
        print(f"{'train step':<12}{1000 * cost['train_step']:>10.1f}  (baseline: forward + backward per sample)")
        print(f"eval per page: {total / cost['train_step']:.1f}x a training sample")
        runs = {"with": [], "without": []}
        duration = [f"trainer.max_duration.value={args.steps}", f"trainer.eval_interval={args.eval_interval}"]
        for repeat in range(args.repeats):
            runs["with"].append(run_wall(tmp, f"with{repeat}", duration))
            runs["without"].append(run_wall(tmp, f"without{repeat}", duration + ["eval.bench=null"]))
        with_eval, without = statistics.median(runs["with"]), statistics.median(runs["without"])
        evals = args.steps // args.eval_interval
        print(f"tiny SFT run, {args.steps} steps, {evals} bench evals, median of {args.repeats}:")
        print(f"{'run':<16}{'wall s':>8}")
        print(f"{'with the eval':<16}{with_eval:>8.2f}")
        print(f"{'without':<16}{without:>8.2f}")
        print(f"share of the run's wall time: {100 * (1 - without / with_eval):.1f}%")


if __name__ == "__main__":
    sys.exit(main())
