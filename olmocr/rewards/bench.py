"""The bench reward: the share of a page's olmOCR-bench tests that a completion passes (SPEC §4)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

from olmocr.bench.records import BenchTest, parse_test
from olmocr.rewards.text import completion_body, completion_text


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


def score(tests: Sequence[BenchTest], markdown: str, macro: bool = False) -> float:
    """Fraction of tests passed; with ``macro``, the mean over test types of each type's pass rate."""
    by_type: dict[str, list[bool]] = {}
    for test in tests:
        by_type.setdefault(test.type, []).append(test.run(markdown, explain=False)[0])
    if macro:
        return sum(sum(r) / len(r) for r in by_type.values()) / len(by_type)
    results = [r for rs in by_type.values() for r in rs]
    return sum(results) / len(results)


def bench(completions: Sequence, tests: Sequence | None = None, *, macro: bool = False, **_) -> list[float | None]:
    """Share of the page's unit tests the completion's text passes (front matter, if any, removed);
    ``macro`` averages per-type pass rates instead. None for a page without tests."""
    columns = tests if tests is not None else [None] * len(completions)
    out: list[float | None] = []
    for completion, records in zip(completions, columns):
        parsed = page_tests(records)
        out.append(score(parsed, completion_body(completion_text(completion)), macro) if parsed else None)
    return out
