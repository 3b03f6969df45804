"""A page as structure: its blocks in reading order, each with a label from one fixed set, a box and its content.

The answer a structured model writes (after the usual front matter) is a run of blocks, one after another::

    <div data-label="section_header" data-bbox="96 112 540 139">
    ## 2. Methods
    </div>
    <div data-label="text" data-bbox="96 150 904 310">
    The samples were ...
    </div>

``data-bbox`` is ``x0 y0 x1 y1`` in whole numbers from 0 to 1000 of the page image (its left and top edges are
0, its right and bottom edges 1000, whatever its pixels), and the content is the block's markdown as a plain
answer would write it (a heading with its ``#``, tables as HTML, formulas as LaTeX), so the page's markdown is
the blocks' contents joined (:func:`markdown_of`) and olmOCR-bench scores it unchanged. Furniture (running
headers, footers, page numbers) is written as blocks of its own labels: :func:`markdown_of` drops it unless
asked to keep it.

:func:`parse_blocks` refuses an answer it cannot take whole, with one line naming the block and what was wrong
(an unknown label, a box outside 0-1000 or inside out, a block the answer ends inside, text between blocks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LABELS = ("title", "section_header", "text", "list_item", "caption", "footnote", "page_header", "page_footer",
          "page_number", "table", "formula", "figure")
FURNITURE = frozenset({"page_header", "page_footer", "page_number"})
SCALE = 1000
SUFFIX = ".blocks.json"  # a page's blocks record (page_record), beside its .md truth

_OPEN = re.compile(r'<div data-label="([^"]*)" data-bbox="([^"]*)">\n?')
_CLOSE = "</div>"


class StructureError(ValueError):
    """An answer that is not a run of well-formed blocks; the message names the block and what is wrong."""


@dataclass(frozen=True)
class Block:
    label: str
    box: tuple[int, int, int, int]  # x0, y0, x1, y1 in 0-1000 of the page image, from its top-left corner
    text: str  # the block's markdown

    def __post_init__(self):
        wrong = problem(self.label, self.box)
        if wrong:
            raise StructureError(f"block ({self.label}): {wrong}")

    @property
    def furniture(self) -> bool:
        return self.label in FURNITURE

    def to_dict(self) -> dict:
        return {"label": self.label, "box": list(self.box), "text": self.text}


def problem(label: str, box: tuple) -> str | None:
    """What is wrong with a block of ``label`` and ``box``, in a few words; None when nothing is."""
    if label not in LABELS:
        return f"unknown label {label!r} (expected one of {', '.join(LABELS)})"
    if len(box) != 4 or not all(isinstance(v, int) for v in box):
        return f"a box is four whole numbers x0 y0 x1 y1, got {box!r}"
    if not all(0 <= v <= SCALE for v in box):
        return f"box {' '.join(map(str, box))} is outside 0-{SCALE}"
    if box[0] > box[2] or box[1] > box[3]:
        return f"box {' '.join(map(str, box))} is inside out (x0 > x1 or y0 > y1)"
    return None


def parse_blocks(answer: str) -> list[Block]:
    """The blocks of a structured answer (the part after the front matter), in the order written."""
    blocks: list[Block] = []
    at = 0
    while True:
        rest = answer[at:]
        stripped = rest.lstrip()
        if not stripped:
            return blocks
        at += len(rest) - len(stripped)
        where = f"block {len(blocks) + 1}"
        match = _OPEN.match(answer, at)
        if match is None:
            if stripped.startswith("<div") and ">" not in stripped.split("\n", 1)[0]:
                raise StructureError(f"{where}: truncated in its opening tag ({_excerpt(stripped)})")
            raise StructureError(f"{where}: expected '<div data-label=\"…\" data-bbox=\"x0 y0 x1 y1\">', got "
                                 f"{_excerpt(stripped)}")
        label, raw_box = match.groups()
        end = answer.find(_CLOSE, match.end())
        if end < 0:
            raise StructureError(f"{where} ({label}): truncated: the answer ends inside it (no {_CLOSE})")
        text = answer[match.end():end]
        if _OPEN.search(text):
            raise StructureError(f"{where} ({label}): not closed before the next block opens")
        try:
            box = tuple(int(v) for v in raw_box.split())
        except ValueError:
            raise StructureError(f"{where} ({label}): a box is four whole numbers x0 y0 x1 y1, got "
                                 f"{raw_box!r}") from None
        wrong = problem(label, box)
        if wrong:
            raise StructureError(f"{where} ({label}): {wrong}")
        blocks.append(Block(label, box, text.strip("\n")))
        at = end + len(_CLOSE)


def format_blocks(blocks: list[Block]) -> str:
    """The structured answer :func:`parse_blocks` reads back as ``blocks``."""
    return "\n".join(f'<div data-label="{b.label}" data-bbox="{" ".join(map(str, b.box))}">\n{b.text}\n{_CLOSE}'
                     for b in blocks)


def markdown_of(blocks: list[Block], furniture: bool = False) -> str:
    """The page's markdown: the blocks' contents in order, a blank line between two (a list's items one line
    after another), furniture left out unless ``furniture``."""
    kept = [b for b in blocks if b.text and (furniture or not b.furniture)]
    parts = []
    for n, block in enumerate(kept):
        if n:
            parts.append("\n" if block.label == kept[n - 1].label == "list_item" else "\n\n")
        parts.append(block.text)
    return "".join(parts)


def to_scale(box: tuple[float, float, float, float], size: tuple[float, float]) -> tuple[int, int, int, int]:
    """A box in a page's units (points or pixels, from its top-left corner) in 0-1000 of the page; a box reaching
    past an edge is held to it."""
    width, height = size
    x0, y0, x1, y1 = (round(min(max(v / d, 0.0), 1.0) * SCALE)
                      for v, d in zip(box, (width, height, width, height)))
    return x0, y0, x1, y1


def from_scale(box: tuple[int, int, int, int], size: tuple[float, float]) -> tuple[float, float, float, float]:
    """A 0-1000 box in a page's units (points or pixels, from its top-left corner)."""
    width, height = size
    x0, y0, x1, y1 = (v / SCALE * d for v, d in zip(box, (width, height, width, height)))
    return x0, y0, x1, y1


def page_record(blocks: list[Block], size: tuple[float, float]) -> dict:
    """A page's blocks as a user loads them without parsing markdown: each with its place in reading order,
    label, box in 0-1000 and in the page's units (points for a PDF page, from its top-left corner) and text."""
    return {"page_size": [round(v, 2) for v in size],
            "blocks": [{"order": n, "label": b.label, "box": list(b.box),
                        "box_pt": [round(v, 1) for v in from_scale(b.box, size)], "text": b.text}
                       for n, b in enumerate(blocks)]}


def blocks_from_record(record: dict) -> list[Block]:
    """The blocks of a :func:`page_record`, in reading order."""
    try:
        rows = sorted(record["blocks"], key=lambda b: b["order"])
        return [Block(b["label"], tuple(int(v) for v in b["box"]), b["text"]) for b in rows]
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, StructureError):
            raise
        raise StructureError(f"not a page's blocks record ({type(exc).__name__}: {exc})") from None


def _excerpt(text: str, limit: int = 40) -> str:
    line = text.split("\n", 1)[0]
    return repr(line if len(line) <= limit else line[:limit] + "…")
