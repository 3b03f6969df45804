"""What each olmOCR-bench test type checks. Every check returns (passed, explanation); the explanation
says why a test failed (the closest match and its distance, the neighbour that differed, …).
``explain=False`` skips the search for the closest match, the costly part of an explanation, where only
the verdict is wanted (rewards)."""

from __future__ import annotations

import re
import unicodedata

from olmocr.bench import equations

from olmocr.bench.fuzzy import best_match, match_ends
from olmocr.bench.normalize import normalize
from olmocr.bench.tables import find_cells, parse_tables


def _window(text: str, first_n: int | None, last_n: int | None) -> str:
    if first_n is not None:
        text = text[:first_n]
    if last_n is not None:
        text = text[-last_n:] if last_n else ""
    return text


def _prepare(needle: str, haystack: str, case_sensitive: bool) -> tuple[str, str]:
    needle, haystack = normalize(needle), normalize(haystack)
    return (needle, haystack) if case_sensitive else (needle.lower(), haystack.lower())


def _closest(needle: str, haystack: str) -> str:
    edits, end = best_match(needle, haystack)
    found = haystack[max(0, end - len(needle)):end]
    return f"closest match {found!r} is {edits} edit(s) away"


def present(test, markdown: str, explain: bool = True) -> tuple[bool, str]:
    needle, haystack = _prepare(test.text, _window(markdown, test.first_n, test.last_n), test.case_sensitive)
    if needle in haystack or match_ends(needle, haystack, test.max_diffs):
        return True, "found"
    closest = f": {_closest(needle, haystack)}" if explain else ""
    return False, f"{test.text!r} not found within {test.max_diffs} edit(s){closest}"


def absent(test, markdown: str, explain: bool = True) -> tuple[bool, str]:
    needle, haystack = _prepare(test.text, _window(markdown, test.first_n, test.last_n), test.case_sensitive)
    hits = match_ends(needle, haystack, test.max_diffs)
    if not hits:
        return True, "not found"
    end, edits = min(hits, key=lambda h: h[1])
    return False, f"{test.text!r} appears ({edits} edit(s)) at {haystack[max(0, end - len(needle)):end]!r}"


def order(test, markdown: str, explain: bool = True) -> tuple[bool, str]:
    text = normalize(markdown)
    before, after = normalize(test.before), normalize(test.after)
    b = match_ends(before, text, test.max_diffs)
    a = match_ends(after, text, test.max_diffs)
    for name, hits, needle in (("before", b, before), ("after", a, after)):
        if not hits:
            return False, f"{name!r} text not found" + (f": {_closest(needle, text)}" if explain else "")
    first_before = min(end - len(before) for end, _ in b)
    last_after = max(end - len(after) for end, _ in a)
    if first_before < last_after:
        return True, "in order"
    return False, f"'before' starts at {first_before}, after the last 'after' at {last_after}"


_DISALLOWED_SCRIPTS = ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "ARABIC", "HEBREW", "DEVANAGARI", "THAI",
                       "BENGALI", "TAMIL", "ETHIOPIC", "TIBETAN", "MYANMAR", "KHMER")


def _repeated_tail(text: str, max_repeats: int, max_unit: int = 60) -> str | None:
    """A unit repeated more than max_repeats times at the end of the text (degenerate generation)."""
    for unit in range(1, min(max_unit, len(text) // (max_repeats + 1)) + 1):
        piece = text[-unit:]
        count, pos = 1, len(text) - unit
        while pos >= unit and text[pos - unit:pos] == piece:
            count += 1
            pos -= unit
        if count > max_repeats:
            return piece
    return None


_IMAGE_LINK = re.compile(r"!\[[^\]]*\]\([^)]*\)")


def baseline(test, markdown: str, explain: bool = True) -> tuple[bool, str]:
    text = normalize(markdown)
    if test.max_length is not None:
        count = sum(ch.isalnum() for ch in _IMAGE_LINK.sub("", text))
        if count > test.max_length:
            return False, f"{count} letters/digits on a page that allows {test.max_length} (blank page?)"
        return True, "ok"
    if not any(ch.isalnum() for ch in text):
        return False, "no text"
    tail = _repeated_tail(text, test.max_repeats)
    if tail is not None:
        return False, f"the text ends with {tail!r} repeated more than {test.max_repeats} times"
    if test.check_disallowed_characters:
        for ch in text:
            if ord(ch) > 0x2FF and unicodedata.name(ch, "").startswith(_DISALLOWED_SCRIPTS):
                return False, f"unexpected script: {ch!r} ({unicodedata.name(ch, '?')})"
    return True, "ok"


def table(test, markdown: str, explain: bool = True) -> tuple[bool, str]:
    tables = parse_tables(markdown)
    if not tables:
        return False, "no table found (HTML or markdown)"
    return find_cells(tables, test)



def math(test, markdown: str, explain: bool = True) -> tuple[bool, str]:
    return equations.match(test.math, markdown)
