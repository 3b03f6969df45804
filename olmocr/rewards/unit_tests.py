"""The bench reward: the share of a page's olmOCR-bench tests that a completion passes (SPEC §4), judged by
``strict`` scoring: under olmOCR-bench's published verdicts a blank or fragmentary completion passes every
present test of longer text, so a policy optimised on them would learn to say less (olmocr.bench.checks)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

from olmocr.bench.records import BenchTest, parse_test
from olmocr.formats.frontmatter import page_text
from olmocr.rewards.text import completion_text


@functools.lru_cache(maxsize=4096)
def _parsed(records: str) -> tuple[BenchTest, ...]:
    return tuple(parse_test(record) for record in json.loads(records))


def page_tests(tests) -> tuple[BenchTest, ...]:
    """A page's tests from a dataset column: BenchTest objects, dicts, or their JSON (cached by value,
    since every completion of a group carries the same list)."""
    if tests is None:
        return ()
    if isinstance(tests, str):
        return _parsed(tests)
    if all(isinstance(t, BenchTest) for t in tests):
        return tuple(tests)
    return _parsed(json.dumps(list(tests), sort_keys=True))


def outcomes(tests: Sequence[BenchTest], markdown: str) -> dict[str, list[bool]]:
    """Pass/fail of each test, grouped by test type."""
    by_type: dict[str, list[bool]] = {}
    for test in tests:
        by_type.setdefault(test.type, []).append(test.run(markdown, explain=False, scoring="strict")[0])
    return by_type


def score(by_type: dict[str, list[bool]], macro: bool = False) -> float:
    """Fraction of tests passed; with ``macro``, the mean over test types of each type's pass rate."""
    if macro:
        return sum(sum(r) / len(r) for r in by_type.values()) / len(by_type)
    results = [r for rs in by_type.values() for r in rs]
    return sum(results) / len(results)


def bench(completions: Sequence, tests: Sequence | None = None, log_metric=None, *, macro: bool = False,
          **_) -> list[float | None]:
    """Share of the page's unit tests the completion's text passes (front matter, if any, removed);
    ``macro`` averages per-type pass rates instead. None for a page without tests.

    Under trl, per-type pass rates over the batch are logged as ``bench/<type>`` (``log_metric``)."""
    columns = tests if tests is not None else [None] * len(completions)
    out: list[float | None] = []
    totals: dict[str, list[bool]] = {}
    for completion, records in zip(completions, columns):
        parsed = page_tests(records)
        if not parsed:
            out.append(None)
            continue
        by_type = outcomes(parsed, page_text(completion_text(completion)))
        for kind, results in by_type.items():
            totals.setdefault(kind, []).extend(results)
        out.append(score(by_type, macro))
    if log_metric is not None:
        for kind, results in sorted(totals.items()):
            log_metric(f"bench/{kind}", sum(results) / len(results))
    return out
