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
"""

from __future__ import annotations

import glob
import os
import re
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from olmocr.bench.records import BaselineTest, BenchTest, load_tests
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


def _bench_pdfs(bench_dir: str, tests: Iterable[BenchTest]) -> list[str]:
    """PDF paths relative to ``pdfs/`` (every PDF there), or those the tests name when there is none."""
    root = os.path.join(bench_dir, "pdfs")
    if os.path.isdir(root):
        found = glob.glob(os.path.join(glob.escape(root), "**", "*.pdf"), recursive=True)
        return sorted(os.path.relpath(p, root).replace(os.sep, "/") for p in found)
    return sorted({t.pdf for t in tests})


def load_bench(bench_dir: str, skip_baseline: bool = False, skip_rejected: bool = False) -> Bench:
    if not os.path.isdir(bench_dir):
        raise ValueError(f"bench_dir: {bench_dir} is not a folder")
    files = sorted(glob.glob(os.path.join(glob.escape(bench_dir), "*.jsonl")))
    if not files:
        raise ValueError(f"bench_dir: no test files (*.jsonl) in {bench_dir}")
    bench = Bench(tests=[])
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

    __test__ = False  # not a pytest class

    @property
    def score(self) -> float:
        """The share of repeats that passed (olmOCR-bench's per-test average)."""
        return self.passed / self.repeats if self.repeats else 0.0


def _score_page(job: tuple[list[tuple[str, BenchTest]], str, str, int]) -> list[TestResult]:
    tests, candidates, pdf, page = job
    texts, unreadable = read_outputs(candidates, pdf, page)
    missing = f"no {'readable ' if unreadable else ''}candidate output ({candidate_stem(candidates, pdf, page)}_repeat1.md)"
    results = []
    for category, test in tests:
        if not texts:
            results.append(TestResult(category, test, 0, 0, missing, tuple(unreadable)))
            continue
        outcomes = []
        for _, text in texts:
            try:
                outcomes.append(test.run(text))
            except Exception as exc:  # noqa: BLE001 - one broken check must not lose the page's other results
                outcomes.append((False, f"the check failed: {type(exc).__name__}: {exc}"))
        failure = next((f"{os.path.basename(f)}: {why}" for (f, _), (ok, why) in zip(texts, outcomes) if not ok), "")
        results.append(TestResult(category, test, sum(ok for ok, _ in outcomes), len(texts), failure, tuple(unreadable)))
    return results


def run_tests(bench: Bench, candidates: str, workers: int = 1) -> list[TestResult]:
    """Every test against every repeat of its page's output, pages in parallel over ``workers`` processes."""
    pages: dict[tuple[str, int], list[tuple[str, BenchTest]]] = {}
    for category, test in bench.tests:
        pages.setdefault((test.pdf, test.page), []).append((category, test))
    jobs = [(tests, candidates, pdf, page) for (pdf, page), tests in pages.items()]
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
        raise ValueError(f"group_by: expected 'file' or 'type', got {group_by!r}")
    if repeat_rule not in REPEAT_RULES:
        raise ValueError(f"repeat_rule: expected one of {', '.join(REPEAT_RULES)}, got {repeat_rule!r}")


def verdict(result: TestResult, repeat_rule: str) -> float:
    """A test's value in category rates: 1/0 by majority of repeats, or the share of repeats passing."""
    return float(result.score > 0.5) if repeat_rule == "majority" else result.score


def summarize(results: list[TestResult], group_by: str = "file", repeat_rule: str = "majority",
              samples: int = 1000, confidence: float = 0.95, seed: int = 0) -> dict:
    """Per-category rates (tests scored by ``repeat_rule``), overall = their mean with a bootstrap
    interval, ``overall_score`` = mean repeat average over all tests, per-type mean repeat averages;
    every rate with its own bootstrap interval (``low``, ``high``)."""
    check_options(group_by, repeat_rule)
    if not results:
        raise ValueError("no tests to score")
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

    return {
        "overall": float(np.mean([g.mean() for g in groups.values()])),
        "ci": {"low": low, "high": high, "confidence": confidence, "bootstrap_samples": samples},
        "overall_score": float(np.mean([r.score for r in results])),
        "repeat_rule": repeat_rule,
        "categories": table(by_category),
        "types": table(by_type),
        "tests": len(results),
        "passed": int(sum(verdict(r, "majority") for r in results)),
        "missing_pages": sorted({f"{r.test.pdf} page {r.test.page}" for r in results if r.repeats == 0}),
        "unreadable_outputs": sorted({u for r in results for u in r.unreadable}),
    }
