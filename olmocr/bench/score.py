"""Score a folder of OCR outputs against an olmOCR-bench folder, as olmOCR-bench scores it.

A bench folder holds test files (``*.jsonl``, one category per file) and the PDFs under ``pdfs/``.
Every PDF without a baseline test gets one (page 1) in a category of its own, ``baseline``, unless
``skip_baseline`` (which, as in olmOCR-bench, drops every baseline test). Candidate outputs are
``<candidates>/<pdf path without .pdf>_pg<page>_repeat<n>.md``; every repeat is scored. A test passes
when more than half of its repeats pass (``repeat_rule=majority``, the published figures) or scores the
share of repeats passing (``repeat_rule=mean``). A category's rate is the mean over its tests; the
overall score is the mean over categories, with a stratified bootstrap interval. ``overall_score`` is
olmOCR-bench's other figure: the mean over all tests of their repeat averages. A page with no output
fails its tests and is listed (olmOCR-bench refuses to score such a candidate at all).

Every score says what it is made of (``makeup`` in the summary): of the tested pages, how many the model
answered (an output with letters or digits that its producer did not record as a fallback in
``<candidates>/answers.jsonl``, which the pipeline's bench mode and training's bench eval write), how many
fell back to the text layer, were empty or missing; and, where the bench has a page's truth (the ``.md``
beside a single-page PDF, as synthetic pages and ``bench.split``'s held-out pages have), the character
error rate against it: Levenshtein distance over the truth's length, both normalised as tests are.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from rapidfuzz.distance import Levenshtein
from tqdm import tqdm

from olmocr.bench.checks import check_scoring
from olmocr.bench.normalize import normalize
from olmocr.bench.records import BaselineTest, BenchTest, load_tests
from olmocr.errors import UserError
from olmocr.formats.frontmatter import page_text
from olmocr.utils.io import irregular

REPEAT_RULES = ("majority", "mean")


@dataclass
class Bench:
    tests: list[tuple[str, BenchTest]]  # (category, test)
    malformed: list[str] = field(default_factory=list)  # "file:line: why", skipped
    warnings: list[str] = field(default_factory=list)  # "file:line: why", test kept
    skipped: Counter = field(default_factory=Counter)  # why -> tests not run
    implicit_baselines: int = 0
    root: str = ""  # the bench folder (its pages' truth: pdfs/<stem>.md)


def _bench_pdfs(bench_dir: str, tests: Iterable[BenchTest]) -> list[str]:
    """PDF paths relative to ``pdfs/`` (every PDF there), or those the tests name when there is none."""
    root = os.path.join(bench_dir, "pdfs")
    if os.path.isdir(root):
        found = glob.glob(os.path.join(glob.escape(root), "**", "*.pdf"), recursive=True)
        return sorted(os.path.relpath(p, root).replace(os.sep, "/") for p in found)
    return sorted({t.pdf for t in tests})


def load_bench(bench_dir: str, skip_baseline: bool = False, skip_rejected: bool = False) -> Bench:
    if not os.path.isdir(bench_dir):
        raise UserError(f"bench_dir: {bench_dir} is not a folder")
    files = sorted(glob.glob(os.path.join(glob.escape(bench_dir), "*.jsonl")))
    if not files:
        raise UserError(f"bench_dir: no test files (*.jsonl) in {bench_dir}")
    bench = Bench(tests=[], root=bench_dir)
    seen: dict[str, str] = {}
    for path in files:
        category = os.path.splitext(os.path.basename(path))[0]
        loaded = load_tests(path)
        bench.malformed += loaded.errors
        bench.warnings += loaded.warnings
        for test in loaded.tests:
            if test.id in seen:
                bench.malformed.append(f"{path}: duplicate test id {test.id!r} (first in {seen[test.id]}); skipped")
                continue
            seen[test.id] = path
            if skip_rejected and test.checked == "rejected":
                bench.skipped["marked checked: rejected (skip_rejected)"] += 1
                continue
            bench.tests.append((category, test))
    categories = {category for category, _ in bench.tests}
    implicit = "baseline" if "baseline" not in categories else "baseline (implicit)"
    with_baseline = {t.pdf for _, t in bench.tests if t.type == "baseline"}
    for pdf in _bench_pdfs(bench_dir, (t for _, t in bench.tests)):
        if pdf not in with_baseline:
            bench.tests.append((implicit, BaselineTest(pdf=pdf, page=1, id=f"{pdf}_baseline")))
            bench.implicit_baselines += 1
    if skip_baseline:
        kept = [(c, t) for c, t in bench.tests if t.type != "baseline"]
        bench.skipped["baseline tests (skip_baseline)"] = len(bench.tests) - len(kept)
        bench.implicit_baselines = 0
        bench.tests = kept
    return bench


_REPEAT = re.compile(r"_repeat\d+\.md$")
ANSWERS = "answers.jsonl"  # in a candidates folder: {"file": <path in the folder>, "answered": bool} per output
_LETTER = re.compile(r"[^\W_]")


def record_answers(candidates: str, rows: Iterable[tuple[str, bool]]) -> None:
    """Note in ``<candidates>/answers.jsonl`` whether the model answered each output file (False: the text
    is a fallback, the text layer or nothing, not the model's reading); a file noted again counts last."""
    os.makedirs(candidates, exist_ok=True)
    with open(os.path.join(candidates, ANSWERS), "a", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"file": os.path.relpath(path, candidates).replace(os.sep, "/"),
                                  "answered": bool(answered)}) + "\n" for path, answered in rows)


def read_fallbacks(candidates: str) -> set[str]:
    """Output files (paths in the folder) recorded as not the model's answer; lines that do not parse are
    left out (a line cut short by a kill)."""
    noted: dict[str, bool] = {}
    try:
        with open(os.path.join(candidates, ANSWERS), encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    row = json.loads(line)
                    noted[str(row["file"])] = bool(row["answered"])
                except (ValueError, KeyError, TypeError):
                    continue
    except OSError:
        return set()
    return {name for name, answered in noted.items() if not answered}


def truth_path(bench_dir: str, pdf: str, page: int) -> str | None:
    """The page's truth, the ``.md`` beside a single-page PDF (page 1), when the bench has one."""
    if page != 1 or not bench_dir or not pdf.lower().endswith(".pdf"):
        return None
    path = os.path.join(bench_dir, "pdfs", pdf[:-4] + ".md")
    return path if os.path.isfile(path) else None


def char_error_rate(text: str, truth: str) -> float:
    """Levenshtein distance over the truth's length, both normalised as tests are (whitespace runs as one space,
    markdown emphasis markers dropped); 1.0 for an empty output, above 1 for one longer and wrong."""
    got, want = normalize(text).strip(), normalize(truth).strip()
    return Levenshtein.distance(got, want) / max(len(want), 1)


@dataclass
class PageOutputs:
    """What a page's outputs are: how many of its repeats the model answered, fell back or were empty, and
    their mean character error rate against the page's truth (None without one)."""
    outputs: int
    answered: int
    fallback: int
    empty: int
    cer: float | None


def candidate_stem(candidates: str, pdf: str, page: int) -> str:
    """``<candidates>/<pdf path without .pdf>_pg<page>``; repeats add ``_repeat<n>.md``."""
    return os.path.join(candidates, f"{pdf[:-4] if pdf.lower().endswith('.pdf') else pdf}_pg{page}")


def candidate_files(candidates: str, pdf: str, page: int) -> list[str]:
    found = glob.glob(glob.escape(candidate_stem(candidates, pdf, page)) + "_repeat*.md")
    return sorted(f for f in found if _REPEAT.search(f))


def read_outputs(candidates: str, pdf: str, page: int) -> tuple[list[tuple[str, str]], list[str]]:
    """The page's repeats as (file, text), and those that cannot be read as "<file>: why" (a link to nothing, a
    folder or FIFO, never opened; a read refused): these are left out of the page's repeats, and listed."""
    texts, unreadable = [], []
    for path in candidate_files(candidates, pdf, page):
        try:
            kind = irregular(path)
            if kind is not None:
                unreadable.append(f"{path}: {kind}, not a file")
                continue
            with open(path, encoding="utf-8", errors="replace") as fh:
                texts.append((path, page_text(fh.read())))
        except FileNotFoundError:
            unreadable.append(f"{path}: a link to nothing, or removed while read")
        except OSError as exc:
            unreadable.append(f"{path}: {type(exc).__name__}: {exc.strerror or exc}")
    return texts, unreadable


@dataclass
class TestResult:
    category: str
    test: BenchTest
    passed: int  # repeats that passed
    repeats: int
    explanation: str  # of the first failing repeat; empty when all passed
    unreadable: tuple[str, ...] = ()  # the page's repeats that could not be read, each "<file>: why"
    outputs: PageOutputs | None = None  # the page's outputs (shared by its tests)
    scoring: str = "strict"  # how the verdicts were reached (olmocr.bench.checks)

    __test__ = False  # not a pytest class

    @property
    def score(self) -> float:
        """The share of repeats that passed (olmOCR-bench's per-test average)."""
        return self.passed / self.repeats if self.repeats else 0.0


def page_outputs(texts: list[tuple[str, str]], candidates: str, fallbacks: set[str], truth: str | None) -> PageOutputs:
    fell_back = empty = 0
    for path, text in texts:
        if os.path.relpath(path, candidates).replace(os.sep, "/") in fallbacks:
            fell_back += 1
        elif not _LETTER.search(text):
            empty += 1
    cer = None
    if truth is not None:
        rates = [char_error_rate(text, truth) for _, text in texts] or [1.0]  # no output: nothing read
        cer = float(np.mean(rates))
    return PageOutputs(len(texts), len(texts) - fell_back - empty, fell_back, empty, cer)


def _read_truth(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return page_text(fh.read())
    except OSError:
        return None


def _score_page(job: tuple) -> list[TestResult]:
    tests, candidates, pdf, page, scoring, fallbacks, truth = job
    texts, unreadable = read_outputs(candidates, pdf, page)
    outputs = page_outputs(texts, candidates, fallbacks, _read_truth(truth))
    missing = f"no {'readable ' if unreadable else ''}candidate output ({candidate_stem(candidates, pdf, page)}_repeat1.md)"
    results = []
    for category, test in tests:
        if not texts:
            results.append(TestResult(category, test, 0, 0, missing, tuple(unreadable), outputs, scoring))
            continue
        outcomes = []
        for _, text in texts:
            try:
                outcomes.append(test.run(text, scoring=scoring))
            except Exception as exc:  # noqa: BLE001 - one broken check must not lose the page's other results
                outcomes.append((False, f"the check failed: {type(exc).__name__}: {exc}"))
        failure = next((f"{os.path.basename(f)}: {why}" for (f, _), (ok, why) in zip(texts, outcomes) if not ok), "")
        results.append(TestResult(category, test, sum(ok for ok, _ in outcomes), len(texts), failure, tuple(unreadable),
                                  outputs, scoring))
    return results


def run_tests(bench: Bench, candidates: str, workers: int = 1, scoring: str = "strict") -> list[TestResult]:
    """Every test against every repeat of its page's output, pages in parallel over ``workers`` processes,
    judged by ``scoring`` (``strict`` or ``published``: :mod:`olmocr.bench.checks`)."""
    check_scoring(scoring)
    pages: dict[tuple[str, int], list[tuple[str, BenchTest]]] = {}
    for category, test in bench.tests:
        pages.setdefault((test.pdf, test.page), []).append((category, test))
    fallbacks: dict[str, set[str]] = {}
    for name in read_fallbacks(candidates):
        fallbacks.setdefault(_REPEAT.sub("", name), set()).add(name)
    jobs = []
    for (pdf, page), tests in pages.items():
        stem = os.path.relpath(candidate_stem(candidates, pdf, page), candidates).replace(os.sep, "/")
        jobs.append((tests, candidates, pdf, page, scoring, fallbacks.get(stem, set()),
                     truth_path(bench.root, pdf, page)))
    progress = dict(total=len(jobs), desc="bench pages", unit="page", disable=len(jobs) < 20)
    if workers <= 1 or len(jobs) < 2:
        scored: Iterable = tqdm(map(_score_page, jobs), **progress)
        return [r for page in scored for r in page]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        scored = tqdm(pool.map(_score_page, jobs, chunksize=max(1, len(jobs) // (workers * 8))), **progress)
        return [r for page in scored for r in page]


def bootstrap_interval(groups: list[np.ndarray], samples: int, confidence: float, seed: int) -> tuple[float, float]:
    """Percentile interval of the mean of group means, resampling tests within each group."""
    rng = np.random.default_rng(seed)
    means = np.zeros(samples)
    for scores in groups:
        picks = rng.integers(0, len(scores), size=(samples, len(scores)))
        means += scores[picks].mean(axis=1)
    means /= len(groups)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def check_options(group_by: str, repeat_rule: str) -> None:
    if group_by not in ("file", "type"):
        raise UserError(f"group_by: expected 'file' or 'type', got {group_by!r}")
    if repeat_rule not in REPEAT_RULES:
        raise UserError(f"repeat_rule: expected one of {', '.join(REPEAT_RULES)}, got {repeat_rule!r}")


def verdict(result: TestResult, repeat_rule: str) -> float:
    """A test's value in category rates: 1/0 by majority of repeats, or the share of repeats passing."""
    return float(result.score > 0.5) if repeat_rule == "majority" else result.score


def makeup(results: list[TestResult]) -> dict:
    """What the scored outputs are: pages answered by the model, fallen back, empty or missing; the character
    error rate over pages with truth (every such page, and those the model answered)."""
    pages = {(r.test.pdf, r.test.page): r.outputs for r in results if r.outputs is not None}
    rows = list(pages.values())
    with_truth = [p for p in rows if p.cer is not None]
    answered = [p for p in with_truth if p.answered]
    return {
        "pages": len(rows),
        "answered": sum(p.answered > 0 for p in rows),  # at least one repeat the model's own reading
        "fallback": sum(p.outputs > 0 and not p.answered and p.fallback > 0 for p in rows),
        "empty": sum(p.outputs > 0 and not p.answered and not p.fallback for p in rows),
        "missing": sum(p.outputs == 0 for p in rows),
        "outputs": sum(p.outputs for p in rows),
        "outputs_answered": sum(p.answered for p in rows),
        "pages_with_truth": len(with_truth),
        "cer": float(np.mean([p.cer for p in with_truth])) if with_truth else None,
        "cer_answered": float(np.mean([p.cer for p in answered])) if answered else None,
    }


def describe_makeup(m: dict) -> str:
    """One line: pages answered, fallbacks, empty, missing, and CER where there is truth."""
    parts = [f"the model answered {m['answered']} of {m['pages']} pages"]
    parts += [f"{m[key]} {what}" for key, what in (("fallback", "fell back to the text layer"),
                                                    ("empty", "empty"), ("missing", "missing")) if m[key]]
    line = ", ".join(parts)
    if m["cer"] is not None:
        line += f"; character error rate {m['cer']:.3f} over {m['pages_with_truth']} pages with truth"
        if m["cer_answered"] is not None and m["answered"] < m["pages_with_truth"]:
            line += f" ({m['cer_answered']:.3f} over those answered)"
    return line


def describe_overall(summary: dict, each: bool = True) -> str:
    """How ``overall`` is made, in one line, with the plain share of tests passed beside it: a category of 5
    tests weighs as much as one of 500 (a bench of one category and the implicit ``baseline`` one: baseline is
    half the figure). ``each``: every category's tests and rate too."""
    categories = summary["categories"]
    line = (f"overall {100 * summary['overall']:.1f}% is the mean of {len(categories)} categories' pass rates, each "
            f"weighing 1/{len(categories)} whatever its number of tests" if len(categories) > 1 else
            f"overall {100 * summary['overall']:.1f}% is the pass rate of the one category")
    if each:
        line += " (" + ", ".join(f"{name} {100 * row['pass_rate']:.1f}% of {row['tests']}"
                                 for name, row in categories.items()) + ")"
    return line + (f"; the plain share of tests passed is {100 * summary['share']:.1f}% ({summary['passed']} of "
                   f"{summary['tests']})")


def summarize(results: list[TestResult], group_by: str = "file", repeat_rule: str = "majority",
              samples: int = 1000, confidence: float = 0.95, seed: int = 0) -> dict:
    """Per-category rates (tests scored by ``repeat_rule``), overall = their mean with a bootstrap
    interval, ``overall_score`` = mean repeat average over all tests, per-type mean repeat averages;
    every rate with its own bootstrap interval (``low``, ``high``); the scoring the results were judged by
    and what the outputs are (:func:`makeup`)."""
    check_options(group_by, repeat_rule)
    if not results:
        raise UserError("no tests to score")
    by_category: dict[str, list[float]] = {}
    by_type: dict[str, list[float]] = {}
    for r in results:
        by_category.setdefault(r.category if group_by == "file" else r.test.type, []).append(verdict(r, repeat_rule))
        by_type.setdefault(r.test.type, []).append(r.score)
    groups = {name: np.asarray(values) for name, values in sorted(by_category.items())}
    low, high = bootstrap_interval(list(groups.values()), samples, confidence, seed)

    def table(source: dict[str, list[float]]) -> dict:
        rows = {}
        for name, values in sorted(source.items()):
            low, high = bootstrap_interval([np.asarray(values)], samples, confidence, seed)
            rows[name] = {"tests": len(values), "pass_rate": float(np.mean(values)), "low": low, "high": high}
        return rows

    passed = int(sum(verdict(r, "majority") for r in results))
    return {
        "overall": float(np.mean([g.mean() for g in groups.values()])),
        "ci": {"low": low, "high": high, "confidence": confidence, "bootstrap_samples": samples},
        "overall_score": float(np.mean([r.score for r in results])),
        "repeat_rule": repeat_rule,
        "scoring": "/".join(sorted({r.scoring for r in results})),
        "makeup": makeup(results),
        "categories": table(by_category),
        "types": table(by_type),
        "tests": len(results),
        "passed": passed,
        "share": passed / len(results),  # the plain share of tests passed, beside overall (categories weigh alike)
        "missing_pages": sorted({f"{r.test.pdf} page {r.test.page}" for r in results if r.repeats == 0}),
        "unreadable_outputs": sorted({u for r in results for u in r.unreadable}),
    }
