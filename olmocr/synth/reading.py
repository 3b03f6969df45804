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

``typeset`` pages (``reading_type=typeset``) set the same kinds of text as documents set theirs, off that grid:
the text anywhere on the page (a left, top and bottom margin of 3 to 60 pixels, any fraction of one), at 0.7 to
1.5 times the grid's size, in one of several typefaces (:mod:`olmocr.synth.fonts`; regular, a page in four bold),
with a leading of 1.1 to 1.45, paragraphs wrapped at any width, pages whose height is no whole number of rows.
Their words have both cases (a capital opening a sentence, names, words in capitals; random letters of either
case), numbers and codes among them (``1,250``, ``3.14``, ``12%``, ``2024-03-17``, ``AB-1234``), and
punctuation (commas, colons, parentheses, quotes, other sentence ends); ``words=codes`` writes lines of nothing
else: mixed-case strings, numbers and codes. Each page is 448 points wide, drawn one pixel a point at a longest
side of 448 as the grid pages are.
"""

from __future__ import annotations

import random
import string

from reportlab.lib.utils import simpleSplit

from olmocr.bench.records import AbsentTest, BaselineTest, OrderTest, PresentTest
from olmocr.errors import UserError
from olmocr.formats.frontmatter import PageMeta
from olmocr.synth import fonts
from olmocr.synth import text as words
from olmocr.synth.blocks import Furniture, Heading, Page, Paragraph, page_name

# text rows on a page (structured: rows of paragraph text, beside its header, headings and page number)
LEVELS = {"word": (1, 1), "line": (1, 1), "lines": (2, 4), "page": (8, 12), "structured": (2, 5)}
WORD_CHOICES = ("seen", "all", "unseen", "letters", "mixed", "codes")
TYPES = ("grid", "typeset")
# Typeset pages' typefaces when none are named; HELD_OUT_FACES are never among them: a model trained on the
# default set is judged on these as typefaces it never saw.
TRAIN_FACES = ("courier", "helvetica", "times", "dejavu-sans", "dejavu-serif", "dejavu-mono")
HELD_OUT_FACES = ("carlito", "caladea")
SCALE = (0.7, 1.5)  # a typeset page's size, in the grid's
EDGE = (3.0, 60.0)  # a typeset page's margins, in pixels
LEADING = (1.1, 1.45)
PUNCTUATION = (",", ",", ",", ";", ":")
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

    def __init__(self, seed: int, level: str, words: str = "all", category: str | None = None,
                 kind: str = "grid", faces: tuple[str, ...] | list[str] = ()):
        if level not in LEVELS:
            raise UserError(f"reading: expected one of {', '.join(LEVELS)}, got {level!r}")
        if words not in WORD_CHOICES:
            raise UserError(f"reading_words: expected one of {', '.join(WORD_CHOICES)}, got {words!r}")
        if kind not in TYPES:
            raise UserError(f"reading_type: expected one of {', '.join(TYPES)}, got {kind!r}")
        if level == "structured" and kind != "grid":
            raise UserError("reading=structured sets its pages on the grid (reading_type=grid)")
        if kind == "grid" and (words == "codes" or any(f != "courier" for f in faces)):
            raise UserError("reading_type=grid sets lowercase words in Courier alone (a character a patch): "
                            "reading_words=codes and other reading_faces need reading_type=typeset")
        self.seed, self.level, self.words, self.category, self.kind = seed, level, words, category, kind
        self.faces = tuple(faces) or (TRAIN_FACES if kind == "typeset" else ("courier",))
        for name in self.faces:
            fonts.face(name)  # known and installed, before any page
        self.bank = ([w for w in _BANK if w not in UNSEEN] if words in ("seen", "mixed")
                     else sorted(UNSEEN) if words == "unseen" else list(_BANK))

    def word(self, rng: random.Random) -> str:
        kind = rng.choice(("seen", "changed", "letters")) if self.words == "mixed" else self.words
        if kind == "codes":
            return code(rng)
        typeset = self.kind == "typeset"
        if typeset and rng.random() < 0.08:
            return number(rng)  # numbers and codes among the words of every kind
        if kind not in ("letters", "changed"):
            return cased(rng.choice(self.bank), rng) if typeset else rng.choice(self.bank)
        while True:  # a string that happens to spell a held-out word ('it', 'to') is drawn again
            if kind == "letters":  # as long as the words a model reads elsewhere, the long ones included
                word = "".join(rng.choice(string.ascii_lowercase) for _ in range(len(rng.choice(_BANK))))
            else:
                letters = list(rng.choice(self.bank))
                for at in rng.sample(range(len(letters)), min(len(letters), rng.randint(1, 2))):
                    letters[at] = rng.choice(string.ascii_lowercase.replace(letters[at], ""))
                word = "".join(letters)
            if word not in UNSEEN:
                if typeset and kind == "letters" and rng.random() < 0.5:  # random letters of both cases
                    return "".join(c.upper() if rng.random() < 0.4 else c for c in word)
                return cased(word, rng) if typeset else word

    def sentence(self, rng: random.Random) -> str:
        picked = [self.word(rng) for _ in range(1 if self.level == "word" else rng.randint(*SENTENCE_WORDS))]
        picked[0] = picked[0][0].upper() + picked[0][1:]
        if self.kind == "grid":
            return " ".join(picked) + "."
        for at in range(len(picked) - 1):  # typeset: punctuation as prose has it
            if rng.random() < 0.12:
                picked[at] += rng.choice(PUNCTUATION)
        if len(picked) > 2 and rng.random() < 0.1:
            first = rng.randrange(1, len(picked) - 1)
            opening, closing = rng.choice((("(", ")"), ("\u201c", "\u201d"), ('"', '"')))
            picked[first] = opening + picked[first]
            picked[first] += closing
        return " ".join(picked) + rng.choice((".",) * 6 + ("?", "!", ";"))

    def lines_of(self, sentences: list[str], font: str = FONT[0], size: float = SIZE,
                 width: float = WIDTH - 2 * MARGIN) -> int:
        return len(simpleSplit(" ".join(sentences), font, size, width))

    def rows_of(self, paragraphs: list[list[str]]) -> int:
        filled = [p for p in paragraphs if p]
        return sum(self.lines_of(p) for p in filled) + len(filled) - 1

    def describe(self, index: int) -> Page:
        rng = random.Random(f"reading/{self.seed}/{self.level}/{self.words}/{index}"
                            + ("" if self.kind == "grid" else f"/{self.kind}/{','.join(self.faces)}"))
        low, high = LEVELS[self.level]
        wanted = rng.randint(low, high)
        if self.level == "structured":
            return self.structured(rng, index, wanted)
        if self.kind == "typeset":
            return self.typeset(rng, index, wanted)
        paragraphs = self.fill(rng, wanted)
        # A row above the text and one below it (the layout's margins), a blank row after each paragraph.
        height = ROW * (self.rows_of(paragraphs) + 2)
        return Page(page_name(self.seed, index, self.category), PageMeta(primary_language="en"), [Paragraph(p) for p in paragraphs],
                    None, None, 1, (WIDTH, height), FONT, SIZE, 0, margin=MARGIN, leading=ROW / SIZE,
                    gap=ROW / SIZE)

    def phrase(self, rng: random.Random, fewest: int, most: int) -> str:
        """A few words on one grid line, the first capitalised: a heading or a running header."""
        while True:
            words = [self.word(rng) for _ in range(rng.randint(fewest, most))]
            text = " ".join(words)
            text = text[0].upper() + text[1:]
            if self.lines_of([text]) == 1:
                return text

    def structured(self, rng: random.Random, index: int, wanted: int) -> Page:
        """A page with structure on the grid: a running header, one or two sections (a heading, then a paragraph),
        a page number, a blank row between blocks; ``wanted`` rows of paragraph text in all."""
        blocks: list = [Furniture(self.phrase(rng, 2, 4), "page_header")]
        sections = 1 if wanted < 3 else rng.randint(1, 2)
        shares = [wanted // sections + (n < wanted % sections) for n in range(sections)]
        for rows in shares:
            blocks.append(Heading(self.phrase(rng, 1, 3), 2))
            blocks.append(Paragraph(self.fill(rng, rows)[0]))
        number = rng.randint(1, 400)
        blocks.append(Furniture(rng.choice((f"Page {number}", str(number), f"- {number} -")), "page_number"))
        rows = sum(self.lines_of(b.sentences if isinstance(b, Paragraph) else [b.text]) for b in blocks)
        height = ROW * (rows + len(blocks) - 1 + 2)  # a blank row between blocks, one above and one below
        return Page(page_name(self.seed, index, self.category), PageMeta(primary_language="en"), blocks, None, None, 1,
                    (WIDTH, height), FONT, SIZE, 0, margin=MARGIN, leading=ROW / SIZE, gap=ROW / SIZE,
                    heading_growth=(0.0, 0.0))

    def typeset(self, rng: random.Random, index: int, wanted: int) -> Page:
        """A page of ``wanted`` lines set as a document might set them: its typeface, size, leading, margins and
        wrap width drawn; its height whatever the text and margins make it."""
        regular, bold = fonts.face(rng.choice(self.faces))
        font = bold if rng.random() < 0.25 else regular
        leading = rng.uniform(*LEADING)
        left, right, top, bottom = (rng.uniform(*EDGE) for _ in range(4))
        gap = rng.uniform(0.3, 1.0)  # between paragraphs, in sizes
        # A page of many lines at a large size would be taller than wide (drawn smaller at the same longest
        # side): its size is held to what fits.
        most = min(SIZE * SCALE[1], (WIDTH - top - bottom) / (wanted * leading + gap))
        size = rng.uniform(SIZE * SCALE[0], max(SIZE * SCALE[0], most))
        room = WIDTH - left - right
        width = room if self.level in ("word", "line") else room * rng.uniform(0.55, 1.0)
        setting = (font, size, width)
        paragraphs = self.fill(rng, wanted, setting)
        lines = sum(self.lines_of(p, *setting) for p in paragraphs)
        height = top + size * (leading * lines + gap * (len(paragraphs) - 1)) + bottom
        return Page(page_name(self.seed, index, self.category), PageMeta(primary_language="en"),
                    [Paragraph(p) for p in paragraphs], None, None, 1, (WIDTH, round(height, 2)), (font, font), size,
                    0, leading=leading, gap=gap, frame=(left, top, width))

    def fill(self, rng: random.Random, wanted: int, setting: tuple = ()) -> list[list[str]]:
        """Sentences in paragraphs filling ``wanted`` rows (a blank row between paragraphs on grid pages)."""
        paragraphs: list[list[str]] = [[]]
        misses = 0
        count = (lambda ps: sum(self.lines_of(p, *setting) for p in ps if p)) if setting else self.rows_of
        # A sentence that would overflow is drawn again, a few times, then the page ends; a one-sentence page
        # tries until one fits (long random words overflow a line often, and a blank page teaches nothing).
        while misses < (1000 if self.level in ("word", "line") else 20):
            sentence = self.sentence(rng)
            trial = paragraphs[:-1] + [paragraphs[-1] + [sentence]]
            if count(trial) > wanted:
                misses += 1
                continue
            paragraphs = trial
            if self.level in ("word", "line"):
                break  # one sentence
            if wanted > 4 and self.lines_of(paragraphs[-1], *setting) >= 3 and rng.random() < 0.5:
                paragraphs.append([])  # a new paragraph on longer pages
        return [p for p in paragraphs if p]

    def tests(self, page: Page, rng: random.Random) -> list:
        """Every sentence present (a difference per ten characters allowed, at most two: a word of four letters
        with two would pass on half of it), the first before the last, and a baseline."""
        pdf = f"{page.name}.pdf"
        out: list = []
        for block in page.blocks:  # furniture drawn, and left out of the truth: a good reading drops it
            if isinstance(block, Furniture):
                out.append(AbsentTest(pdf=pdf, page=1, id=f"{page.name}_absent_{len(out):02d}", text=block.text,
                                      max_diffs=0))
        sentences = [s for block in page.blocks for s in block.sentences]
        for sentence in sentences:
            out.append(PresentTest(pdf=pdf, page=1, id=f"{page.name}_present_{len(out):02d}", text=sentence,
                                   max_diffs=min(2, len(sentence) // 10)))
        if len(sentences) >= 2 and sentences[0] != sentences[-1]:
            out.append(OrderTest(pdf=pdf, page=1, id=f"{page.name}_order_{len(out):02d}", before=sentences[0],
                                 after=sentences[-1], max_diffs=1))
        out.append(BaselineTest(pdf=pdf, page=1, id=f"{page.name}_baseline_{len(out):02d}"))
        return out


def cased(word: str, rng: random.Random) -> str:
    """A word as prose sets it: mostly as it is, a name's capital now and then, a word in capitals."""
    draw = rng.random()
    return word.capitalize() if draw < 0.12 else word.upper() if draw < 0.16 else word


def number(rng: random.Random) -> str:
    """A number as documents write them: counts, thousands, decimals, percentages, money, years, dates."""
    shape = rng.randrange(7)
    if shape == 0:
        return str(rng.randint(0, 999))
    if shape == 1:
        return f"{rng.randint(1000, 999999):,}"
    if shape == 2:
        return f"{rng.uniform(0, 100):.{rng.randint(1, 3)}f}"
    if shape == 3:
        return f"{rng.randint(1, 99)}%"
    if shape == 4:
        return f"${rng.randint(1, 9999)}.{rng.randint(0, 99):02d}"
    if shape == 5:
        return str(rng.randint(1900, 2030))
    return f"{rng.randint(1990, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def code(rng: random.Random) -> str:
    """A token no prior can guess and no one case: an identifier (AB-1234, X7K9Q, QD/1622), a number, or random
    letters of both cases, as long as the bank's words."""
    shape = rng.randrange(4)
    if shape == 0:
        letters = "".join(rng.choice(string.ascii_uppercase) for _ in range(rng.randint(1, 3)))
        return f"{letters}{rng.choice(('-', '', '/'))}{rng.randint(1, 99999)}"
    if shape == 1:
        return "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(rng.randint(3, 7)))
    if shape == 2:
        return number(rng)
    return "".join(rng.choice(string.ascii_letters) for _ in range(len(rng.choice(_BANK))))
