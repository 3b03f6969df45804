"""Reading pages: plain English text a small model can learn to read on CPU, in three levels of a curriculum.

A level is a number of text lines: ``line`` (one sentence on one line), ``lines`` (a paragraph of two to
four lines) and ``page`` (paragraphs filling eight to twelve lines). Every page is 448 points wide, drawn in
Helvetica at 20 points with lines 27 points apart, so rendered at a longest side of 448 pixels (one pixel a
point) a text line is about one 28-pixel row of a Qwen2-VL family model's image tokens: the size the
reader model (``model=reader``) is built for. The truth, front matter and tests are written as for every
synthetic page (:mod:`olmocr.synth.generator`), so training and inference read these pages through the
production prompt and data steps.

Reading is told apart from guessing by the words. ``words=seen`` draws from the English word bank less
every eighth word (:data:`UNSEEN`); ``words=all`` draws from the whole bank. Train on ``seen`` pages and
hold out ``all`` pages of another seed: held-out pages then have word orders training never saw (random
sentences do not repeat) and about one word in eight that no training page had.
"""

from __future__ import annotations

import random

from reportlab.lib.utils import simpleSplit

from olmocr.bench.records import BaselineTest, OrderTest, PresentTest
from olmocr.formats.frontmatter import PageMeta
from olmocr.synth import text as words
from olmocr.synth.blocks import Page, Paragraph, page_name

LEVELS = {"word": (1, 1), "line": (1, 1), "lines": (2, 4), "page": (8, 12)}  # text lines on a page
WORD_CHOICES = ("seen", "all")
WIDTH = 448.0
MARGIN = 4.0  # plus the 10 points the layout adds above and below
FONT = ("Helvetica", "Helvetica-Bold")
SIZE = 20.0
ADVANCE = SIZE * 1.35  # the layout's line advance
SENTENCE_WORDS = (3, 7)

_BANK = sorted(set(words.WORDS["en"]))
UNSEEN = frozenset(_BANK[3::8])  # never on a words=seen page


class ReadingPageGenerator:
    """Pages of one level, deterministic by seed and index, with :class:`PageGenerator`'s interface."""

    def __init__(self, seed: int, level: str, words: str = "all"):
        if level not in LEVELS:
            raise ValueError(f"reading: expected one of {', '.join(LEVELS)}, got {level!r}")
        if words not in WORD_CHOICES:
            raise ValueError(f"reading_words: expected one of {', '.join(WORD_CHOICES)}, got {words!r}")
        self.seed, self.level, self.words = seed, level, words
        self.bank = [w for w in _BANK if w not in UNSEEN] if words == "seen" else list(_BANK)

    def sentence(self, rng: random.Random) -> str:
        picked = [rng.choice(self.bank) for _ in range(1 if self.level == "word" else rng.randint(*SENTENCE_WORDS))]
        picked[0] = picked[0][0].upper() + picked[0][1:]
        return " ".join(picked) + "."

    def lines_of(self, sentences: list[str]) -> int:
        return len(simpleSplit(" ".join(sentences), FONT[0], SIZE, WIDTH - 2 * MARGIN))

    def describe(self, index: int) -> Page:
        rng = random.Random(f"reading/{self.seed}/{self.level}/{self.words}/{index}")
        low, high = LEVELS[self.level]
        wanted = rng.randint(low, high)
        paragraphs: list[list[str]] = [[]]
        misses = 0
        while misses < 20:  # a sentence that would overflow is drawn again, a few times, then the page ends
            sentence = self.sentence(rng)
            trial = paragraphs[:-1] + [paragraphs[-1] + [sentence]]
            if sum(self.lines_of(p) for p in trial) > wanted:
                misses += 1
                continue
            paragraphs = trial
            if self.level in ("word", "line"):
                break  # one sentence
            if wanted > 4 and self.lines_of(paragraphs[-1]) >= 3 and rng.random() < 0.5:
                paragraphs.append([])  # a new paragraph on longer pages
        paragraphs = [p for p in paragraphs if p]
        lines = sum(self.lines_of(p) for p in paragraphs)
        blocks = [Paragraph(p) for p in paragraphs]
        # Each block ends with a gap of 0.8 of the size; the layout leaves 10 points inside each margin.
        height = 2 * (MARGIN + 10) + lines * ADVANCE + (len(blocks) - 1) * 0.8 * SIZE
        return Page(page_name(self.seed, index), PageMeta(primary_language="en"), blocks, None, None, 1,
                    (WIDTH, height), FONT, SIZE, 0, margin=MARGIN)

    def tests(self, page: Page, rng: random.Random) -> list:
        """Every sentence present (a difference per ten characters allowed, at most two: a word of four letters
        with two would pass on half of it), the first before the last, and a baseline."""
        pdf = f"{page.name}.pdf"
        out: list = []
        sentences = [s for block in page.blocks for s in block.sentences]
        for sentence in sentences:
            out.append(PresentTest(pdf=pdf, page=1, id=f"{page.name}_present_{len(out):02d}", text=sentence,
                                   max_diffs=min(2, len(sentence) // 10)))
        if len(sentences) >= 2 and sentences[0] != sentences[-1]:
            out.append(OrderTest(pdf=pdf, page=1, id=f"{page.name}_order_{len(out):02d}", before=sentences[0],
                                 after=sentences[-1], max_diffs=1))
        out.append(BaselineTest(pdf=pdf, page=1, id=f"{page.name}_baseline_{len(out):02d}"))
        return out
