"""Scores comparable with published olmOCR-bench numbers: on a bench of synthetic pages with OCR-like
outputs (tests/parity_fixture.py), every figure and every test verdict equals what olmOCR-bench's own
scorer reported (tests/expected/bench_parity.json), with one and three repeats, with and without the
implicit baseline tests."""

import json
import os

import pytest

from olmocr.bench.score import load_bench, run_tests, summarize
from parity_fixture import build

EXPECTED = json.load(open(os.path.join(os.path.dirname(__file__), "expected", "bench_parity.json")))


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("parity")
    build(str(out))
    return str(out)


@pytest.mark.parametrize("run", sorted(EXPECTED["runs"]))
def test_scores_equal_the_bench_scorer(bench_dir, run):
    expected = EXPECTED["runs"][run]
    candidates, _, skip = run.partition("_")
    bench = load_bench(bench_dir, skip_baseline=bool(skip))
    assert not bench.malformed and not bench.warnings
    results = run_tests(bench, os.path.join(bench_dir, candidates), workers=1, scoring="published")
    summary = summarize(results)
    assert {name: row["pass_rate"] for name, row in summary["categories"].items()} == \
        pytest.approx(expected["categories"], abs=1e-6)
    assert summary["overall"] == pytest.approx(expected["overall"], abs=1e-6)
    assert summary["overall_score"] == pytest.approx(expected["overall_score"], abs=1e-6)
    assert {name: row["pass_rate"] for name, row in summary["types"].items()} == \
        pytest.approx(expected["types"], abs=1e-6)
    assert sorted(r.test.id for r in results if r.score <= 0.5) == expected["failed"]
    # the fixture exercises what it is for: repeats, implicit baselines, every test type but math
    assert {r.test.type for r in results} >= {"present", "absent", "order", "table", "format", "footnote"}
    assert (bench.implicit_baselines > 0) is not bool(skip)
    assert max(r.repeats for r in results) == (3 if candidates == "three" else 1)
