"""Synthetic single-page PDFs with their markdown truth and olmOCR-bench tests, deterministic by seed.

A page is a list of blocks (heading, paragraph, list, table, equation, figure). Each block knows
how it is drawn and how it is written in the target markdown, so the truth, the PDF and the tests
come from one description. Running headers and footers are drawn but left out of the truth: a good
OCR drops them, and absent tests check that it does.
"""

from __future__ import annotations

import html
import json
import os
import random
from dataclasses import dataclass, field

from reportlab.lib.pagesizes import A4, LETTER, landscape
from reportlab.lib.utils import simpleSplit
from reportlab.pdfgen.canvas import Canvas
from tqdm import tqdm

from olmocr.bench.records import AbsentTest, BaselineTest, MathTest, OrderTest, PresentTest, TableTest
from olmocr.formats.frontmatter import PageMeta, write_document
from olmocr.synth import text as words

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


@dataclass
class Block:
    kind: str
    # A figure's markdown names its position on the page, so it is filled in when the figure is drawn.
    markdown: str
    lines: list[tuple[str, str, float]] = field(default_factory=list)  # (text, font, size) drawn lines
    rows: list[list[str]] = field(default_factory=list)
    latex: str = ""
    sentences: list[str] = field(default_factory=list)
    height: float = 0.0  # figures only, in points


@dataclass
class Page:
    name: str
    meta: PageMeta
    blocks: list[Block]
    header: str | None
    footer: str | None
    columns: int
    page_size: tuple[float, float]
    font: tuple[str, str]
    body_size: float
    rotation: int  # clockwise display rotation of the PDF page

    @property
    def markdown(self) -> str:
        return "\n\n".join(b.markdown for b in self.blocks)


def _table_share(blocks: list[Block]) -> float:
    """Fraction of the page's visible characters that are table cells."""
    table = sum(len(cell) for b in blocks if b.kind == "table" for row in b.rows for cell in row)
    prose = sum(len(sentence) for b in blocks if b.kind != "table" for sentence in b.sentences)
    return table / max(table + prose, 1)


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
            is_table=_table_share(blocks) > 0.5,
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

    def _heading(self, rng, lang, level) -> Block:
        text = words.title(rng, lang)
        if level == 2:
            text = f"{rng.randint(1, 9)}. {text}"
        return Block("heading", "#" * level + " " + text, sentences=[text])

    def _paragraph(self, rng, lang, count: tuple[int, int] = (2, 5)) -> Block:
        sentences = [words.sentence(rng, lang) for _ in range(rng.randint(*count))]
        return Block("paragraph", " ".join(sentences), sentences=sentences)

    def _list(self, rng, lang) -> Block:
        items = [words.sentence(rng, lang, 3, 8) for _ in range(rng.randint(2, 4))]
        return Block("list", "\n".join(f"- {item}" for item in items), sentences=items)

    def _table(self, rng, lang, rows: tuple[int, int], cols: tuple[int, int]) -> Block:
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
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        rows_html = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in body)
        markdown = f"<table><thead><tr>{head}</tr></thead><tbody>{rows_html}</tbody></table>"
        return Block("table", markdown, rows=[header] + body)

    def _equation(self, rng) -> Block:
        latex, shown = rng.choice(EQUATIONS)
        values = {"a": rng.randint(2, 9), "b": rng.randint(2, 99), "c": rng.randint(2, 99)}
        latex = latex.format(**values)
        return Block("equation", f"\\[{latex}\\]", lines=[(shown.format(**values), "", 0.0)], latex=latex)

    def _figure(self, rng, lang, height: float) -> Block:
        caption = words.title(rng, lang, (2, 4))
        bars = [str(rng.randint(10, 90)) for _ in range(rng.randint(3, 6))]
        return Block("figure", "", sentences=[caption], rows=[bars], height=height)

    # -- drawing ------------------------------------------------------------------------------------------------
    def draw(self, page: Page, path: str) -> None:
        width, height = page.page_size
        # reportlab's pagesize is the displayed size: for a quarter turn it swaps the MediaBox back, so
        # passing the swapped size keeps the MediaBox in the coordinates the content is drawn in.
        displayed = (height, width) if page.rotation in (90, 270) else (width, height)
        canvas = Canvas(path, pagesize=displayed, invariant=1, pageCompression=1)
        canvas.setTitle(page.name)
        canvas.setCreator("olmocr.synth")
        if page.rotation:
            canvas.setPageRotation(page.rotation)
        regular, bold = page.font
        margin = 54.0
        if page.header:
            canvas.setFont(regular, 8)
            canvas.drawString(margin, height - 30, page.header)
        if page.footer:
            canvas.setFont(regular, 8)
            canvas.drawCentredString(width / 2, 24, page.footer)
        gutter = 18.0
        col_width = (width - 2 * margin - gutter * (page.columns - 1)) / page.columns
        col, x, y = 0, margin, height - margin - 10
        bottom = margin + 10
        for block in page.blocks:
            for kind, payload in self._layout(block, page, col_width):
                needed = payload[2] if kind == "figure" else (payload[1] * 1.35 if kind != "table" else 0)
                if kind == "table":
                    needed = len(block.rows) * (page.body_size + 8)
                if y - needed < bottom and col + 1 < page.columns:
                    col += 1
                    x, y = margin + col * (col_width + gutter), height - margin - 10
                y = self._draw_piece(canvas, kind, payload, block, x, y, col_width, page)
            y -= page.body_size * 0.8
        canvas.showPage()
        canvas.save()
        # Page text beyond the bottom margin would make the truth wrong: fail loudly instead.
        if y < 20:
            raise RuntimeError(f"{page.name}: content overflowed the page")

    def _layout(self, block: Block, page: Page, width: float):
        regular, bold = page.font
        size = page.body_size
        if block.kind == "heading":
            level_size = size + (8 if block.markdown.startswith("# ") else 3)
            for line in simpleSplit(block.sentences[0], bold, level_size, width):
                yield "text", (line, level_size, bold)
        elif block.kind == "paragraph":
            for line in simpleSplit(block.markdown, regular, size, width):
                yield "text", (line, size, regular)
        elif block.kind == "list":
            for item in block.sentences:
                for i, line in enumerate(simpleSplit(item, regular, size, width - 14)):
                    yield "text", (("• " if i == 0 else "   ") + line, size, regular)
        elif block.kind == "equation":
            yield "equation", (block.lines[0][0], size + 1, regular)
        elif block.kind == "table":
            yield "table", (None, size, regular)
        elif block.kind == "figure":
            yield "figure", (None, size, block.height)

    def _draw_piece(self, canvas, kind, payload, block, x, y, width, page) -> float:
        regular, bold = page.font
        if kind == "text":
            line, size, font = payload
            canvas.setFont(font, size)
            canvas.drawString(x, y - size, line)
            return y - size * 1.35
        if kind == "equation":
            line, size, font = payload
            canvas.setFont("Times-Italic", size)
            canvas.drawCentredString(x + width / 2, y - size - 4, line)
            return y - size * 1.35 - 8
        if kind == "table":
            size = payload[1]
            rows = block.rows
            row_h = size + 8
            col_w = width / len(rows[0])
            top = y - 4
            for r, row in enumerate(rows):
                canvas.setFont(bold if r == 0 else regular, size)
                for c, cell in enumerate(row):
                    canvas.drawString(x + c * col_w + 3, top - (r + 1) * row_h + 5, cell)
            canvas.setLineWidth(0.5)
            for r in range(len(rows) + 1):
                canvas.line(x, top - r * row_h, x + width, top - r * row_h)
            for c in range(len(rows[0]) + 1):
                canvas.line(x + c * col_w, top, x + c * col_w, top - len(rows) * row_h)
            return top - len(rows) * row_h - 6
        if kind == "figure":
            fig_h = payload[2]
            values = [int(v) for v in block.rows[0]]
            fig_w = min(width, 1.3 * fig_h)
            left, base = x + (width - fig_w) / 2, y - fig_h
            bar_w = fig_w / (2 * len(values))
            canvas.setLineWidth(0.8)
            canvas.line(left, base, left + fig_w, base)
            canvas.line(left, base, left, base + fig_h - 20)
            for i, v in enumerate(values):
                canvas.setFillGray(0.3 + 0.1 * (i % 4))
                canvas.rect(left + (2 * i + 0.5) * bar_w, base, bar_w, (fig_h - 24) * v / 100, fill=1, stroke=0)
            canvas.setFillGray(0)
            canvas.setFont("Helvetica-Oblique", 8)
            canvas.drawCentredString(left + fig_w / 2, base - 12, block.sentences[0])
            # The figure's place on the page, in PDF points from the top-left, goes into the truth.
            pw, ph = page.page_size
            block.markdown = (f"![Bar chart: {block.sentences[0]}]"
                              f"(page_{left:.0f}_{ph - y:.0f}_{fig_w:.0f}_{fig_h + 14:.0f}.png)")
            return base - 20
        raise AssertionError(kind)

    # -- tests ----------------------------------------------------------------------------------------------------
    def tests(self, page: Page, rng: random.Random) -> list:
        pdf = f"{page.name}.pdf"
        out = []

        def tid(kind: str) -> str:
            return f"{page.name}_{kind}_{len(out):02d}"

        if not page.blocks:
            return [BaselineTest(pdf=pdf, page=1, id=tid("blank"), max_length=0)]
        sentences = [(i, s) for i, b in enumerate(page.blocks) if b.kind in ("paragraph", "list") for s in b.sentences]
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
            if block.kind == "table":
                rows = block.rows
                r, c = rng.randint(1, len(rows) - 1), rng.randint(0, len(rows[0]) - 1)
                out.append(TableTest(
                    pdf=pdf, page=1, id=tid("table"), cell=rows[r][c],
                    up=rows[r - 1][c], down=rows[r + 1][c] if r + 1 < len(rows) else None,
                    left=rows[r][c - 1] if c else None, right=rows[r][c + 1] if c + 1 < len(rows[0]) else None,
                    top_heading=rows[0][c],
                ))
            elif block.kind == "equation":
                out.append(MathTest(pdf=pdf, page=1, id=tid("math"), math=block.latex))
        out.append(BaselineTest(pdf=pdf, page=1, id=tid("baseline")))
        return out


def generate(out_dir: str, num_pages: int, seed: int = 0, first_index: int = 0,
             layout_weights: dict[str, float] | None = None,
             language_weights: dict[str, float] | None = None, tests_file: str = "synth.jsonl") -> dict:
    """Write ``num_pages`` pages as ``pdfs/<name>.pdf`` + ``pdfs/<name>.md`` and their tests as JSONL.

    Returns counts by layout and test type. The same arguments always give byte-identical files.
    """
    gen = PageGenerator(seed, layout_weights, language_weights)
    pdf_dir = os.path.join(out_dir, "pdfs")
    os.makedirs(pdf_dir, exist_ok=True)
    counts: dict[str, int] = {}
    lines = []
    for index in tqdm(range(first_index, first_index + num_pages), desc="synth pages", unit="page",
                      disable=num_pages < 50):
        page = gen.describe(index)
        gen.draw(page, os.path.join(pdf_dir, f"{page.name}.pdf"))
        with open(os.path.join(pdf_dir, f"{page.name}.md"), "w", encoding="utf-8", newline="\n") as fh:
            fh.write(write_document(page.meta, page.markdown))
        for test in gen.tests(page, random.Random(f"{seed}/{index}/tests")):
            lines.append(json.dumps(test.to_dict(), ensure_ascii=False))
            counts[f"test:{test.type}"] = counts.get(f"test:{test.type}", 0) + 1
        kind = "rotated" if page.rotation else ("blank" if not page.blocks else "page")
        counts[kind] = counts.get(kind, 0) + 1
    with open(os.path.join(out_dir, tests_file), "w", encoding="utf-8", newline="\n") as fh:
        fh.write("".join(line + "\n" for line in lines))
    return counts
