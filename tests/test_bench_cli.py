"""python -m olmocr.bench on a synthetic bench: reports, repeats, missing outputs, malformed lines."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import SAMPLE
from olmocr.bench.records import load_tests
from olmocr.bench.score import bootstrap_interval, load_bench, run_tests, summarize


@pytest.fixture
def bench(tmp_path):
    """The bundled eval pages as a two-category bench, with truth outputs (two repeats) for all but one page."""
    src = os.path.join(SAMPLE, "eval")
    bench_dir, cand = tmp_path / "bench", tmp_path / "cand"
    shutil.copytree(os.path.join(src, "pdfs"), bench_dir / "pdfs", ignore=shutil.ignore_patterns("*.md"))
    lines = open(os.path.join(src, "synth.jsonl"), encoding="utf-8").read().splitlines()
    tables = [line for line in lines if '"type": "table"' in line or '"type": "math"' in line]
    rest = [line for line in lines if line not in tables]
    (bench_dir / "structure.jsonl").write_text("\n".join(tables) + "\n")
    (bench_dir / "text.jsonl").write_text("\n".join(rest) + '\n{"type": "present", "pdf": "x.pdf"}\nnot json\n')
    cand.mkdir()
    pages = sorted({json.loads(line)["pdf"][:-4] for line in lines})
    for i, name in enumerate(pages):
        if i == 0:
            continue  # no output for the first page
        with open(os.path.join(src, "pdfs", name + ".md"), encoding="utf-8") as fh:
            text = fh.read()  # front matter included: the bench scores the page text only
        (cand / f"{name}_pg1_repeat1.md").write_text(text)
        (cand / f"{name}_pg1_repeat2.md").write_text(text if i != 1 else "")  # one bad repeat
    return bench_dir, cand, pages, len(rest)


def test_cli_writes_both_reports(bench, tmp_path):
    bench_dir, cand, pages, n_text = bench
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "olmocr.bench", f"bench_dir={bench_dir}", f"candidates={cand}",
                           "workers=2", f"hydra.run.dir={run_dir}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((run_dir / "results.json").read_text())
    tests, _ = load_tests(os.path.join(SAMPLE, "eval", "synth.jsonl"))
    first, second = [t for t in tests if t.pdf == pages[0] + ".pdf"], [t for t in tests if t.pdf == pages[1] + ".pdf"]
    # Malformed lines are reported by file:line and skipped.
    text_file = bench_dir / "text.jsonl"
    assert result["malformed"] == [f"{text_file}:{n_text + 1}: present test: missing field 'page'",
                                   f"{text_file}:{n_text + 2}: Expecting value: line 1 column 1 (char 0)"]
    # The missing page fails all its tests; the page with an empty repeat scores 1/2 on tests "" fails.
    assert result["missing_pages"] == [f"{pages[0]}.pdf page 1"]
    failed = {f["id"]: f for f in result["failed"]}
    assert {t.id for t in first} <= set(failed)
    assert all(failed[t.id]["explanation"].startswith("no candidate output") for t in first)
    empty_fails = [t for t in second if not t.run("")[0]]
    assert empty_fails and all(failed[t.id]["score"] == 0.5 for t in empty_fails)
    assert all("repeat2.md" in failed[t.id]["explanation"] for t in empty_fails)
    assert len(failed) == len(first) + len(empty_fails)
    # Overall is the mean of the two category rates.
    cats = result["categories"]
    assert set(cats) == {"structure", "text"}
    assert result["overall"] == pytest.approx((cats["structure"]["pass_rate"] + cats["text"]["pass_rate"]) / 2)
    assert result["ci"]["low"] <= result["overall"] <= result["ci"]["high"]
    assert sum(row["tests"] for row in result["types"].values()) == len(tests)
    report = (run_dir / "report.md").read_text()
    assert f"**Overall {100 * result['overall']:.1f}**" in report
    assert "## Missing outputs (1 page(s)" in report and "## Malformed test lines (2, skipped)" in report
    assert f"## Failed tests ({len(failed)})" in report
    assert "overall" in proc.stdout and "tests/s" in proc.stdout


def test_perfect_outputs_score_100_and_parallel_equals_serial(bench):
    bench_dir, cand, pages, n_text = bench
    truth = os.path.join(SAMPLE, "eval", "pdfs", pages[0] + ".md")
    shutil.copy(truth, cand / f"{pages[0]}_pg1_repeat1.md")
    os.remove(cand / f"{pages[1]}_pg1_repeat2.md")
    loaded = load_bench(str(bench_dir))
    serial = run_tests(loaded, str(cand), workers=1)
    parallel = run_tests(loaded, str(cand), workers=2)
    assert [(r.test.id, r.score) for r in serial] == [(r.test.id, r.score) for r in parallel]
    summary = summarize(serial)
    assert summary["overall"] == 1.0 and summary["ci"] == {"low": 1.0, "high": 1.0, "confidence": 0.95,
                                                           "bootstrap_samples": 1000}
    assert summary["passed"] == summary["tests"] and summary["missing_pages"] == []
    by_type = summarize(serial, group_by="type")
    assert set(by_type["categories"]) == {"present", "absent", "order", "table", "math", "baseline"}


def test_bootstrap_interval_is_stratified_and_seeded():
    groups = [np.array([1.0] * 50 + [0.0] * 50), np.array([1.0] * 10)]
    low, high = bootstrap_interval(groups, 2000, 0.95, seed=0)
    assert (low, high) == bootstrap_interval(groups, 2000, 0.95, seed=0)
    # Only the first group varies: its mean's sd is 0.05, halved in the overall mean.
    assert 0.75 - 0.06 < low < 0.75 - 0.04 and 0.75 + 0.04 < high < 0.75 + 0.06


def test_bad_folders_are_clear_errors(tmp_path):
    from olmocr.bench.__main__ import run
    from olmocr.config import compose

    cfg = compose("bench", [f"bench_dir={tmp_path}", f"candidates={tmp_path}"])
    with pytest.raises(ValueError, match=r"bench_dir: no test files \(\*\.jsonl\)"):
        run(cfg, str(tmp_path / "out"))
    cfg = compose("bench", [f"candidates={tmp_path / 'nope'}"])
    with pytest.raises(ValueError, match="candidates: .* is not a folder"):
        run(cfg, str(tmp_path / "out"))
    with pytest.raises(ValueError, match="group_by"):
        run(compose("bench", [f"candidates={tmp_path}", "group_by=pdf"]), str(tmp_path / "out"))
