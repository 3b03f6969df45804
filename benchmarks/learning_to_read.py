"""The reader learns to read: each stage of the factory measured on the same held-out reading pages, with intervals.

    python benchmarks/learning_to_read.py [--out outputs/learning_to_read] [--steps 3600] [--rows …]

Pages (scripts/reading_pages.sh): the recipe's training pages, and a held-out bench of another seed in four
categories of 256 pages: ``bank`` (sentences of the word bank, one word in eight never on a training page),
``unseen`` (only those words), ``letters`` (random strings no prior can guess) and ``lines`` (paragraphs of two to
four lines); and a typeset held-out bench (other seeds, 256 pages of each: the same kinds set as documents set
text, any place, size and typeface, both cases and numbers, in five categories: ``letters``, ``unseen``,
``codes``, ``lines``, and ``faces`` in two typefaces training never used). Every row is scored on both. Then,
each by its stage's own command (a run dir under --out, resumed or skipped when done):

- untrained: the reader at its random weights (model=reader), through the pipeline;
- sft: +experiment=read_tiny, SFT from random weights;
- blind: the same SFT with every image blanked (olmocr.data.steps.BlankImage): what the text alone teaches;
- grpo, grpo2: +experiment=read_grpo from the SFT checkpoint, olmOCR 2 rewards, two seeds;
- control: the same GRPO with each batch's rewards shuffled across its completions (algo.shuffle_rewards):
  as many steps, no information about the page; a gain it shares is not the rewards';
- soup: the mean of the two GRPO seeds (python -m olmocr.prepare), through the pipeline;
- dpo: +experiment=read_dpo from the SFT checkpoint, on pairs mined from its own samples of other training pages
  (python -m olmocr.pairs); the same samples give the SFT model's pass@1 and pass@k at the sampling temperature;
- fp8: the soup compressed to FP8 (python -m olmocr.compress), through the pipeline;
- pipeline: the SFT model served by vLLM's CPU engine instead of transformers serve;
- tesseract: Debian's tesseract on the same pages at the same pixels (python -m olmocr.pipeline.tesseract, the
  reader's render step at its 448 pixels): a real engine's figures beside every row's, and each row's CER over
  tesseract's, set by set.

Every model is released (python -m olmocr.prepare) and greedy-decodes every held-out page through the pipeline
(python -m olmocr.pipeline.bench, transformers serve; the pipeline row: vLLM's CPU engine), and is scored here,
strictly, on what it wrote itself: a page the pipeline gave its text layer, or an empty answer, passes nothing
and has a character error rate of 1. Per row and category:
the strict pass rate of the present tests (one per sentence) and the mean character error rate, each with a 95%
interval by bootstrap over pages; per stage, its difference from the row it started from on the same pages, with
the paired interval. A gain is claimed only where that interval lies above 0.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from olmocr.bench.intervals import Interval, bootstrap, paired  # noqa: E402

ROWS = ("untrained", "sft", "blind", "grpo", "control", "soup", "dpo", "fp8", "pipeline", "tesseract")
SETS = ("bank", "unseen", "letters", "lines")
HELD_OUT = ("bank", "unseen", "letters")  # the line pages; "held-out" pools them
# Each held-out bench: its folder under the pages, its categories, the line pages "held-out" pools. The grid bench
# is the typography the reader trained on; the typeset one sets the same kinds as documents set text (any place,
# size and typeface, both cases, numbers), faces in two typefaces training never used.
BENCHES = {"grid": ("heldout", SETS, HELD_OUT),
           "typeset": (os.path.join("typeset", "heldout"), ("letters", "unseen", "codes", "lines", "faces"),
                       ("letters", "unseen", "codes"))}
BLIND = "+data.steps.blind={_target_: olmocr.data.steps.BlankImage, _after_: render}"
GREEDY = ["convert.temperatures=[0]", "convert.concurrency=8", "progress=false"]
# What each stage starts from: its difference from that row, page by page, is its gain.
BASE = {"grpo": "sft", "grpo seed 2": "sft", "control": "sft", "dpo": "sft", "soup": "grpo", "fp8": "soup",
        "pipeline, vLLM": "sft", "blind": "sft"}


def reader_config():
    from olmocr.config import compose

    return compose("train", ["+experiment=read_tiny"])


def convert_args(sampled: bool = False) -> list[str]:
    """How a stage that converts pages does: the reader's answer length; greedy, or (``sampled``, mining DPO pairs)
    at convert=tiny's temperatures. (Its pages are presented as the model it serves was trained to read them.)"""
    return ["convert=tiny", *([] if sampled else GREEDY),
            f"convert.max_tokens={reader_config().eval.bench.max_new_tokens}"]


class Factory:
    def __init__(self, out: str, args: argparse.Namespace):
        self.out, self.args = out, args
        # Seconds each stage ran, over every invocation: a resumed benchmark adds to what the first one spent.
        self.times_path = self.path("seconds.json")
        self.times: dict[str, float] = json.load(open(self.times_path)) if os.path.exists(self.times_path) else {}
        self.py = sys.executable

    def path(self, *parts: str) -> str:
        return os.path.join(self.out, *parts)

    def stage(self, row: str, command: list[str]) -> None:
        print(f"\n== {row}: {' '.join(command)}", flush=True)
        start = time.perf_counter()
        subprocess.run(command, cwd=ROOT, check=True)
        self.times[row] = self.times.get(row, 0.0) + time.perf_counter() - start
        os.makedirs(self.out, exist_ok=True)
        with open(self.times_path, "w") as fh:
            json.dump(self.times, fh, indent=2)

    def module(self, row: str, module: str, args: list[str]) -> None:
        self.stage(row, [self.py, "-m", module, *args])

    def pages(self) -> None:
        a = self.args
        env = {"TRAIN_PAGES": a.train_pages, "LINES_PAGES": max(1, a.train_pages // 2),
               "HELDOUT_PAGES": a.heldout_pages, "PAIRS_PAGES": a.dpo_pages, "TYPESET_PAGES": a.typeset_pages}
        os.environ.update({k: str(v) for k, v in env.items()})
        os.environ.setdefault("PYTHON", self.py)
        if not os.path.exists(self.path("pages", "done")):
            self.stage("pages", ["bash", "scripts/reading_pages.sh", self.path("pages")])
            open(self.path("pages", "done"), "w").close()

    def train(self, row: str, args: list[str]) -> str:
        run = self.path(row)
        self.module(row, "olmocr.train", [f"paths.reading={self.path('pages')}", f"hydra.run.dir={run}", *args])
        return run

    def release(self, row: str, sources: list[str]) -> str:
        out = self.path("release", row)
        if not os.path.exists(out):
            self.module(f"{row} release", "olmocr.prepare", [f"sources=[{','.join(sources)}]", f"output={out}",
                                                f"hydra.run.dir={self.path('runs', 'prepare_' + row)}"])
        return out

    def benches(self) -> dict[str, str]:
        """The held-out benches the pages hold (the typeset one unless --typeset-pages 0), by name."""
        folders = {name: self.path("pages", folder) for name, (folder, _, _) in BENCHES.items()}
        return {name: folder for name, folder in folders.items() if os.path.isdir(folder)}

    def candidates(self, bench: str, row: str) -> str:
        return self.path("candidates", row) if bench == "grid" else self.path("candidates", bench, row)

    def convert(self, row: str, model: list[str], server: str = "transformers") -> dict[str, str]:
        """The model's candidates on every held-out bench, each converted by the pipeline in bench mode."""
        out = {}
        for bench, folder in self.benches().items():
            out[bench] = candidates = self.candidates(bench, row)
            run = self.path("runs", f"bench_mode_{row}" + ("" if bench == "grid" else f"_{bench}"))
            self.module(f"{row} bench", "olmocr.pipeline.bench", [*model, f"server={server}", f"bench_dir={folder}",
                                                       f"candidates={candidates}", *convert_args(),
                                                       f"hydra.run.dir={run}"])
        return out

    def tesseract(self) -> dict[str, str]:
        """Debian's tesseract on the same pages at the same pixels: the reader's render step, at its size."""
        size = reader_config().data.steps.render.longest_side
        out = {}
        for bench, folder in self.benches().items():
            out[bench] = candidates = self.candidates(bench, "tesseract")
            self.module("tesseract", "olmocr.pipeline.tesseract", [f"bench_dir={folder}", f"candidates={candidates}",
                                                                  f"render.longest_side={size}", "progress=false",
                                                                  f"hydra.run.dir={self.path('runs', 'tesseract_' + bench)}"])
        return out


def page_scores(bench_dir: str, candidates: str) -> dict[str, dict[str, list[float]]]:
    """Per category, per page: [present tests passed, present tests, character error rate], strictly, on what the
    model wrote itself: a page that fell back, came out empty or was not decoded passes nothing and has CER 1."""
    from olmocr.bench.score import load_bench, run_tests

    out: dict[str, dict[str, list[float]]] = {}
    for r in run_tests(load_bench(bench_dir), candidates, scoring="strict"):
        if r.test.type == "baseline":
            continue
        page = out.setdefault(r.category, {}).setdefault(r.test.pdf, [0.0, 0.0, 1.0])
        o = r.outputs
        own = o is not None and o.answered == o.outputs > 0
        if r.test.type == "present":
            page[0] += r.score if own else 0.0
            page[1] += 1
        page[2] = min(o.cer, 1.0) if own and o.cer is not None else 1.0
    return out


def chance(bench_dir: str) -> dict[str, float]:
    """Per category, the mean CER of the next page's truth against each page's: what a line of the right kind
    scores without reading the page, the CER a blind model can reach by writing well."""
    from olmocr.bench.score import char_error_rate, load_bench, truth_path
    from olmocr.formats.frontmatter import page_text

    truths: dict[str, dict[str, str]] = {}
    for category, test in load_bench(bench_dir).tests:
        path = truth_path(bench_dir, test.pdf, test.page)
        if path is not None and test.pdf not in truths.get(category, {}):
            truths.setdefault(category, {})[test.pdf] = page_text(open(path, encoding="utf-8").read())
    return {name: float(np.mean([min(char_error_rate(t[(i + 1) % len(t)], x), 1.0) for i, x in enumerate(t)]))
            for name, pages in truths.items() if len(t := [pages[k] for k in sorted(pages)]) > 1}


def pooled(scores: dict, sets) -> dict[str, list[float]]:
    return {f"{name}/{pdf}": page for name in sets for pdf, page in scores.get(name, {}).items()}


def figures(pages: dict[str, list[float]]) -> dict[str, Interval]:
    rows = np.array([pages[k] for k in sorted(pages)])
    return {"present": bootstrap(rows[:, 0], rows[:, 1]).scaled(100), "cer": bootstrap(rows[:, 2])}


def gains(base: dict[str, list[float]], row: dict[str, list[float]]) -> dict[str, Interval]:
    """Row minus base on the same pages: present in points, CER (negative: fewer errors)."""
    keys = sorted(base)
    a, b = np.array([base[k] for k in keys]), np.array([row[k] for k in keys])
    return {"present": paired(a[:, 0], b[:, 0], a[:, 1]).scaled(100), "cer": paired(a[:, 2], b[:, 2])}


def chain(f: Factory, rows: set[str], steps: int | None) -> dict[str, str]:
    """Run the stages the rows need, in order; the candidates folder each row is scored on: every model released
    (python -m olmocr.prepare) and converted by the pipeline, page by page as a user's would be."""
    sft_args = ["+experiment=read_tiny"]
    if steps:  # else the recipe's; here three evals of a sample of the bench, the last at the end
        every = steps // 3 if steps % 3 == 0 else steps
        sft_args += [f"trainer.max_duration.value={steps}", f"trainer.eval_interval={every}",
                     f"checkpoint.interval={every}"]
    candidates: dict[str, dict[str, str]] = {}
    if "tesseract" in rows:
        candidates["tesseract"] = f.tesseract()

    def trained(row: str, args: list[str]) -> dict[str, str]:
        f.train(row, args)
        return f.convert(row, ["model=reader_trained", f"model.name_or_path={f.release(row, [f.path(row)])}"])

    if "untrained" in rows:
        # Random weights have no record of how they read: shown the pages as the reader's training presents them.
        steps = reader_config().data.steps
        candidates["untrained"] = f.convert("untrained", ["model=reader", *(
            f"convert.steps.{name}.{key}={steps[name][key]}" for name, key in (("render", "longest_side"),
                                                                              ("prompt", "version")))])
    if rows - {"untrained", "blind", "tesseract"}:
        candidates["sft"] = trained("sft", [*sft_args, "run_name=read_sft"])
    if "blind" in rows:
        candidates["blind"] = trained("blind", [*sft_args, "run_name=read_blind", BLIND])
    if not rows & {"grpo", "control", "dpo", "soup", "fp8", "pipeline"}:  # tesseract needs no model
        return candidates
    sft = f.path("release", "sft")
    start = ["model=reader_trained", f"model.name_or_path={sft}", f"paths.reading={f.path('pages')}",
             "trainer.eval_interval=null", "checkpoint.keep_best=null"]  # scored here, from its release
    grpo = ["+experiment=read_grpo", *start]
    if f.args.grpo_steps:  # else the recipe's
        grpo += [f"trainer.max_duration.value={f.args.grpo_steps}", f"checkpoint.interval={f.args.grpo_steps}"]
    if rows & {"grpo", "soup", "fp8"}:
        candidates["grpo"] = trained("grpo", [*grpo, "seed=1"])
    if "control" in rows:
        candidates["control"] = trained("control", [*grpo, "seed=1", "algo.shuffle_rewards=true",
                                                    "run_name=read_grpo_control"])
    if "dpo" in rows:
        pairs = f.path("pairs")
        # Run each time: pages mined before are skipped, and a category added to the pages since is mined.
        f.module("dpo pairs", "olmocr.pairs", ["model=reader_trained", f"model.name_or_path={sft}",
                                               f"bench_dir={f.path('pages', 'pairs')}", "run_name=read",
                                               *convert_args(sampled=True), f"samples={f.args.samples}",
                                               f"temperature={f.args.temperature}", "progress=false",
                                               f"hydra.run.dir={pairs}"])
        candidates["dpo"] = trained("dpo", ["+experiment=read_dpo", *start, f"data.train=[{pairs}/pairs.jsonl]"])
    if rows & {"soup", "fp8"}:
        candidates["grpo seed 2"] = trained("grpo2", [*grpo, "seed=2", "run_name=read_grpo2"])
        soup = f.release("soup", [f.path("grpo"), f.path("grpo2")])
        candidates["soup"] = f.convert("soup", ["model=reader_trained", f"model.name_or_path={soup}"])
    if "fp8" in rows:
        fp8 = f.path("release", "fp8")
        if not os.path.exists(fp8):
            f.module("fp8", "olmocr.compress", [f"source={soup}", f"output={fp8}",
                                                f"calibration.root={f.path('pages', 'pairs')}",
                                                f"hydra.run.dir={f.path('runs', 'compress')}"])
        candidates["fp8"] = f.convert("fp8", ["model=reader_trained", f"model.name_or_path={fp8}"])
    if "pipeline" in rows:
        candidates["pipeline, vLLM"] = f.convert("pipeline_vllm", ["model=reader_trained", f"model.name_or_path={sft}"],
                                                 server="vllm")
    return candidates


STAGE_OF = {"grpo seed 2": "grpo2", "pipeline, vLLM": "pipeline_vllm"}
RUN_OF = {"sft": "sft", "blind": "blind", "grpo": "grpo", "grpo seed 2": "grpo2", "control": "control", "dpo": "dpo"}


def train_metrics(run: str) -> list[dict]:
    path = os.path.join(run, "metrics.jsonl")
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []


def data_wait(run: str) -> float | None:
    """The median share of a training run's logged steps spent waiting for data, in %."""
    waits = [r["perf/data_wait_percent"] for r in train_metrics(run) if "perf/data_wait_percent" in r]
    return statistics.median(waits) if waits else None


def curve(f: Factory, run: str) -> list[dict]:
    """At each eval of an SFT run: held-out loss, and strict present and CER per category."""
    losses = {r["step"]: v for r in train_metrics(run) if r["kind"] == "eval" for k, v in r.items()
              if k.endswith("/loss")}
    points = []
    for path in sorted(glob.glob(os.path.join(run, "bench_eval", "step_*", "candidates"))):
        step = int(os.path.basename(os.path.dirname(path)).split("_")[1])
        # The eval decodes a sample of the held-out pages: the curve is over those (the others, never decoded,
        # would count as pages read wrong).
        with open(os.path.join(os.path.dirname(path), "pages.jsonl")) as fh:
            decoded = {json.loads(line)["pdf"] for line in fh}
        scores = {name: {pdf: page for pdf, page in pages.items() if pdf in decoded}
                  for name, pages in page_scores(f.path("pages", "heldout"), path).items()}
        points.append({"step": step, "loss": losses.get(step),
                       **{name: figures(scores[name]) for name in SETS if scores.get(name)}})
    return points


def grpo_signal(run: str) -> list[dict]:
    """What GRPO learnt from at each logged step: mean reward, its spread within a page's group, the share of
    groups all alike, and the share of the completions' present tests passed."""
    keys = {"reward": "train/reward", "group_std": "train/signal/group_std", "alike": "train/signal/alike_groups",
            "present": "train/bench/present"}
    return [{"step": r["step"], **{name: r.get(key) for name, key in keys.items()}} for r in train_metrics(run)
            if r["kind"] == "train" and "train/reward" in r]


def pass_at_k(pairs: str) -> dict | None:
    """From the mined samples (pairs.jsonl): pass@1 (a sample passes all its page's tests) and pass@k (any of the
    page's k samples does), over the pages sampled."""
    path = os.path.join(pairs, "pairs.jsonl")
    if not os.path.exists(path):
        return None
    per_page = []
    for row in map(json.loads, open(path)):
        passes = [s.get("rewards", {}).get("bench") == 1.0 for s in row.get("samples") or []]
        if passes:
            per_page.append(passes)
    if not per_page:
        return None
    return {"k": max(map(len, per_page)), "pages": len(per_page),
            "pass@1": bootstrap([np.mean(p) for p in per_page]).scaled(100),
            "pass@k": bootstrap([float(any(p)) for p in per_page]).scaled(100),
            "pairs": sum(1 for row in map(json.loads, open(path)) if row.get("chosen") is not None)}


def fmt(i: Interval, digits: int = 1) -> str:
    return f"{i.mean:.{digits}f} [{i.low:.{digits}f}, {i.high:.{digits}f}]"


def bench_tables(f: Factory, bench: str, candidates: dict[str, dict[str, str]]) -> dict:
    """One held-out bench: every row's figures per category and pooled, each stage's gain over the row it started
    from, chance, and where tesseract read the bench, each row's CER over tesseract's, set by set."""
    folder, members, held_out = BENCHES[bench]
    heldout = f.path("pages", folder)
    scores = {row: page_scores(heldout, paths[bench]) for row, paths in candidates.items() if bench in paths}
    sets = [s for s in members if any(s in sc for sc in scores.values())]
    groups = {name: (name,) for name in sets} | {"held-out": tuple(s for s in held_out if s in sets)}
    table = {row: {g: figures(pooled(sc, m)) for g, m in groups.items() if pooled(sc, m)} for row, sc in scores.items()}
    print(f"\n=== the {bench} bench ({heldout}), strict; a page that fell back or was empty passes nothing; "
          "95% intervals by bootstrap over pages")
    floor = chance(heldout)
    for g in groups:
        print(f"\n{g} ({' + '.join(groups[g])})" if g == "held-out" else f"\n{g}")
        if g in floor:
            print(f"(chance: the next page's own text scores CER {floor[g]:.3f} against each page)")
        print(f"{'row':<24}{'strict present %':>24}{'CER':>24}{'made in s':>10}")
        for row, t in table.items():
            if g in t:
                seconds = made_in(f.times, row)
                print(f"{row:<24}{fmt(t[g]['present']):>24}{fmt(t[g]['cer'], 3):>24}"
                      f"{'' if seconds is None else f'{seconds:10.0f}'}")
    deltas = {}
    print(f"\n{bench}: each stage against the row it started from, on the same pages (paired 95% intervals)")
    for row, base in BASE.items():
        if row in scores and base in scores:
            deltas[row] = {g: gains(pooled(scores[base], m), pooled(scores[row], m)) for g, m in groups.items()
                           if pooled(scores[base], m)}
            for g, d in deltas[row].items():
                print(f"{row + ' - ' + base:<36}{g:<10} present {fmt(d['present']):>22} points   "
                      f"CER {fmt(d['cer'], 3):>22}")
    ratios = {}
    if "tesseract" in table:
        print(f"\n{bench}: each row's CER over tesseract's on the same pages, set by set (below 1: fewer errors)")
        engine = table["tesseract"]
        for row, t in table.items():
            if row != "tesseract":
                ratios[row] = {g: t[g]["cer"].mean / max(engine[g]["cer"].mean, 1e-3) for g in t if g in engine}
                print(f"{row:<24}" + "  ".join(f"{g} {r:.2f}x" for g, r in ratios[row].items()))
    return {"table": table, "deltas": deltas, "chance": floor, "ratios": ratios}


def report(f: Factory, candidates: dict[str, dict[str, str]]) -> dict:
    benches = {bench: bench_tables(f, bench, candidates) for bench in f.benches()}
    grid = benches["grid"]
    table, deltas, floor = grid["table"], grid["deltas"], grid["chance"]
    curves = {row: curve(f, f.path(row)) for row in ("sft", "blind") if row in candidates}
    for row, points in curves.items():
        print(f"\n{row}: step, held-out loss, then strict present % / CER per category at each eval")
        for p in points:
            cells = "  ".join(f"{name} {p[name]['present'].mean:5.1f}/{p[name]['cer'].mean:.3f}" for name in SETS
                              if name in p)
            loss = "" if p["loss"] is None else f"{p['loss']:.4f}"
            print(f"  {p['step']:>6} {loss:>8}  {cells}")
    signals = {row: grpo_signal(f.path(run)) for row, run in (("grpo", "grpo"), ("control", "control"))
               if row in candidates}
    for row, points in signals.items():
        print(f"\n{row}: the signal at each logged step (reward, its spread within groups, groups all alike, present "
              "tests the completions passed)")
        for p in points[:: max(1, len(points) // 12)] + points[-1:]:
            print("  " + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in p.items()))
    sampled = pass_at_k(f.path("pairs"))
    if sampled:
        print(f"\nSFT samples at temperature {f.args.temperature} on {sampled['pages']} training-like pages: pass@1 "
              f"{fmt(sampled['pass@1'])}%, pass@{sampled['k']} {fmt(sampled['pass@k'])}%; {sampled['pairs']} DPO "
              f"pairs ({f.times.get('dpo pairs', 0):.0f} s of mining)")
    waits = {row: data_wait(f.path(run)) for row, run in RUN_OF.items() if row in candidates}
    if waits.get("sft") is not None:
        print(f"\nSFT: {waits['sft']:.1f}% of each logged step waiting for data (median)")
    lines = goals(table, deltas, waits, floor, f.times)
    print("\ngoals")
    for line in lines:
        print(f"  {line}")
    result = {"benches": {bench: {"scores": figures_json(b["table"]), "gains": figures_json(b["deltas"]),
                                  "chance_cer": b["chance"], "cer_over_tesseract": b["ratios"]}
                          for bench, b in benches.items()},
              "scores": figures_json(table), "gains": figures_json(deltas),
              "curves": {row: [{k: (vars(v) if isinstance(v, Interval) else {m: vars(i) for m, i in v.items()}
                                    if isinstance(v, dict) else v) for k, v in p.items()} for p in points]
                         for row, points in curves.items()},
              "signal": signals, "pass_at_k": sampled and {k: vars(v) if isinstance(v, Interval) else v
                                                          for k, v in sampled.items()},
              "chance_cer": floor, "data_wait_percent": waits, "seconds": f.times, "candidates": candidates, "goals": lines}
    with open(f.path("learning_to_read.json"), "w") as fh:
        json.dump(result, fh, indent=2)
    return result


def figures_json(rows: dict) -> dict:
    return {row: {g: {k: vars(v) for k, v in t.items()} for g, t in gs.items()} for row, gs in rows.items()}


def made_in(times: dict[str, float], row: str) -> float | None:
    """Seconds the row's model took to make: its training run, or its release where that makes it (the soup);
    FP8's compression. None for a model made elsewhere (untrained, the same SFT served by vLLM)."""
    stage = STAGE_OF.get(row, row)
    return (times.get(stage, times.get(f"{stage} release")) if row not in ("untrained", "pipeline, vLLM", "tesseract")
            else None)


def goals(table: dict, deltas: dict, waits: dict, floor: dict[str, float], times: dict[str, float]) -> list[str]:
    """Each goal the rows measured allow judging: met or missed, with its figures."""
    def present(row, g):
        return table[row][g]["present"].mean

    def cer(row, g):
        return table[row][g]["cer"].mean

    def has(*rows):
        return all(r in table for r in rows)

    out = []

    def check(ok: bool, name: str, figure: str) -> None:
        out.append(f"{'met   ' if ok else 'missed'} {name}: {figure}")

    for row in ("sft", "grpo"):
        if times.get(row) is not None and row in table:
            check(times[row] <= 1200, f"{row} trains in <= 20 minutes", f"{times[row] / 60:.1f} min")
    if has("sft"):
        for g in ("letters", "unseen"):
            if g in table["sft"]:
                check(cer("sft", g) <= 0.15, f"SFT CER <= 0.15 on {g}", f"{cer('sft', g):.3f}")
        if "bank" in table["sft"]:
            check(present("sft", "bank") >= 50, "SFT >= 50% strict present on bank", f"{present('sft', 'bank'):.1f}")
        if "lines" in table["sft"]:
            check(present("sft", "lines") >= 50, "SFT >= 50% strict present on lines", f"{present('sft', 'lines'):.1f}")
    if has("blind"):
        for g in HELD_OUT:
            if g in table["blind"]:
                check(cer("blind", g) >= 0.9, f"blind CER >= 0.9 on {g}",
                      f"{cer('blind', g):.3f} (chance {floor[g]:.3f})" if g in floor else f"{cer('blind', g):.3f}")
    if "grpo" in deltas:
        d = deltas["grpo"]["held-out"]
        check(d["present"].mean >= 5 and d["present"].above_zero() and d["cer"].below_zero(),
              "GRPO - SFT >= +5 points held-out, interval above 0, CER lower",
              f"{fmt(d['present'])} points, CER {fmt(d['cer'], 3)}")
    if "control" in deltas:
        d = deltas["control"]["held-out"]
        check(not d["present"].above_zero(), "control (shuffled rewards) does not gain",
              f"{fmt(d['present'])} points, CER {fmt(d['cer'], 3)}")
    if "dpo" in deltas:
        d = deltas["dpo"]["held-out"]
        check(d["present"].mean >= 3 and d["present"].above_zero(), "DPO - SFT >= +3 points held-out, interval above 0",
              f"{fmt(d['present'])} points")
    if has("soup", "grpo", "grpo seed 2"):
        best = max(present("grpo", "held-out"), present("grpo seed 2", "held-out"))
        check(present("soup", "held-out") >= best, "soup >= the best GRPO seed held-out",
              f"{present('soup', 'held-out'):.1f} vs {best:.1f}")
    if "fp8" in deltas:
        d = deltas["fp8"]["held-out"]["present"]
        check(abs(d.mean) <= 3, "|FP8 - soup| <= 3 points", fmt(d))
    if "pipeline, vLLM" in deltas:
        d = deltas["pipeline, vLLM"]["held-out"]["present"]
        check(abs(d.mean) <= 2, "|vLLM - transformers| <= 2 points", fmt(d))
    if waits.get("sft") is not None:
        check(waits["sft"] < 5, "SFT data wait < 5% of each step", f"{waits['sft']:.1f}%")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "outputs", "learning_to_read"))
    parser.add_argument("--steps", type=int, help="SFT steps of 8 pages (default: +experiment=read_tiny's)")
    parser.add_argument("--train-pages", type=int, default=12000, help="training pages of each kind")
    parser.add_argument("--heldout-pages", type=int, default=256, help="held-out pages of each category")
    parser.add_argument("--typeset-pages", type=int, default=12000,
                        help="typeset training pages of each kind (0: no typeset pages, nor their bench)")
    parser.add_argument("--grpo-steps", type=int, help="default: +experiment=read_grpo's")
    parser.add_argument("--dpo-pages", type=int, default=512, help="training-like pages whose samples are mined")
    parser.add_argument("--samples", type=int, default=8, help="samples a page, mined for DPO pairs and pass@k")
    parser.add_argument("--temperature", type=float, default=1.0, help="of the mined samples")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    args = parser.parse_args()
    f = Factory(os.path.abspath(args.out), args)
    f.pages()
    report(f, chain(f, set(args.rows), args.steps))


if __name__ == "__main__":
    main()
