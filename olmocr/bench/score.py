"""Score a folder of OCR outputs against an olmOCR-bench folder.

A bench folder holds test files (``*.jsonl``, one category per file) and the PDFs they name. Candidate
outputs are ``<candidates>/<pdf path without .pdf>_pg<page>_repeat<n>.md``; every repeat is scored and
a test's score is the share of its page's repeats that pass it. A page with no candidate file fails
all its tests. Category rates are means over their tests; the overall score is the mean over
categories, with a stratified bootstrap confidence interval.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from olmocr.bench.records import BenchTest, load_tests
from olmocr.data.frontmatter import page_text


@dataclass
class Bench:
    tests: list[tuple[str, BenchTest]]  # (category, test)
    malformed: list[str] = field(default_factory=list)  # "file:line: why"
    skipped: int = 0  # tests marked checked: rejected


def load_bench(bench_dir: str) -> Bench:
    if not os.path.isdir(bench_dir):
        raise ValueError(f"bench_dir: {bench_dir} is not a folder")
    files = sorted(glob.glob(os.path.join(bench_dir, "*.jsonl")))
    if not files:
        raise ValueError(f"bench_dir: no test files (*.jsonl) in {bench_dir}")
    bench = Bench(tests=[])
    seen: dict[str, str] = {}
    for path in files:
        category = os.path.splitext(os.path.basename(path))[0]
        tests, errors = load_tests(path)
        bench.malformed.extend(errors)
        for test in tests:
            if test.id in seen:
                bench.malformed.append(f"{path}: duplicate test id {test.id!r} (first in {seen[test.id]}); skipped")
                continue
            seen[test.id] = path
            if test.checked == "rejected":
                bench.skipped += 1
                continue
            bench.tests.append((category, test))
    return bench


_REPEAT = re.compile(r"_repeat\d+\.md$")


def candidate_stem(candidates: str, pdf: str, page: int) -> str:
    """``<candidates>/<pdf path without .pdf>_pg<page>``; repeats add ``_repeat<n>.md``."""
    return os.path.join(candidates, f"{pdf[:-4] if pdf.lower().endswith('.pdf') else pdf}_pg{page}")


def candidate_files(candidates: str, pdf: str, page: int) -> list[str]:
    found = glob.glob(glob.escape(candidate_stem(candidates, pdf, page)) + "_repeat*.md")
    return sorted(f for f in found if _REPEAT.search(f))


def _page_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return page_text(fh.read())


@dataclass
class TestResult:
    category: str
    test: BenchTest
    score: float  # share of repeats passed
    repeats: int
    explanation: str  # of the first failing repeat; empty when all passed


def _score_page(job: tuple[list[tuple[str, BenchTest]], list[str], str]) -> list[TestResult]:
    tests, files, missing_path = job
    texts = [_page_text(f) for f in files]
    results = []
    for category, test in tests:
        if not texts:
            results.append(TestResult(category, test, 0.0, 0, f"no candidate output ({missing_path})"))
            continue
        outcomes = [test.run(text) for text in texts]
        passed = sum(ok for ok, _ in outcomes)
        failure = next((f"{os.path.basename(f)}: {why}" for f, (ok, why) in zip(files, outcomes) if not ok), "")
        results.append(TestResult(category, test, passed / len(texts), len(texts), failure))
    return results


def run_tests(bench: Bench, candidates: str, workers: int = 1) -> list[TestResult]:
    """Every test against every repeat of its page's output, pages in parallel over ``workers`` processes."""
    pages: dict[tuple[str, int], list[tuple[str, BenchTest]]] = {}
    for category, test in bench.tests:
        pages.setdefault((test.pdf, test.page), []).append((category, test))
    jobs = []
    for (pdf, page), tests in pages.items():
        missing = candidate_stem(candidates, pdf, page) + "_repeat1.md"
        jobs.append((tests, candidate_files(candidates, pdf, page), missing))
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


def check_group_by(group_by: str) -> None:
    if group_by not in ("file", "type"):
        raise ValueError(f"group_by: expected 'file' or 'type', got {group_by!r}")


def summarize(results: list[TestResult], group_by: str = "file", samples: int = 1000, confidence: float = 0.95,
              seed: int = 0) -> dict:
    """Per-category and per-type pass rates, overall (mean over categories) and its bootstrap interval."""
    check_group_by(group_by)
    if not results:
        raise ValueError("no tests to score")
    by_category: dict[str, list[float]] = {}
    by_type: dict[str, list[float]] = {}
    for r in results:
        by_category.setdefault(r.category if group_by == "file" else r.test.type, []).append(r.score)
        by_type.setdefault(r.test.type, []).append(r.score)
    groups = {name: np.asarray(scores) for name, scores in sorted(by_category.items())}
    overall = float(np.mean([g.mean() for g in groups.values()]))
    low, high = bootstrap_interval(list(groups.values()), samples, confidence, seed)

    def table(source: dict[str, list[float]]) -> dict:
        return {name: {"tests": len(s), "pass_rate": float(np.mean(s))} for name, s in sorted(source.items())}

    return {
        "overall": overall,
        "ci": {"low": low, "high": high, "confidence": confidence, "bootstrap_samples": samples},
        "categories": table(by_category),
        "types": table(by_type),
        "tests": len(results),
        "passed": sum(r.score == 1.0 for r in results),
        "missing_pages": sorted({f"{r.test.pdf} page {r.test.page}" for r in results if r.repeats == 0}),
    }
