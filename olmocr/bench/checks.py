"""What each olmOCR-bench test type checks. Every check returns (passed, explanation); the explanation
says why a test failed (the closest match, the neighbour that differed, …). ``explain=False`` skips the
search for the closest match, the costly part of an explanation, where only the verdict is wanted
(rewards).

Two scorings. ``published`` gives olmOCR-bench's verdicts exactly, for figures set beside its leaderboard.
``strict`` (the default) mends one flaw of theirs: rapidfuzz's ``partial_ratio`` aligns the *shorter* string
inside the longer, so an output shorter than the text sought is scored at its best place inside that text —
``""``, ``" "`` or one word of a sentence "contains" the sentence, a blank page passes present tests and
fails absent ones. Under ``strict`` an output (or a formatted span, or a footnote's surroundings) shorter
than the text sought is compared whole (``ratio``), and no threshold falls below ``STRICT_FLOOR``; every
other verdict is the same. ``max_diffs`` is a similarity threshold, not an edit count: a text passes
when rapidfuzz's ``partial_ratio`` to the output reaches ``1 - max_diffs / len(text)`` (one diff is about
one substituted character, or two inserted ones); order tests find their texts within ``max_diffs``
Levenshtein edits with fuzzysearch's results (:mod:`olmocr.bench.fuzzy`); table cells compare by
``ratio`` with a floor of 0.5. The work is arranged to skip what cannot change a verdict: normalised
outputs and parsed tables are cached per output, and an exact hit (or, with ``max_diffs`` 0, its
absence) decides without any fuzzy matching.
"""

from __future__ import annotations

import re

from rapidfuzz import fuzz

from olmocr.bench import equations
from olmocr.bench.fuzzy import match_starts
from olmocr.bench.normalize import normalize
from olmocr.errors import UserError
from olmocr.formats.tables import MalformedTable, parse_tables

FORMATS = ("heading", "bold", "italic")
SCORINGS = ("strict", "published")
STRICT_FLOOR = 0.5  # strict: the least similarity that passes, whatever max_diffs allows (as table cells)


def _threshold(max_diffs: int, text: str) -> float:
    return 1.0 - max_diffs / (len(text) or 1)


def check_scoring(scoring: str) -> bool:
    """True for strict; a scoring that is neither is a one-line error."""
    if scoring not in SCORINGS:
        raise UserError(f"scoring: expected one of {', '.join(SCORINGS)}, got {scoring!r}")
    return scoring == "strict"


def _similar(needle: str, text: str, threshold: float, strict: bool) -> bool:
    """The text holds the needle to ``threshold``: partial_ratio, or (strict) a whole comparison when the
    text is the shorter, under a threshold no lower than STRICT_FLOOR."""
    if not strict:
        return threshold <= 0 or fuzz.partial_ratio(needle, text) / 100.0 >= threshold
    threshold = max(threshold, STRICT_FLOOR)
    score = fuzz.partial_ratio(needle, text) if len(text) >= len(needle) else fuzz.ratio(needle, text)
    return score / 100.0 >= threshold


def _closest(needle: str, text: str) -> str:
    """Where the text comes closest to the needle (rapidfuzz's best partial alignment)."""
    if len(text) < len(needle):
        return f"the output ({len(text)} characters here) is shorter than the text sought ({len(needle)})"
    best = fuzz.partial_ratio_alignment(needle, text)
    return f"closest is {text[best.dest_start:best.dest_end]!r} (partial ratio {best.score / 100:.3f})"


# -- present / absent -------------------------------------------------------------------------------------------
def _window(test, markdown: str) -> tuple[str, str]:
    """The test's text and the part of the normalised output it is looked for in."""
    needle, text = normalize(test.text), normalize(markdown)
    if not test.case_sensitive:
        needle, text = needle.lower(), text.lower()
    head, tail = test.first_n, test.last_n
    if head and tail:
        text = text[:head] + text[-tail:]
    elif head:
        text = text[:head]
    elif tail:
        text = text[-tail:]
    return needle, text


def _found(needle: str, text: str, max_diffs: int, strict: bool) -> bool:
    """The needle is in the text to the max_diffs threshold (:func:`_similar`)."""
    if needle in text:
        return True
    if max_diffs == 0 and (strict or len(needle) <= len(text)):
        return False  # a ratio of 100 takes an exact occurrence
    return _similar(needle, text, _threshold(max_diffs, needle), strict)


def _needs(max_diffs: int, needle: str, strict: bool) -> float:
    threshold = _threshold(max_diffs, needle)
    return max(threshold, STRICT_FLOOR) if strict else threshold


def present(test, markdown: str, explain: bool = True, scoring: str = "strict") -> tuple[bool, str]:
    strict = check_scoring(scoring)
    needle, text = _window(test, markdown)
    if _found(needle, text, test.max_diffs, strict):
        return True, "found"
    why = f"{test.text!r} not found"
    if explain:
        why += f" (needs similarity {_needs(test.max_diffs, needle, strict):.3f}); {_closest(needle, text)}"
    return False, why


def absent(test, markdown: str, explain: bool = True, scoring: str = "strict") -> tuple[bool, str]:
    strict = check_scoring(scoring)
    needle, text = _window(test, markdown)
    if not _found(needle, text, test.max_diffs, strict):
        return True, "not found"
    why = f"{test.text!r} appears"
    if explain:
        why += f" (similarity at least {_needs(test.max_diffs, needle, strict):.3f}); {_closest(needle, text)}"
    return False, why


# -- order ------------------------------------------------------------------------------------------------------
def order(test, markdown: str, explain: bool = True, scoring: str = "strict") -> tuple[bool, str]:
    text = normalize(markdown)
    found = {}
    for name in ("before", "after"):
        needle = normalize(getattr(test, name))
        found[name] = match_starts(needle, text, test.max_diffs)
        if not found[name]:
            why = f"{name!r} text not found within {test.max_diffs} edit(s)"
            return False, why + (f"; {_closest(needle, text)}" if explain else "")
    first_before, last_after = min(found["before"]), max(found["after"])
    if first_before < last_after:
        return True, "in order"
    return False, f"'before' starts at {first_before}, not before any 'after' (the last starts at {last_after})"


# -- baseline ---------------------------------------------------------------------------------------------------
# Scripts a page of the bench's languages should not produce: CJK ideographs, kana and emoji.
_DISALLOWED = re.compile("[\u4e00-\u9fff\u3040-\u309f\u30a0-\u30ff"
                         "\U0001f600-\U0001f64f\U0001f300-\U0001f5ff\U0001f680-\U0001f6ff\U0001f1e0-\U0001f1ff]")
_IMAGE_LINK = re.compile(r"!\[.*?\]\(.*?\)")  # lazy, so ![a [b] c](x) is one link
_SPACE = re.compile(r"\s+")
_ALNUM = re.compile(r"[^\W_]")  # exactly the characters str.isalnum() accepts
_MAX_UNIT = 5


def _alnum(text: str) -> int:
    return len(_ALNUM.findall(text))


def _repeats(text: str, max_unit: int) -> tuple[int, int]:
    best = (0, 0)
    for unit in range(1, min(max_unit, len(text)) + 1):
        piece, count, pos = text[-unit:], 0, len(text) - unit
        while pos >= 0 and text.startswith(piece, pos):
            count += 1
            pos -= unit
        if count > best[1]:
            best = (unit, count)
    return best


def repeated_tail(text: str, enough: int, max_unit: int = _MAX_UNIT) -> tuple[int, int]:
    """(unit length, count) of the most repeated unit of 1..max_unit characters at the end of the text,
    whitespace runs counting as one space; a count over ``enough`` may be reported lower than it is.
    Only as much of the tail is looked at as can change the answer."""
    size = 2 * (enough + 2) * max_unit
    while True:
        tail = _SPACE.sub(" ", text[-size:])
        unit, count = _repeats(tail, max_unit)
        # A count of at most `enough` in a tail this long stopped inside it: the whole text agrees.
        if count > enough or size >= len(text) or len(tail) >= (enough + 1) * max_unit:
            return unit, count
        size *= 4


def baseline(test, markdown: str, explain: bool = True, scoring: str = "strict") -> tuple[bool, str]:
    if test.max_length is not None:
        counted = _IMAGE_LINK.sub("", markdown) if test.max_length_skips_image_alt_tags else markdown
        count = _alnum(counted)
        if count > test.max_length:
            return False, f"{count} letters/digits on a page that allows {test.max_length} (blank page)"
        return True, "ok"
    if not _ALNUM.search(markdown):
        return False, "no letters or digits"
    unit, count = repeated_tail(markdown, test.max_repeats)
    if count > test.max_repeats:
        return False, f"the text ends with a {unit}-character unit repeated over {test.max_repeats} times"
    if test.check_disallowed_characters and _DISALLOWED.search(markdown):
        bad = "".join(dict.fromkeys(_DISALLOWED.findall(markdown)))
        return False, f"unexpected characters: {bad[:20]!r}"
    return True, "ok"


# -- table ------------------------------------------------------------------------------------------------------
_HEADING_WALKS = {"top_heading": "up", "left_heading": "left"}


def _cell_matches(expected: str, got: str, max_diffs: int) -> bool:
    threshold = max(0.5, _threshold(max_diffs, expected))
    if threshold >= 1.0:
        return expected == got
    return fuzz.ratio(expected, got) / 100.0 >= threshold


def table(test, markdown: str, explain: bool = True, scoring: str = "strict") -> tuple[bool, str]:
    try:
        tables = parse_tables(markdown, not test.ignore_markdown_tables)
    except MalformedTable as exc:
        return False, f"the output's tables cannot be laid out: {exc}"
    if not tables:
        return False, "no table found" + (" (markdown tables ignored)" if test.ignore_markdown_tables else "")
    target = normalize(test.cell)
    wanted = [(name, normalize(value)) for name, value in
              (("up", test.up), ("down", test.down), ("left", test.left), ("right", test.right),
               ("left_heading", test.left_heading), ("top_heading", test.top_heading)) if value]
    wanted = [(name, value) for name, value in wanted if value]
    best: tuple[int, str] | None = None
    for t in tables:
        for pos, text in t.text.items():
            if not _cell_matches(target, normalize(text), test.max_diffs):
                continue
            failures = []
            for name, expected in wanted:
                others = t.heading_cells(pos, _HEADING_WALKS[name]) if name in _HEADING_WALKS \
                    else t.neighbours(name, pos)
                texts = [normalize(t.text[o]) for o in others]
                if not any(_cell_matches(expected, got, test.max_diffs) for got in texts):
                    failures.append(f"{name} is {' / '.join(map(repr, sorted(texts))) or 'nothing'}, "
                                    f"expected {expected!r}")
            if not failures:
                return True, "cell and neighbours match"
            if best is None or len(failures) < best[0]:
                best = (len(failures), "; ".join(failures))
    if best is None:
        return False, f"no cell matches {test.cell!r} (max_diffs {test.max_diffs}) in {len(tables)} table(s)"
    return False, f"cell {test.cell!r} found but {best[1]}"


# -- math -------------------------------------------------------------------------------------------------------
def math(test, markdown: str, explain: bool = True, scoring: str = "strict") -> tuple[bool, str]:
    return equations.match(test.math, markdown, dollars=not test.ignore_dollar_delimited)


# -- format -----------------------------------------------------------------------------------------------------
_FORMATTED = {
    "heading": [re.compile(r"^#{1,6}\s+(.+?)$", re.M), re.compile(r"<h[1-6][^>]*>(.*?)</h[1-6]>", re.I | re.S)],
    "bold": [re.compile(r"\*\*(.*?)\*\*", re.S), re.compile(r"__(.*?)__", re.S),
             re.compile(r"<b[^>]*>(.*?)</b>", re.I | re.S), re.compile(r"<strong[^>]*>(.*?)</strong>", re.I | re.S)],
    "italic": [re.compile(r"(?<!\*)\*(?!\*)(.*?)(?<!\*)\*(?!\*)", re.S), re.compile(r"(?<!_)_(?!_)(.*?)(?<!_)_(?!_)", re.S),
               re.compile(r"<i[^>]*>(.*?)</i>", re.I | re.S), re.compile(r"<em[^>]*>(.*?)</em>", re.I | re.S)],
}


def formatted(test, markdown: str, explain: bool = True, scoring: str = "strict") -> tuple[bool, str]:
    """The text appears (as present tests judge it) in some span with the format: a markdown or
    HTML heading, bold (``**``, ``__``, ``<b>``, ``<strong>``) or italic (``*``, ``_``, ``<i>``, ``<em>``)."""
    spans = [normalize(s) for pattern in _FORMATTED[test.format] for s in pattern.findall(markdown)]
    needle = normalize(test.text)
    if not test.case_sensitive:
        needle, spans = needle.lower(), [s.lower() for s in spans]
    strict, threshold = check_scoring(scoring), _threshold(test.max_diffs, needle)
    if any(_similar(needle, s, threshold, strict) for s in spans):
        return True, f"found as {test.format}"
    seen = ", ".join(repr(s[:30]) for s in spans[:3]) or "none"
    return False, f"{test.text!r} not found as {test.format} ({len(spans)} {test.format} span(s): {seen})"


# -- footnote ---------------------------------------------------------------------------------------------------
_SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
_CONTEXT = 200  # characters looked at on each side of a marker


def _marker_spans(marker: str, markdown: str) -> list[tuple[int, int]]:
    m = re.escape(marker)
    patterns = [re.compile(rf"\[\^{m}\](?!:)"), re.compile(rf"<sup[^>]*>{m}</sup>", re.I)]
    if marker.isascii() and marker.isdigit():
        patterns.append(re.compile(re.escape(marker.translate(_SUPERSCRIPT))))
    return [match.span() for pattern in patterns for match in pattern.finditer(markdown)]


def _letters(text: str) -> str:
    return "".join(ch for ch in normalize(text) if ch.isalnum()).lower()


def _beside(target: str, spans, markdown: str, max_diffs: int, before: bool, strict: bool) -> bool:
    """The target's letters and digits end right before (or start right after) some marker, fuzzily."""
    target = normalize(target)
    wanted = _letters(target)  # normalised twice, as the bench does
    threshold = _threshold(max_diffs, target)
    for start, end in spans:
        near = _letters(markdown[max(0, start - _CONTEXT):start] if before else markdown[end:end + _CONTEXT])
        if not near:
            continue
        size = min(len(near), 2 * len(wanted))
        if size:
            near = near[-size:] if before else near[:size]
        if _similar(wanted, near, threshold, strict):
            return True
    return False


def footnote(test, markdown: str, explain: bool = True, scoring: str = "strict") -> tuple[bool, str]:
    """The marker appears as ``[^m]`` (not its definition ``[^m]:``), ``<sup>m</sup>`` or, for digits, as
    Unicode superscripts; the optional texts appear right before / after some occurrence."""
    strict = check_scoring(scoring)
    spans = _marker_spans(test.marker, markdown)
    if not spans:
        return False, f"marker {test.marker!r} not found as [^{test.marker}], <sup>{test.marker}</sup> or superscript"
    failures = [f"{text!r} not found {side} marker {test.marker!r}"
                for text, side, before in ((test.appears_before_marker, "before", True),
                                           (test.appears_after_marker, "after", False))
                if text and not _beside(text, spans, markdown, test.max_diffs, before, strict)]
    if failures:
        return False, "; ".join(failures)
    return True, f"marker found {len(spans)} time(s)"
