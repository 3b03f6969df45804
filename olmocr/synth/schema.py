"""Schema of ``python -m olmocr.synth`` (conf/synth.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from olmocr.config import OneOf, Range, StageConfig, store


@dataclass
class SynthConfig(StageConfig):
    out_dir: str | None = None  # default: <run dir>/pages
    num_pages: Annotated[int, Range(at_least=1)] = 24
    seed: int = 0
    first_index: Annotated[int, Range(at_least=0)] = 0
    layout_weights: dict[str, float] = field(default_factory=dict)
    language_weights: dict[str, float] = field(default_factory=dict)
    render_check: bool = True
    # The pages' category: tests in <category>.jsonl, pages named <category>_s<seed>_<index>, so sets made with
    # other settings share out_dir as the categories of one bench (null: synth.jsonl, synth_s<seed>_<index>)
    category: str | None = None
    # Reading pages instead (olmocr.synth.reading): plain text a small model learns to read, by level of a
    # curriculum (line, lines, page), or structured (a header, headings, paragraphs, a page number); the weights
    # above do not apply
    reading: Annotated[str | None, OneOf("word", "line", "lines", "page", "structured")] = None  # null: the layouts above
    # seen: never the held-out words (to train on); all: the whole bank; unseen: only the held-out words;
    # letters: random strings; mixed: training words, training words with letters changed, random strings;
    # codes (typeset only): mixed-case strings, numbers and identifiers
    reading_words: Annotated[str, OneOf("seen", "all", "unseen", "letters", "mixed", "codes")] = "all"
    # grid: lowercase Courier on the image-token grid, a character a patch; typeset: any place, size and typeface,
    # both cases, numbers and punctuation (olmocr.synth.reading)
    reading_type: Annotated[str, OneOf("grid", "typeset")] = "grid"
    # typefaces of typeset pages (olmocr.synth.fonts.FACES); empty: the training set, which leaves out
    # olmocr.synth.reading.HELD_OUT_FACES (carlito, caladea)
    reading_faces: list[str] = field(default_factory=list)


store("synth_schema", SynthConfig)
