"""JSON-lines files that runs append to and read back when they resume (metrics, mined pairs, rejected
samples). A process killed, or a disk that fills, while it writes a line leaves that line torn at the end of
the file: readers leave it out, and a resumed writer cuts it off first (:func:`mend`), so that its own lines
do not run on from it."""

from __future__ import annotations

import json
import os
from typing import Any

from olmocr.errors import UserError


def parse_lines(text: str, path: str) -> list[tuple[int, Any]]:
    """(line number, value) of each non-blank line of JSON-lines ``text`` read from ``path``. A torn last line
    (not JSON, no newline after it) is left out; a line elsewhere that is not JSON is a UserError naming
    ``path:line``."""
    lines = text.split("\n")
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            if number == len(lines):  # nothing after it, not even its newline: cut off as it was written
                break
            raise UserError(f"{path}:{number}: not a JSON line ({exc})") from None
    return rows


def read_rows(path: str) -> list[Any]:
    with open(path, encoding="utf-8") as fh:
        return [row for _, row in parse_lines(fh.read(), path)]


def mend(path: str) -> bool:
    """Cut a torn last line off ``path`` (a complete one that lacks only its newline gets it), so that lines
    appended next start on a line of their own; whether the file was torn. Call it before a resumed run
    appends, while no other process writes the file."""
    if not os.path.exists(path):
        return False
    with open(path, "rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return False
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return False
        # The tail after the last newline: read back in blocks until one is found.
        start, block = size, 1 << 16
        while start > 0:
            start = max(0, start - block)
            fh.seek(start)
            cut = fh.read(size - start).rfind(b"\n")
            if cut >= 0:
                start += cut + 1
                break
        fh.seek(start)
        tail = fh.read()
        try:
            json.loads(tail)
        except (json.JSONDecodeError, UnicodeDecodeError):
            fh.truncate(start)
            return True
        fh.write(b"\n")
        return False
