"""The reader learns to read: each stage of the factory measured on the same held-out reading pages.

    python benchmarks/learning_to_read.py [--out outputs/learning_to_read] [--steps 3000] [--rows …]

Reading pages (python -m olmocr.synth reading=line): training pages of sentences from the word bank less one
word in eight, held-out pages of another seed with every word. Then, each by its stage's own command (a run
dir under --out, resumed or skipped when done):

- untrained: the reader at its random weights (model=reader);
- sft: +experiment=read_tiny, SFT from random weights;
- blind: the same SFT with every image blanked (olmocr.data.steps.BlankImage): what the text alone teaches;
- grpo: GRPO from the SFT checkpoint (olmOCR 2 rewards, strict), on training pages;
- dpo: DPO from the SFT checkpoint on pairs mined from its own samples of other training pages;
- soup: the mean of two GRPO seeds (python -m olmocr.prepare);
- fp8: the soup compressed to FP8 (python -m olmocr.compress);
- pipeline: the SFT checkpoint through the pipeline's page conversion, transformers serve and vLLM's CPU engine.

Every model greedy-decodes the held-out pages (the training runs' own bench eval at their last step; the pipeline
rows by python -m olmocr.pipeline.bench convert.temperatures=[0]) and is scored here, strictly, on what it wrote
itself: a page the pipeline gave its text layer, or an empty answer, passes nothing and has a character error
rate of 1. Printed per row: strict pass rate of the present tests (one per sentence), of all tests, pages
answered, mean character error rate, and the wall time of the stage.
"""

from __future__ import annotations

import argparse
import functools
import glob
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = ("untrained", "sft", "blind", "grpo", "dpo", "soup", "fp8", "pipeline")
BLIND = "+data.steps.blind={_target_: olmocr.data.steps.BlankImage, _after_: render}"
GREEDY = ["convert.temperatures=[0]", "convert.max_tokens=192", "convert.concurrency=8", "progress=false"]


@functools.cache
def reader_render() -> int:
    """The size the reader trains at (+experiment=read_tiny's data steps), at which every later stage must render
    a page: at the pipeline's own 1288 pixels the image holds other tokens than any it learnt from, and it
    writes nothing that parses."""
    from olmocr.config import compose

    return int(compose("train", ["+experiment=read_tiny"]).data.steps.render.longest_side)


def convert_args(sampled: bool = False) -> list[str]:
    """How a stage that converts pages does: the reader's render size; greedy, or (``sampled``, mining DPO pairs)
    at convert=tiny's temperatures."""
    return ["convert=tiny", *([] if sampled else GREEDY), f"convert.steps.render.longest_side={reader_render()}"]


def folder_model(path: str) -> list[str]:
    """A saved reader as any checkpoint folder is served and trained: its family and its image size."""
    return ["model=olmocr2_7b", "model.dtype=float32", "model.image_min_pixels=3136", "model.image_max_pixels=200704",
            f"model.name_or_path={path}"]


class Factory:
    def __init__(self, out: str, train_pages: int, heldout_pages: int, grpo_steps: int, dpo_pages: int):
        self.out, self.grpo_steps = out, grpo_steps
        self.train_pages, self.heldout_pages, self.dpo_pages = train_pages, heldout_pages, dpo_pages
        # Seconds each stage ran, over every invocation: a resumed benchmark adds to what the first one spent.
        self.times_path = self.path("seconds.json")
        self.times: dict[str, float] = json.load(open(self.times_path)) if os.path.exists(self.times_path) else {}
        self.py = sys.executable

    def path(self, *parts: str) -> str:
        return os.path.join(self.out, *parts)

    def stage(self, row: str, module: str, args: list[str]) -> None:
        print(f"\n== {row}: python -m {module} {' '.join(args)}", flush=True)
        start = time.perf_counter()
        subprocess.run([self.py, "-m", module, *args], cwd=ROOT, check=True)
        self.times[row] = self.times.get(row, 0.0) + time.perf_counter() - start
        os.makedirs(self.out, exist_ok=True)
        with open(self.times_path, "w") as fh:
            json.dump(self.times, fh, indent=2)

    def pages(self) -> None:
        for name, args in (("train", [f"num_pages={self.train_pages}", "reading_words=seen"]),
                           ("heldout", [f"num_pages={self.heldout_pages}", "reading_words=all", "seed=1"]),
                           ("pairs", [f"num_pages={self.dpo_pages}", "reading_words=seen", "seed=2"])):
            if not os.path.exists(self.path("pages", name, "synth.jsonl")):
                self.stage("pages", "olmocr.synth", ["reading=line", *args, f"out_dir={self.path('pages', name)}",
                                                      f"hydra.run.dir={self.path('runs', 'synth_' + name)}"])

    def train(self, row: str, args: list[str]) -> str:
        run = self.path(row)
        self.stage(row, "olmocr.train", [f"paths.reading={self.path('pages')}", f"hydra.run.dir={run}", *args])
        return last_candidates(run)

    def grpo(self, seed: int) -> list[str]:
        """GRPO from the SFT checkpoint on the training pages as a bench (their tests the rewards' unit tests)."""
        return ["+experiment=grpo_tiny", f"seed={seed}", f"run_name=read_grpo{seed}",
                f"data.train.synth.root={self.path('pages', 'train')}", "algo.max_completion_length=96",
                f"trainer.max_duration.value={self.grpo_steps}", f"trainer.eval_interval={self.grpo_steps}",
                f"trainer.save_interval={self.grpo_steps}"]

    def release(self, row: str, sources: list[str]) -> str:
        out = self.path("release", row)
        if not os.path.exists(out):
            self.stage(row, "olmocr.prepare", [f"sources=[{','.join(sources)}]", f"output={out}",
                                               f"hydra.run.dir={self.path('runs', 'prepare_' + row)}"])
        return out

    def convert(self, row: str, model: list[str], server: str = "transformers") -> str:
        candidates = self.path("candidates", row)
        self.stage(row, "olmocr.pipeline.bench", [*model, f"server={server}", f"bench_dir={self.path('pages', 'heldout')}",
                                                  f"candidates={candidates}", *convert_args(),
                                                  f"hydra.run.dir={self.path('runs', 'bench_mode_' + row)}"])
        return candidates


def last_candidates(run: str) -> str:
    steps = sorted(glob.glob(os.path.join(run, "bench_eval", "step_*", "candidates")))
    if not steps:
        raise RuntimeError(f"{run}: no bench eval candidates (bench_eval/step_*/candidates)")
    return steps[-1]


def curve(bench_dir: str, run: str) -> list[tuple[int, float | None, float]]:
    """(step, held-out loss, strict present pass rate) at each eval of a training run."""
    rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    losses = {r["step"]: v for r in rows if r["kind"] == "eval" for k, v in r.items() if k.endswith("/loss")}
    points = []
    for path in sorted(glob.glob(os.path.join(run, "bench_eval", "step_*", "candidates"))):
        step = int(os.path.basename(os.path.dirname(path)).split("_")[1])
        points.append((step, losses.get(step), score(bench_dir, path)["present"]))
    return points


def score(bench_dir: str, candidates: str) -> dict:
    """Strict verdicts on what the model wrote itself: a page that fell back or came out empty passes nothing."""
    from olmocr.bench.score import load_bench, run_tests

    results = run_tests(load_bench(bench_dir), candidates, scoring="strict")
    own = [(r, r.outputs is not None and r.outputs.answered == r.outputs.outputs > 0) for r in results]
    by_type: dict[str, list[float]] = {}
    for r, answered in own:
        by_type.setdefault(r.test.type, []).append(r.score if answered else 0.0)
    pages = {(r.test.pdf, r.test.page): r.outputs for r, _ in own}
    cer = [min(p.cer, 1.0) if p is not None and p.answered and p.cer is not None else 1.0 for p in pages.values()]
    return {"present": float(np.mean(by_type.get("present", [0.0]))), "tests": float(np.mean([s for v in by_type.values() for s in v])),
            "by_type": {k: float(np.mean(v)) for k, v in by_type.items()},
            "answered": sum(p is not None and p.answered > 0 for p in pages.values()), "pages": len(pages),
            "cer": float(np.mean(cer))}


def chain(f: Factory, rows: set[str], steps: int) -> dict[str, str]:
    """Run the stages the rows need, in order; the candidates folder each row is scored on."""
    every = steps // 5 if steps % 5 == 0 else steps  # five evals, the last at the end
    sft_args = ["+experiment=read_tiny", f"trainer.max_duration.value={steps}", f"trainer.eval_interval={every}",
                f"trainer.save_interval={every}"]
    candidates: dict[str, str] = {}
    if "untrained" in rows:
        candidates["untrained"] = f.convert("untrained", ["model=reader"])
    if rows - {"untrained", "blind"}:
        candidates["sft"] = f.train("sft", [*sft_args, "run_name=read_sft"])
    if "blind" in rows:
        candidates["blind"] = f.train("blind", [*sft_args, "run_name=read_blind", BLIND])
    if not rows & {"grpo", "dpo", "soup", "fp8", "pipeline"}:
        return candidates
    sft = f.release("sft", [f.path("sft")])
    tuned = [*folder_model(sft), "eval=reading_bench", "finetune.freeze_vision=true", f"data.steps.render.longest_side={reader_render()}",
             "trainer.keep_best=null"]
    if rows & {"grpo", "soup", "fp8"}:
        candidates["grpo"] = f.train("grpo", [*f.grpo(1), *tuned])
    if "dpo" in rows:
        pairs = f.path("pairs")
        if not os.path.exists(os.path.join(pairs, "pairs.jsonl")):
            f.stage("dpo", "olmocr.pairs", [*folder_model(sft), f"bench_dir={f.path('pages', 'pairs')}", "run_name=read",
                                            *convert_args(sampled=True), "convert.max_tokens=96", "progress=false",
                                            f"hydra.run.dir={pairs}"])
        candidates["dpo"] = f.train("dpo", ["+experiment=dpo_tiny", *tuned, "run_name=read_dpo",
                                            f"data.train=[{pairs}/pairs.jsonl]", "trainer.max_duration.value=40",
                                            "trainer.eval_interval=40", "trainer.save_interval=40"])
    if rows & {"soup", "fp8"}:
        candidates["grpo seed 2"] = f.train("grpo2", [*f.grpo(2), *tuned])
        soup = f.release("soup", [f.path("grpo"), f.path("grpo2")])
        candidates["soup"] = f.convert("soup", folder_model(soup))
    if "fp8" in rows:
        fp8 = f.path("release", "fp8")
        if not os.path.exists(fp8):
            f.stage("fp8", "olmocr.compress", [f"source={soup}", f"output={fp8}", f"steps.render.longest_side={reader_render()}",
                                               f"calibration.root={f.path('pages', 'pairs')}",
                                               f"hydra.run.dir={f.path('runs', 'compress')}"])
        candidates["fp8"] = f.convert("fp8", folder_model(fp8))
    if "pipeline" in rows:
        candidates["pipeline, transformers"] = f.convert("pipeline_hf", folder_model(sft))
        candidates["pipeline, vLLM"] = f.convert("pipeline_vllm", folder_model(sft), server="vllm")
    return candidates


def report(f: Factory, candidates: dict[str, str]) -> None:
    heldout = f.path("pages", "heldout")
    table = {row: score(heldout, path) for row, path in candidates.items()}
    with open(f.path("learning_to_read.json"), "w") as fh:
        json.dump({"scores": table, "seconds": f.times, "candidates": candidates}, fh, indent=2)
    print(f"\nheld-out reading pages ({heldout}), strict; a page that fell back or was empty passes nothing")
    print(f"{'row':<24}{'present':>9}{'all tests':>11}{'answered':>10}{'CER':>7}{'stage s':>9}")
    stage_of = {"grpo seed 2": "grpo2", "pipeline, transformers": "pipeline_hf", "pipeline, vLLM": "pipeline_vllm"}
    for row, s in table.items():
        seconds = f.times.get(stage_of.get(row, row))
        print(f"{row:<24}{100 * s['present']:>8.1f}%{100 * s['tests']:>10.1f}%{s['answered']:>5}/{s['pages']:<4}"
              f"{s['cer']:>7.3f}{'' if seconds is None else f'{seconds:9.0f}'}")
    types = sorted({t for s in table.values() for t in s["by_type"]})
    print("\nstrict pass rate by test type: " + ", ".join(types))
    for row, s in table.items():
        print(f"{row:<24}" + "".join(f"{100 * s['by_type'].get(t, 0.0):>9.1f}%" for t in types))
    for row in ("sft", "blind"):
        if row in table:
            print(f"\n{row}: step, held-out loss, strict present pass rate at each eval")
            for step, loss, present in curve(heldout, f.path(row)):
                print(f"  {step:>6} {'' if loss is None else f'{loss:.4f}':>8} {100 * present:6.1f}%")
    if "sft" in table and "blind" in table:
        gap = 100 * (table["sft"]["present"] - table["blind"]["present"])
        print(f"\nSFT - blind control: {gap:+.1f} points of strict present-test pass rate")
    print("\ngoals (strict present-test pass rate, points)")
    for line in goals({row: 100 * s["present"] for row, s in table.items()}):
        print(f"  {line}")


def goals(p: dict[str, float]) -> list[str]:
    """Each goal the rows measured allow judging: met or missed, with its figures."""
    checks = [
        ("sft", "SFT >= 50", lambda: p["sft"] >= 50, lambda: f"{p['sft']:.1f}"),
        ("blind", "blind control <= 10", lambda: p["blind"] <= 10, lambda: f"{p['blind']:.1f}"),
        ("blind", "SFT - blind >= 20", lambda: p["sft"] - p["blind"] >= 20, lambda: f"{p['sft'] - p['blind']:+.1f}"),
        ("grpo", "GRPO - SFT >= 5", lambda: p["grpo"] - p["sft"] >= 5, lambda: f"{p['grpo'] - p['sft']:+.1f}"),
        ("soup", "soup >= mean of its seeds", lambda: p["soup"] >= (p["grpo"] + p["grpo seed 2"]) / 2,
         lambda: f"{p['soup']:.1f} vs {(p['grpo'] + p['grpo seed 2']) / 2:.1f}"),
        ("fp8", "|FP8 - soup| <= 3", lambda: abs(p["fp8"] - p["soup"]) <= 3, lambda: f"{p['fp8'] - p['soup']:+.1f}"),
        ("pipeline, vLLM", "|vLLM - transformers| <= 2",
         lambda: abs(p["pipeline, vLLM"] - p["pipeline, transformers"]) <= 2,
         lambda: f"{p['pipeline, vLLM'] - p['pipeline, transformers']:+.1f}"),
    ]
    return [f"{'met   ' if ok() else 'missed'} {name}: {figure()}" for row, name, ok, figure in checks
            if row in p and "sft" in p]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "outputs", "learning_to_read"))
    parser.add_argument("--steps", type=int, default=3000, help="SFT steps of 8 pages")
    parser.add_argument("--train-pages", type=int, default=20000)
    parser.add_argument("--heldout-pages", type=int, default=64)
    parser.add_argument("--grpo-steps", type=int, default=40)
    parser.add_argument("--dpo-pages", type=int, default=64, help="training pages whose samples are mined for pairs")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    args = parser.parse_args()
    f = Factory(os.path.abspath(args.out), args.train_pages, args.heldout_pages, args.grpo_steps, args.dpo_pages)
    f.pages()
    report(f, chain(f, set(args.rows), args.steps))


if __name__ == "__main__":
    main()
