"""Approximate substring search: the fewest edits that turn a pattern into some substring of a text.

Myers' bit-vector algorithm (J. ACM 1999) in its search form: one pass over the text, a few integer
operations per character, with the pattern's columns packed into one Python integer (so any pattern
length works). Matches may start anywhere in the text at no cost.
"""

from __future__ import annotations


def _peq(pattern: str) -> dict[str, int]:
    masks: dict[str, int] = {}
    for i, ch in enumerate(pattern):
        masks[ch] = masks.get(ch, 0) | (1 << i)
    return masks


def _scan(pattern: str, text: str, max_diffs: int, offset: int = 0,
          peq: dict[str, int] | None = None) -> list[tuple[int, int]]:
    m = len(pattern)
    if m == 0:
        return [(0, 0)]
    peq = peq or _peq(pattern)
    full = (1 << m) - 1
    top = 1 << (m - 1)
    pv, mv, score = full, 0, m
    out = []
    for j, ch in enumerate(text):
        eq = peq.get(ch, 0)
        xv = eq | mv
        xh = (((eq & pv) + pv) ^ pv) | eq
        ph = mv | (~(xh | pv) & full)
        mh = pv & xh
        if ph & top:
            score += 1
        elif mh & top:
            score -= 1
        ph = (ph << 1) & full
        mh = (mh << 1) & full
        pv = mh | (~(xv | ph) & full)
        mv = ph & xv
        if score <= max_diffs:
            out.append((offset + j + 1, score))
    return out


def _windows(pattern: str, text: str, max_diffs: int) -> list[tuple[int, int]] | None:
    """Text spans that can hold a match, or None when filtering would not pay off.

    Pigeonhole: split the pattern into max_diffs + 1 pieces; a substring within max_diffs edits contains
    at least one piece unchanged, so exact hits of the pieces (found by str.find, in C) locate every
    possible match.
    """
    m, k = len(pattern), max_diffs
    size = m // (k + 1)
    if size < 3 or len(text) < 4 * m:
        return None
    spans = []
    for i in range(k + 1):
        start = i * size
        piece = pattern[start:start + size] if i < k else pattern[start:]
        pos = text.find(piece)
        while pos != -1:
            spans.append((max(0, pos - start - k), min(len(text), pos - start + m + k)))
            pos = text.find(piece, pos + 1)
    spans.sort()
    merged: list[tuple[int, int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def match_ends(pattern: str, text: str, max_diffs: int) -> list[tuple[int, int]]:
    """(end index, edits) for every text position where a substring ending there is within
    ``max_diffs`` edits of ``pattern``."""
    windows = _windows(pattern, text, max_diffs)
    if windows is None:
        return _scan(pattern, text, max_diffs)
    out: list[tuple[int, int]] = []
    peq = _peq(pattern)
    for lo, hi in windows:
        out += _scan(pattern, text[lo:hi], max_diffs, lo, peq)
    return out


def best_match(pattern: str, text: str) -> tuple[int, int]:
    """(edits, end index) of the closest substring of ``text`` to ``pattern``."""
    if pattern in text:
        return 0, text.index(pattern) + len(pattern)
    ends = _scan(pattern, text, len(pattern))
    if not ends:
        return len(pattern), 0
    end, edits = min(ends, key=lambda e: (e[1], e[0]))
    return edits, end
