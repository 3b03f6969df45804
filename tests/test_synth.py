import filecmp
import random
import glob
import os

import pytest
from conftest import SAMPLE

from olmocr.bench.records import load_tests
from olmocr.formats.frontmatter import parse_document
from olmocr.formats.pdf import pdf_info
from olmocr.formats.render import render_page
from olmocr.synth.generator import LAYOUTS, PageGenerator, generate

ALL_LAYOUTS = {name: 1.0 for name in LAYOUTS}
LANGS = {"en": 2, "de": 1, "fr": 1, "no": 1}


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("synth"))
    counts = generate(out, 40, seed=7, layout_weights=ALL_LAYOUTS, language_weights=LANGS)
    return out, counts


def test_every_file_round_trips(pages):
    out, counts = pages
    pdfs = sorted(f for f in os.listdir(os.path.join(out, "pdfs")) if f.endswith(".pdf"))
    assert len(pdfs) == 40
    metas = []
    for name in pdfs:
        path = os.path.join(out, "pdfs", name)
        with open(path[:-4] + ".md", encoding="utf-8") as fh:
            meta, text = parse_document(fh.read())
        metas.append(meta)
        info = pdf_info(path)
        assert info.num_pages == 1
        image = render_page(path, 1, 200)
        assert max(image.size) in (200, 201)  # poppler rounds the dpi-derived size up
        if meta.rotation_correction in (90, 270):
            assert image.size[0] > image.size[1] or info.width > info.height
        if meta.primary_language is None:
            assert text == ""
    loaded = load_tests(os.path.join(out, "synth.jsonl"))
    tests = loaded.tests
    assert loaded.errors == loaded.warnings == [] and len(tests) == sum(v for k, v in counts.items() if k.startswith("test:"))
    assert {t.type for t in tests} == {"present", "absent", "order", "table", "math", "baseline"}
    assert {t.pdf for t in tests} <= set(pdfs)
    assert len({t.id for t in tests}) == len(tests)
    assert {m.primary_language for m in metas} >= {"en", "de", "fr", "no", None}
    assert any(m.is_table for m in metas) and any(m.is_diagram for m in metas)
    assert {m.rotation_correction for m in metas} - {0}, "no rotated page generated"


def test_tests_agree_with_the_truth(pages):
    """Exact-match checks of each test against its own page's truth (fuzzy matching is the bench's job)."""
    out, _ = pages
    truth = {}
    for name in os.listdir(os.path.join(out, "pdfs")):
        if name.endswith(".md"):
            with open(os.path.join(out, "pdfs", name), encoding="utf-8") as fh:
                truth[name[:-3] + ".pdf"] = parse_document(fh.read())[1]
    tests = load_tests(os.path.join(out, "synth.jsonl")).tests
    for t in tests:
        text = truth[t.pdf]
        if t.type == "present":
            hay = text if t.case_sensitive else text.lower()
            hay = hay[: t.first_n] if t.first_n else hay
            assert t.text in hay, t
        elif t.type == "absent":
            assert t.text not in text, t
        elif t.type == "order":
            assert text.index(t.before) < text.index(t.after), t
        elif t.type == "table":
            for cell in (t.cell, t.up, t.down, t.left, t.right, t.top_heading):
                assert cell is None or f">{cell}<" in text, t
        elif t.type == "math":
            assert f"\\[{t.math}\\]" in text, t
        elif t.type == "baseline":
            assert bool(text.strip()) == (t.max_length is None), t


def test_same_seed_same_bytes(tmp_path):
    a, b, c = (str(tmp_path / x) for x in "abc")
    generate(a, 12, seed=3, layout_weights=ALL_LAYOUTS)
    generate(b, 12, seed=3, layout_weights=ALL_LAYOUTS)
    generate(c, 12, seed=4, layout_weights=ALL_LAYOUTS)
    cmp = filecmp.dircmp(os.path.join(a, "pdfs"), os.path.join(b, "pdfs"))
    assert cmp.left_only == cmp.right_only == [] and len(cmp.common) == 36
    match, mismatch, errors = filecmp.cmpfiles(os.path.join(a, "pdfs"), os.path.join(b, "pdfs"), cmp.common, shallow=False)
    assert mismatch == errors == []
    assert filecmp.cmp(os.path.join(a, "synth.jsonl"), os.path.join(b, "synth.jsonl"), shallow=False)
    assert not filecmp.cmp(os.path.join(a, "synth.jsonl"), os.path.join(c, "synth.jsonl"), shallow=False)


def test_bundled_sample_is_what_the_generator_makes(tmp_path):
    """data/sample must be regenerable: the same command gives the same bytes (and is not stale)."""
    weights = _configured_weights()
    for split, n, first in (("train", 32, 0), ("eval", 8, 1000)):
        out = str(tmp_path / split)
        generate(out, n, seed=0, first_index=first, **weights)
        ref = os.path.join(SAMPLE, split)
        names = sorted(os.listdir(os.path.join(ref, "pdfs")))
        assert names == sorted(os.listdir(os.path.join(out, "pdfs")))
        _, mismatch, errors = filecmp.cmpfiles(os.path.join(ref, "pdfs"), os.path.join(out, "pdfs"), names, shallow=False)
        assert mismatch == errors == [], f"data/sample/{split} is stale: regenerate it (see docs/datasets.md)"
        assert filecmp.cmp(os.path.join(ref, "synth.jsonl"), os.path.join(out, "synth.jsonl"), shallow=False)


def test_unknown_layout_or_language_and_values_out_of_range_are_named(tmp_path):
    with pytest.raises(ValueError, match="unknown layout.*'poster'"):
        PageGenerator(0, {"poster": 1.0})
    with pytest.raises(ValueError, match="unknown language.*'xx'"):
        PageGenerator(0, None, {"xx": 1.0})
    with pytest.raises(ValueError, match=r"^language_weights: weights must be 0 or more with at least one positive"):
        PageGenerator(0, None, {"en": 0.0})
    for arguments, error in (({"num_pages": -1}, "num_pages: must be at least 1, got -1"),
                             ({"num_pages": 2, "first_index": -3}, "first_index: must be 0 or more, got -3")):
        with pytest.raises(ValueError) as info:
            generate(str(tmp_path / "out"), **arguments)
        assert str(info.value) == error
    assert not os.path.exists(tmp_path / "out")  # refused before anything is written


def test_synth_stage_starts_without_torch():
    """Generating pages needs no deep-learning stack: the stage must not pay torch's import time."""
    import subprocess
    import sys

    code = "import sys, olmocr.synth.__main__; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_a_stage_that_fills_its_disk_ends_in_one_line_saying_where_space_is_short(small_disk, tmp_path):
    """A write that does not say where it went (Python's buffered writes do not): the line gives what is free
    on each file system the stage writes to, its config's paths among them, the full one first."""
    import re
    import subprocess
    import sys

    small_disk.leave(50_000)
    run = subprocess.run([sys.executable, "-m", "olmocr.synth", "num_pages=200", f"out_dir={small_disk.path / 'pages'}",
                          f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    error = run.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"error: no space left on device; free: \d+(\.\d)? [KB]+ where out_dir is; "
                        r"\d+\.\d [KMGT]B where the run dir, the temporary folder, \S.* are", error), error


@pytest.mark.parametrize("sweep", [False, True])
def test_a_run_dir_on_a_full_disk_is_one_line_before_the_stage_starts(small_disk, tmp_path, sweep):
    """Hydra makes the run dir and writes its .hydra/ files before any stage code runs; a sweep's dir and its
    multirun.yaml before the first job."""
    import subprocess
    import sys

    small_disk.leave(0)
    run_dir = small_disk.path / "run"
    args = ["-m", "num_pages=1,2", f"hydra.sweep.dir={run_dir}"] if sweep else ["num_pages=1", f"hydra.run.dir={run_dir}"]
    run = subprocess.run([sys.executable, "-m", "olmocr.synth", *args], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert (run.returncode, run.stderr) == (2, f"error: no space left on device writing {run_dir} (0 B free there)\n")
    assert not list(run_dir.rglob("pages"))  # the stage never started


def test_a_killed_run_leaves_whole_pages_and_resumes_to_the_bytes_of_an_uninterrupted_one(tmp_path):
    """SIGKILL mid-run: every page file there is whole (no PDF cut short for a later stage to pick up), no tests
    file yet; the same command again keeps those pages, writes the rest and says so."""
    import signal
    import subprocess
    import sys
    import time

    out, ref = tmp_path / "out", str(tmp_path / "ref")
    command = [sys.executable, "-m", "olmocr.synth", "num_pages=800", f"out_dir={out}", "render_check=false",
               f"hydra.run.dir={tmp_path / 'run'}"]
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while proc.poll() is None and len([f for f in os.listdir(out / "pdfs") if not f.endswith(".partial")]
                                      if (out / "pdfs").exists() else []) < 60:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "the run ended before it was killed"
    generate(ref, 800, seed=0, **_configured_weights())
    written = [f for f in os.listdir(out / "pdfs") if not f.endswith(".partial")]
    assert 60 <= len(written) < 1600 and not (out / "synth.jsonl").exists(), len(written)
    _, mismatch, errors = filecmp.cmpfiles(out / "pdfs", os.path.join(ref, "pdfs"), written, shallow=False)
    assert mismatch == errors == []
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    kept = len([f for f in written if f.endswith(".pdf") and f[:-4] + ".md" in written])
    assert f"wrote {800 - kept} pages to {out} " in again.stdout, (kept, again.stdout[-2000:])
    assert f"; {kept} kept, written by an earlier run" in again.stdout, (kept, again.stdout[-2000:])
    assert sorted(os.listdir(out / "pdfs")) == sorted(os.listdir(os.path.join(ref, "pdfs")))
    _, mismatch, errors = filecmp.cmpfiles(out / "pdfs", os.path.join(ref, "pdfs"), os.listdir(out / "pdfs"),
                                           shallow=False)
    assert mismatch == errors == []
    assert filecmp.cmp(out / "synth.jsonl", os.path.join(ref, "synth.jsonl"), shallow=False)


def _configured_weights() -> dict:
    from omegaconf import OmegaConf

    from olmocr.config import compose

    cfg = compose("synth")
    return dict(layout_weights=OmegaConf.to_container(cfg.layout_weights),
                language_weights=OmegaConf.to_container(cfg.language_weights))


def test_pages_of_other_ranges_and_seeds_add_up_and_other_weights_are_refused(tmp_path):
    from olmocr.runlock import run_dir_held

    out = str(tmp_path / "out")
    generate(out, 5, seed=1, layout_weights=ALL_LAYOUTS)
    assert generate(out, 5, seed=1, first_index=3, layout_weights=ALL_LAYOUTS)["kept"] == 2
    generate(out, 3, seed=2, layout_weights=ALL_LAYOUTS)
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    generate(one, 8, seed=1, layout_weights=ALL_LAYOUTS)
    generate(two, 3, seed=2, layout_weights=ALL_LAYOUTS)
    tests = open(os.path.join(out, "synth.jsonl")).read()
    assert tests == open(os.path.join(one, "synth.jsonl")).read() + open(os.path.join(two, "synth.jsonl")).read()
    assert len(os.listdir(os.path.join(out, "pdfs"))) == 3 * 11  # each page's PDF, truth and blocks

    with pytest.raises(ValueError) as info:
        generate(out, 3, seed=1, layout_weights={"table": 1.0})
    assert str(info.value).startswith(f'out_dir {out} holds pages made with layout_weights={{"single_column": 1.0, ')
    assert str(info.value).endswith(', and this run has layout_weights={"table": 1.0}: give it another out_dir, '
                                    "or the same settings to add pages or finish an interrupted run")
    with run_dir_held(out), pytest.raises(ValueError, match=f"^{out} is in use by another run .*: wait for it to "
                                                           "end, or give this one another out_dir$"):
        generate(out, 3, seed=1, layout_weights=ALL_LAYOUTS)
    assert open(os.path.join(out, "synth.jsonl")).read() == tests


def test_an_out_dir_that_cannot_be_made_is_one_line_naming_the_key(tmp_path):
    import subprocess
    import sys

    (tmp_path / "a_file").write_text("")
    out_dir = tmp_path / "a_file" / "pages"
    run = subprocess.run([sys.executable, "-m", "olmocr.synth", "num_pages=1", f"out_dir={out_dir}",
                          f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (run.returncode, run.stderr) == (2, f"error: out_dir={out_dir}: not a directory: {out_dir}\n")


def test_ctrl_c_is_one_line_saying_where_the_work_is_kept(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    out, run = tmp_path / "out", tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "olmocr.synth", "num_pages=100000", f"out_dir={out}",
                             f"hydra.run.dir={run}"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    while proc.poll() is None and len(os.listdir(out / "pdfs") if (out / "pdfs").exists() else []) < 20:
        time.sleep(0.01)
    assert proc.poll() is None, proc.communicate()[1][-2000:]  # ended before it was interrupted
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert err.splitlines()[-1] == (f"error: interrupted (run dir {run}); what was written is kept, and a training "
                                    "run resumes from its newest checkpoint when the same command runs again"), err[-2000:]


def test_the_check_parses_every_page_and_test_and_renders_a_spread_sample(tmp_path, monkeypatch):
    import shutil

    import olmocr.synth.__main__ as stage
    from olmocr.formats.frontmatter import FrontMatterError
    from olmocr.synth.generator import page_name

    out, md, tests = str(tmp_path / "out"), str(tmp_path / "md"), str(tmp_path / "tests")
    generate(out, 10, seed=1, layout_weights=ALL_LAYOUTS)
    names = [page_name(1, index) for index in range(10)]
    monkeypatch.setattr(stage, "RENDER_SAMPLE", 3)
    lines = sum(1 for _ in open(os.path.join(out, "synth.jsonl")))
    assert stage.check_output(out, names, "synth.jsonl") == {"pages": 10, "rendered": 3, "tests": lines}
    shutil.copytree(out, md)
    with open(os.path.join(md, "pdfs", names[-1] + ".md"), "w") as fh:  # a page the sample does not render
        fh.write("no front matter\n")
    with pytest.raises(FrontMatterError):
        stage.check_output(md, names, "synth.jsonl")
    shutil.copytree(out, tests)
    with open(os.path.join(tests, "synth.jsonl"), "a") as fh:
        fh.write('{"type": "present", "pdf": "x.pdf", "colour": "red"}\n')
    with pytest.raises(RuntimeError, match=rf"^generated tests do not parse:\n.*synth\.jsonl:{lines + 1}: "):
        stage.check_output(tests, names, "synth.jsonl")


@pytest.mark.parametrize("level, rows", [("word", (1, 1)), ("line", (1, 1)), ("lines", (2, 4)), ("page", (8, 12))])
def test_reading_pages_put_each_line_in_a_token_row_and_each_character_in_a_patch(tmp_path, level, rows):
    """Reading pages (olmocr.synth.reading): the level's number of rows, 448 pixels wide at longest_side 448,
    each text line in one 28-pixel row and each character in one 14-pixel column, drawn alike wherever it stands
    between the same neighbours (a glyph may reach a little into the next cell); text in the
    PDF as in the truth, and tests the truth passes."""
    import numpy as np

    from olmocr.formats.pdf import text_layer
    from olmocr.synth.reading import UNSEEN

    counts = generate(str(tmp_path), 6, seed=3, reading=level, reading_words="seen")
    assert counts["page"] == 6 and counts["test:present"] >= 6
    tests = load_tests(str(tmp_path / "synth.jsonl")).tests
    for index in range(6):
        stem = tmp_path / "pdfs" / f"synth_s3_{index:05d}"
        _, truth = parse_document((stem.with_suffix(".md")).read_text())
        drawn = text_layer(str(stem.with_suffix(".pdf")), 1).split("\n")
        drawn = [line for line in drawn if line.strip()]
        gaps = truth.strip().count("\n\n")  # a blank row between paragraphs
        assert rows[0] <= len(drawn) + gaps <= rows[1], drawn
        assert " ".join(" ".join(drawn).split()) == " ".join(truth.split())
        if level == "word":
            assert len(truth.split()) == 1
        assert not {w.strip(".").lower() for w in truth.split()} & UNSEEN  # words=seen: no held-out word
        image = render_page(str(stem.with_suffix(".pdf")), 1, 448)
        assert image.size == (448, 28 * (len(drawn) + gaps + 2))  # a row above the text and one below
        pixels = np.asarray(image.convert("L")).astype(int)
        ink_rows = {int(y) // 28 for y in np.nonzero(pixels.min(axis=1) < 200)[0]}
        cells: dict[str, list] = {}
        # Rows with ink: exactly the text lines' rows (paragraph gaps are blank rows).
        assert len(ink_rows) == len(drawn) and min(ink_rows) == 1 and max(ink_rows) == len(drawn) + gaps
        for line, row in zip(drawn, sorted(ink_rows)):
            padded = f" {line} "
            for i in range(len(line)):
                cells.setdefault(padded[i:i + 3], []).append(pixels[28 * row:28 * row + 28, 14 + 14 * i:28 + 14 * i])
        # Alike to a few anti-aliased pixels at a glyph's edge (half a column off: ~50 apart)
        assert max(np.abs(cell - same[0]).mean() for same in cells.values() for cell in same) < 16
        for test in (t for t in tests if t.pdf == stem.name + ".pdf"):
            assert test.run(truth)[0], test.id
            if level != "word" and test.type != "baseline":
                assert not test.run(truth.split()[0])[0]  # a word of it is not enough


def test_held_out_reading_pages_have_words_training_pages_never_have(tmp_path):
    from olmocr.synth.reading import ReadingPageGenerator

    seen = {w.strip(".").lower() for i in range(200) for b in ReadingPageGenerator(0, "page", "seen").describe(i).blocks
            for s in b.sentences for w in s.split()}
    held = [w.strip(".").lower() for i in range(20) for b in ReadingPageGenerator(1, "page", "all").describe(i).blocks
            for s in b.sentences for w in s.split()]
    unseen = [w for w in held if w not in seen]
    assert 0.05 < len(unseen) / len(held) < 0.25
    # a folder of reading pages is not topped up with pages of other settings
    generate(str(tmp_path), 2, reading="line")
    with pytest.raises(ValueError, match="holds pages made with reading=\"line\""):
        generate(str(tmp_path), 2, reading="page")
    with pytest.raises(ValueError, match="reading: expected one of word, line, lines, page, structured, got 'book'"):
        generate(str(tmp_path / "other"), 2, reading="book")


def test_reading_pages_of_random_letters_have_no_word_of_the_bank():
    from olmocr.synth.reading import ReadingPageGenerator
    from olmocr.synth.text import WORDS

    bank = {w.lower() for words in WORDS.values() for w in words}
    gen = ReadingPageGenerator(0, "line", "letters")
    written = [w.strip(".").lower() for i in range(50) for b in gen.describe(i).blocks for s in b.sentences
               for w in s.split()]
    assert all(2 <= len(w) <= 11 and w.isalpha() for w in written) and max(map(len, written)) >= 8
    assert sum(w in bank for w in written) < 0.05 * len(written)  # a two-letter string may be a word by chance
    assert len(set(written)) > 0.9 * len(written)


def test_a_reading_word_is_not_found_in_another_word():
    """Present tests of one short word allow no difference: 'Are.' with two would pass on 'Reported.'."""
    from olmocr.synth.reading import ReadingPageGenerator

    gen = ReadingPageGenerator(0, "word")
    for index in range(40):
        page = gen.describe(index)
        (present,) = [t for t in gen.tests(page, random.Random(0)) if t.type == "present"]
        assert present.max_diffs == min(2, len(present.text) // 10)
        assert not present.run("Reported.")[0] or present.text == "Reported."


def test_categories_of_reading_pages_share_a_folder_as_one_bench(tmp_path):
    """A held-out bench of three categories in one folder: the bank's words, words no training page has, and
    random letters; each category's pages, tests and record its own, and adding to one leaves the others."""
    from olmocr.bench.score import load_bench
    from olmocr.synth.reading import UNSEEN

    out = str(tmp_path / "heldout")
    generate(out, 6, seed=1, category="bank", reading="line", reading_words="all")
    generate(out, 5, seed=1, category="unseen", reading="line", reading_words="unseen")
    generate(out, 4, seed=1, category="letters", reading="line", reading_words="letters")
    bench = load_bench(out)
    present = {}
    for category, test in bench.tests:
        if test.type == "present":
            present.setdefault(category, []).append(test)
    assert {c: len(t) for c, t in present.items()} == {"bank": 6, "unseen": 5, "letters": 4}
    assert all(t.pdf.startswith(f"{c}_s1_") for c, tests in present.items() for t in tests)
    unseen_words = {w.strip(".").lower() for t in present["unseen"] for w in t.text.split()}
    assert unseen_words and unseen_words <= UNSEEN
    with open(os.path.join(out, "bank.jsonl")) as fh:
        bank_before = fh.read()
    generate(out, 3, seed=1, first_index=4, category="letters", reading="line", reading_words="letters")
    with open(os.path.join(out, "bank.jsonl")) as fh:
        assert fh.read() == bank_before
    assert len(glob.glob(os.path.join(out, "pdfs", "letters_s1_*.pdf"))) == 7
    with pytest.raises(ValueError, match='holds pages made with reading_words="letters"'):
        generate(out, 2, seed=1, category="letters", reading="line", reading_words="all")
    with pytest.raises(ValueError, match="category: expected letters, digits"):
        generate(out, 2, category="../up", reading="line")


def test_mixed_reading_pages_hold_training_words_changed_words_and_random_letters():
    """reading_words=mixed: a word the reader knows is as likely to be misspelt or replaced by random letters as
    to be itself, and never one of the held-out words."""
    from olmocr.synth.reading import _BANK, UNSEEN, ReadingPageGenerator

    seen = {w for w in _BANK if w not in UNSEEN}
    gen = ReadingPageGenerator(0, "line", "mixed")
    words = [w.strip(".").lower() for i in range(200) for b in gen.describe(i).blocks for s in b.sentences
             for w in s.split()]
    kept = sum(w in seen for w in words)
    near = sum(w not in seen and any(len(w) == len(k) and 1 <= sum(a != b for a, b in zip(w, k)) <= 2 for k in seen)
               for w in words)
    assert not {w for w in words} & UNSEEN
    assert 0.25 < kept / len(words) < 0.42 and 0.2 < near / len(words) < 0.4
    # Long random words overflow a line often: a line page still always holds its sentence.
    for words_from in ("mixed", "letters"):
        gen = ReadingPageGenerator(5, "line", words_from)
        assert all(gen.describe(i).blocks for i in range(1500))


def test_typeset_reading_pages_are_set_as_documents_set_text(tmp_path):
    """reading_type=typeset: the same kinds of text off the image-token grid — margins, sizes, leading and
    heights that are no whole number of rows or patches, the training typefaces (each embedded in the PDF as
    asked, the held-out ones never among them), both cases, numbers and punctuation; the text layer is the truth,
    the ink lies inside the page, the tests pass on the truth and not on a word of it."""
    import subprocess

    import numpy as np

    from olmocr.formats.pdf import text_layer
    from olmocr.synth.reading import HELD_OUT_FACES, SCALE, SIZE, TRAIN_FACES, UNSEEN, ReadingPageGenerator

    gen = ReadingPageGenerator(4, "lines", "seen", kind="typeset")
    described = [gen.describe(i) for i in range(120)]
    sizes = [p.body_size / SIZE for p in described]
    assert SCALE[0] - 1e-9 <= min(sizes) < 0.8 and 1.35 < max(sizes) <= SCALE[1] + 1e-9
    lefts = {round(p.frame[0] % 14, 1) for p in described}
    assert len(lefts) > 50  # anywhere against a patch, not one phase of it
    assert sum(p.page_size[1] % 28 > 1 for p in described) > 100  # heights are not whole rows
    fonts_used = {p.font[0] for p in described}
    assert len(fonts_used) == 2 * len(TRAIN_FACES)  # each face, regular and bold
    assert not any(face in font for font in fonts_used for face in HELD_OUT_FACES)
    written = " ".join(s for p in described for b in p.blocks for s in b.sentences)
    assert any(c.isupper() for w in written.split()[1:] for c in w[1:])  # capitals inside sentences
    assert sum(c.isdigit() for c in written) > 50 and {",", ";", ":"} <= set(written)
    assert not {w.strip('.,;:?!()"\u201c\u201d').lower() for w in written.split()} & UNSEEN

    counts = generate(str(tmp_path), 8, seed=4, reading="lines", reading_words="seen", reading_type="typeset")
    assert counts["page"] == 8
    tests = load_tests(str(tmp_path / "synth.jsonl")).tests
    for index in range(8):
        stem = tmp_path / "pdfs" / f"synth_s4_{index:05d}"
        page = described[index]
        _, truth = parse_document(stem.with_suffix(".md").read_text())
        drawn = [line for line in text_layer(str(stem.with_suffix(".pdf")), 1).split("\n") if line.strip()]
        assert " ".join(" ".join(drawn).split()) == " ".join(truth.split())
        embedded = subprocess.run(["pdffonts", str(stem.with_suffix(".pdf"))], capture_output=True, text=True).stdout
        assert page.font[0].split("-")[0].lower() in embedded.lower(), (page.font, embedded)
        image = render_page(str(stem.with_suffix(".pdf")), 1, 448)
        assert image.size[0] == 448 and abs(image.size[1] - page.page_size[1]) <= 1
        ink = np.nonzero(np.asarray(image.convert("L")).min(axis=1) < 128)[0]
        # The first ink near the top margin drawn (a capital's top, not the line's), none past the bottom
        assert abs(ink[0] - page.frame[1] - 0.2 * page.body_size) < 0.35 * page.body_size, (ink[0], page.frame)
        assert ink[-1] < image.size[1] - 1
        for test in (t for t in tests if t.pdf == stem.name + ".pdf"):
            assert test.run(truth)[0], test.id
            if test.type != "baseline":
                assert not test.run(truth.split()[0])[0]


def test_typeset_codes_and_held_out_faces(tmp_path):
    """reading_words=codes: lines of mixed-case strings, numbers and identifiers; reading_faces names the
    typefaces (the held-out pair here); a grid page cannot take either; a face whose file is missing is one line
    naming its Debian package."""
    from olmocr.errors import UserError
    from olmocr.synth import fonts
    from olmocr.synth.reading import ReadingPageGenerator

    gen = ReadingPageGenerator(2, "line", "codes", kind="typeset", faces=("carlito", "caladea"))
    pages = [gen.describe(i) for i in range(60)]
    assert {p.font[0].split("-")[0] for p in pages} == {"carlito", "caladea"}
    tokens = [w.rstrip(".?!;,:") for p in pages for b in p.blocks for s in b.sentences for w in s.split()]
    assert sum(any(c.isdigit() for c in t) for t in tokens) > 0.4 * len(tokens)
    assert sum(any(c.isupper() for c in t[1:]) for t in tokens) > 0.3 * len(tokens)
    generate(str(tmp_path), 3, seed=2, reading="line", reading_words="codes", reading_type="typeset",
             reading_faces=["carlito"])
    with pytest.raises(ValueError, match='holds pages made with reading_faces=\\["carlito"\\]'):
        generate(str(tmp_path), 3, seed=2, reading="line", reading_words="codes", reading_type="typeset")
    with pytest.raises(UserError, match="reading_type=grid sets lowercase words in Courier alone"):
        ReadingPageGenerator(0, "line", "codes")
    with pytest.raises(UserError, match="typeface: expected one of courier, helvetica"):
        ReadingPageGenerator(0, "line", kind="typeset", faces=("comic",))
    fonts._registered.pop("caladea", None)
    old, fonts.FONT_ROOT = fonts.FONT_ROOT, str(tmp_path / "none")
    try:
        with pytest.raises(UserError, match="install Debian's fonts-crosextra-caladea"):
            fonts.face("caladea")
    finally:
        fonts.FONT_ROOT = old
