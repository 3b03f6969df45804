"""Text normalisation applied to OCR output and test strings before matching."""

from __future__ import annotations

import functools
import re
import unicodedata

# Asterisks emphasise anywhere; underscores only at word boundaries (snake_case stays as it is).
_EMPHASIS = re.compile(r"(\*\*|\*)(?=\S)(.+?)(?<=\S)\1|(?<!\w)(__|_)(?=\S)(.+?)(?<=\S)\3(?!\w)")
_BREAK = re.compile(r"<br\s*/?>", re.I)
_SPACE = re.compile(r"\s+")
_QUOTES = str.maketrans({"‘": "'", "’": "'", "‚": "'", "‛": "'", "′": "'", "“": '"', "”": '"', "„": '"',
                         "‟": '"', "″": '"', "«": '"', "»": '"', "–": "-", "—": "-", "‐": "-", "‑": "-",
                         "‒": "-", "−": "-", "―": "-", "\u00a0": " "})


# Every test of a page normalises the same output: cache it (and the test strings) by value.
@functools.lru_cache(maxsize=1024)
def normalize(text: str) -> str:
    """Strip markdown emphasis and <br>, unify quotes and dashes, NFC, collapse whitespace."""
    text = unicodedata.normalize("NFC", text)
    text = _BREAK.sub(" ", text)
    previous = None
    while previous != text and ("*" in text or "_" in text):  # nested emphasis (***x***) takes more than one pass
        previous, text = text, _EMPHASIS.sub(lambda m: m.group(2) if m.group(1) else m.group(4), text)
    return _SPACE.sub(" ", text.translate(_QUOTES)).strip()
