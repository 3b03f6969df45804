"""python -m olmocr.bench on a synthetic bench: reports, repeats, missing outputs, malformed lines."""

import glob
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import SAMPLE
from olmocr.bench.records import load_tests
from olmocr.bench.score import bootstrap_interval, load_bench, run_tests, summarize


@pytest.fixture
def bench(tmp_path):
    """The bundled eval pages as a two-category bench, with truth outputs (two repeats) for all but one
    page, a PDF no test names, and test lines the scorer must report or warn about."""
    src = os.path.join(SAMPLE, "eval")
    bench_dir, cand = tmp_path / "bench", tmp_path / "cand"
    shutil.copytree(os.path.join(src, "pdfs"), bench_dir / "pdfs", ignore=shutil.ignore_patterns("*.md"))
    lines = open(os.path.join(src, "synth.jsonl"), encoding="utf-8").read().splitlines()
    tables = [line for line in lines if '"type": "table"' in line or '"type": "math"' in line]
    rest = [line for line in lines if line not in tables]
    pages = sorted({json.loads(line)["pdf"][:-4] for line in lines})
    extra = [
        '{"type": "present", "pdf": "x.pdf"}',  # no page: malformed
        "not json",
        '{"type": "shape", "pdf": "x.pdf", "page": 1, "id": "s"}',  # a type no scorer knows
        json.dumps({"type": "absent", "pdf": f"{pages[1]}.pdf", "page": 1, "id": "extra_field", "text": "zzqx",
                    "reviewer": "me"}),  # an unknown field: warned about, the test kept
        json.dumps({"type": "present", "pdf": f"{pages[1]}.pdf", "page": 1, "id": "rejected", "text": "zzqx",
                    "checked": "rejected"}),  # run, unless skip_rejected
    ]
    (bench_dir / "structure.jsonl").write_text("\n".join(tables) + "\n")
    (bench_dir / "text.jsonl").write_text("\n".join(rest + extra) + "\n")
    shutil.copy(os.path.join(src, "pdfs", pages[2] + ".pdf"), bench_dir / "pdfs" / "untested.pdf")
    cand.mkdir()
    for i, name in enumerate(pages + ["untested"]):
        if i == 0:
            continue  # no output for the first page
        md = os.path.join(src, "pdfs", (name if name != "untested" else pages[2]) + ".md")
        with open(md, encoding="utf-8") as fh:
            text = fh.read()  # front matter included: the bench scores the page text only
        (cand / f"{name}_pg1_repeat1.md").write_text(text)
        (cand / f"{name}_pg1_repeat2.md").write_text(text if i != 1 else "")  # one bad repeat
    return bench_dir, cand, pages, len(rest)


def test_cli_writes_both_reports(bench, tmp_path, warm_python):
    bench_dir, cand, pages, n_text = bench
    run_dir = tmp_path / "run"
    proc = subprocess.run([warm_python, "-m", "olmocr.bench", f"bench_dir={bench_dir}", f"candidates={cand}",
                           "workers=2", f"hydra.run.dir={run_dir}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((run_dir / "results.json").read_text())
    tests = load_tests(os.path.join(SAMPLE, "eval", "synth.jsonl")).tests
    first, second = [t for t in tests if t.pdf == pages[0] + ".pdf"], [t for t in tests if t.pdf == pages[1] + ".pdf"]
    # Malformed lines and unknown types are reported by file:line and skipped; unknown fields are warnings.
    text_file = bench_dir / "text.jsonl"
    assert result["malformed"] == [
        f"{text_file}:{n_text + 1}: present test: missing field 'page'",
        f"{text_file}:{n_text + 2}: Expecting value: line 1 column 1 (char 0)",
        f"{text_file}:{n_text + 3}: unknown test type 'shape' (expected one of present, absent, order, table, math, "
        "baseline, format, footnote)"]
    assert result["warnings"] == [f"{text_file}:{n_text + 4}: unknown field(s) reviewer, ignored"]
    # Every test's verdict is listed, passes too; the PDF without tests got a baseline test of its own.
    rows = {row["id"]: row for row in result["results"]}
    assert len(rows) == len(tests) + 3 and result["implicit_baselines"] == 1
    implicit = rows["untested.pdf_baseline"]
    assert implicit["category"] == "baseline" and implicit["passed"] and implicit["repeats"] == 2
    assert result["categories"]["baseline"] == {"tests": 1, "pass_rate": 1.0, "low": 1.0, "high": 1.0}
    assert rows["extra_field"]["passed"] and not rows["rejected"]["passed"]  # checked: rejected tests run
    # The missing page fails all its tests; on the page with an empty repeat a test passes on 1 of 2
    # repeats, which is not more than half: it fails (repeat_rule=majority).
    assert result["missing_pages"] == [f"{pages[0]}.pdf page 1"]
    assert all(rows[t.id]["repeats"] == 0 and rows[t.id]["explanation"].startswith("no candidate output")
               for t in first)
    empty_fails = [t for t in second if not t.run("")[0]]
    assert empty_fails and all(rows[t.id]["repeats_passed"] == 1 and not rows[t.id]["passed"] for t in empty_fails)
    assert all("repeat2.md" in rows[t.id]["explanation"] for t in empty_fails)
    # Overall is the mean of the category rates; overall_score the mean of repeat averages.
    cats = result["categories"]
    assert set(cats) == {"structure", "text", "baseline"} and result["repeat_rule"] == "majority"
    assert result["overall"] == pytest.approx(sum(c["pass_rate"] for c in cats.values()) / 3)
    values = [row["repeats_passed"] / row["repeats"] if row["repeats"] else 0 for row in result["results"]]
    assert result["overall_score"] == pytest.approx(sum(values) / len(values))
    assert result["ci"]["low"] <= result["overall"] <= result["ci"]["high"]
    report = (run_dir / "report.md").read_text()
    assert f"**Overall {100 * result['overall']:.1f}**" in report
    assert "## Missing outputs (1 page(s)" in report and "## Malformed test lines (3, skipped)" in report
    assert "## Warnings (1)" in report and "1 PDF(s) without a baseline test got one" in report
    assert "overall" in proc.stdout and "tests/s" in proc.stdout


def test_scoring_options(bench, tmp_path):
    from olmocr.bench.__main__ import run
    from olmocr.config import compose

    bench_dir, cand, pages, _ = bench
    for name in "abcd":
        (tmp_path / name).mkdir()
    default = run(compose("bench", [f"bench_dir={bench_dir}", f"candidates={cand}", "workers=1"]), str(tmp_path / "a"))
    mean = run(compose("bench", [f"bench_dir={bench_dir}", f"candidates={cand}", "workers=1", "repeat_rule=mean"]),
               str(tmp_path / "b"))
    # half-passing tests count 1/2 under the mean rule and 0 under the majority rule
    assert mean["categories"]["text"]["pass_rate"] > default["categories"]["text"]["pass_rate"]
    assert mean["overall_score"] == default["overall_score"]
    skipped = run(compose("bench", [f"bench_dir={bench_dir}", f"candidates={cand}", "workers=1",
                                    "skip_baseline=true", "skip_rejected=true"]), str(tmp_path / "c"))
    assert "baseline" not in skipped["categories"] and "baseline" not in skipped["types"]
    assert skipped["tests"] == default["tests"] - 1 - default["types"]["baseline"]["tests"]
    with pytest.raises(ValueError, match="repeat_rule: expected one of majority, mean"):
        run(compose("bench", [f"bench_dir={bench_dir}", f"candidates={cand}", "repeat_rule=best"]), str(tmp_path / "d"))


def test_perfect_outputs_score_100_and_parallel_equals_serial(bench):
    bench_dir, cand, pages, n_text = bench
    truth = os.path.join(SAMPLE, "eval", "pdfs", pages[0] + ".md")
    shutil.copy(truth, cand / f"{pages[0]}_pg1_repeat1.md")
    os.remove(cand / f"{pages[1]}_pg1_repeat2.md")
    loaded = load_bench(str(bench_dir))
    serial = run_tests(loaded, str(cand), workers=1)
    parallel = run_tests(loaded, str(cand), workers=2)
    assert [(r.test.id, r.passed, r.repeats) for r in serial] == [(r.test.id, r.passed, r.repeats) for r in parallel]
    loaded.tests = [(c, t) for c, t in loaded.tests if t.id != "rejected"]  # this one is meant to fail
    serial = run_tests(loaded, str(cand), workers=1)
    summary = summarize(serial)
    assert summary["overall"] == 1.0 and summary["ci"] == {"low": 1.0, "high": 1.0, "confidence": 0.95,
                                                           "bootstrap_samples": 1000}
    assert summary["passed"] == summary["tests"] and summary["missing_pages"] == []
    by_type = summarize(serial, group_by="type")
    assert set(by_type["categories"]) == {"present", "absent", "order", "table", "math", "baseline"}
    assert summary["overall_score"] == 1.0


def test_overall_says_how_it_is_made_beside_the_plain_share(bench):
    """A bench of one test file and the implicit baseline category (bench.split's): 6 of 10 tests of the file pass
    and both baselines do, so overall is 80% while 8 of 12 tests (66.7%) pass: the line says both."""
    from dataclasses import replace

    from olmocr.bench.score import describe_overall

    bench_dir, cand, _, _ = bench
    loaded = load_bench(str(bench_dir))
    some = run_tests(loaded, str(cand), workers=1)[:12]
    results = ([replace(r, category="mydocs", passed=r.repeats if i < 6 else 0) for i, r in enumerate(some[:10])]
               + [replace(r, category="baseline", passed=r.repeats) for r in some[10:]])
    summary = summarize(results)
    assert summary["overall"] == pytest.approx(0.8) and summary["share"] == pytest.approx(8 / 12)
    assert describe_overall(summary) == (
        "overall 80.0% is the mean of 2 categories' pass rates, each weighing 1/2 whatever its number of tests "
        "(baseline 100.0% of 2, mydocs 60.0% of 10); the plain share of tests passed is 66.7% (8 of 12)")


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


def test_outputs_that_cannot_be_read_are_left_out_of_their_pages_and_listed(bench, tmp_path):
    """A link to nothing, a folder and a FIFO where repeats should be (a FIFO's read would block for ever): the
    scoring ends, each is listed with what it is, and the pages are scored on the repeats that can be read,
    as if those were not there."""
    from olmocr.bench.__main__ import run
    from olmocr.config import compose

    bench_dir, cand, pages, _ = bench
    plain = tmp_path / "plain"
    shutil.copytree(cand, plain)
    os.remove(plain / f"{pages[2]}_pg1_repeat2.md")
    os.remove(plain / f"{pages[3]}_pg1_repeat2.md")
    os.symlink(tmp_path / "gone.md", cand / f"{pages[0]}_pg1_repeat1.md")
    os.remove(cand / f"{pages[2]}_pg1_repeat2.md")
    os.mkdir(cand / f"{pages[2]}_pg1_repeat2.md")
    os.remove(cand / f"{pages[3]}_pg1_repeat2.md")
    os.mkfifo(cand / f"{pages[3]}_pg1_repeat2.md")
    options = [f"bench_dir={bench_dir}", "workers=2"]
    (tmp_path / "odd").mkdir()
    (tmp_path / "clean").mkdir()
    odd = run(compose("bench", [*options, f"candidates={cand}"]), str(tmp_path / "odd"))
    clean = run(compose("bench", [*options, f"candidates={plain}", "html=false"]), str(tmp_path / "clean"))
    assert odd["unreadable_outputs"] == [f"{cand}/{pages[0]}_pg1_repeat1.md: a link to nothing, or removed while read",
                                         f"{cand}/{pages[2]}_pg1_repeat2.md: a directory, not a file",
                                         f"{cand}/{pages[3]}_pg1_repeat2.md: a FIFO, not a file"]
    assert clean["unreadable_outputs"] == []
    rows = {name: [(r["id"], r["repeats_passed"], r["repeats"]) for r in
                   json.loads((tmp_path / name / "results.json").read_text())["results"]] for name in ("odd", "clean")}
    assert rows["odd"] == rows["clean"]
    assert odd["missing_pages"] == clean["missing_pages"] == [f"{pages[0]}.pdf page 1"]
    report = (tmp_path / "odd" / "report.md").read_text()
    assert "## Unreadable outputs (3 file(s), left out of their pages' repeats)" in report
    assert f"cannot read {cand}/{pages[3]}_pg1_repeat2.md: a FIFO, not a file" in (
        tmp_path / "odd" / "report.html").read_text()


def test_blank_pages_earn_nothing_under_strict_scoring_and_every_score_says_what_it_is_made_of(tmp_path, caplog):
    """The bundled eval pages (their .md truth beside each PDF): blank outputs score 0 on present tests under
    strict scoring (olmOCR-bench's published verdicts pass them), the truth scores 100 with a character error
    rate of 0, and a comparison in which one side answered no page says so first, in its reports and log."""
    from olmocr.bench.__main__ import run
    from olmocr.bench.score import record_answers
    from olmocr.config import compose

    bench_dir = os.path.join(SAMPLE, "eval")
    pages = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(bench_dir, "pdfs", "*.md")))
    blank, truth = tmp_path / "blank", tmp_path / "truth"
    for folder in (blank, truth):
        folder.mkdir()
    for name in pages:
        (blank / f"{name}_pg1_repeat1.md").write_text("\n" * 48)
        shutil.copy(os.path.join(bench_dir, "pdfs", name + ".md"), truth / f"{name}_pg1_repeat1.md")
    loaded = load_bench(bench_dir)
    published = summarize(run_tests(loaded, str(blank), scoring="published"))
    strict = summarize(run_tests(loaded, str(blank)))
    assert published["types"]["present"]["pass_rate"] > 0.5  # the flaw: a blank page "contains" the text sought
    assert strict["types"]["present"]["pass_rate"] == 0 and strict["types"]["absent"]["pass_rate"] == 1
    assert (published["scoring"], strict["scoring"]) == ("published", "strict")
    assert strict["makeup"] == {"pages": len(pages), "answered": 0, "fallback": 0, "empty": len(pages), "missing": 0,
                                "outputs": len(pages), "outputs_answered": 0, "pages_with_truth": len(pages),
                                "cer": 1.0, "cer_answered": None}
    # The truth, two pages of it recorded by their producer as a fallback (the text layer, not the model)
    record_answers(str(truth), [(str(truth / f"{name}_pg1_repeat1.md"), i >= 2) for i, name in enumerate(pages)])
    perfect = summarize(run_tests(loaded, str(truth)))
    assert perfect["types"]["present"]["pass_rate"] == 1.0
    assert perfect["makeup"]["cer"] == 0.0 and perfect["makeup"]["answered"] == len(pages) - 2
    assert perfect["makeup"]["fallback"] == 2
    for name in "ab":
        (tmp_path / name).mkdir()
    with caplog.at_level("INFO", logger="olmocr.bench"):
        summary = run(compose("bench", [f"bench_dir={bench_dir}", f"candidates=[{blank},{truth}]", "workers=1"]),
                      str(tmp_path / "a"))
    notice = f"not a comparison of models: the model answered no page in {blank}"
    assert summary["makeup"]["answered"] == 0 and notice in caplog.text
    assert f"the model answered 0 of {len(pages)} pages, {len(pages)} empty; character error rate 1.000" in caplog.text
    for report in ("report.md", "report_b.md"):
        assert (tmp_path / "a" / report).read_text().splitlines()[2].startswith(f"**{notice}")
    assert "strict scoring" in (tmp_path / "a" / "report.md").read_text()
    html = (tmp_path / "a" / "report.html").read_text()
    assert html.index('id="notice"') < html.index("<h2>") and "strict scoring" in html
    caplog.clear()
    with caplog.at_level("INFO", logger="olmocr.bench"):
        run(compose("bench", [f"bench_dir={bench_dir}", f"candidates=[{truth},{truth}]", "workers=1",
                              "scoring=published", "html=false"]), str(tmp_path / "b"))
    assert "not a comparison" not in caplog.text and "published scoring" in caplog.text
    assert json.loads((tmp_path / "b" / "results.json").read_text())["scoring"] == "published"
