"""``filter=olmocr``: documents not worth a model request, decided from the PDF's own text layer before
any page is rendered: fill-in forms, documents in other languages, SEO/download spam.

The decision is the one olmOCR's ``PdfFilter`` makes in its pipeline (a test compares the two on the
same PDFs): the text of the first pages as ``pdftotext`` prints it; too little text (a scan), or text
that is mostly not letters (a bad text layer), keeps the document on the safe side; a language that
cannot be detected is kept. Images have no text layer and are always kept.
"""

from __future__ import annotations

import functools
import io
import re
import threading
from collections import Counter
from typing import Annotated

from olmocr.config import Range
from olmocr.errors import UserError
from olmocr.formats.pdf import run_poppler
from olmocr.utils.io import local_path

# olmOCR's list: words that fill the text of download-bait pages.
SPAM_WORDS = ("download", "pdf", "epub", "mobi", "free", "ebook", "file", "save", "casino", "viagra", "cialis",
              "ciprofloxacin")
_NOT_WORD = re.compile(r"\W+")


@functools.cache
def _detector():
    # Every language, loaded on first use (preloading all of them takes 13 s and 1.3 GB for the same answers).
    from lingua import LanguageDetectorBuilder

    return LanguageDetectorBuilder.from_all_languages().build(), threading.Lock()


class DocumentFilter:
    """Why a PDF is not worth converting (a short reason and a detail), or None to keep it."""

    def __init__(self, languages: list[str] = ("en",), forms: bool = True, spam: bool = True,
                 spam_threshold: Annotated[float, Range(at_least=0)] = 0.004, spam_words: list[str] = SPAM_WORDS,
                 pages: Annotated[int, Range(at_least=1)] = 5, min_chars: Annotated[int, Range(at_least=0)] = 200,
                 min_letter_share: Annotated[float, Range(at_least=0, at_most=1)] = 0.5):
        from lingua import IsoCode639_1, Language

        try:
            self.languages = {Language.from_iso_code_639_1(getattr(IsoCode639_1, code.upper())) for code in languages}
        except AttributeError as exc:
            raise UserError(f"filter.languages: {exc.name!r} is not an ISO 639-1 code lingua knows "
                            f"(expected two-letter codes such as en, de, zh), got {list(languages)}") from None
        self.forms = forms
        self.spam = spam
        self.spam_threshold = spam_threshold
        self.spam_words = frozenset(spam_words)
        self.pages = pages
        self.min_chars = min_chars
        self.min_letter_share = min_letter_share

    def __call__(self, path: str, data: bytes) -> tuple[str, str] | None:
        from pypdf import PdfReader

        if self.forms:
            try:
                if PdfReader(io.BytesIO(data)).get_form_text_fields():
                    return "form", "has fill-in text fields"
            except Exception as exc:  # noqa: BLE001 - pypdf raises many types; the document is not kept, as upstream
                return "unreadable", f"form fields: {type(exc).__name__}: {exc}"
        text = self.text(path, data)
        if text is None:
            return "unreadable", "pdftotext failed"
        if len(text) < self.min_chars or sum(c.isalpha() for c in text) / len(text) < self.min_letter_share:
            return None  # too little text, or not letters (a scan, a bad text layer): kept on the safe side
        detector, lock = _detector()
        with lock:
            language = detector.detect_language_of(text)
        if language is not None and language not in self.languages:
            return "language", language.iso_code_639_1.name.lower()
        if self.spam:
            words = _NOT_WORD.sub(" ", text.strip().lower()).split()
            counts = Counter(words)
            share = sum(counts[word] for word in self.spam_words) / len(words) if words else 0.0
            if share > self.spam_threshold:
                return "spam", f"{share:.1%} of its words are download/SEO words"
        return None

    def text(self, path: str, data: bytes) -> str | None:
        """The first ``pages`` pages' text as pdftotext prints it (form feeds and all); None if it fails."""
        with local_path(path, data) as local:
            proc = run_poppler("pdftotext", ["-f", "1", "-l", str(self.pages), local, "-"], timeout=60)
        return proc.stdout.decode("utf-8", errors="replace") if proc.returncode == 0 else None
