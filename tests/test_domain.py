"""Fine-tuning on your own documents (scripts/domain.sh, olmocr.bench.split): the recipe end to end on CPU
with a teacher that reads each bundled page as its truth (a scripted chat server: a strong model cannot run
here), the tiny model as the base and the model fine-tuned; and the split's tests on their own."""

from __future__ import annotations

import glob
import json
import os
import random
import shutil
import subprocess

import pytest
from chat_server import ChatServer, answer, good, pixels_key
from conftest import SAMPLE, write_pdf
from test_pipeline_ocr import SIDE, page_keys

from olmocr.config import PROJECT_ROOT, compose

PAGES = sorted(glob.glob(f"{SAMPLE}/train/pdfs/*.pdf"))[:10]


@pytest.mark.integration
def test_the_recipe_turns_a_pdf_folder_into_a_model_scored_on_its_own_pages(tmp_path, cache_dir, warm_python):
    pdfs = tmp_path / "my_pdfs"
    pdfs.mkdir()
    for pdf in PAGES:
        shutil.copy(pdf, pdfs)
    truth = {page_keys(pdf, 1)[0]: answer(open(pdf[:-4] + ".md", encoding="utf-8").read()) for pdf in PAGES}
    out = tmp_path / "out"
    with ChatServer(script=lambda request: truth.get(pixels_key(request.image), good("not a page of mine"))) as teacher:
        env = {**os.environ, "PYTHON": warm_python, "HELDOUT": "0.3", "STEPS": "4",
               "TEACHER": f"server=external server.url={teacher.url} server.model_name=scripted work=ocr "
                          f"convert=default convert.steps.render.longest_side={SIDE}"}
        proc = subprocess.run(["bash", "scripts/domain.sh", str(pdfs), str(out)], cwd=PROJECT_ROOT, env=env,
                              capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert len(glob.glob(f"{out}/pages/**/*.md", recursive=True)) == len(PAGES)  # every page the teacher read
    held = glob.glob(f"{out}/split/heldout/pdfs/*.pdf")
    trained = glob.glob(f"{out}/split/train/**/*.md", recursive=True)
    assert len(held) == 3 and len(trained) == len(PAGES) - 3
    assert not {os.path.basename(p)[:-4] for p in held} & {os.path.basename(p)[:-3] for p in trained}
    tests = [json.loads(line) for line in open(out / "split" / "heldout" / "heldout.jsonl")]
    assert {"present", "order", "absent"} <= {t["type"] for t in tests}
    evals = [json.loads(line) for line in open(out / "train" / "metrics.jsonl") if "eval/bench/overall" in line]
    assert [r["step"] for r in evals] == [1, 2, 3, 4]  # scored on the held-out split while training
    assert json.load(open(out / "release" / "finetuned" / "provenance.json"))["sources"]
    base, tuned = (json.load(open(out / "bench" / name)) for name in ("results.json", "results_b.json"))
    lines = proc.stdout.strip().splitlines()
    line = next(line for line in lines if line.startswith("held-out bench of your pages"))
    assert line.startswith(f"held-out bench of your pages, {base['tests']} tests, strict scoring: base "
                           f"{base['overall']:.1%}, fine-tuned {tuned['overall']:.1%} ("), line
    assert line.endswith(f"{out}/bench/report.html"), line
    # the tiny model reads no page: each side's score is its text layers', and the recipe says so
    for name, result in (("base", base), ("fine-tuned", tuned)):
        m = result["makeup"]
        assert m["answered"] == 0 and m["fallback"] == m["pages"] == 3
        said = f"  {name}: the model answered 0 of 3 pages (3 text layer, 0 empty), character error rate "
        assert any(line.startswith(said) for line in lines), "\n".join(lines[-5:])
    assert lines[-1].startswith("  not a comparison of models: a side answered no page")


def test_the_split_holds_out_whole_documents_with_tests_the_truth_passes(tmp_path):
    """Tests written from a reading pass on that reading (scored by olmocr.bench); the pages of one document
    stay on one side; a text-layer line the reading left out is an absent test."""
    from olmocr.bench.__main__ import run as bench
    from olmocr.bench.split import run as split
    from olmocr.formats.frontmatter import parse_document

    pages = tmp_path / "pages"
    pages.mkdir()
    for pdf in PAGES:
        shutil.copy(pdf, pages)
        shutil.copy(pdf[:-4] + ".md", pages)
    two = write_pdf(str(pages / "report_pg1.pdf"), ["Quarterly Report page header\n\nThe committee met twice this "
                                                    "year to review the budget."])
    write_pdf(str(pages / "report_pg2.pdf"), ["The second page of the same document, with its own sentence."])
    for page, text in ((two, "The committee met twice this year to review the budget."),
                       (str(pages / "report_pg2.pdf"), "The second page of the same document, with its own sentence.")):
        open(page[:-4] + ".md", "w").write("---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\n"
                                           "is_table: False\nis_diagram: False\n---\n" + text)
    summary = split(compose("bench_split", [f"pages={pages}", f"out_dir={tmp_path / 'split'}", "heldout=0.5"]),
                    str(tmp_path / "run"))
    assert summary["documents"] == len(PAGES) + 1 and summary["heldout_documents"] == round((len(PAGES) + 1) / 2)
    held = {os.path.basename(p)[:-4] for p in glob.glob(f"{tmp_path}/split/heldout/pdfs/*.pdf")}
    trained = {os.path.basename(p)[:-3] for p in glob.glob(f"{tmp_path}/split/train/*.md")}
    assert held.isdisjoint(trained) and len(held | trained) == len(PAGES) + 2
    assert ({"report_pg1", "report_pg2"} <= held) or ({"report_pg1", "report_pg2"} <= trained)  # one document
    candidates = tmp_path / "candidates"
    candidates.mkdir()
    for name in held:
        text = parse_document(open(pages / f"{name}.md", encoding="utf-8").read())[1]
        (candidates / f"{name}_pg1_repeat1.md").write_text(text, encoding="utf-8")
    os.makedirs(tmp_path / "score")
    scores = bench(compose("bench", [f"bench_dir={tmp_path / 'split' / 'heldout'}", f"candidates={candidates}",
                                     "html=false"]), str(tmp_path / "score"))
    assert scores["overall"] == 1.0 and scores["missing_pages"] == []
    from olmocr.bench.split import page_tests
    from olmocr.formats.pdf import text_layer

    made = page_tests("report_pg1", "The committee met twice this year to review the budget.", text_layer(two), 3, 3,
                      random.Random(0))
    assert [(t.type, getattr(t, "text", None)) for t in made] == [
        ("present", "The committee met twice this year to review the budget."),
        ("absent", "Quarterly Report page header")]
    with pytest.raises(ValueError, match=r"heldout: must be in \(0, 1\), got 1.5"):
        split(compose("bench_split", [f"pages={pages}", f"out_dir={tmp_path / 'x'}", "heldout=1.5"]), str(tmp_path))
