"""What a synthetic page is made of: its blocks, in reading order, each a named record that knows its
markdown (the truth) and its sentences (what tests quote). A figure's markdown names where it stands on
the page, so it is written from the figure's placement (:mod:`olmocr.synth.layout`)."""

from __future__ import annotations

import html
from dataclasses import dataclass

from olmocr.formats.frontmatter import PageMeta


@dataclass(frozen=True)
class Heading:
    text: str
    level: int  # 1: the page title, 2: a section

    @property
    def markdown(self) -> str:
        return "#" * self.level + " " + self.text

    @property
    def sentences(self) -> list[str]:
        return [self.text]


@dataclass(frozen=True)
class Paragraph:
    sentences: list[str]

    @property
    def markdown(self) -> str:
        return " ".join(self.sentences)


@dataclass(frozen=True)
class Bullets:
    items: list[str]

    @property
    def markdown(self) -> str:
        return "\n".join(f"- {item}" for item in self.items)

    @property
    def sentences(self) -> list[str]:
        return self.items


@dataclass(frozen=True)
class Table:
    rows: list[list[str]]  # the first is the header; every cell's text is unique on the page

    @property
    def markdown(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.rows[0])
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in self.rows[1:])
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    @property
    def sentences(self) -> list[str]:
        return []


@dataclass(frozen=True)
class Equation:
    latex: str  # the truth
    shown: str  # what the page shows, in characters the standard PDF fonts encode

    @property
    def markdown(self) -> str:
        return f"\\[{self.latex}\\]"

    @property
    def sentences(self) -> list[str]:
        return []


@dataclass(frozen=True)
class Figure:
    caption: str
    bars: list[int]  # a bar chart's values, 0-100
    height: float  # in points

    @property
    def sentences(self) -> list[str]:
        return [self.caption]


@dataclass(frozen=True)
class Furniture:
    """A running header, footer or page number set in the page's flow as a line of its own (reading pages): drawn,
    labelled in the page's blocks, left out of the markdown truth as the fixed running header is."""

    text: str
    label: str  # page_header, page_footer or page_number

    @property
    def sentences(self) -> list[str]:
        return []


Block = Heading | Paragraph | Bullets | Table | Equation | Figure | Furniture


@dataclass(frozen=True)
class Page:
    name: str
    meta: PageMeta
    blocks: list[Block]
    header: str | None  # running header and footer: drawn, left out of the truth
    footer: str | None
    columns: int
    page_size: tuple[float, float]  # as drawn, before the display rotation
    font: tuple[str, str]  # regular, bold
    body_size: float
    rotation: int  # clockwise display rotation of the PDF page
    margin: float = 54.0  # around the text, in PDF points (10 more above and below)
    leading: float = 1.35  # a text line's advance, in body sizes
    gap: float = 0.8  # the space after a block, in body sizes
    # (left, top, width) of one column of text in PDF points, its top from the page's top, where the text is set
    # anywhere on the page (typeset reading pages); None: inside the margins
    frame: tuple[float, float, float] | None = None
    heading_growth: tuple[float, float] = (8.0, 3.0)  # points a title and a section heading are set above the body


def page_name(seed: int, index: int, category: str | None = None) -> str:
    """``synth_s<seed>_<index>``, or with a category ``<category>_s<seed>_<index>``: pages of several categories
    share a folder without one overwriting another's."""
    return f"{category or 'synth'}_s{seed}_{index:05d}"


def table_share(blocks: list[Block]) -> float:
    """Fraction of the page's visible characters that are table cells."""
    table = sum(len(cell) for b in blocks if isinstance(b, Table) for row in b.rows for cell in row)
    prose = sum(len(sentence) for b in blocks for sentence in b.sentences)
    return table / max(table + prose, 1)
