"""Synthetic single-page PDFs with their markdown truth and olmOCR-bench tests, deterministic by seed.

A page is described once (:mod:`olmocr.synth.blocks`: heading, paragraph, bullets, table, equation,
figure); its blocks are placed (:mod:`olmocr.synth.layout`), and the PDF, the truth and the tests all
come from that one description. Running headers and footers are drawn but left out of the truth: a good
OCR drops them, and absent tests check that it does.
"""

from __future__ import annotations

import json
import os
import random

from reportlab.lib.pagesizes import A4, LETTER, landscape
from tqdm import tqdm

from olmocr.bench.records import AbsentTest, BaselineTest, MathTest, OrderTest, PresentTest, TableTest
from olmocr.formats.frontmatter import PageMeta, write_document
from olmocr.synth import text as words
from olmocr.synth.blocks import Block, Bullets, Equation, Figure, Heading, Page, Paragraph, Table, table_share
from olmocr.synth.layout import draw, place, truth

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
                 language_weights: dict[str, float] | None = None):
        self.seed = seed
        self.layout_weights = layout_weights or {name: 1.0 for name in LAYOUTS}
        unknown = set(self.layout_weights) - set(LAYOUTS)
        if unknown:
            raise ValueError(f"layout_weights: unknown layout(s) {sorted(unknown)} (expected {', '.join(LAYOUTS)})")
        self.language_weights = language_weights or {"en": 1.0}
        unknown = set(self.language_weights) - set(words.LANGUAGES)
        if unknown:
            raise ValueError(f"language_weights: unknown language(s) {sorted(unknown)} "
                             f"(expected {', '.join(words.LANGUAGES)})")
        for key, weights in (("layout_weights", self.layout_weights), ("language_weights", self.language_weights)):
            if any(w < 0 for w in weights.values()) or not sum(weights.values()) > 0:
                raise ValueError(f"{key}: weights must be 0 or more with at least one positive, got {weights}")

    # -- page description ---------------------------------------------------------------------------------
    def describe(self, index: int) -> Page:
        rng = random.Random(f"{self.seed}/{index}")
        layout = rng.choices(list(self.layout_weights), weights=list(self.layout_weights.values()))[0]
        lang = rng.choices(list(self.language_weights), weights=list(self.language_weights.values()))[0]
        page_size = rng.choice([LETTER, A4])
        font = rng.choice(FONTS)
        body = rng.choice([9.0, 10.0, 11.0, 12.0])
        name = f"synth_s{self.seed}_{index:05d}"
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


def generate(out_dir: str, num_pages: int, seed: int = 0, first_index: int = 0,
             layout_weights: dict[str, float] | None = None,
             language_weights: dict[str, float] | None = None, tests_file: str = "synth.jsonl") -> dict:
    """Write ``num_pages`` pages as ``pdfs/<name>.pdf`` + ``pdfs/<name>.md`` and their tests as JSONL.

    Returns counts by layout and test type. The same arguments always give byte-identical files.
    """
    if num_pages < 1:
        raise ValueError(f"num_pages: must be at least 1, got {num_pages}")
    if first_index < 0:
        raise ValueError(f"first_index: must be 0 or more, got {first_index}")
    gen = PageGenerator(seed, layout_weights, language_weights)
    pdf_dir = os.path.join(out_dir, "pdfs")
    os.makedirs(pdf_dir, exist_ok=True)
    counts: dict[str, int] = {}
    lines = []
    for index in tqdm(range(first_index, first_index + num_pages), desc="synth pages", unit="page",
                      disable=num_pages < 50):
        page = gen.describe(index)
        placed = place(page)
        draw(page, placed, os.path.join(pdf_dir, f"{page.name}.pdf"))
        with open(os.path.join(pdf_dir, f"{page.name}.md"), "w", encoding="utf-8", newline="\n") as fh:
            fh.write(write_document(page.meta, truth(page, placed)))
        for test in gen.tests(page, random.Random(f"{seed}/{index}/tests")):
            lines.append(json.dumps(test.to_dict(), ensure_ascii=False))
            counts[f"test:{test.type}"] = counts.get(f"test:{test.type}", 0) + 1
        kind = "rotated" if page.rotation else ("blank" if not page.blocks else "page")
        counts[kind] = counts.get(kind, 0) + 1
    with open(os.path.join(out_dir, tests_file), "w", encoding="utf-8", newline="\n") as fh:
        fh.write("".join(line + "\n" for line in lines))
    return counts
