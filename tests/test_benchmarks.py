"""Benchmark scripts run end to end (with small sizes), so they do not rot between measurements: as commands forked
from the warm interpreter (tests/warm_python.py), or in this process."""

import json
import os
import re
import runpy
import subprocess
import sys

import pytest

from olmocr.config import PROJECT_ROOT


def in_process(script: str, args: list[str], monkeypatch, capsys) -> str:
    """The script run as ``python benchmarks/<script> …`` runs it, in this process: the scripts that train spend
    most of a fresh process importing torch and transformers, which this one has done already."""
    monkeypatch.setattr(sys, "argv", [script, *args])
    try:
        runpy.run_path(os.path.join(PROJECT_ROOT, "benchmarks", script), run_name="__main__")
    except SystemExit as exc:
        assert exc.code in (None, 0), capsys.readouterr().err[-3000:]
    return capsys.readouterr().out


def test_the_reading_benchmark_converts_pages_as_the_reader_saw_them_in_training(tmp_path):
    """Its rows serve released readers, which carry how they read (olmocr_pages.json): the bench mode and the pairs
    it mines present a page as +experiment=read_tiny's data steps do (at the pipeline's own render size the reader
    answered no page), greedy for the bench and sampled for pairs."""
    from omegaconf import OmegaConf

    from olmocr.cli import stages
    from olmocr.config import compose
    from olmocr.data.presented import write_record

    bench = runpy.run_path(os.path.join(PROJECT_ROOT, "benchmarks", "learning_to_read.py"))
    train = compose("train", ["+experiment=read_tiny"]).data
    write_record(str(tmp_path), OmegaConf.to_container(train.steps, resolve=True))
    reader = ["model=reader_trained", f"model.name_or_path={tmp_path}", "bench_dir=x"]
    convert = stages()["olmocr.pipeline.bench"].check(compose("pipeline_bench", [
        *reader, "candidates=y", *bench["convert_args"]()])).convert
    assert convert.steps.render.longest_side == train.steps.render.longest_side != 1288
    assert convert.steps.prompt.version == train.steps.prompt.version != "v4"
    assert convert.temperatures == [0]
    pairs = stages()["olmocr.pairs"].check(compose("pairs", [*reader, *bench["convert_args"](sampled=True)])).convert
    assert pairs.steps.render == convert.steps.render and len(pairs.temperatures) > 1


def test_bench_throughput_runs(warm_python):
    proc = subprocess.run([warm_python, "benchmarks/bench_throughput.py", "--pages", "12", "--repeats", "1",
                           "--group", "6"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for kind in ("present", "absent", "order", "table", "baseline", "mix"):
        assert re.search(rf"^{kind}\s+\d+\s+\d+", out, re.M), kind
    for reward in ("bench", "medoid", "edit_distance", "front_matter", "element_count", "rectangular_tables", "eos"):
        assert re.search(rf"^{reward}\s+[\d.]+\s+\d+", out, re.M), reward
    assert re.search(r"medoid over 8 completions of \d+ bytes: [\d.]+ ms", out)


@pytest.mark.integration
def test_stage_startup_runs(warm_python):
    proc = subprocess.run([warm_python, "benchmarks/stage_startup.py", "--repeats", "1", "--stages", "olmocr.train",
                           "olmocr.pipeline.stats"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    floor = float(re.search(r"^floor .*: ([\d.]+)s$", proc.stdout, re.M).group(1))
    rows = re.findall(r"^(olmocr\S+)((?:\s+[\d.]+s \([\d.]+x\)){3})$", proc.stdout, re.M)
    assert [module for module, _ in rows] == ["olmocr.pipeline.stats", "olmocr.train"]
    for _, cells in rows:
        for seconds, ratio in re.findall(r"([\d.]+)s \(([\d.]+)x\)", cells):
            # to the same run's floor: within the rounding of the three printed figures
            assert abs(float(ratio) - float(seconds) / floor) <= 0.051 + 0.0051 * (1 + float(ratio)) / floor


@pytest.mark.integration
def test_checkpoint_tools_runs(warm_python):
    proc = subprocess.run([warm_python, "benchmarks/checkpoint_tools.py", "--copies", "2", "--repeats", "1",
                           "--layers", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = {m: re.search(rf"^{re.escape(m)}\s+([\d.]+)\s+(\d+)\s+(\d+)\s+([\d.]+)$", proc.stdout, re.M)
            for m in ("prepare", "baseline", "baseline+hashes")}
    assert all(rows.values()), proc.stdout
    # The streaming soup holds about one model at a time; the baseline holds every source.
    assert float(rows["prepare"].group(4)) < float(rows["baseline"].group(4))
    assert re.search(r"soup of 2 \(median of 1\): time [\d.]+x", proc.stdout)


@pytest.mark.integration
def test_workqueue_runs_in_bad_weather(warm_python):
    proc = subprocess.run([warm_python, "benchmarks/workqueue.py", "--items", "12", "--workers", "3", "--runs", "1",
                           "--faults", "0.1", "--no-upstream"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "olmocr 0.4.27: skipped (--no-upstream)" in proc.stdout
    assert "3 workers, 12 items, 20 ms of work per item, 1 runs, 10% of S3 requests faulted" in proc.stdout
    run = re.search(r"^run 0 ours .* (\d+) faults met, 0 worker exits on errors$", proc.stdout, re.M)
    assert run and int(run.group(1)) > 0, proc.stdout
    # Nothing lost or given up; claims/s and wall time measured.
    assert re.search(r"^ours\s+[\d.]+\s+\d+\s+0\s+0\s+[\d.]+$", proc.stdout, re.M), proc.stdout


@pytest.mark.integration
def test_pipeline_recovery_runs(warm_python):
    proc = subprocess.run([warm_python, "benchmarks/pipeline_recovery.py", "--pdfs", "8", "--pages-per-item", "1",
                           "--page-s", "1", "--outages", "3", "--runs", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = re.search(r"^run 0: fault-free ([\d.]+) s, with outages of 3 s ([\d.]+) s: extra / outage -?[\d.]+; "
                    r"pages converted twice 0, documents lost 0, items given back \d+, S3 requests refused in the "
                    r"outages (\d+)$", proc.stdout, re.M)
    assert run and int(run.group(3)) > 0, proc.stdout  # the outage was met


def test_pipeline_throughput_runs(warm_python):
    proc = subprocess.run([warm_python, "benchmarks/pipeline_throughput.py", "--pdfs", "2", "--pages-per-pdf", "3",
                           "--runs", "1", "--no-upstream"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "olmocr 0.4.27: skipped (--no-upstream)" in proc.stdout
    assert "6 pages (2 PDFs x 3)" in proc.stdout
    assert re.search(r"^ours\s+[\d.]+\s+[\d.]+$", proc.stdout, re.M), proc.stdout
    assert re.search(r"^filter=olmocr: [\d.]+ ms per document .* 0 of 6 pages filtered out", proc.stdout, re.M)


def test_viewer_scale_runs(warm_python):
    proc = subprocess.run([warm_python, "benchmarks/viewer_scale.py", "--documents", "30", "--baseline", "10",
                           "--pdfs", "3", "--repeats", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^ +30 documents: [\d.]+ s, peak RSS \d+ MiB, 30 document pages, index [\d.]+ MiB opens in "
                     r"[\d.]+ s$", proc.stdout, re.M), proc.stdout
    assert re.search(r"^peak RSS 30 vs 10 documents: [\d.]+x", proc.stdout, re.M), proc.stdout


def test_export_scale_runs(warm_python):
    proc = subprocess.run([warm_python, "benchmarks/export_scale.py", "--items", "4", "--baseline", "2", "--pages", "100",
                           "--chars", "200", "--repeats", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^ +4 items \(400 pages, \d+ MiB of page results\): [\d.]+ s, peak RSS \d+ MiB, 4 pages exported, "
                     r"396 fallback$", proc.stdout, re.M), proc.stdout
    assert re.search(r"^peak RSS 4 vs 2 items: [\d.]+x", proc.stdout, re.M), proc.stdout


@pytest.mark.integration
def test_dpo_learning_runs(monkeypatch, capsys):
    out = in_process("dpo_learning.py", ["--steps", "3", "--seeds", "0"], monkeypatch, capsys)
    assert re.search(r"^seed 0 lr 0 +0\.000 +\| 0\.00$", out, re.M), out  # lr 0: policy == reference
    assert "median over seeds, last window: margin" in out


@pytest.mark.integration
def test_bench_eval_cost_runs(monkeypatch, capsys):
    out = in_process("bench_eval.py", ["--repeats", "1", "--steps", "2", "--eval-interval", "2"], monkeypatch, capsys)
    parts = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(decode|score|total|train step)\s+([\d.]+)", out, re.M)}
    assert set(parts) == {"decode", "score", "total", "train step"} and parts["total"] > 0, out
    assert re.search(r"^eval per page: [\d.]+x a training sample$", out, re.M)
    walls = dict(re.findall(r"^(with the eval|without)\s+([\d.]+)$", out, re.M))
    share = float(re.search(r"^share of the run's wall time: (-?[\d.]+)%$", out, re.M).group(1))
    # the walls are printed to 0.01 s and the share to 0.1 %: the share must lie within what those roundings allow
    without, with_eval = float(walls["without"]), float(walls["with the eval"])
    lowest = 100 * (1 - (without + 0.005) / (with_eval - 0.005)) - 0.05
    highest = 100 * (1 - (without - 0.005) / (with_eval + 0.005)) + 0.05
    assert lowest <= share <= highest, out


@pytest.mark.integration
def test_learning_to_read_runs(tmp_path, cache_dir, monkeypatch, capsys):
    """The reading benchmark's chain at toy sizes: the recipe's pages, the untrained reader through the pipeline,
    SFT and its blind control, each scored on every page of the four held-out categories on what it wrote itself,
    with intervals and the blind control's difference from SFT on the same pages (the figures mean nothing at 6
    steps; the chain must run and report what it measured)."""
    in_process("learning_to_read.py", ["--out", str(tmp_path), "--steps", "6", "--train-pages", "24",
                                       "--heldout-pages", "3", "--dpo-pages", "2", "--typeset-pages", "6",
                                       "--rows", "untrained", "sft", "blind", "tesseract"], monkeypatch, capsys)
    result = json.load(open(tmp_path / "learning_to_read.json"))
    assert set(result["scores"]) == {"untrained", "sft", "blind", "tesseract"}
    # Every row on the typeset bench too, and beside tesseract: its reading of the same pages, and each row's
    # CER over its, set by set.
    typeset = result["benches"]["typeset"]
    assert set(typeset["scores"]) == {"untrained", "sft", "blind", "tesseract"}
    assert set(typeset["scores"]["sft"]) == {"letters", "unseen", "codes", "lines", "faces", "held-out"}
    assert typeset["scores"]["tesseract"]["held-out"]["present"]["mean"] > 50  # a real engine reads them
    assert set(typeset["cer_over_tesseract"]) == {"untrained", "sft", "blind"}
    assert typeset["cer_over_tesseract"]["untrained"]["faces"] >= 1
    for row, groups in result["scores"].items():
        assert set(groups) == {"bank", "unseen", "letters", "lines", "held-out"}, row
        for name, figures in groups.items():
            assert figures["present"]["n"] == (9 if name == "held-out" else 3)
            for figure in figures.values():
                assert figure["low"] <= figure["mean"] <= figure["high"]
    # The untrained reader answers nothing a page parser takes: no test passes, every page has CER 1.
    assert result["scores"]["untrained"]["held-out"]["cer"]["mean"] == 1.0
    assert result["scores"]["untrained"]["held-out"]["present"]["mean"] == 0.0
    # Chance: another page's own text against each page, per category (3 pages: something, never a perfect read).
    assert set(result["chance_cer"]) == {"bank", "unseen", "letters", "lines"}
    assert all(0 < v <= 1 for v in result["chance_cer"].values())
    blind = result["gains"]["blind"]["held-out"]["present"]
    assert blind["low"] <= blind["mean"] <= blind["high"]
    assert [p["step"] for p in result["curves"]["sft"]] == [2, 4, 6]
    assert result["data_wait_percent"]["sft"] is not None and result["seconds"]["sft"] > 0
    assert any("SFT CER <= 0.15 on letters" in line for line in result["goals"])
    # Training time is the run's own, apart from releasing and converting the bench.
    assert result["seconds"]["sft bench"] > 0 and any("sft trains in <= 20 minutes" in g for g in result["goals"])


@pytest.mark.integration
def test_reading_tower_runs(monkeypatch, capsys):
    """The tower probe's chain at toy sizes: pages rendered, each config taught and scored on held-out pages (the
    figures mean nothing after two steps; the probe must run and print what it measured)."""
    out = in_process("reading_tower.py", ["--pages", "6", "--heldout", "4", "--steps", "2", "--eval-every", "1",
                                          "--configs", "frozen", "reader", "stem", "cnn"], monkeypatch, capsys)
    assert "6 training and 4 held-out typeset pages rendered" in out
    rows = dict(re.findall(r"^(frozen|reader|stem|cnn)\s+2\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s+[\d. ]+$", out, re.M))
    assert set(rows) == {"frozen", "reader", "stem", "cnn"} and all(0 <= float(f1) <= 1 for f1 in rows.values()), out


def test_the_structure_benchmark_scores_layout_text_and_furniture_on_what_each_row_wrote(tmp_path, capsys):
    """benchmarks/reading_structure.py's scoring on rows written by hand: blocks (each page's own truth blocks, as
    a perfect structured reader would write them), plain (the markdown truth, no blocks), blind (nothing)."""
    import argparse
    import shutil

    from benchmarks.reading_structure import HELDOUT, Structure, report
    from olmocr.formats.frontmatter import parse_document
    from olmocr.formats.structure import SUFFIX, blocks_from_record, markdown_of
    from olmocr.synth.generator import generate

    bench = tmp_path / "pages" / HELDOUT
    generate(str(bench), 6, seed=51, reading="structured", category="structured")
    rows = {name: tmp_path / "candidates" / name for name in ("blocks", "plain", "blind")}
    for folder in rows.values():
        os.makedirs(folder)
    for pdf in sorted(p for p in os.listdir(bench / "pdfs") if p.endswith(".pdf")):
        stem = bench / "pdfs" / pdf[:-4]
        _, text = parse_document(open(f"{stem}.md").read())
        blocks = blocks_from_record(json.load(open(f"{stem}{SUFFIX}")))
        (rows["blocks"] / f"{pdf[:-4]}_pg1_repeat1.md").write_text(markdown_of(blocks))
        shutil.copy(f"{stem}{SUFFIX}", rows["blocks"] / f"{pdf[:-4]}_pg1_repeat1{SUFFIX}")
        (rows["plain"] / f"{pdf[:-4]}_pg1_repeat1.md").write_text(text)
    f = Structure(str(tmp_path), argparse.Namespace())
    result = report(f, {name: str(folder) for name, folder in rows.items()})
    table = result["table"]
    assert table["blocks"]["mean IoU"]["mean"] == 1 and table["blocks"]["label accuracy %"]["mean"] == 100
    assert table["plain"]["mean IoU"]["mean"] == 0 and table["blind"]["layout F1 %"]["mean"] == 0
    assert table["blocks"]["present %"]["mean"] == table["plain"]["present %"]["mean"] == 100
    assert table["blocks"]["absent %"]["mean"] == 100 and table["blind"]["present %"]["mean"] == 0
    assert table["blocks"]["CER"]["mean"] == 0 and table["blind"]["CER"]["mean"] == 1
    plain = result["differences"]["plain"]
    assert plain["mean IoU"]["mean"] == -1 and plain["mean IoU"]["high"] == -1  # every page, every block
    assert result["goals"][0].endswith(": met") and "within 2): met" in result["goals"][1]
    out = capsys.readouterr().out
    assert "plain - blocks" in out and json.load(open(tmp_path / "reading_structure.json")) == result
