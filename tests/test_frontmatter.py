import json

import pytest

from olmocr.formats.frontmatter import (
    FrontMatterError,
    PageMeta,
    parse_document,
    to_json_target,
    write_document,
)

DOC = """---
primary_language: {lang}
is_rotation_valid: True
rotation_correction: 0
is_table: False
is_diagram: False
---
Hello **world**.

Second paragraph."""


def test_roundtrip_keeps_text_and_fields():
    meta = PageMeta(primary_language="de", is_rotation_valid=False, rotation_correction=270, is_table=True)
    text = "# Title\n\nBody with <table><tr><td>1</td></tr></table>"
    parsed_meta, parsed_text = parse_document(write_document(meta, text))
    assert parsed_meta == meta
    assert parsed_text == text


def test_norwegian_language_code_stays_a_string():
    meta, _ = parse_document(DOC.format(lang="no"))
    assert meta.primary_language == "no"
    meta, _ = parse_document(DOC.format(lang="'no'"))
    assert meta.primary_language == "no"
    # Written back, it parses to the same string again.
    assert parse_document(write_document(meta, "x"))[0].primary_language == "no"


@pytest.mark.parametrize("raw", ["null", "None", "~", ""])
def test_null_language(raw):
    meta, _ = parse_document(DOC.format(lang=raw))
    assert meta.primary_language is None
    assert parse_document(write_document(meta, "x"))[0].primary_language is None


def test_quoted_null_is_a_string():
    assert parse_document(DOC.format(lang='"null"'))[0].primary_language == "null"


def test_crlf_and_bom_are_tolerated():
    meta, text = parse_document("\ufeff" + DOC.format(lang="en").replace("\n", "\r\n"))
    assert meta.primary_language == "en"
    assert text == "Hello **world**.\n\nSecond paragraph."


def test_blank_page_has_empty_text():
    meta, text = parse_document(write_document(PageMeta(primary_language=None), ""))
    assert text == ""
    assert write_document(meta, "").endswith("---\n")


def test_missing_field_is_named():
    doc = DOC.format(lang="en").replace("is_table: False\n", "")
    with pytest.raises(FrontMatterError, match="missing field.*is_table"):
        parse_document(doc)


def test_extra_field_is_named():
    doc = DOC.format(lang="en").replace("is_table: False\n", "is_table: False\nis_handwritten: True\n")
    with pytest.raises(FrontMatterError, match="unknown field 'is_handwritten'"):
        parse_document(doc)


@pytest.mark.parametrize("bad, match", [
    ("rotation_correction: 45", "rotation_correction"),
    ("rotation_correction: ninety", "rotation_correction"),
])
def test_bad_rotation(bad, match):
    with pytest.raises(FrontMatterError, match=match):
        parse_document(DOC.format(lang="en").replace("rotation_correction: 0", bad))


def test_bad_boolean_is_named():
    with pytest.raises(FrontMatterError, match="is_diagram: expected True or False"):
        parse_document(DOC.format(lang="en").replace("is_diagram: False", "is_diagram: maybe"))


@pytest.mark.parametrize("doc, match", [
    ("no front matter here", "does not start"),
    ("---\nprimary_language: en\n", "no closing"),
    ("---\nprimary_language en\n---\n", "expected 'key: value'"),
    ("---\nprimary_language: en\nprimary_language: de\n---\n", "appears twice"),
])
def test_broken_front_matter(doc, match):
    with pytest.raises(FrontMatterError, match=match):
        parse_document(doc)


def test_json_target():
    data = json.loads(to_json_target(PageMeta(primary_language="fr"), "Bonjour"))
    assert data == {"primary_language": "fr", "is_rotation_valid": True, "rotation_correction": 0,
                    "is_table": False, "is_diagram": False, "natural_text": "Bonjour"}
    assert json.loads(to_json_target(PageMeta(), ""))["natural_text"] is None
