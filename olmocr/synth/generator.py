"""Synthetic single-page PDFs with their markdown truth and olmOCR-bench tests, deterministic by seed.

A page is described once (:mod:`olmocr.synth.blocks`: heading, paragraph, bullets, table, equation,
figure); its blocks are placed (:mod:`olmocr.synth.layout`), and the PDF, the truth and the tests all
come from that one description. Running headers and footers are drawn but left out of the markdown truth: a
good OCR drops them, and absent tests check that it does. The page's blocks record (labels and boxes of
everything drawn) keeps them, labelled as furniture.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import random
import re

from reportlab.lib.pagesizes import A4, LETTER, landscape
from tqdm import tqdm

from olmocr.bench.records import AbsentTest, BaselineTest, MathTest, OrderTest, PresentTest, TableTest
from olmocr.errors import UserError
from olmocr.formats import structure
from olmocr.formats.frontmatter import PageMeta, write_document
from olmocr.runlock import run_dir_held
from olmocr.synth import text as words
from olmocr.synth.blocks import (Block, Bullets, Equation, Figure, Heading, Page, Paragraph, Table, page_name,
                                 table_share)
from olmocr.synth.layout import blocks_of, draw, place, truth

FONTS = [("Helvetica", "Helvetica-Bold"), ("Times-Roman", "Times-Bold"), ("Courier", "Courier-Bold")]
LAYOUTS = ("single_column", "two_column", "table", "math", "diagram", "rotated", "blank")

# Equations as (LaTeX truth, how the page shows it); {a}/{b}/{c} are filled with numbers. The shown
# form keeps to characters the standard PDF fonts encode, so no glyph is silently dropped.
EQUATIONS = [
    ("E = m c^{{{a}}}", "E = m c^{a}"),
    ("x_{{{a}}} = \\frac{{{b}}}{{{c}}}", "x_{a} = {b} / {c}"),
    ("\\sum_{{i=1}}^{{{a}}} i = {b}", "sum(i = 1 ... {a}) i = {b}"),
    ("\\int_{{0}}^{{{a}}} x \\, dx = {b}", "int(0 ... {a}) x dx = {b}"),
    ("y = {a} x^{{2}} + {b} x + {c}", "y = {a}x\u00b2 + {b}x + {c}"),
    ("\\sqrt{{{a}}} \\approx {b}", "sqrt({a}) ~ {b}"),
    ("\\alpha + \\beta = {a}", "alpha + beta = {a}"),
    ("f(x) = \\frac{{x}}{{{a}}} - {b}", "f(x) = x / {a} - {b}"),
]


class PageGenerator:
    def __init__(self, seed: int, layout_weights: dict[str, float] | None = None,
                 language_weights: dict[str, float] | None = None, category: str | None = None):
        self.seed, self.category = seed, category
        self.layout_weights = layout_weights or {name: 1.0 for name in LAYOUTS}
        unknown = set(self.layout_weights) - set(LAYOUTS)
        if unknown:
            raise UserError(f"layout_weights: unknown layout(s) {sorted(unknown)} (expected {', '.join(LAYOUTS)})")
        self.language_weights = language_weights or {"en": 1.0}
        unknown = set(self.language_weights) - set(words.LANGUAGES)
        if unknown:
            raise UserError(f"language_weights: unknown language(s) {sorted(unknown)} "
                            f"(expected {', '.join(words.LANGUAGES)})")
        for key, weights in (("layout_weights", self.layout_weights), ("language_weights", self.language_weights)):
            if any(w < 0 for w in weights.values()) or not sum(weights.values()) > 0:
                raise UserError(f"{key}: weights must be 0 or more with at least one positive, got {weights}")

    # -- page description ---------------------------------------------------------------------------------
    def describe(self, index: int) -> Page:
        rng = random.Random(f"{self.seed}/{index}")
        layout = rng.choices(list(self.layout_weights), weights=list(self.layout_weights.values()))[0]
        lang = rng.choices(list(self.language_weights), weights=list(self.language_weights.values()))[0]
        page_size = rng.choice([LETTER, A4])
        font = rng.choice(FONTS)
        body = rng.choice([9.0, 10.0, 11.0, 12.0])
        name = page_name(self.seed, index, self.category)
        rotation = rng.choice([90, 180, 270]) if layout == "rotated" else 0
        columns = 2 if layout == "two_column" else 1
        if layout == "two_column" and page_size == LETTER and rng.random() < 0.3:
            page_size = landscape(LETTER)
        header = None if layout == "blank" else f"{words.title(rng, lang, (2, 4))} · {rng.randint(1990, 2025)}"
        footer = None if layout == "blank" else f"Page {rng.randint(2, 400)}"
        blocks = [] if layout == "blank" else self._blocks(rng, layout, lang)
        meta = PageMeta(
            primary_language=None if layout == "blank" else lang,
            is_rotation_valid=rotation == 0,
            rotation_correction=(360 - rotation) % 360,
            # As in olmOCR's schema, the flags say whether *most* of the page is a table or a diagram.
            is_table=table_share(blocks) > 0.5,
            is_diagram=layout == "diagram",
        )
        return Page(name, meta, blocks, header, footer, columns, page_size, font, body, rotation)

    def _blocks(self, rng: random.Random, layout: str, lang: str) -> list[Block]:
        blocks = [self._heading(rng, lang, 1)]
        if layout == "table":  # mostly table: a short lead-in, then a large table
            return blocks + [self._paragraph(rng, lang, (1, 1)), self._table(rng, lang, (8, 14), (3, 5))]
        if layout == "diagram":  # mostly figure: a large chart and a short caption paragraph
            return blocks + [self._figure(rng, lang, 260.0), self._paragraph(rng, lang, (1, 2))]
        count = {"two_column": 6, "single_column": 4}.get(layout, 3)
        for i in range(count):
            if i and rng.random() < 0.3:
                blocks.append(self._heading(rng, lang, 2))
            blocks.append(self._list(rng, lang) if rng.random() < 0.15 else self._paragraph(rng, lang))
            if layout == "single_column" and i == 0 and rng.random() < 0.3:
                blocks.append(self._table(rng, lang, (2, 3), (2, 3)))  # a small table on a text page
            if layout == "math" and i < 2:
                blocks.append(self._equation(rng))
        return blocks

    def _heading(self, rng, lang, level) -> Heading:
        text = words.title(rng, lang)
        if level == 2:
            text = f"{rng.randint(1, 9)}. {text}"
        return Heading(text, level)

    def _paragraph(self, rng, lang, count: tuple[int, int] = (2, 5)) -> Paragraph:
        return Paragraph([words.sentence(rng, lang) for _ in range(rng.randint(*count))])

    def _list(self, rng, lang) -> Bullets:
        return Bullets([words.sentence(rng, lang, 3, 8) for _ in range(rng.randint(2, 4))])

    def _table(self, rng, lang, rows: tuple[int, int], cols: tuple[int, int]) -> Table:
        cols, rows = rng.randint(*cols), rng.randint(*rows)
        header = [words.title(rng, lang, (1, 2)) for _ in range(cols)]
        body = [[words.title(rng, lang, (1, 1))] + [f"{rng.uniform(0, 1000):.1f}" for _ in range(cols - 1)]
                for _ in range(rows)]
        # Cell text must be unique so a table test names one cell.
        seen: set[str] = set()
        for r, row in enumerate([header] + body):
            for c, cell in enumerate(row):
                while cell in seen:
                    cell = f"{cell} {r}{c}"
                seen.add(cell)
                row[c] = cell
        return Table([header] + body)

    def _equation(self, rng) -> Equation:
        latex, shown = rng.choice(EQUATIONS)
        values = {"a": rng.randint(2, 9), "b": rng.randint(2, 99), "c": rng.randint(2, 99)}
        return Equation(latex.format(**values), shown.format(**values))

    def _figure(self, rng, lang, height: float) -> Figure:
        caption = words.title(rng, lang, (2, 4))
        return Figure(caption, [rng.randint(10, 90) for _ in range(rng.randint(3, 6))], height)

    # -- tests ----------------------------------------------------------------------------------------------------
    def tests(self, page: Page, rng: random.Random) -> list:
        pdf = f"{page.name}.pdf"
        out = []

        def tid(kind: str) -> str:
            return f"{page.name}_{kind}_{len(out):02d}"

        if not page.blocks:
            return [BaselineTest(pdf=pdf, page=1, id=tid("blank"), max_length=0)]
        sentences = [(i, s) for i, b in enumerate(page.blocks) if isinstance(b, (Paragraph, Bullets))
                     for s in b.sentences]
        for _, s in rng.sample(sentences, min(3, len(sentences))):
            out.append(PresentTest(pdf=pdf, page=1, id=tid("present"), text=s, max_diffs=rng.choice([0, 1, 2])))
        title = page.blocks[0].sentences[0]
        out.append(PresentTest(pdf=pdf, page=1, id=tid("present"), text=title.lower(), case_sensitive=False,
                               first_n=len(title) + 40))
        if page.header:
            out.append(AbsentTest(pdf=pdf, page=1, id=tid("absent"), text=page.header, max_diffs=1))
        if page.footer:
            out.append(AbsentTest(pdf=pdf, page=1, id=tid("absent"), text=page.footer, last_n=200))
        if len(sentences) >= 2:
            (i, a), (j, b) = sorted(rng.sample(sentences, 2))
            if i == j:  # same block: keep the order the sentences have in the block
                block = page.blocks[i].sentences
                a, b = sorted((a, b), key=block.index)
            if a != b:
                out.append(OrderTest(pdf=pdf, page=1, id=tid("order"), before=a, after=b, max_diffs=1))
        for block in page.blocks:
            if isinstance(block, Table):
                rows = block.rows
                r, c = rng.randint(1, len(rows) - 1), rng.randint(0, len(rows[0]) - 1)
                out.append(TableTest(
                    pdf=pdf, page=1, id=tid("table"), cell=rows[r][c],
                    up=rows[r - 1][c], down=rows[r + 1][c] if r + 1 < len(rows) else None,
                    left=rows[r][c - 1] if c else None, right=rows[r][c + 1] if c + 1 < len(rows[0]) else None,
                    top_heading=rows[0][c],
                ))
            elif isinstance(block, Equation):
                out.append(MathTest(pdf=pdf, page=1, id=tid("math"), math=block.latex))
        out.append(BaselineTest(pdf=pdf, page=1, id=tid("baseline")))
        return out


SETTINGS_FILE = "synth_settings.json"  # what out_dir's pages were made with, and which pages finished runs wrote
PARTIAL = ".partial"
# What a record written before a key existed means by it (records of layout pages have none of them).
READING_KEYS = {"reading": None, "reading_words": None, "reading_type": None, "reading_faces": None}
READING_BEFORE = {"reading_type": "grid", "reading_faces": []}  # reading pages recorded before typeset ones
CATEGORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def category_files(category: str | None) -> tuple[str, str]:
    """(tests file, settings record) of a category's pages in out_dir: ``synth.jsonl`` and SETTINGS_FILE by
    default; ``<category>.jsonl`` (a category of the bench the folder is) and ``<category>_settings.json``."""
    name = category or "synth"
    if not CATEGORY.fullmatch(name):
        raise UserError(f"category: expected letters, digits, '_' or '-' (a test file's name), got {category!r}")
    return f"{name}.jsonl", SETTINGS_FILE if name == "synth" else f"{name}_settings.json"


def make_generator(seed: int, settings: dict, category: str | None = None):
    """The page generator that ``settings`` (as recorded in SETTINGS_FILE) describe."""
    if settings.get("reading"):
        from olmocr.synth.reading import ReadingPageGenerator

        return ReadingPageGenerator(seed, settings["reading"], settings["reading_words"], category,
                                    settings.get("reading_type", "grid"), settings.get("reading_faces") or ())
    return PageGenerator(seed, settings["layout_weights"], settings["language_weights"], category)


def generate(out_dir: str, num_pages: int, seed: int = 0, first_index: int = 0,
             layout_weights: dict[str, float] | None = None,
             language_weights: dict[str, float] | None = None, category: str | None = None,
             reading: str | None = None, reading_words: str = "all", reading_type: str = "grid",
             reading_faces: list[str] | tuple[str, ...] = ()) -> dict:
    """Write pages ``first_index …`` as ``pdfs/<name>.pdf`` + ``pdfs/<name>.md`` + ``pdfs/<name>.blocks.json`` (its
    blocks with their labels and boxes, :func:`olmocr.formats.structure.page_record`), and the tests of every page
    that finished runs wrote to ``out_dir`` as JSONL (``synth.jsonl``, or ``<category>.jsonl``: pages of
    several categories, each made with settings of its own, share a folder as a bench's categories do).

    Returns counts by layout and test type, and how many pages an earlier run had written. The same arguments
    always give byte-identical files. Each file appears whole (written aside, then renamed), so a run that
    is killed leaves only whole pages, and run again with the same settings it keeps them and writes the
    rest; a run with another ``first_index`` or ``seed`` adds its pages, and the tests file then covers all.
    """
    if num_pages < 1:
        raise UserError(f"num_pages: must be at least 1, got {num_pages}")
    if first_index < 0:
        raise UserError(f"first_index: must be 0 or more, got {first_index}")
    tests_file, settings_file = category_files(category)
    if reading:  # reading pages (olmocr.synth.reading): the weights do not apply
        settings = {"layout_weights": {}, "language_weights": {}, "reading": reading, "reading_words": reading_words,
                    "reading_type": reading_type, "reading_faces": list(reading_faces)}
        gen = make_generator(seed, settings, category)
    else:
        gen = PageGenerator(seed, layout_weights, language_weights, category)
        settings = {"layout_weights": _floats(gen.layout_weights), "language_weights": _floats(gen.language_weights)}
    pdf_dir = os.path.join(out_dir, "pdfs")
    os.makedirs(pdf_dir, exist_ok=True)
    with run_dir_held(out_dir, advice="give this one another out_dir"):
        resuming, ranges = _made_before(out_dir, settings, settings_file)
        for stray in glob.glob(os.path.join(glob.escape(pdf_dir), f"*{PARTIAL}")):
            os.remove(stray)  # cut short by a kill; no other run writes here while this one holds the folder
        counts: dict[str, int] = {}
        # Closed as an error unwinds, so the bar's last line comes before the line saying what happened.
        with tqdm(range(first_index, first_index + num_pages), desc="synth pages", unit="page",
                  disable=num_pages < 50) as pages:
            for index in pages:
                page = gen.describe(index)
                pdf, md, boxes = (os.path.join(pdf_dir, page.name + ext) for ext in (".pdf", ".md", structure.SUFFIX))
                if resuming and all(os.path.exists(path) for path in (pdf, md, boxes)):
                    counts["kept"] = counts.get("kept", 0) + 1
                else:
                    placed = place(page)
                    _whole(md, _write_text, write_document(page.meta, truth(page, placed)))
                    record = structure.page_record(blocks_of(page, placed), page.page_size)
                    _whole(boxes, _write_text, json.dumps(record, ensure_ascii=False) + "\n")
                    _whole(pdf, functools.partial(draw, page, placed))
                for test in gen.tests(page, random.Random(f"{seed}/{index}/tests")):
                    counts[f"test:{test.type}"] = counts.get(f"test:{test.type}", 0) + 1
                kind = "rotated" if page.rotation else ("blank" if not page.blocks else "page")
                counts[kind] = counts.get(kind, 0) + 1
        ranges = _merged(ranges + [[seed, first_index, num_pages]])
        _whole(os.path.join(out_dir, tests_file), _write_tests, settings, ranges, category)
        _whole(os.path.join(out_dir, settings_file), _write_text, _record(settings, ranges))
    return counts


def _floats(weights: dict[str, float]) -> dict[str, float]:
    return {key: float(value) for key, value in weights.items()}


def _record(settings: dict, ranges: list[list[int]]) -> str:
    return json.dumps({**settings, "pages": ranges}) + "\n"


def _made_before(out_dir: str, settings: dict, settings_file: str = SETTINGS_FILE) -> tuple[bool, list[list[int]]]:
    """(whether out_dir's pages may be kept, the [seed, first, count] ranges that finished runs wrote). Pages made
    with other settings would pass for this run's, so such a folder is refused; a folder of pages with no
    record (made by hand, or before records were kept) is written over."""
    path = os.path.join(out_dir, settings_file)
    try:
        with open(path, encoding="utf-8") as fh:
            record = json.load(fh)
        # Records of layout pages (and those written before reading pages existed) have no reading keys.
        made_with = {key: _recorded(record, key) if key in READING_KEYS else record[key] for key in settings}
        ranges = [[int(seed), int(first), int(count)] for seed, first, count in record["pages"]]
    except FileNotFoundError:
        # Recorded before the first page, so a run killed before it finishes is resumed.
        _whole(path, _write_text, _record(settings, []))
        return False, []
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: not a record of synthetic pages ({type(exc).__name__}: {exc}); "
                        "give this run another out_dir, or remove the file to write the pages again") from None
    # Order matters as much as values: the weights are drawn from in their order.
    differ = [key for key in settings if _ordered(made_with[key]) != _ordered(settings[key])]
    if differ:
        theirs = ", ".join(f"{key}={json.dumps(made_with[key])}" for key in differ)
        ours = ", ".join(f"{key}={json.dumps(settings[key])}" for key in differ)
        raise UserError(f"out_dir {out_dir} holds pages made with {theirs}, and this run has {ours}: give it "
                        "another out_dir, or the same settings to add pages or finish an interrupted run")
    return True, ranges


def _recorded(record: dict, key: str):
    if key in record:
        return record[key]
    return READING_BEFORE.get(key) if record.get("reading") else None


def _ordered(value):
    return list(value.items()) if isinstance(value, dict) else value


def _merged(ranges: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for seed, first, count in sorted(ranges):
        if out and out[-1][0] == seed and first <= out[-1][1] + out[-1][2]:
            out[-1][2] = max(out[-1][2], first + count - out[-1][1])
        else:
            out.append([seed, first, count])
    return out


def _whole(path: str, write, *args) -> None:
    """``write(tmp, *args)``, then the file appears at ``path`` at once: a reader (or a run resumed after a
    kill) never finds it cut short."""
    tmp = path + PARTIAL
    write(tmp, *args)
    os.replace(tmp, path)


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)


def _write_tests(path: str, settings: dict, ranges: list[list[int]], category: str | None = None) -> None:
    """Every page's tests, a line each, in page order; written as made, so memory does not grow with pages."""
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for seed, first, count in ranges:
            gen = make_generator(seed, settings, category)
            for index in range(first, first + count):
                for test in gen.tests(gen.describe(index), random.Random(f"{seed}/{index}/tests")):
                    fh.write(json.dumps(test.to_dict(), ensure_ascii=False) + "\n")
