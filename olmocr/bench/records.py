"""olmOCR-bench test records: one JSON object per line naming a PDF page and what its OCR must satisfy.

Parsing is strict: an unknown field, a missing field or a wrong type is a ValueError naming the field,
and :func:`load_tests` names the file and line.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, fields
from typing import ClassVar, Union, get_args, get_origin, get_type_hints

from olmocr.bench import checks


@dataclass(frozen=True)
class BenchTest:
    pdf: str
    page: int
    id: str
    type: ClassVar[str] = ""
    max_diffs: int = 0
    checked: str | None = None
    url: str | None = None

    def to_dict(self) -> dict:
        return {"type": self.type, **dataclasses.asdict(self)}


@dataclass(frozen=True)
class TextPresenceTest(BenchTest):
    text: str = ""
    case_sensitive: bool = True
    first_n: int | None = None
    last_n: int | None = None


@dataclass(frozen=True)
class PresentTest(TextPresenceTest):
    type: ClassVar[str] = "present"

    def run(self, markdown: str, explain: bool = True) -> tuple[bool, str]:
        return checks.present(self, markdown, explain)


@dataclass(frozen=True)
class AbsentTest(TextPresenceTest):
    type: ClassVar[str] = "absent"

    def run(self, markdown: str, explain: bool = True) -> tuple[bool, str]:
        return checks.absent(self, markdown, explain)


@dataclass(frozen=True)
class OrderTest(BenchTest):
    type: ClassVar[str] = "order"
    before: str = ""
    after: str = ""

    def run(self, markdown: str, explain: bool = True) -> tuple[bool, str]:
        return checks.order(self, markdown, explain)


@dataclass(frozen=True)
class TableTest(BenchTest):
    type: ClassVar[str] = "table"
    cell: str = ""
    up: str | None = None
    down: str | None = None
    left: str | None = None
    right: str | None = None
    top_heading: str | None = None
    left_heading: str | None = None

    def run(self, markdown: str, explain: bool = True) -> tuple[bool, str]:
        return checks.table(self, markdown, explain)


@dataclass(frozen=True)
class MathTest(BenchTest):
    type: ClassVar[str] = "math"
    math: str = ""

    def run(self, markdown: str, explain: bool = True) -> tuple[bool, str]:
        return checks.math(self, markdown, explain)


@dataclass(frozen=True)
class BaselineTest(BenchTest):
    type: ClassVar[str] = "baseline"
    # Set for blank pages: at most this many letters and digits may be output (image links not counted).
    max_length: int | None = None
    max_repeats: int = 30
    check_disallowed_characters: bool = True

    def run(self, markdown: str, explain: bool = True) -> tuple[bool, str]:
        return checks.baseline(self, markdown, explain)


TEST_TYPES: dict[str, type[BenchTest]] = {
    cls.type: cls for cls in (PresentTest, AbsentTest, OrderTest, TableTest, MathTest, BaselineTest)
}
_REQUIRED_TEXT = {"present": ("text",), "absent": ("text",), "order": ("before", "after"),
                  "table": ("cell",), "math": ("math",)}


def _check_type(name: str, value, annotation) -> None:
    allowed = get_args(annotation) if get_origin(annotation) in (Union, type(int | None)) else (annotation,)
    if value is None and type(None) in allowed:
        return
    expected = tuple(t for t in allowed if t is not type(None))
    if bool in expected and isinstance(value, bool):
        return
    if isinstance(value, bool) or not isinstance(value, expected):
        names = " or ".join(t.__name__ for t in allowed)
        raise ValueError(f"field {name!r} must be {names}, got {value!r}")


def parse_test(data: dict) -> BenchTest:
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    kind = data.get("type")
    if kind not in TEST_TYPES:
        raise ValueError(f"field 'type' must be one of {', '.join(TEST_TYPES)}, got {kind!r}")
    cls = TEST_TYPES[kind]
    hints = get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    values = {k: v for k, v in data.items() if k != "type"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{kind} test: unknown field(s) {', '.join(unknown)}")
    for name in ("pdf", "page", "id", *_REQUIRED_TEXT.get(kind, ())):
        if name not in values:
            raise ValueError(f"{kind} test: missing field {name!r}")
    for name, value in values.items():
        _check_type(name, value, hints[name])
    for name in _REQUIRED_TEXT.get(kind, ()):
        if not values[name].strip():
            raise ValueError(f"{kind} test: field {name!r} is empty")
    if values["page"] < 1:
        raise ValueError(f"field 'page' must be 1 or more, got {values['page']}")
    return cls(**values)


def load_tests(path: str) -> tuple[list[BenchTest], list[str]]:
    """Parse a test JSONL file; malformed lines are returned as ``file:line: why`` errors, not raised."""
    tests, errors = [], []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                tests.append(parse_test(json.loads(line)))
            except (ValueError, TypeError) as exc:
                errors.append(f"{path}:{number}: {exc}")
    return tests, errors
