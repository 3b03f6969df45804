"""Debian's tesseract reads a bench's pages (python -m olmocr.pipeline.tesseract) at the pixels a model's render
step gives, into candidates python -m olmocr.bench scores beside a model's."""

import json
import os
import shutil

import pytest

from olmocr.bench.score import load_bench, run_tests
from olmocr.config import compose
from olmocr.errors import UserError
from olmocr.synth.generator import generate


def test_tesseract_reads_typeset_pages_and_says_each_page_it_could_not(tmp_path):
    from olmocr.pipeline import tesseract

    bench = tmp_path / "bench"
    generate(str(bench), 4, seed=3, category="lines", reading="lines", reading_words="all", reading_type="typeset")
    generate(str(bench), 3, seed=3, category="codes", reading="line", reading_words="codes", reading_type="typeset")
    (bench / "pdfs" / "codes_s3_00002.pdf").write_bytes(b"%PDF-1.4\nnot a page\n")  # corrupt: no render
    out = tmp_path / "candidates"
    cfg = compose("pipeline_tesseract", [f"bench_dir={bench}", f"candidates={out}", "render.longest_side=448",
                                         "workers=2", "progress=false"])
    summary = tesseract.run(cfg, str(tmp_path / "run"))
    assert summary["pages"] == 7 and summary["written"] == 7 and summary["failed"] == 1
    assert summary["engine"].startswith("tesseract 5")
    assert (out / "codes_s3_00002_pg1_repeat1.md").read_text() == ""
    answers = [json.loads(line) for line in open(out / "answers.jsonl")]
    assert sum(not a["answered"] for a in answers) == 1
    results = run_tests(load_bench(str(bench)), str(out), scoring="strict")
    present = [r for r in results if r.test.type == "present"]
    read = [r for r in present if r.test.pdf != "codes_s3_00002.pdf"]
    assert sum(r.score for r in read) >= 0.8 * len(read)  # it reads typeset pages
    assert not any(r.score for r in present if r.test.pdf == "codes_s3_00002.pdf")  # the failed page passes nothing
    lines_text = (out / "lines_s3_00000_pg1_repeat1.md").read_text()
    assert "\n" not in lines_text.strip() or "\n\n" in lines_text  # a block's lines are one paragraph
    # Run again: every page kept, nothing read
    again = tesseract.run(cfg, str(tmp_path / "run2"))
    assert again["kept"] == 7 and again["written"] == 0


def test_tesseract_missing_or_without_the_language_is_one_line(tmp_path, monkeypatch):
    from olmocr.pipeline import tesseract

    bench = tmp_path / "bench"
    generate(str(bench), 1, seed=3, reading="line", reading_type="typeset")
    cfg = compose("pipeline_tesseract", [f"bench_dir={bench}", "lang=xyz", "progress=false"])
    with pytest.raises(UserError, match="lang: tesseract has no language data for xyz .*tesseract-ocr-xyz"):
        tesseract.run(cfg, str(tmp_path / "run"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # a machine without the command
    assert shutil.which("tesseract") is None
    with pytest.raises(UserError, match="tesseract: the command is not installed: install Debian's tesseract-ocr"):
        tesseract.run(cfg, str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run" / "candidates")
