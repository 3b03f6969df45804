"""Page front matter: the five typed fields that open every target .md file.

YAML's type guessing is the wrong tool here: ``no`` (Norwegian) and ``on`` would become booleans and
``null`` a missing language. Each field is therefore parsed by its own rule, and the schema is strict:
a missing or unknown field is an error that names the field.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import NamedTuple

from olmocr.formats.structure import StructureError, markdown_of, parse_blocks

VALID_ROTATIONS = (0, 90, 180, 270)
FIELDS = ("primary_language", "is_rotation_valid", "rotation_correction", "is_table", "is_diagram")
_TRUE = {"true", "yes"}
_FALSE = {"false", "no"}
_NULL = {"", "null", "none", "~"}


class FrontMatterError(ValueError):
    """Front matter that does not match the schema; the message names the field."""


@dataclass(frozen=True)
class PageMeta:
    primary_language: str | None = "en"
    is_rotation_valid: bool = True
    rotation_correction: int = 0
    is_table: bool = False
    is_diagram: bool = False

    def __post_init__(self):
        if self.rotation_correction not in VALID_ROTATIONS:
            raise FrontMatterError(
                f"rotation_correction must be one of {VALID_ROTATIONS}, got {self.rotation_correction!r}"
            )

    def to_front_matter(self) -> str:
        lang = "null" if self.primary_language is None else self.primary_language
        return (
            "---\n"
            f"primary_language: {lang}\n"
            f"is_rotation_valid: {self.is_rotation_valid}\n"
            f"rotation_correction: {self.rotation_correction}\n"
            f"is_table: {self.is_table}\n"
            f"is_diagram: {self.is_diagram}\n"
            "---\n"
        )

    def to_dict(self) -> dict:
        return asdict(self)


def _unquote(raw: str) -> tuple[str, bool]:
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1], True
    return raw, False


def _parse_bool(field: str, raw: str) -> bool:
    value = _unquote(raw)[0].lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise FrontMatterError(f"{field}: expected True or False, got {raw!r}")


def _parse_language(raw: str) -> str | None:
    value, quoted = _unquote(raw)
    if not quoted and value.lower() in _NULL:
        return None
    return value


def _parse_rotation(raw: str) -> int:
    value = _unquote(raw)[0]
    try:
        angle = int(value)
    except ValueError:
        raise FrontMatterError(f"rotation_correction: expected an integer in {VALID_ROTATIONS}, got {raw!r}") from None
    if angle not in VALID_ROTATIONS:
        raise FrontMatterError(f"rotation_correction: expected one of {VALID_ROTATIONS}, got {angle}")
    return angle


_PARSERS = {
    "primary_language": _parse_language,
    "is_rotation_valid": lambda raw: _parse_bool("is_rotation_valid", raw),
    "rotation_correction": _parse_rotation,
    "is_table": lambda raw: _parse_bool("is_table", raw),
    "is_diagram": lambda raw: _parse_bool("is_diagram", raw),
}


def parse_fields(lines: list[str]) -> PageMeta:
    values: dict = {}
    for number, line in enumerate(lines, start=2):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, raw = stripped.partition(":")
        key = key.strip()
        if not sep:
            raise FrontMatterError(f"line {number}: expected 'key: value', got {stripped!r}")
        if key not in _PARSERS:
            raise FrontMatterError(f"unknown field {key!r} (expected {', '.join(FIELDS)})")
        if key in values:
            raise FrontMatterError(f"field {key!r} appears twice")
        raw = raw.split(" #", 1)[0].strip()
        values[key] = _PARSERS[key](raw)
    missing = [f for f in FIELDS if f not in values]
    if missing:
        raise FrontMatterError(f"missing field(s) {', '.join(missing)}")
    return PageMeta(**values)


def parse_document(document: str) -> tuple[PageMeta, str]:
    """Split a target document into its front matter and its page text (blank pages give '')."""
    text = document.replace("\r\n", "\n").replace("\r", "\n")
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        raise FrontMatterError("document does not start with a '---' front matter line")
    for end in range(1, len(lines)):
        if lines[end].strip() == "---":
            break
    else:
        raise FrontMatterError("front matter has no closing '---' line")
    meta = parse_fields(lines[1:end])
    body = "\n".join(lines[end + 1 :]).strip("\n")
    return meta, body


def page_text(document: str) -> str:
    """The page text of a model output: without its front matter when it has one that parses (outputs
    of models trained on front-matter targets), else the whole output."""
    try:
        return parse_document(document)[1]
    except FrontMatterError:
        return document


class Reading(NamedTuple):
    """A model's answer to a page, read: its front matter, its page text (markdown), and its blocks where the
    model writes blocks (:mod:`olmocr.formats.structure`; None for a markdown answer)."""

    meta: PageMeta
    text: str
    blocks: list | None = None


def read_answer(text: str, finish_reason: str | None, max_tokens: int, answer: str = "markdown",
                furniture: bool = False) -> Reading | str:
    """A model's answer to a page: its front matter and text, or why it is none (cut off at ``max_tokens``,
    stopped for another reason, no front matter that parses, blocks that do not parse). The pipeline and
    training's bench eval judge answers by this one rule, so their scores agree. ``answer`` is what the model
    writes after its front matter (:func:`olmocr.formats.prompts.answer_format`): for ``blocks``, the page text
    is made from them, furniture left out unless ``furniture``."""
    if finish_reason == "length":
        return f"cut off at max_tokens={max_tokens}"
    if finish_reason not in (None, "stop"):
        return f"finish_reason {finish_reason}"
    try:
        meta, body = parse_document(text)
    except FrontMatterError as exc:
        return f"unparseable: {exc}"
    if answer != "blocks":
        return Reading(meta, body)
    try:
        blocks = parse_blocks(body)
    except StructureError as exc:
        return f"unparseable blocks: {exc}"
    return Reading(meta, markdown_of(blocks, furniture), blocks)


def write_document(meta: PageMeta, text: str) -> str:
    return meta.to_front_matter() + (text.strip("\n") + "\n" if text.strip() else "")


def to_json_target(meta: PageMeta, text: str) -> str:
    """The JSON target form: the five fields plus ``natural_text`` (None for a blank page)."""
    return json.dumps({**meta.to_dict(), "natural_text": text or None}, ensure_ascii=False)
