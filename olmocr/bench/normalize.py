"""Text normalisation applied to OCR output and test strings before matching.

The steps and their order are olmOCR-bench's, so that a verdict here is the verdict a published score
counts: ``<br>`` becomes a space; paired ``**``/``__`` then ``*``/``_`` markers are removed (within a
line, shortest pairs first, which also joins ``snake_case`` words: both sides of a comparison are
normalised alike); ``<b>``/``<i>`` tags are dropped; whitespace runs become one space (not stripped);
NFC; typographic quotes, dashes, the minus sign, the fullwidth underscore and the micro sign become their
plain forms.
"""

from __future__ import annotations

import functools
import re
import unicodedata

# (pattern, replacement, characters one of which the pattern needs: without them the step is skipped)
_MARKUP = [
    (re.compile(r"<br/?>"), " ", "<"),
    (re.compile(r"\*\*(.*?)\*\*"), r"\1", "*"),
    (re.compile(r"__(.*?)__"), r"\1", "_"),
    (re.compile(r"</?b>"), "", "<"),
    (re.compile(r"</?i>"), "", "<"),
    (re.compile(r"(\*\*|__)(.*?)\1"), r"\2", "*_"),
    (re.compile(r"(\*|_)(.*?)\1"), r"\2", "*_"),
]
_PLAIN = str.maketrans({"‘": "'", "’": "'", "‚": "'", "“": '"', "”": '"', "„": '"', "＿": "_", "–": "-",
                        "—": "-", "‑": "-", "‒": "-", "−": "-", "\u00b5": "\u03bc"})


# Every test of a page normalises the same output: cache it (and the test strings) by value.
@functools.lru_cache(maxsize=1024)
def normalize(text: str) -> str:
    for pattern, replacement, needs in _MARKUP:
        if any(ch in text for ch in needs):
            text = pattern.sub(replacement, text)
    return unicodedata.normalize("NFC", _one_space(text)).translate(_PLAIN)


def _one_space(text: str) -> str:
    r"""re.sub(r"\s+", " ", text), several times faster: str.split() splits on the same characters."""
    words = text.split()
    if not words:
        return " " if text else ""
    return (" " if text[0].isspace() else "") + " ".join(words) + (" " if text[-1].isspace() else "")
