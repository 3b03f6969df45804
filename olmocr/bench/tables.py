"""Tables in OCR output (HTML, spans included, and markdown pipe tables) as grids, and the table test.

A grid position holds the cell covering it; a cell spanning several positions appears in each, so a
neighbour is the nearest *different* cell in that direction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from rapidfuzz.distance import Levenshtein

from olmocr.bench.normalize import normalize


@dataclass(eq=False)
class Cell:
    text: str
    header: bool = False


@dataclass
class Grid:
    rows: list[list[Cell | None]] = field(default_factory=list)

    def at(self, r: int, c: int) -> Cell | None:
        if 0 <= r < len(self.rows) and 0 <= c < len(self.rows[r]):
            return self.rows[r][c]
        return None

    def neighbour(self, r: int, c: int, dr: int, dc: int) -> Cell | None:
        cell = self.at(r, c)
        while True:
            r, c = r + dr, c + dc
            other = self.at(r, c)
            if other is None or other is not cell:
                return other


def _span(value: str | None) -> int:
    """A rowspan/colspan attribute; OCR output writes junk here too, which counts as 1."""
    value = (value or "1").strip()
    return max(1, int(value)) if value.isdigit() else 1


class _HtmlTables(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.grids: list[Grid] = []
        self.stack: list[dict] = []  # open tables (nested tables are separate grids)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.stack.append({"grid": Grid(), "row": -1, "cell": None, "thead": False, "spans": {}})
        elif not self.stack:
            return
        elif tag == "thead":
            self.stack[-1]["thead"] = True
        elif tag in ("tbody", "tfoot"):
            self.stack[-1]["thead"] = False
        elif tag == "tr":
            t = self.stack[-1]
            t["row"] += 1
            if len(t["grid"].rows) <= t["row"]:  # a rowspan from above may have created it already
                t["grid"].rows.append([])
            t["col"] = 0
        elif tag in ("td", "th"):
            t = self.stack[-1]
            if t["row"] < 0:  # a cell outside any <tr>: start a row for it
                self.handle_starttag("tr", [])
            t["cell"] = (Cell("", header=tag == "th" or t["thead"]), _span(attrs.get("rowspan")),
                         _span(attrs.get("colspan")), [])
        elif tag == "br" and self.stack[-1]["cell"]:
            self.stack[-1]["cell"][3].append(" ")

    def handle_endtag(self, tag):
        if not self.stack:
            return
        t = self.stack[-1]
        if tag in ("td", "th") and t["cell"]:
            self._place(t)
        elif tag == "table":
            if t["cell"]:
                self._place(t)
            self.grids.append(t["grid"])
            self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1]["cell"]:
            self.stack[-1]["cell"][3].append(data)

    def _place(self, t):
        cell, rowspan, colspan, parts = t["cell"]
        cell.text = normalize("".join(parts))
        t["cell"] = None
        grid, r = t["grid"], t["row"]
        row = grid.rows[r]
        c = t["col"]
        while c < len(row) and row[c] is not None:  # skip positions taken by spans from above
            c += 1
        for dr in range(rowspan):
            while len(grid.rows) <= r + dr:
                grid.rows.append([])
            target = grid.rows[r + dr]
            while len(target) < c + colspan:
                target.append(None)
            for dc in range(colspan):
                target[c + dc] = cell
        t["col"] = c + colspan


_PIPE_ROW = re.compile(r"^\s*\|?(.+?)\|?\s*$")
_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _markdown_tables(text: str) -> list[Grid]:
    grids, lines, i = [], text.split("\n"), 0
    while i + 1 < len(lines):
        if "|" in lines[i] and _RULE.match(lines[i + 1]):
            grid = Grid()
            header = [Cell(normalize(x), header=True) for x in _PIPE_ROW.match(lines[i]).group(1).split("|")]
            grid.rows.append(header)
            i += 2
            while i < len(lines) and "|" in lines[i] and lines[i].strip():
                grid.rows.append([Cell(normalize(x)) for x in _PIPE_ROW.match(lines[i]).group(1).split("|")])
                i += 1
            grids.append(grid)
        else:
            i += 1
    return grids


def parse_tables(markdown: str) -> list[Grid]:
    parser = _HtmlTables()
    parser.feed(markdown)
    parser.close()
    return parser.grids + _markdown_tables(markdown)


def _close(a: str, b: str, max_diffs: int) -> bool:
    return Levenshtein.distance(a, b, score_cutoff=max_diffs) <= max_diffs


def _heading_above(grid: Grid, r: int, c: int) -> list[Cell]:
    above = [grid.at(i, c) for i in range(r)]
    headers = [cell for cell in above if cell is not None and cell.header]
    return headers or ([grid.at(0, c)] if r > 0 and grid.at(0, c) is not None else [])


def _heading_left(grid: Grid, r: int, c: int) -> list[Cell]:
    left = [grid.at(r, j) for j in range(c)]
    headers = [cell for cell in left if cell is not None and cell.header]
    return headers or ([grid.at(r, 0)] if c > 0 and grid.at(r, 0) is not None else [])


def find_cells(grids: list[Grid], test) -> tuple[bool, str]:
    """Pass when some cell matches ``test.cell`` and every neighbour/heading the test names."""
    target = normalize(test.cell)
    checks = [(name, normalize(value)) for name, value in
              (("up", test.up), ("down", test.down), ("left", test.left), ("right", test.right),
               ("top_heading", test.top_heading), ("left_heading", test.left_heading)) if value]
    moves = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
    best: tuple[int, str] | None = None
    for grid in grids:
        seen: set[int] = set()
        for r, row in enumerate(grid.rows):
            for c, cell in enumerate(row):
                if cell is None or id(cell) in seen or not _close(cell.text, target, test.max_diffs):
                    continue
                seen.add(id(cell))
                failures = []
                for name, expected in checks:
                    if name in moves:
                        other = grid.neighbour(r, c, *moves[name])
                        found = [other] if other is not None else []
                    else:
                        found = _heading_above(grid, r, c) if name == "top_heading" else _heading_left(grid, r, c)
                    if not any(_close(o.text, expected, test.max_diffs) for o in found):
                        got = ", ".join(repr(o.text) for o in found) or "nothing"
                        failures.append(f"{name} is {got}, expected {expected!r}")
                if not failures:
                    return True, "cell and neighbours match"
                if best is None or len(failures) < best[0]:
                    best = (len(failures), "; ".join(failures))
    if best is None:
        return False, f"no cell matches {test.cell!r} within {test.max_diffs} edit(s)"
    return False, f"cell {test.cell!r} found but {best[1]}"
