"""Pages as structure: the blocks format's parser, and the synthetic generator's blocks against where poppler
finds the text of the PDF it drew."""

import json
import os
import re
import subprocess

import pytest

from olmocr.formats.frontmatter import parse_document
from olmocr.formats.structure import (LABELS, SUFFIX, Block, StructureError, blocks_from_record, format_blocks,
                                      from_scale, markdown_of, page_record, parse_blocks, to_scale)
from olmocr.synth.generator import LAYOUTS, PageGenerator, generate
from olmocr.synth.layout import blocks_of, draw, place, truth
from olmocr.synth.reading import ReadingPageGenerator

PAGE = [Block("page_header", (90, 28, 260, 38), "Annual Report · 2024"),
        Block("title", (90, 80, 500, 104), "# Results"),
        Block("text", (90, 120, 910, 200), "The samples were drawn\nat random."),
        Block("list_item", (90, 210, 600, 222), "- first"),
        Block("list_item", (90, 224, 640, 236), "- second"),
        Block("table", (90, 250, 910, 400), "<table><tr><td>a</td></tr></table>"),
        Block("formula", (400, 420, 600, 440), "\\[E = m c^2\\]"),
        Block("page_number", (470, 960, 530, 972), "Page 7")]


def test_an_answer_round_trips_and_its_markdown_drops_furniture_unless_kept():
    answer = format_blocks(PAGE)
    assert parse_blocks(answer) == PAGE
    assert parse_blocks("\n\n" + answer.replace("\n<div", "\n\n<div") + "\n") == PAGE  # blank lines between blocks
    body = markdown_of(PAGE)
    assert body == ("# Results\n\nThe samples were drawn\nat random.\n\n- first\n- second\n\n"
                    "<table><tr><td>a</td></tr></table>\n\n\\[E = m c^2\\]")
    kept = markdown_of(PAGE, furniture=True)
    assert kept.startswith("Annual Report · 2024\n\n# Results") and kept.endswith("\n\nPage 7")
    assert blocks_from_record(json.loads(json.dumps(page_record(PAGE, (612, 792))))) == PAGE
    assert parse_blocks("") == [] and markdown_of([]) == ""


@pytest.mark.parametrize("answer, said", [
    ('<div data-label="sidebar" data-bbox="1 2 3 4">\nx\n</div>', "block 1 (sidebar): unknown label 'sidebar'"),
    ('<div data-label="text" data-bbox="1 2 3 4">\nx\n</div>\n<div data-label="text" data-bbox="10 20 1003 40">\ny\n'
     '</div>', "block 2 (text): box 10 20 1003 40 is outside 0-1000"),
    ('<div data-label="text" data-bbox="500 20 400 40">\nx\n</div>', "block 1 (text): box 500 20 400 40 is inside out"),
    ('<div data-label="text" data-bbox="1 2 3">\nx\n</div>', "block 1 (text): a box is four whole numbers"),
    ('<div data-label="text" data-bbox="1 2 3 x">\nx\n</div>', "block 1 (text): a box is four whole numbers"),
    ('<div data-label="title" data-bbox="1 2 3 4">\n# A\n</div>\n<div data-label="text" data-bbox="1 5 3 9">\nThe '
     'samples were', "block 2 (text): truncated: the answer ends inside it"),
    ('<div data-label="title" data-bbox="1 2 3 4">\n# A\n</div>\n<div data-label="te', "block 2: truncated in its "
     "opening tag"),
    ('<div data-label="title" data-bbox="1 2 3 4">\n# A\n<div data-label="text" data-bbox="1 5 3 9">\nb\n</div>',
     "block 1 (title): not closed before the next block opens"),
    ('<div data-label="title" data-bbox="1 2 3 4">\n# A\n</div>\nloose words', "block 2: expected '<div"),
    ("# A plain markdown answer", "block 1: expected '<div"),
])
def test_a_malformed_answer_is_refused_in_one_line_naming_the_block_and_what_is_wrong(answer, said):
    with pytest.raises(StructureError) as caught:
        parse_blocks(answer)
    message = str(caught.value)
    assert message.startswith(said) and "\n" not in message


def test_a_block_made_in_code_is_checked_as_one_parsed_is():
    with pytest.raises(StructureError, match="unknown label 'aside'"):
        Block("aside", (0, 0, 1, 1), "x")
    with pytest.raises(StructureError, match="outside 0-1000"):
        Block("text", (0, 0, 1001, 1), "x")
    assert set(LABELS) >= {"title", "section_header", "text", "list_item", "caption", "footnote", "page_header",
                           "page_footer", "page_number", "table", "formula", "figure"}


def test_boxes_scale_to_the_page_and_back():
    assert to_scale((61.2, 79.2, 550.8, 712.8), (612, 792)) == (100, 100, 900, 900)
    assert to_scale((-3, 0, 700, 792), (612, 792)) == (0, 0, 1000, 1000)  # held to the page's edges
    assert from_scale((100, 100, 900, 900), (612, 792)) == pytest.approx((61.2, 79.2, 550.8, 712.8))


def _poppler_lines(pdf: str) -> list[tuple[float, float, float, float]]:
    out = subprocess.run(["pdftotext", "-bbox-layout", pdf, "-"], capture_output=True, text=True, check=True).stdout
    return [tuple(float(v) for v in m) for m in
            re.findall(r'<line xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)"', out)]


def _pages():
    synth = PageGenerator(11, {name: 1.0 for name in LAYOUTS if name != "rotated"})
    typeset = ReadingPageGenerator(3, "lines", "mixed", kind="typeset")
    grid = ReadingPageGenerator(3, "page", "all")
    structured = ReadingPageGenerator(3, "structured", "mixed")
    return ([synth.describe(i) for i in range(24)] + [typeset.describe(i) for i in range(6)] + [grid.describe(0)]
            + [structured.describe(i) for i in range(4)])


def test_the_generators_blocks_are_where_poppler_finds_the_text_of_the_pdf_drawn(tmp_path):
    """Every text line poppler extracts from the PDF lies in one block's box, and a block of text (a paragraph,
    a heading, a list item, a formula, a header or footer) is the extent of its lines to within the rounding
    of 0-1000 (a table's box is its ruled grid, a figure's its plot and caption: larger than their text)."""
    labels = set()
    for page in _pages():
        placed = place(page)
        pdf = str(tmp_path / f"{page.name}.pdf")
        draw(page, placed, pdf)
        blocks = blocks_of(page, placed)
        # two lists one after another are one list in markdown made of blocks (its items one line after another)
        assert markdown_of(blocks) == re.sub(r"(?m)^(- .*)\n\n(?=- )", r"\1\n", truth(page, placed))
        size = page.page_size
        boxes = [from_scale(b.box, size) for b in blocks]
        inside: dict[int, list] = {}
        for line in _poppler_lines(pdf):
            cx, cy = (line[0] + line[2]) / 2, (line[1] + line[3]) / 2
            holders = [n for n, (x0, y0, x1, y1) in enumerate(boxes) if x0 <= cx <= x1 and y0 <= cy <= y1]
            assert len(holders) == 1, f"{page.name}: poppler's line {line} is in blocks {holders}"
            inside.setdefault(holders[0], []).append(line)
        # half a 0-1000 step (0.42 points on A4), and poppler's glyph extents beside the font's ascent and
        # descent (0.6 points at most at these sizes)
        tolerance = 0.6 + max(size) / 2000
        for n, block in enumerate(blocks):
            labels.add(block.label)
            if block.label in ("table", "figure") or not block.text:
                continue
            lines = inside.get(n)
            assert lines, f"{page.name}: poppler finds no text in block {n} ({block.label})"
            extent = (min(v[0] for v in lines), min(v[1] for v in lines), max(v[2] for v in lines),
                      max(v[3] for v in lines))
            assert boxes[n] == pytest.approx(extent, abs=tolerance), f"{page.name}: block {n} ({block.label})"
    assert labels >= {"page_header", "title", "section_header", "text", "list_item", "table", "formula", "figure",
                      "page_number"}


def test_structured_reading_pages_set_a_header_sections_and_a_page_number_on_the_token_grid(tmp_path):
    """Reading pages with structure to learn on CPU: each block's lines in whole 28-pixel rows of the image (a blank
    row between blocks), the header and page number drawn, in the blocks record and absent from the truth."""
    import numpy as np

    from olmocr.bench.records import load_tests
    from olmocr.formats.render import render_page

    generate(str(tmp_path), 8, seed=5, reading="structured", reading_words="seen")
    tests = load_tests(str(tmp_path / "synth.jsonl")).tests
    for index in range(8):
        stem = tmp_path / "pdfs" / f"synth_s5_{index:05d}"
        _, text = parse_document(stem.with_suffix(".md").read_text())
        blocks = blocks_from_record(json.loads((tmp_path / "pdfs" / f"{stem.name}{SUFFIX}").read_text()))
        labels = [b.label for b in blocks]
        assert labels[0] == "page_header" and labels[-1] == "page_number" and labels.count("section_header") in (1, 2)
        assert set(labels[1:-1]) == {"section_header", "text"} and markdown_of(blocks) == text
        assert all(b.text.startswith("## ") for b in blocks if b.label == "section_header")
        image = render_page(str(stem.with_suffix(".pdf")), 1, 448)
        width, height = image.size
        pixels = np.asarray(image.convert("L"))
        ink_rows = sorted({int(y) // 28 for y in np.nonzero(pixels.min(axis=1) < 200)[0]})
        covered = []
        for block in blocks:  # a block's box lies in its own rows of tokens
            top, bottom = block.box[1] / 1000 * height, block.box[3] / 1000 * height
            first, last = int(top // 28), int((bottom - 1) // 28)
            assert top - 28 * first > 3 and 28 * (last + 1) - bottom > 3, (block, top, bottom)
            covered += range(first, last + 1)
        assert covered == ink_rows and height == 28 * (ink_rows[-1] + 2) and width == 448
        mine = [t for t in tests if t.pdf == f"{stem.name}.pdf"]
        assert {t.type for t in mine} == {"present", "absent", "order", "baseline"}
        assert all(t.run(text)[0] for t in mine)
        kept = [t for t in mine if t.type == "absent" and not t.run(markdown_of(blocks, furniture=True))[0]]
        assert len(kept) == 2  # a reading that keeps the furniture fails both absent tests


def test_synthetic_pages_are_written_with_their_blocks_beside_the_truth(tmp_path):
    generate(str(tmp_path), 6, seed=2, layout_weights={"single_column": 1.0, "rotated": 1.0, "blank": 1.0})
    names = sorted(f[:-4] for f in os.listdir(tmp_path / "pdfs") if f.endswith(".pdf"))
    for name in names:
        with open(tmp_path / "pdfs" / f"{name}.md", encoding="utf-8") as fh:
            _, text = parse_document(fh.read())
        with open(tmp_path / "pdfs" / f"{name}{SUFFIX}", encoding="utf-8") as fh:
            record = json.load(fh)
        blocks = blocks_from_record(record)
        assert markdown_of(blocks) == text
        if text:  # a blank page has no header, footer or blocks
            assert blocks[0].label == "page_header" and blocks[-1].label == "page_number"
            for row, block in zip(record["blocks"], blocks):  # the same box in the page's points
                assert row["box_pt"] == pytest.approx(from_scale(block.box, record["page_size"]), abs=0.1)
        else:
            assert blocks == []


def test_layout_checks_find_blocks_by_label_and_overlap_and_an_answer_without_blocks_finds_none():
    from olmocr.bench.layout import iou, score_page, summarize

    truth = [b for b in PAGE if b.label != "list_item"]
    assert iou((0, 0, 10, 10), (5, 0, 15, 10)) == pytest.approx(1 / 3) and iou((0, 0, 1, 1), (2, 2, 3, 3)) == 0
    perfect = summarize([score_page(truth, truth)])
    assert all(perfect[k]["mean"] == 1.0 for k in ("f1", "mean_iou", "label_accuracy", "order_accuracy"))
    for nothing in (None, []):
        none = summarize([score_page(truth, nothing)])
        assert none["f1"]["mean"] == none["mean_iou"]["mean"] == none["order_accuracy"]["mean"] == 0
        assert none["label_accuracy"]["mean"] == 0 and none["pages_without_blocks"] == 1
    # The title a little off (IoU 0.8: found), the table wrongly labelled (not found, its label wrong), the
    # formula far off (not found), the first two blocks written in the other order.
    t = {b.label: b for b in truth}
    x0, y0, x1, y1 = t["title"].box
    answer = [t["page_header"], t["text"], Block("title", (x0, y0, x0 + round(0.8 * (x1 - x0)), y1), "# Results"),
              Block("figure", t["table"].box, "![a chart](x.png)"), Block("formula", (0, 900, 50, 950), "x"),
              t["page_number"]]
    page = score_page(truth, answer)
    assert (page.truth, page.answered, page.found) == (6, 6, 4)
    assert page.iou == pytest.approx(1 + 0.8 + 1 + 1) and page.labelled == 4  # table and formula not labelled so
    # pairs in truth order: header-title (found, in order), title-text (reversed), text-table, table-formula,
    # formula-number (not both found)
    assert (page.pairs, page.in_order) == (5, 1)
    row = summarize([page])
    assert row["f1_by_label"]["table"]["mean"] == 0 and row["f1_by_label"]["title"]["mean"] == 1
    assert row["f1"]["mean"] == pytest.approx(2 * 4 / 12, abs=1e-4)  # figures are rounded to 4 places


def test_the_bench_scores_layout_beside_text_where_the_truth_has_blocks(tmp_path):
    from olmocr.bench.__main__ import run
    from olmocr.config import compose

    bench = tmp_path / "bench"
    generate(str(bench), 8, seed=4, layout_weights={"single_column": 1.0, "two_column": 1.0})
    candidates = tmp_path / "candidates"
    os.makedirs(candidates)
    names = sorted(f[:-4] for f in os.listdir(bench / "pdfs") if f.endswith(".pdf"))
    for n, name in enumerate(names):
        with open(bench / "pdfs" / f"{name}.md", encoding="utf-8") as fh:
            (candidates / f"{name}_pg1_repeat1.md").write_text(parse_document(fh.read())[1])
        if n % 2 == 0:  # half the outputs have their page's blocks beside them, the rest none (a markdown answer)
            (candidates / f"{name}_pg1_repeat1{SUFFIX}").write_bytes((bench / "pdfs" / f"{name}{SUFFIX}").read_bytes())
    out = tmp_path / "run"
    os.makedirs(out)
    summary = run(compose("bench", [f"bench_dir={bench}", f"candidates={candidates}", "html=false",
                                    f"hydra.run.dir={out}"]), str(out))
    layout = summary["layout"]
    assert summary["overall"] == 1.0 and layout["pages"] == 8 and layout["pages_without_blocks"] == 4
    assert layout["mean_iou"]["mean"] == layout["label_accuracy"]["mean"] == pytest.approx(
        layout["answer_blocks"] / layout["truth_blocks"], abs=1e-4)
    assert 0 < layout["f1"]["low"] < layout["f1"]["mean"] < layout["f1"]["high"] < 1
    assert set(layout["f1_by_label"]) >= {"title", "text", "page_header", "page_number"}
    written = json.load(open(out / "results.json"))
    assert written["layout"] == layout and "Layout (8 pages with truth blocks" in (out / "report.md").read_text()
