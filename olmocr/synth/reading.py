"""Reading pages: plain English text a small model can learn to read on CPU, in levels of a curriculum.

A level is a number of text rows: ``word`` and ``line`` (one sentence on one line, of one word or three to
seven), ``lines`` (a paragraph of two to four lines) and ``page`` (paragraphs filling eight to twelve rows, a
blank row between two). The text sits on the grid of a Qwen2-VL family model's image tokens: rendered at a
longest side of 448 pixels (one pixel a point), a page is 448 wide and a whole number of 28-pixel rows high,
each text line fills one row, and Courier at 70/3 points advances 14 pixels a character, one patch, from a
left margin of one patch. Every image token is then two characters of one line, drawn alike wherever they
stand (between the same neighbours, to a few pixels of anti-aliasing): a small vision tower, even one left at
its random weights, sees the same pixels for the same letters. The truth, front matter and tests are written
as for every synthetic page (:mod:`olmocr.synth.generator`), so training and inference read these pages
through the production prompt and data steps.

Reading is told apart from guessing by the words. ``words=seen`` draws from the English word bank less every
eighth word (:data:`UNSEEN`); ``words=all`` draws from the whole bank. Train on ``seen`` pages and hold out
``all`` pages of another seed: held-out pages then have word orders training never saw (random sentences do
not repeat) and about one word in eight that no training page had. ``words=unseen`` draws only from those
held-out words: a model that learnt the training words rather than their letters writes other words there.
``words=letters`` writes words of random letters, each as long as a word drawn from the bank (two to eleven
letters), which no language model can guess: only a model that reads does better than chance. ``words=mixed``
(to train on) draws each word alike from three sources: a training word, a training word with one or two of
its letters changed, random letters. A model that writes the word it expects after the first letters is wrong
on two words in three there, so it learns to read each letter of a word it knows too.
"""

from __future__ import annotations

import random
import string

from reportlab.lib.utils import simpleSplit

from olmocr.bench.records import BaselineTest, OrderTest, PresentTest
from olmocr.errors import UserError
from olmocr.formats.frontmatter import PageMeta
from olmocr.synth import text as words
from olmocr.synth.blocks import Page, Paragraph, page_name

LEVELS = {"word": (1, 1), "line": (1, 1), "lines": (2, 4), "page": (8, 12)}  # text rows on a page
WORD_CHOICES = ("seen", "all", "unseen", "letters", "mixed")
ROW, CELL = 28.0, 14.0  # an image token's height and a patch's width, in pixels = points at 448 pixels
WIDTH = 16 * ROW
FONT = ("Courier", "Courier-Bold")
SIZE = CELL / 0.6  # Courier advances 0.6 of its size
MARGIN = CELL  # the layout adds 10 more above and below: the first line's glyphs sit inside the second row
SENTENCE_WORDS = (3, 7)

_BANK = sorted(set(words.WORDS["en"]))
UNSEEN = frozenset(_BANK[3::8])  # never on a words=seen page


class ReadingPageGenerator:
    """Pages of one level, deterministic by seed and index, with :class:`PageGenerator`'s interface."""

    def __init__(self, seed: int, level: str, words: str = "all", category: str | None = None):
        if level not in LEVELS:
            raise UserError(f"reading: expected one of {', '.join(LEVELS)}, got {level!r}")
        if words not in WORD_CHOICES:
            raise UserError(f"reading_words: expected one of {', '.join(WORD_CHOICES)}, got {words!r}")
        self.seed, self.level, self.words, self.category = seed, level, words, category
        self.bank = ([w for w in _BANK if w not in UNSEEN] if words in ("seen", "mixed")
                     else sorted(UNSEEN) if words == "unseen" else list(_BANK))

    def word(self, rng: random.Random) -> str:
        kind = rng.choice(("seen", "changed", "letters")) if self.words == "mixed" else self.words
        if kind not in ("letters", "changed"):
            return rng.choice(self.bank)
        while True:  # a string that happens to spell a held-out word ('it', 'to') is drawn again
            if kind == "letters":  # as long as the words a model reads elsewhere, the long ones included
                word = "".join(rng.choice(string.ascii_lowercase) for _ in range(len(rng.choice(_BANK))))
            else:
                letters = list(rng.choice(self.bank))
                for at in rng.sample(range(len(letters)), min(len(letters), rng.randint(1, 2))):
                    letters[at] = rng.choice(string.ascii_lowercase.replace(letters[at], ""))
                word = "".join(letters)
            if word not in UNSEEN:
                return word

    def sentence(self, rng: random.Random) -> str:
        picked = [self.word(rng) for _ in range(1 if self.level == "word" else rng.randint(*SENTENCE_WORDS))]
        picked[0] = picked[0][0].upper() + picked[0][1:]
        return " ".join(picked) + "."

    def lines_of(self, sentences: list[str]) -> int:
        return len(simpleSplit(" ".join(sentences), FONT[0], SIZE, WIDTH - 2 * MARGIN))

    def rows_of(self, paragraphs: list[list[str]]) -> int:
        filled = [p for p in paragraphs if p]
        return sum(self.lines_of(p) for p in filled) + len(filled) - 1

    def describe(self, index: int) -> Page:
        rng = random.Random(f"reading/{self.seed}/{self.level}/{self.words}/{index}")
        low, high = LEVELS[self.level]
        wanted = rng.randint(low, high)
        paragraphs: list[list[str]] = [[]]
        misses = 0
        # A sentence that would overflow is drawn again, a few times, then the page ends; a one-sentence page
        # tries until one fits (long random words overflow a line often, and a blank page teaches nothing).
        while misses < (1000 if self.level in ("word", "line") else 20):
            sentence = self.sentence(rng)
            trial = paragraphs[:-1] + [paragraphs[-1] + [sentence]]
            if self.rows_of(trial) > wanted:
                misses += 1
                continue
            paragraphs = trial
            if self.level in ("word", "line"):
                break  # one sentence
            if wanted > 4 and self.lines_of(paragraphs[-1]) >= 3 and rng.random() < 0.5:
                paragraphs.append([])  # a new paragraph on longer pages
        paragraphs = [p for p in paragraphs if p]
        # A row above the text and one below it (the layout's margins), a blank row after each paragraph.
        height = ROW * (self.rows_of(paragraphs) + 2)
        return Page(page_name(self.seed, index, self.category), PageMeta(primary_language="en"), [Paragraph(p) for p in paragraphs],
                    None, None, 1, (WIDTH, height), FONT, SIZE, 0, margin=MARGIN, leading=ROW / SIZE,
                    gap=ROW / SIZE)

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
