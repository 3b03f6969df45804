"""Where a synthetic page's blocks go, then the PDF drawn from that and the truth written from it.

:func:`place` turns the blocks into pieces (a line of text, an equation, a table, a chart), each at its
place in the page's columns; it draws nothing. :func:`draw` renders the placed pieces with reportlab,
and :func:`truth` writes the page's markdown, where a figure names its box on the page.
"""

from __future__ import annotations

from dataclasses import dataclass

from reportlab.lib.utils import simpleSplit
from reportlab.pdfbase.pdfmetrics import getAscentDescent, stringWidth
from reportlab.pdfgen.canvas import Canvas

from olmocr.formats import structure
from olmocr.synth.blocks import Block, Bullets, Equation, Figure, Furniture, Heading, Page, Paragraph, Table

MARGIN, GUTTER = 54.0, 18.0
# the running header's baseline below the page's top, the footer's above its bottom, and their size
HEADER_DROP, FOOTER_RISE, FURNITURE_SIZE = 30.0, 24.0, 8.0


@dataclass(frozen=True)
class TextLine:
    text: str
    font: str
    size: float
    leading: float = 1.35  # in sizes
    item: int = 0  # which item of a list the line belongs to

    def needs(self) -> float:  # the space it must find in a column
        return self.size * self.leading

    def advance(self) -> float:  # how far down the next piece starts
        return self.size * self.leading


@dataclass(frozen=True)
class EquationLine:
    text: str
    size: float

    def needs(self) -> float:
        return self.size * 1.35

    def advance(self) -> float:
        return self.size * 1.35 + 8


@dataclass(frozen=True)
class TableGrid:
    table: Table
    size: float
    regular: str
    bold: str

    @property
    def row_height(self) -> float:
        return self.size + 8

    def needs(self) -> float:
        return len(self.table.rows) * self.row_height

    def advance(self) -> float:
        return 4 + len(self.table.rows) * self.row_height + 6


@dataclass(frozen=True)
class Chart:
    figure: Figure

    def needs(self) -> float:
        return self.figure.height

    def advance(self) -> float:
        return self.figure.height + 20


Piece = TextLine | EquationLine | TableGrid | Chart


@dataclass(frozen=True)
class Placed:
    block: int  # index of the block the piece draws
    piece: Piece
    x: float  # left edge of its column
    y: float  # top of the piece, in PDF points from the bottom of the page
    width: float  # of its column


def chart_box(placed: Placed) -> tuple[float, float, float, float]:
    """(left, bottom, width, height) of a chart's plot area, in PDF points."""
    height = placed.piece.figure.height
    width = min(placed.width, 1.3 * height)
    return placed.x + (placed.width - width) / 2, placed.y - height, width, height


def pieces(block: Block, page: Page, width: float) -> list[Piece]:
    regular, bold = page.font
    size = page.body_size
    if isinstance(block, Heading):
        size += page.heading_growth[0 if block.level == 1 else 1]
        return [TextLine(line, bold, size, page.leading) for line in simpleSplit(block.text, bold, size, width)]
    if isinstance(block, Paragraph | Furniture):
        text = block.markdown if isinstance(block, Paragraph) else block.text
        return [TextLine(line, regular, size, page.leading) for line in simpleSplit(text, regular, size, width)]
    if isinstance(block, Bullets):
        return [TextLine(("• " if i == 0 else "   ") + line, regular, size, page.leading, n)
                for n, item in enumerate(block.items)
                for i, line in enumerate(simpleSplit(item, regular, size, width - 14))]
    if isinstance(block, Equation):
        return [EquationLine(block.shown, size + 1)]
    if isinstance(block, Table):
        return [TableGrid(block, size, regular, bold)]
    return [Chart(block)]


def place(page: Page) -> list[Placed]:
    """Every piece of the page at its place: top to bottom, then on to the next column when one is full.
    Text beyond the bottom margin would make the truth wrong: that is an error, before anything is drawn."""
    width, height = page.page_size
    margin = page.margin
    column_width = (width - 2 * margin - GUTTER * (page.columns - 1)) / page.columns
    top, bottom = height - margin - 10, margin + 10
    if page.frame:
        margin, from_top, column_width = page.frame
        top, bottom = height - from_top, 0.0
    column, x, y = 0, margin, top
    placed = []
    for index, block in enumerate(page.blocks):
        for piece in pieces(block, page, column_width):
            if y - piece.needs() < bottom and column + 1 < page.columns:
                column += 1
                x, y = margin + column * (column_width + GUTTER), top
            placed.append(Placed(index, piece, x, y, column_width))
            y -= piece.advance()
        y -= page.body_size * page.gap
    # the gap after the last block may reach into the bottom margin; a frame's text ends on the page
    if (y + page.body_size * page.gap < -0.01) if page.frame else y < min(20, bottom - page.body_size):
        raise RuntimeError(f"{page.name}: content overflowed the page")
    return placed


def truth(page: Page, placed: list[Placed]) -> str:
    """The page's markdown: its blocks in reading order, furniture left out; a figure as an image named after its
    box on the page (PDF points from the top-left, as olmOCR writes figures)."""
    return "\n\n".join(md for md, block in zip(markdowns(page, placed), page.blocks)
                         if not isinstance(block, Furniture))


def markdowns(page: Page, placed: list[Placed]) -> list[str]:
    """Each block's markdown, as the truth writes it (furniture: its text)."""
    charts = {p.block: p for p in placed if isinstance(p.piece, Chart)}
    parts = []
    for index, block in enumerate(page.blocks):
        if isinstance(block, Figure):
            left, bottom, width, height = chart_box(charts[index])
            top = page.page_size[1] - charts[index].y
            parts.append(f"![Bar chart: {block.caption}](page_{left:.0f}_{top:.0f}_{width:.0f}_{height + 14:.0f}.png)")
        else:
            parts.append(block.text if isinstance(block, Furniture) else block.markdown)
    return parts


def blocks_of(page: Page, placed: list[Placed]) -> list[structure.Block]:
    """The page as drawn, in reading order: the running header, each block (a list's items one by one), the
    footer; each labelled, with the box of its ink's extent (a text line from its font's ascent to its descent,
    as wide as its string) in 0-1000 of the upright page, and its markdown as :func:`truth` writes it."""
    width, height = page.page_size
    boxes: dict[tuple[int, int], list] = {}  # (block, item): the boxes of its pieces, in points from the top
    for p in placed:
        item = p.piece.item if isinstance(p.piece, TextLine) else 0
        boxes.setdefault((p.block, item), []).append(piece_box(p, height))
    out = []

    def add(label: str, parts: list, text: str) -> None:
        x0, y0 = min(b[0] for b in parts), min(b[1] for b in parts)
        x1, y1 = max(b[2] for b in parts), max(b[3] for b in parts)
        out.append(structure.Block(label, structure.to_scale((x0, y0, x1, y1), (width, height)), text))

    if page.header:
        add("page_header", [text_box(page.header, page.font[0], FURNITURE_SIZE, MARGIN, HEADER_DROP)], page.header)
    markdown = markdowns(page, placed)
    for index, block in enumerate(page.blocks):
        if isinstance(block, Bullets):
            for n, item in enumerate(block.items):
                add("list_item", boxes[index, n], f"- {item}")
            continue
        label = block.label if isinstance(block, Furniture) else \
            ("title" if block.level == 1 else "section_header") if isinstance(block, Heading) else \
            "text" if isinstance(block, Paragraph) else "table" if isinstance(block, Table) else \
            "formula" if isinstance(block, Equation) else "figure"
        add(label, boxes[index, 0], markdown[index])
    if page.footer:
        shown = stringWidth(page.footer, page.font[0], FURNITURE_SIZE)
        label = "page_number" if page.footer.split()[-1].isdigit() else "page_footer"
        add(label, [text_box(page.footer, page.font[0], FURNITURE_SIZE, (width - shown) / 2,
                             height - FOOTER_RISE)], page.footer)
    return out


def glyph_boxes(page: Page, placed: list[Placed]) -> list[tuple[str, tuple[float, float, float, float]]]:
    """Every character drawn on the page's text lines with its box: its advance across, its font's ascent to
    descent down, in points from the page's top-left (what a vision tower's tokens are taught to hold)."""
    out = []
    height = page.page_size[1]
    for p in placed:
        if not isinstance(p.piece, TextLine):
            continue
        piece, x = p.piece, p.x
        _, top, _, bottom = text_box(piece.text, piece.font, piece.size, x, height - (p.y - piece.size))
        for char in piece.text:
            advance = stringWidth(char, piece.font, piece.size)
            if not char.isspace():
                out.append((char, (x, top, x + advance, bottom)))
            x += advance
    return out


def text_box(text: str, font: str, size: float, x: float, baseline: float) -> tuple[float, float, float, float]:
    """(x0, top, x1, bottom) of a string drawn from ``x`` on ``baseline`` (points from the page's top)."""
    ascent, descent = getAscentDescent(font, size)
    return x, baseline - ascent, x + stringWidth(text, font, size), baseline - descent


def piece_box(placed: Placed, height: float) -> tuple[float, float, float, float]:
    """(x0, top, x1, bottom) of what :func:`_draw` draws for a piece, in points from the page's top-left."""
    piece, x, y = placed.piece, placed.x, placed.y
    if isinstance(piece, TextLine):
        return text_box(piece.text, piece.font, piece.size, x, height - (y - piece.size))
    if isinstance(piece, EquationLine):
        shown = stringWidth(piece.text, "Times-Italic", piece.size)
        return text_box(piece.text, "Times-Italic", piece.size, x + (placed.width - shown) / 2,
                        height - (y - piece.size - 4))
    if isinstance(piece, TableGrid):
        return x, height - (y - 4), x + placed.width, height - (y - 4 - len(piece.table.rows) * piece.row_height)
    left, base, chart_width, chart_height = chart_box(placed)  # the axes and bars, then the caption below
    caption = piece.figure.caption
    shown = stringWidth(caption, "Helvetica-Oblique", 8)
    cx0, _, cx1, bottom = text_box(caption, "Helvetica-Oblique", 8, left + (chart_width - shown) / 2,
                                   height - (base - 12))
    return min(left, cx0), height - (base + chart_height - 20), max(left + chart_width, cx1), bottom


def draw(page: Page, placed: list[Placed], path: str) -> None:
    width, height = page.page_size
    # reportlab's pagesize is the displayed size: for a quarter turn it swaps the MediaBox back, so passing
    # the swapped size keeps the MediaBox in the coordinates the content is drawn in.
    displayed = (height, width) if page.rotation in (90, 270) else (width, height)
    canvas = Canvas(path, pagesize=displayed, invariant=1, pageCompression=1)
    canvas.setTitle(page.name)
    canvas.setCreator("olmocr.synth")
    if page.rotation:
        canvas.setPageRotation(page.rotation)
    if page.header:
        canvas.setFont(page.font[0], FURNITURE_SIZE)
        canvas.drawString(MARGIN, height - HEADER_DROP, page.header)
    if page.footer:
        canvas.setFont(page.font[0], FURNITURE_SIZE)
        canvas.drawCentredString(width / 2, FOOTER_RISE, page.footer)
    for p in placed:
        _draw(canvas, p)
    canvas.showPage()
    canvas.save()


def _draw(canvas: Canvas, placed: Placed) -> None:
    piece, x, y = placed.piece, placed.x, placed.y
    if isinstance(piece, TextLine):
        canvas.setFont(piece.font, piece.size)
        canvas.drawString(x, y - piece.size, piece.text)
    elif isinstance(piece, EquationLine):
        canvas.setFont("Times-Italic", piece.size)
        canvas.drawCentredString(x + placed.width / 2, y - piece.size - 4, piece.text)
    elif isinstance(piece, TableGrid):
        rows, row_height = piece.table.rows, piece.row_height
        column_width = placed.width / len(rows[0])
        top = y - 4
        for r, row in enumerate(rows):
            canvas.setFont(piece.bold if r == 0 else piece.regular, piece.size)
            for c, cell in enumerate(row):
                canvas.drawString(x + c * column_width + 3, top - (r + 1) * row_height + 5, cell)
        canvas.setLineWidth(0.5)
        for r in range(len(rows) + 1):
            canvas.line(x, top - r * row_height, x + placed.width, top - r * row_height)
        for c in range(len(rows[0]) + 1):
            canvas.line(x + c * column_width, top, x + c * column_width, top - len(rows) * row_height)
    else:
        left, base, width, height = chart_box(placed)
        bars = piece.figure.bars
        bar_width = width / (2 * len(bars))
        canvas.setLineWidth(0.8)
        canvas.line(left, base, left + width, base)
        canvas.line(left, base, left, base + height - 20)
        for i, value in enumerate(bars):
            canvas.setFillGray(0.3 + 0.1 * (i % 4))
            canvas.rect(left + (2 * i + 0.5) * bar_width, base, bar_width, (height - 24) * value / 100, fill=1, stroke=0)
        canvas.setFillGray(0)
        canvas.setFont("Helvetica-Oblique", 8)
        canvas.drawCentredString(left + width / 2, base - 12, piece.figure.caption)
