"""olmOCR-bench test records: one JSON object per line naming a PDF page and what its OCR must satisfy.

Every field that olmOCR-bench writes is accepted, with the same defaults, and a line is rejected for the
same reasons (empty ``pdf``/``id``, negative ``max_diffs``, an empty text after normalisation, an order
test whose ``max_diffs`` exceeds half of either text, …). A wrong type is a UserError naming the field.
A field no test type knows is not an error: :func:`parse_test` reports it and keeps the test, and
:func:`load_tests` turns it into a ``file:line`` warning.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import ClassVar, Union, get_args, get_origin, get_type_hints

from olmocr.bench import checks
from olmocr.bench.normalize import normalize
from olmocr.errors import UserError


@dataclass(frozen=True)
class BenchTest:
    pdf: str
    page: int
    id: str
    type: ClassVar[str] = ""
    check: ClassVar = None  # the function in olmocr.bench.checks that runs this type
    required: ClassVar[tuple[str, ...]] = ()
    max_diffs: int = 0
    checked: str | None = None  # "verified" or "rejected": a reviewer's verdict on the test itself
    url: str | None = None

    def to_dict(self) -> dict:
        """The JSON line: type, pdf, page, id, required fields and every field not at its default."""
        out = {"type": self.type}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("pdf", "page", "id", *self.required) or value != f.default:
                out[f.name] = value
        return out

    def validate(self) -> None:
        """Type-specific checks beyond field types; raises UserError."""

    def run(self, markdown: str, explain: bool = True, scoring: str = "strict") -> tuple[bool, str]:
        """(passed, explanation) for one output; ``explain=False`` skips the costly part of explaining;
        ``scoring`` is ``strict`` or ``published`` (:mod:`olmocr.bench.checks`)."""
        if self.check is None:
            raise NotImplementedError(f"{type(self).__name__} is not a test type")
        return self.check(self, markdown, explain, scoring)


@dataclass(frozen=True)
class TextPresenceTest(BenchTest):
    required: ClassVar[tuple[str, ...]] = ("text",)
    text: str = ""
    case_sensitive: bool = True
    first_n: int | None = None
    last_n: int | None = None

    def validate(self) -> None:
        _not_blank(self, "text")


@dataclass(frozen=True)
class PresentTest(TextPresenceTest):
    type: ClassVar[str] = "present"
    check: ClassVar = staticmethod(checks.present)


@dataclass(frozen=True)
class AbsentTest(TextPresenceTest):
    type: ClassVar[str] = "absent"
    check: ClassVar = staticmethod(checks.absent)


@dataclass(frozen=True)
class OrderTest(BenchTest):
    type: ClassVar[str] = "order"
    check: ClassVar = staticmethod(checks.order)
    required: ClassVar[tuple[str, ...]] = ("before", "after")
    before: str = ""
    after: str = ""

    def validate(self) -> None:
        _not_blank(self, "before")
        _not_blank(self, "after")
        shortest = min(len(normalize(self.before)), len(normalize(self.after)))
        if self.max_diffs > shortest // 2:
            raise UserError(f"order test: max_diffs {self.max_diffs} is more than half of the shorter text "
                            f"({shortest} characters)")


@dataclass(frozen=True)
class TableTest(BenchTest):
    type: ClassVar[str] = "table"
    check: ClassVar = staticmethod(checks.table)
    required: ClassVar[tuple[str, ...]] = ("cell",)
    cell: str = ""
    up: str | None = ""
    down: str | None = ""
    left: str | None = ""
    right: str | None = ""
    top_heading: str | None = ""
    left_heading: str | None = ""
    ignore_markdown_tables: bool = False


@dataclass(frozen=True)
class MathTest(BenchTest):
    type: ClassVar[str] = "math"
    check: ClassVar = staticmethod(checks.math)
    required: ClassVar[tuple[str, ...]] = ("math",)
    math: str = ""
    ignore_dollar_delimited: bool = False

    def validate(self) -> None:
        if not self.math.strip():
            raise UserError("math test: field 'math' is empty")


@dataclass(frozen=True)
class BaselineTest(BenchTest):
    type: ClassVar[str] = "baseline"
    check: ClassVar = staticmethod(checks.baseline)
    # Set for blank pages: at most this many letters and digits may be output.
    max_length: int | None = None
    max_length_skips_image_alt_tags: bool = False
    max_repeats: int = 30
    check_disallowed_characters: bool = True


@dataclass(frozen=True)
class FormatTest(BenchTest):
    type: ClassVar[str] = "format"
    check: ClassVar = staticmethod(checks.formatted)
    required: ClassVar[tuple[str, ...]] = ("text", "format")
    text: str = ""
    format: str = ""  # heading, bold or italic
    case_sensitive: bool = True

    def validate(self) -> None:
        _not_blank(self, "text")
        if self.format not in checks.FORMATS:
            raise UserError(f"format test: field 'format' must be one of {', '.join(checks.FORMATS)}, "
                            f"got {self.format!r}")


@dataclass(frozen=True)
class FootnoteTest(BenchTest):
    type: ClassVar[str] = "footnote"
    check: ClassVar = staticmethod(checks.footnote)
    required: ClassVar[tuple[str, ...]] = ("marker",)
    marker: str = ""
    appears_before_marker: str | None = None
    appears_after_marker: str | None = None

    def validate(self) -> None:
        if not self.marker:
            raise UserError("footnote test: field 'marker' is empty")
        if " " in self.marker:
            raise UserError(f"footnote test: field 'marker' must not contain spaces, got {self.marker!r}")
        for name in ("appears_before_marker", "appears_after_marker"):
            if getattr(self, name):
                _not_blank(self, name)


TEST_TYPES: dict[str, type[BenchTest]] = {
    cls.type: cls
    for cls in (PresentTest, AbsentTest, OrderTest, TableTest, MathTest, BaselineTest, FormatTest, FootnoteTest)
}


def _not_blank(test: BenchTest, name: str) -> None:
    if not normalize(getattr(test, name)).strip():
        raise UserError(f"{test.type} test: field {name!r} is empty")


def _check_type(name: str, value, annotation) -> None:
    allowed = get_args(annotation) if get_origin(annotation) in (Union, type(int | None)) else (annotation,)
    if value is None and type(None) in allowed:
        return
    expected = tuple(t for t in allowed if t is not type(None))
    if bool in expected and isinstance(value, bool):
        return
    if isinstance(value, bool) or not isinstance(value, expected):
        names = " or ".join(t.__name__ for t in allowed)
        raise UserError(f"field {name!r} must be {names}, got {value!r}")


@functools.cache
def _fields_of(cls: type) -> tuple[dict, frozenset]:
    """A test class's field types and names, worked out once: a bench of a million tests parses each line."""
    return get_type_hints(cls), frozenset(f.name for f in fields(cls))


def parse_test(data: dict, unknown: list[str] | None = None) -> BenchTest:
    """A test from its JSON object. Fields no test type knows are left out and, when ``unknown`` is
    given, appended to it; a missing or ill-typed field, or a value the bench rejects, is a UserError."""
    if not isinstance(data, dict):
        raise UserError(f"expected a JSON object, got {type(data).__name__}")
    kind = data.get("type")
    if kind not in TEST_TYPES:
        raise UserError(f"unknown test type {kind!r} (expected one of {', '.join(TEST_TYPES)})")
    cls = TEST_TYPES[kind]
    hints, known = _fields_of(cls)
    values = {k: v for k, v in data.items() if k in known}
    if unknown is not None:
        unknown.extend(sorted(k for k in data if k not in known and k != "type"))
    for name in ("pdf", "page", "id", *cls.required):
        if name not in values:
            raise UserError(f"{kind} test: missing field {name!r}")
    for name, value in values.items():
        _check_type(name, value, hints[name])
    for name in ("pdf", "id"):
        if not values[name]:
            raise UserError(f"{kind} test: field {name!r} is empty")
    if values["page"] < 1:
        raise UserError(f"field 'page' must be 1 or more, got {values['page']}")
    if values.get("max_diffs", 0) < 0:
        raise UserError(f"field 'max_diffs' must be 0 or more, got {values['max_diffs']}")
    test = cls(**values)
    test.validate()
    return test


@dataclass
class TestFile:
    tests: list[BenchTest] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)  # "file:line: why"; the line is skipped
    warnings: list[str] = dataclasses.field(default_factory=list)  # "file:line: why"; the test is kept

    __test__ = False  # not a pytest class


def read_tests(path: str) -> Iterator[tuple[BenchTest | None, str | None]]:
    """A test JSONL file line by line, as ``(test, None)``, ``(test, warning)`` for unknown fields (ignored) or
    ``(None, error)`` for a malformed line; nothing is raised, and nothing is held but the line."""
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            unknown: list[str] = []
            try:
                test = parse_test(json.loads(line), unknown)
            except (ValueError, TypeError) as exc:
                yield None, f"{path}:{number}: {exc}"
                continue
            yield test, (f"{path}:{number}: unknown field(s) {', '.join(unknown)}, ignored" if unknown else None)


def load_tests(path: str) -> TestFile:
    """Parse a test JSONL file; malformed lines become errors and unknown fields warnings, never raised."""
    out = TestFile()
    for test, problem in read_tests(path):
        if test is None:
            out.errors.append(problem)
            continue
        out.tests.append(test)
        if problem:
            out.warnings.append(problem)
    return out
