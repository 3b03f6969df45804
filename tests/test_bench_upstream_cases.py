"""olmOCR-bench's own unit-test cases for its test types and table parser, translated: the behaviour each
of its cases pins (tests/test_tests.py, tests/test_table_parsing.py of allenai/olmocr) is pinned here on
this project's checks, case by case, with the same verdicts. Explanations are this project's wording.
Where a case cannot apply, docs/bench.md says why (a test's class follows from its type
here; a missing required field is a listed line error rather than a TypeError). The cases run under
``scoring=published``; tests/test_bench_checks.py pins where ``strict`` differs."""

import pytest

from olmocr.bench.normalize import normalize
from olmocr.bench.records import BenchTest, parse_test
from olmocr.formats.tables import html_tables, markdown_tables


def make(kind, **fields):
    return parse_test({"type": kind, "pdf": "test.pdf", "page": 1, "id": "test_id", **fields})


def passes(kind, content, **fields):
    return make(kind, **fields).run(content, scoring="published")[0]


# -- normalisation ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, expected", [
    ("Some  spaced\ttext\nover\nlines", "Some spaced text over lines"),
    ("It's 'plain' “curly” and—dash", "It's 'plain' \"curly\" and-dash"),
    ("this is *bold*", "this is bold"),
    ("_italic__ is *bold*", "italic_ is bold"),
    ("", ""),
    ("Hi<br>all", "Hi all"),
    ("Hi<br/>all", "Hi all"),
    ("**Author A.** (1999) – *A Title: with, commas (and brackets)*, thesis, 2 vol., 12 p.",
     "Author A. (1999) - A Title: with, commas (and brackets), thesis, 2 vol., 12 p."),
])
def test_normalize_text(raw, expected):
    assert normalize(raw) == expected


def test_line_breaks_and_br_normalise_alike():
    assert normalize("Hi<br>all") == normalize("Hi\nall") == normalize("Hi<br/>all")


# -- fields every test has --------------------------------------------------------------------------------------
def test_defaults():
    test = make("baseline")
    assert (test.pdf, test.page, test.id, test.type, test.max_diffs, test.checked, test.url) == \
        ("test.pdf", 1, "test_id", "baseline", 0, None, None)
    assert make("baseline", checked="verified").checked == "verified"
    with pytest.raises(NotImplementedError):
        BenchTest(pdf="test.pdf", page=1, id="test_id").run("content")


@pytest.mark.parametrize("fields, error", [
    ({"type": "baseline", "pdf": ""}, "'pdf' is empty"),
    ({"type": "baseline", "id": ""}, "'id' is empty"),
    ({"type": "baseline", "max_diffs": -1}, "'max_diffs' must be 0 or more"),
    ({"type": "invalid_type"}, "unknown test type 'invalid_type'"),
    ({"type": "present", "text": ""}, "'text' is empty"),
    ({"type": "order", "before": "", "after": "second text"}, "'before' is empty"),
    ({"type": "order", "before": "first text", "after": ""}, "'after' is empty"),
    ({"type": "math", "math": ""}, "'math' is empty"),
    ({"type": "format", "text": "", "format": "heading"}, "'text' is empty"),
    ({"type": "format", "text": "test text", "format": "underline"}, "must be one of heading, bold, italic"),
    ({"type": "footnote"}, "missing field 'marker'"),
    ({"type": "footnote", "marker": "1", "appears_before_marker": "   "}, "'appears_before_marker' is empty"),
    ({"type": "footnote", "marker": "1", "appears_after_marker": "   "}, "'appears_after_marker' is empty"),
    ({"type": "footnote", "marker": "has space"}, "must not contain spaces"),
])
def test_invalid_tests_are_rejected(fields, error):
    with pytest.raises(ValueError, match=error):
        parse_test({"pdf": "test.pdf", "page": 1, "id": "test_id", **fields})


def test_type_defaults():
    present = make("present", text="test text")
    assert (present.text, present.case_sensitive, present.first_n, present.last_n) == ("test text", True, None, None)
    absent = make("absent", text="test text", case_sensitive=False)
    assert absent.case_sensitive is False
    order = make("order", before="first text", after="second text")
    assert (order.before, order.after) == ("first text", "second text")
    table = make("table", cell="target cell")
    assert (table.up, table.down, table.left, table.right, table.top_heading, table.left_heading) == ("",) * 6
    assert make("baseline", max_repeats=50).max_repeats == 50
    assert make("math", math="a + b = c").math == "a + b = c"
    fmt = make("format", text="Important Title", format="heading")
    assert (fmt.text, fmt.format, fmt.case_sensitive) == ("Important Title", "heading", True)
    note = make("footnote", marker="1")
    assert (note.marker, note.appears_before_marker, note.appears_after_marker) == ("1", None, None)


# -- present / absent -------------------------------------------------------------------------------------------
DOC = "This is some target text in a document"


@pytest.mark.parametrize("kind, fields, content, passed", [
    ("present", {"text": "target text"}, DOC, True),
    ("present", {"text": "missing text"}, "This document doesn't have the target", False),
    ("present", {"text": "target text", "max_diffs": 2}, "This is some targett textt in a document", True),
    ("absent", {"text": "target text"}, DOC, False),
    ("absent", {"text": "target text", "max_diffs": 2}, DOC, False),
    ("absent", {"text": "target text", "max_diffs": 2}, "This is some targett text in a document", False),
    ("absent", {"text": "target text", "max_diffs": 2}, "This is some targettt text in a document", False),
    ("absent", {"text": "target text", "max_diffs": 2}, "This is some targetttt text in a document", True),
    ("absent", {"text": "max"}, "There is a max set of diffs to make", False),
    ("absent", {"text": "max"}, "This is some maximum text in a document", False),  # substrings count
    ("absent", {"text": "missing text"}, "This document doesn't have the target", True),
    ("present", {"text": "TARGET TEXT", "case_sensitive": False}, DOC, True),
    ("absent", {"text": "TARGET TEXT", "case_sensitive": False}, DOC, False),
    ("present", {"text": "beginning", "first_n": 20}, "beginning of text, but not the end", True),
    ("present", {"text": "end", "first_n": 20}, "beginning of text, but not the end", False),
    ("present", {"text": "end", "last_n": 20}, "beginning of text, but not the end", True),
    ("present", {"text": "beginning", "last_n": 20}, "beginning of text, but not the end", False),
    ("present", {"text": "beginning", "first_n": 15, "last_n": 10}, "beginning of text, middle part, but not the end", True),
    ("present", {"text": "middle", "first_n": 15, "last_n": 10}, "beginning of text, middle part, but not the end", False),
    ("present", {"text": "I like to eat at a caf\u00e9"}, "I like to eat at a caf\u00e9", True),
    ("present", {"text": "I like to eat at a caf\u00e9"}, "I like to eat at a cafe\u0301", True),  # NFC
])
def test_text_presence(kind, fields, content, passed):
    test = make(kind, **fields)
    ok, why = test.run(content, scoring="published")
    assert ok is passed, why
    if not ok:
        assert fields["text"] in why


# -- order ------------------------------------------------------------------------------------------------------
ORDER_DOC = "This has first and then second in correct order"


@pytest.mark.parametrize("fields, content, passed", [
    ({"before": "first", "after": "second"}, ORDER_DOC, True),
    ({"before": "second", "after": "first"}, ORDER_DOC, False),
    ({"before": "missing", "after": "present"}, "This text has present but not the other word", False),
    ({"before": "present", "after": "missing"}, "This text has present but not the other word", False),
    ({"before": "first", "after": "second", "max_diffs": 1}, "This has firsst and then secand in correct order", True),
    ({"before": "target", "after": "target"}, "This has target and then target again", True),
    ({"before": "B", "after": "A"}, "A B A B", True),  # some B comes before some A
    ({"before": "Ana Mar\u00eda Pe\u00f1a*", "after": "All rights reserved."},
     "# A Paper\n\nJohn Roe,\n\nand\n\nAna Mar\u00eda Pe\u00f1a*\n\n*Presented at a conference, 2011*\n\n"
     "*Copyright 2011 by the authors. All rights reserved.  \nReaders may copy it.*", True),
])
def test_order(fields, content, passed):
    assert passes("order", content, **fields) is passed


# -- tables -----------------------------------------------------------------------------------------------------
MD_TABLE = """
| Header 1 | Header 2 | Header 3 |
| -------- | -------- | -------- |
| Cell A1  | Cell A2  | Cell A3  |
| Cell B1  | Cell B2  | Cell B3  |
"""
HTML_TABLE = """
<table>
  <tr><th>Header 1</th><th>Header 2</th><th>Header 3</th></tr>
  <tr><td>Cell A1</td><td>Cell A2</td><td>Cell A3</td></tr>
  <tr><td>Cell B1</td><td>Cell B2</td><td>Cell B3</td></tr>
</table>
"""


@pytest.mark.parametrize("parse, doc", [(markdown_tables, MD_TABLE), (html_tables, HTML_TABLE)])
def test_simple_tables_parse(parse, doc):
    tables = parse(doc)
    assert len(tables) == 1
    assert (tables[0].text[0, 0], tables[0].text[1, 1], tables[0].text[2, 2]) == ("Header 1", "Cell A2", "Cell B3")


@pytest.mark.parametrize("fields, passed", [
    ({"cell": "Cell A2"}, True),
    ({"cell": "Missing Cell"}, False),
    ({"cell": "Cell A2", "up": "Header 2"}, True),
    ({"cell": "Cell A2", "up": "Wrong Header"}, False),
    ({"cell": "Cell A2", "down": "Cell B2"}, True),
    ({"cell": "Cell A2", "down": "Wrong Cell"}, False),
    ({"cell": "Cell A2", "left": "Cell A1"}, True),
    ({"cell": "Cell A2", "left": "Wrong Cell"}, False),
    ({"cell": "Cell A2", "right": "Cell A3"}, True),
    ({"cell": "Cell A2", "right": "Wrong Cell"}, False),
    ({"cell": "Cell B2", "top_heading": "Header 2"}, True),
    ({"cell": "Cell B2", "top_heading": "Wrong Header"}, False),
    ({"cell": "Cell A3", "left_heading": "Cell A1"}, True),  # the first column heads a markdown table's rows
    ({"cell": "Cell A3", "left_heading": "Wrong Cell"}, False),
    ({"cell": "Cell A2", "up": "Header 2", "down": "Cell B2", "left": "Cell A1", "right": "Cell A3"}, True),
    ({"cell": "Cell A2", "up": "Header 2", "down": "Cell B2", "left": "Wrong Cell", "right": "Cell A3"}, False),
])
def test_table_relations(fields, passed):
    ok, why = make("table", **fields).run(MD_TABLE, scoring="published")
    assert ok is passed, why
    if not ok:
        assert ("expected" in why) if len(fields) > 1 else ("no cell matches" in why)


def test_no_table_and_fuzzy_cells():
    ok, why = make("table", cell="Cell A2").run("This is plain text with no tables", scoring="published")
    assert not ok and why == "no table found"
    assert passes("table", MD_TABLE.replace("Cell A2", "Cel A2"), cell="Cell A2", max_diffs=1)


@pytest.mark.parametrize("doc", [
    MD_TABLE.strip(),
    "Some text before the table.\n" + MD_TABLE.strip(),
    MD_TABLE.rstrip(),
    "\n".join(line + "   " for line in MD_TABLE.split("\n")),
    "Some text before the table.\n" + MD_TABLE.strip() + "  \t  ",
    "\nSome text before the table.\n| Header 1 | Header 2 | Header 3\n| -------- | -------- | --------\n"
    "| Cell A1  | Cell A2  | Cell A3  |\n| Cell B1  | Cell B2  | Cell B3",  # pipes missing at the ends
    "\nSome text before the table.\n| Header 1 | Header 2 | Header 3 |\n| Cell A1  | Cell A2  | Cell A3  |\n"
    "| Cell B1  | Cell B2  | Cell B3  |",  # no separator row
    MD_TABLE + "\n" * 10,
    "Lorem ipsum dolor sit amet, " * 100 + "\n" + MD_TABLE.strip(),
])
def test_markdown_tables_anywhere(doc):
    assert passes("table", doc, cell="Cell A2")


def test_table_cells_are_normalised():
    table = ("| Question - – Rating out of 10 | Answer | Group A | Group B |\n|---|---|---|---|\n"
             "| Roads and bridges | Score 8, 9 or 10 | 13% | 11% |\n| | Mean score | 6.4 | 5.7 |\n"
             "| | Don’t know | 11% | 6% |\n| Parks and green space | Score 8, 9 or 10 | 42% | 41% |")
    assert passes("table", table, cell="Don't know", left="")  # curly quote, empty left cell
    assert passes("table", table, cell="6.4", top_heading="Group A")
    assert passes("table", "| A | B |\n|---|---|\n| −.34 (.22) | x |", cell="-.34 (.22)")  # minus sign


POINTS = """| CATEGORY     | POINTS EARNED |
|------------------------------|------------------|
| Sustainable Sites            | 9                |
| Water Efficiency             | 3                |
| TOTAL                        | 12               |"""


def test_markdown_neighbours_and_diffs():
    assert passes("table", POINTS, cell="9", up="POINTS EARNED")
    assert not passes("table", POINTS, cell="9", left="Sustl Sie", max_diffs=2)  # ratio 0.8 < 1 - 2/9
    assert passes("table", POINTS, cell="9", left="Sustainable Site", max_diffs=2)


def test_line_breaks_inside_markdown_cells_split_rows():
    # a cell broken over two lines becomes two rows: neither half matches the whole
    table = ("| Level\nname | [A] | [B] |\n|---|---|---|\n| Low | 250\nμM | 8 μM |\n| Mid | 625 μM | 20 μM |")
    assert not passes("table", table, cell="20 μM", up=".002 nM")
    assert not passes("table", table, cell="625 μM", left_heading="Low\nMid")


def test_long_cells_and_fuzzy_neighbours():
    table = ("<table><thead><tr><th>Topic</th><th>Answer</th></tr></thead><tbody>"
             "<tr><td rowspan='2'>Keeping the town's roads, bridges and pavements in good repair</td><td>Good</td></tr>"
             "<tr><td>Poor</td></tr>"
             "<tr><td rowspan='2'>Support for local clubs,\nyouth groups and\n(e.g. sports) libraries</td><td>Good</td></tr>"
             "<tr><td>Poor</td></tr></tbody></table>")
    assert passes("table", table, max_diffs=5, cell="Keeping the town's roads, bridges and pavements in good repair",
                  down="Support for local clubs, youth groups and\n(e.g. sports) libraries")


SALES = """<table><thead>
<tr><th rowspan="2">Group</th><th rowspan="2">Item</th><th colspan="4">Quarterly units</th><th rowspan="2">Year</th></tr>
<tr><th>Q1</th><th>Q2</th><th>Q3</th><th>Q4</th></tr></thead><tbody>
<tr><td rowspan="2">Garden</td><td>Spades</td><td>5</td><td>6</td><td>7</td><td>8</td><td>26</td></tr>
<tr><td>Rakes</td><td>9</td><td>10</td><td>11</td><td>12</td><td>42</td></tr>
<tr><td rowspan="3">Kitchen</td><td>Pans</td><td>13</td><td>14</td><td>15</td><td>16</td><td>58</td></tr>
<tr><td>Pots</td><td>17</td><td>18</td><td>19</td><td>20</td><td>74</td></tr>
<tr><td>Cups</td><td>21</td><td>22</td><td>23</td><td>24</td><td>90</td></tr>
<tr><td colspan="2">Totals</td><td>65</td><td>70</td><td>75</td><td>80</td><td>290</td></tr>
</tbody></table>"""


@pytest.mark.parametrize("fields, passed", [
    ({"cell": "Pans", "left": "Kitchen"}, True),
    ({"cell": "Pots", "left": "Kitchen"}, True),  # a row span is the left neighbour of each row it covers
    ({"cell": "Cups", "left": "Kitchen"}, True),
    ({"cell": "Pots", "top_heading": "Item"}, True),
    ({"cell": "15", "top_heading": "Q3"}, True),
    ({"cell": "15", "top_heading": "Quarterly units"}, True),  # a column span heads each column it covers
    ({"cell": "80", "top_heading": "Quarterly units"}, True),
    ({"cell": "15", "top_heading": "Q2"}, False),
    ({"cell": "15", "top_heading": "Q1"}, False),
    ({"cell": "15", "top_heading": "Q4"}, False),
    ({"cell": "Kitchen", "top_heading": "Group"}, True),
    ({"cell": "Pots", "top_heading": "Group"}, False),
    ({"cell": "Pots", "top_heading": "Q3"}, False),
    ({"cell": "Pots", "top_heading": "Quarterly units"}, False),
    ({"cell": "Garden", "right": "Rakes"}, True),
    ({"cell": "Kitchen", "right": "Cups"}, True),
    ({"cell": "Quarterly units", "down": "Q2"}, True),
    ({"cell": "Q2", "up": "Quarterly units"}, True),
])
def test_spans(fields, passed):
    assert passes("table", SALES, **fields) is passed


MANY = """
# First

| Name | Age | Role |
| ---- | --- | ---- |
| Ann  | 28  | Developer |
| Bo   | 45  | Manager |

Some text between tables...

| Team | Budget | Staff |
| ---- | ------ | ----- |
| Build | 1.2M  | 15 |
| Sales | 1.5M  | 12 |

<h1>HTML</h1>
<table><thead><tr><th>Country</th><th>Capital</th></tr></thead>
<tbody><tr><td>Peru</td><td>Lima</td></tr><tr><td>Chile</td><td>Santiago</td></tr></tbody></table>
<table><tr><th>Month</th><th>Income</th></tr><tr><td>March</td><td>$4,800</td></tr></table>
"""


@pytest.mark.parametrize("fields", [
    {"cell": "Ann", "right": "28"}, {"cell": "45", "left": "Bo"}, {"cell": "Build", "right": "1.2M"},
    {"cell": "12", "left": "1.5M"}, {"cell": "Bo", "top_heading": "Name"}, {"cell": "Sales", "top_heading": "Team"},
    {"cell": "Peru", "right": "Lima"}, {"cell": "Santiago", "top_heading": "Capital"},
    {"cell": "$4,800", "top_heading": "Income"}, {"cell": "March", "right": "$4,800"},
])
def test_several_tables_in_one_output(fields):
    assert passes("table", MANY, **fields)


def test_br_inside_cells_reads_as_a_break():
    table = "<table><tr><th>A</th><th>B</th></tr><tr><td>Line 1<br/>Line 2<br/>Line 3</td><td>x</td></tr></table>"
    assert passes("table", table, cell="Line 1 Line 2 Line 3")


def test_headings_across_several_header_rows():
    table = """<table><thead>
<tr><th colspan="5">Table 2 &nbsp;&nbsp; Outcomes by group</th></tr>
<tr><th rowspan="2"></th><th colspan="2">Group one<br>(n = 12)<sup>a</sup></th><th colspan="2">Group two</th></tr>
<tr><th>n</th><th>%</th><th>n</th><th>%</th></tr></thead>
<tbody><tr><td>&nbsp;&nbsp;X1</td><td>3</td><td>25.00</td><td>4</td><td>40.00</td></tr></tbody>
<tfoot><tr><td colspan="5">a. a note</td></tr></tfoot></table>"""
    assert passes("table", table, cell="25.00", top_heading="%")
    assert passes("table", table, cell="25.00", top_heading="Group one (n = 12)a")
    assert passes("table", table, cell="25.00", top_heading="Table 2    Outcomes by group")
    assert not passes("table", table, cell="25.00", top_heading="Group two")


# -- baseline ---------------------------------------------------------------------------------------------------
ALT = ("Hello ![Diagram of parts 100, 101, 102, 103, 104, 105, 102A, 103A, 104A, 220 and 140 in a frame.]"
       "(page_370_682_1012_1012.png) World")


@pytest.mark.parametrize("fields, content, passed", [
    ({}, "This is some normal content", True),
    ({}, "   \n\t  ", False),
    ({"max_repeats": 2}, "abc" * 10, False),
    ({}, "This has Chinese characters: 你好", False),
    ({}, "This has emoji: 😊", False),
    ({}, "asdfasdfas維基百科/中文asdfw", False),
    ({}, "This is some normal content with proper English letters and no suspicious repetition.", True),
    ({"max_length": 10, "max_length_skips_image_alt_tags": True}, ALT, True),  # HelloWorld: 10
    ({"max_length": 10}, ALT, False),
    ({"max_length": 15, "max_length_skips_image_alt_tags": True},
     "Start ![First image](img1.png) middle ![Second image](img2.png) end", True),
    ({"max_length": 8, "max_length_skips_image_alt_tags": True}, "Text ![Complex [nested] description](image.png) here", True),
])
def test_baseline(fields, content, passed):
    ok, why = make("baseline", **fields).run(content, scoring="published")
    assert ok is passed, why
    if "😊" in content:
        assert "😊" in why


# -- math -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("content, passed", [
    ("Here is an equation: $$a + b = c$$", True),
    ("Here is an equation: $$a+b=c$$", True),
    ("Here is an equation: $$x + y = z$$", False),
    ("Here is an equation: $a + b = c$", True),
    ("Here is an equation: \\(a + b = c\\)", True),
    ("Here is an equation: \\[a + b = c\\]", True),
])
def test_math(content, passed):
    ok, why = make("math", math="a + b = c").run(content, scoring="published")
    assert ok is passed, why


def test_math_dollars_can_be_ignored():
    assert not passes("math", "$$a + b = c$$ and $a + b = c$", math="a + b = c", ignore_dollar_delimited=True)
    assert passes("math", "\\(a + b = c\\)", math="a + b = c", ignore_dollar_delimited=True)


# -- format -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fields, content, passed", [
    ({"text": "Chapter One", "format": "heading"}, "# Chapter One\nSome text here", True),
    ({"text": "Chapter One", "format": "heading"}, "## Chapter One\nSome text here", True),
    ({"text": "Chapter One", "format": "heading"}, "### Chapter One\nSome text here", True),
    ({"text": "Chapter One", "format": "heading"}, "<h1>Chapter One</h1>\nSome text here", True),
    ({"text": "Chapter One", "format": "heading"}, "<h3>Chapter One</h3>\nSome text here", True),
    ({"text": "important", "format": "bold"}, "This is **important** text", True),
    ({"text": "important", "format": "bold"}, "This is __important__ text", True),
    ({"text": "important", "format": "bold"}, "This is important text", False),
    ({"text": "important", "format": "bold"}, "This is <b>important</b> text", True),
    ({"text": "important", "format": "bold"}, "This is <strong>important</strong> text", True),
    ({"text": "emphasis", "format": "italic"}, "This needs *emphasis* here", True),
    ({"text": "emphasis", "format": "italic"}, "This needs _emphasis_ here", True),
    ({"text": "emphasis", "format": "italic"}, "This needs **emphasis** here", False),
    ({"text": "emphasis", "format": "italic"}, "This needs <i>emphasis</i> here", True),
    ({"text": "emphasis", "format": "italic"}, "This needs <em>emphasis</em> here", True),
    ({"text": "Chapter", "format": "heading"}, "# Chapter One: Introduction\nSome text here", True),
    ({"text": "IMPORTANT", "format": "bold", "case_sensitive": False}, "This is **important** text", True),
    ({"text": "Chapter One", "format": "heading", "max_diffs": 2}, "# Chaptre Oen\nSome text here", True),
    ({"text": "Section Two", "format": "heading"}, "\n# Section One\nSome text\n## Section Two\nMore text\n", True),
    ({"text": "bold text inside", "format": "bold"}, "# This has **bold text inside** the heading", True),
    ({"text": "Important", "format": "bold"}, "Some **Important** bold.\nAnd <b>Important</b> HTML.", True),
    ({"text": "text", "format": "italic"}, "This is **text** here", False),
    ({"text": "text", "format": "italic"}, "This is *text* here", True),
    ({"text": "\"fancy\" 'quotes'", "format": "bold"}, "This is **\u201cfancy\u201d \u2018quotes\u2019** here", True),
])
def test_format(fields, content, passed):
    ok, why = make("format", **fields).run(content, scoring="published")
    assert ok is passed, why
    if not ok:
        assert f"not found as {fields['format']}" in why


# -- footnote ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fields, content, passed", [
    ({"marker": "2"}, "This is some text[^2] with a footnote.\n\n[^2]: This is the footnote text.", True),
    ({"marker": "2"}, "This is some text<sup>2</sup> with a footnote.", True),
    ({"marker": "2"}, "This is some text² with a footnote.", True),
    ({"marker": "2"}, "This text has no footnote markers.", False),
    ({"marker": "1", "appears_before_marker": "important fact"}, "This is an important fact[^1] in the document.", True),
    ({"marker": "1", "appears_before_marker": "important fact"}, "This is an important fact [^1] in it.", True),
    ({"marker": "1", "appears_before_marker": "important fact"}, "This is an important fact\t[^1] in it.", True),
    ({"marker": "1", "appears_before_marker": "important fact"}, "Something else[^1] important fact comes later.", False),
    ({"marker": "3", "appears_after_marker": "that needs citation"}, "A statement[^3] that needs citation here.", True),
    ({"marker": "3", "appears_after_marker": "that needs citation"}, "A statement[^3]that needs citation here.", True),
    ({"marker": "3", "appears_after_marker": "that needs citation"}, "A statement ³that needs citation here.", True),
    ({"marker": "3", "appears_after_marker": "that needs citation"}, "A statement that needs citation before [^3] the marker.", False),
    ({"marker": "1", "appears_before_marker": "important fact", "appears_after_marker": "documented here"},
     "This is an important fact[^1] and also[^1] documented here.", True),  # at different markers
    ({"marker": "1", "appears_before_marker": "important fact", "appears_after_marker": "documented here"},
     "This is an important fact[^1] documented here in the text.", True),
    ({"marker": "1", "appears_before_marker": "important fact", "appears_after_marker": "documented here"},
     "This is something else[^1] documented here.", False),
    ({"marker": "1", "appears_before_marker": "important fact", "appears_after_marker": "documented here"},
     "Thiis is something else [^1] and also an important fact [^1] documented here.", True),
    ({"marker": "1", "appears_before_marker": "Example Reference", "max_diffs": 3}, "The Exampl Referenc[^1] is cited.", True),
    ({"marker": "2", "appears_after_marker": "statistical analysis", "max_diffs": 2},
     "The reference[^2] statistcal analysys shows results.", True),
    ({"marker": "2"}, "First[^1] and second claim[^2].\n[^1]: One.\n[^2]: Two.", True),
    ({"marker": "1"}, "First[^1] and second claim[^2].\n[^1]: One.\n[^2]: Two.", True),
    ({"marker": "4"}, 'Text with footnote<sup class="footnote">4</sup>.', True),
    ({"marker": "4"}, "Text with footnote<SUP>4</SUP>.", True),
    ({"marker": "12"}, "Text with footnote[^12].\n\n[^12]: Reference text.", True),
    ({"marker": "12"}, "Text with footnote¹².", True),
    ({"marker": "1", "appears_before_marker": "claim"}, "This is a claim, ... !![^1] here.", True),
    ({"marker": "1", "appears_before_marker": "claim"}, "This is a claim    [^1] here.", True),
    ({"marker": "1", "appears_before_marker": '"fancy" quotes and-dashes'}, "\u201cfancy\u201d quotes and—dashes[^1] here.", True),
    ({"marker": "1"}, "Text with footnote[^10].", False),
    ({"marker": "1"}, "Text with footnote[^1].", True),
    ({"marker": "†", "appears_before_marker": "important"}, "This is important[^†] here.", True),
    ({"marker": "†", "appears_before_marker": "important"}, "This is something[^†] else important.", False),
    ({"marker": "‡", "appears_after_marker": "critical finding"}, "The reference<sup>‡</sup> critical finding was new.", True),
    ({"marker": "‡", "appears_after_marker": "critical finding"}, "The critical finding was before <sup>‡</sup> the marker.", False),
    ({"marker": "†"}, "\nSome text[^†] in markdown.\nOther text<sup>†</sup> in HTML.\n[^†]: Definition.\n", True),
    ({"marker": "Note"}, "Text[^Note].\n\n[^Note]: Reference.", True),
    ({"marker": "Note"}, "Text[^note].\n\n[^note]: Reference.", False),
    ({"marker": "1"}, "\nA reference<sup>1</sup> here.\nAt the bottom:\n<sup>1</sup>The footnote text.\n", True),
    ({"marker": "†"}, "\nA finding<sup>†</sup> here.\n<sup>†</sup>See the appendix.\n", True),
    ({"marker": "1"}, "\nFirst point[^1] and second<sup>2</sup>.\n[^1]: One.\n<sup>2</sup>Two.\n", True),
    ({"marker": "2"}, "\nFirst point[^1] and second<sup>2</sup>.\n[^1]: One.\n<sup>2</sup>Two.\n", True),
    ({"marker": "3"}, "\nReference here<sup>3</sup>.\n<sup>3</sup>This note\nspans lines.\n", True),
    ({"marker": "1", "appears_before_marker": "Code at example.org/project."},
     "## Abstract\nA long abstract ends here. Code at example.org/project.<sup>1</sup>\n\n## 1 Intro\nText.\n"
     "<sup>1</sup>Released under a free license.", True),
    ({"marker": "1", "appears_after_marker": "Released under a free"},
     "## Abstract\nA long abstract ends here. Code at example.org/project.<sup>1</sup>\n\n## 1 Intro\nText.\n"
     "<sup>1</sup>Released under a free license.", True),
])
def test_footnote(fields, content, passed):
    ok, why = make("footnote", **fields).run(content, scoring="published")
    assert ok is passed, why


@pytest.mark.parametrize("marker", ["*", "†", "‡", "§", "¶", "∥", "**", "††", "‡‡", "§§", "***",
                                    "apple", "note", "ref", "A", "B", "foo"])
def test_symbol_and_word_markers(marker):
    assert passes("footnote", f"Text with footnote[^{marker}].\n\n[^{marker}]: Footnote text.", marker=marker)
    assert passes("footnote", f"Text with footnote<sup>{marker}</sup>.", marker=marker)
    assert not passes("footnote", f"Text with {marker} in the middle.", marker=marker)


@pytest.mark.parametrize("marker", ["*", "**", ".", "^", "$", "+", "?", "|", "\\", "(", ")", "[", "]", "{", "}"])
def test_regex_characters_in_markers(marker):
    assert passes("footnote", f"Text<sup>{marker}</sup>.", marker=marker)


@pytest.mark.parametrize("digit", "0123456789")
def test_unicode_superscript_markers(digit):
    assert passes("footnote", f"Text with footnote{digit.translate(str.maketrans('0123456789', '⁰¹²³⁴⁵⁶⁷⁸⁹'))}.",
                  marker=digit)


# -- table parsing ----------------------------------------------------------------------------------------------
def only(doc):
    tables = html_tables(doc)
    assert len(tables) == 1
    return tables[0]


def test_parse_basic_table():
    t = only("""<table border="1"><thead><tr><th></th><th>Books</th><th>Old<br>maps<br>sets</th><th>Coins</th>
    <th>Stamps<br>&amp;<br>cards</th><th>Total</th></tr></thead>
    <tbody><tr><td>Shop one</td><td>7.2</td><td>6.5</td><td>0.6</td><td>9.3</td><td>72.0±1.1</td></tr></tbody></table>""")
    assert t.rectangular and t.text[0, 0] == "" and t.text[0, 1] == "Books"
    assert t.neighbours("left", (0, 0)) == set() == t.neighbours("up", (0, 0))
    assert t.neighbours("left", (0, 1)) == {(0, 0)} and t.neighbours("up", (1, 0)) == {(0, 0)}
    assert t.headings == {(0, c) for c in range(6)}
    assert t.heading_cells((1, 3), "up") == {(0, 3)}
    assert t.heading_cells((1, 3), "left") == {(1, 0)}  # no heading on the left: the first column


def test_parse_stacked_top_headings():
    t = only("""<table><thead><tr><th colspan="2">Prices in town</th></tr><tr><th>Item</th><th>Cost</th></tr></thead>
    <tbody><tr><td>Pears</td><td>$1.00</td></tr><tr><td>Plums</td><td>$2.00</td></tr></tbody></table>""")
    assert [t.text[p] for p in [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1)]] == \
        ["Prices in town", "Item", "Cost", "Pears", "$1.00", "Plums", "$2.00"]
    assert t.neighbours("up", (1, 0)) == t.neighbours("up", (1, 1)) == {(0, 0)}
    assert t.neighbours("up", (2, 0)) == {(1, 0)} and t.neighbours("up", (2, 1)) == {(1, 1)}
    assert t.heading_cells((1, 0), "up") == t.heading_cells((1, 1), "up") == {(0, 0)}
    assert t.heading_cells((2, 0), "up") == {(0, 0), (1, 0)} and t.heading_cells((2, 1), "up") == {(0, 0), (1, 1)}
    assert t.rectangular


@pytest.mark.parametrize("body, rectangular", [
    ("<tr><td>Pears</td><td>$1.00</td><td>Hi</td></tr><tr><td>Plums</td><td>$2.00</td></tr>", False),
    ("<tr><td rowspan='2'>Pears</td><td>$1.00</td></tr><tr><td>Plums</td><td>$2.00</td></tr>", False),
    ("<tr><td>Pears</td><td>$1.00</td></tr><tr><td rowspan='2'>Plums</td><td>$2.00</td></tr><tr><td>a</td></tr>", True),
])
def test_parse_rectangularity(body, rectangular):
    head = "<thead><tr><th colspan='2'>Prices</th></tr><tr><th>Item</th><th>Cost</th></tr></thead>"
    assert only(f"<table>{head}<tbody>{body}</tbody></table>").rectangular is rectangular


def test_parse_4x4_with_spans():
    t = only("""<table><thead><tr><th>H1</th><th colspan="2">H2-3</th><th>H4</th></tr></thead><tbody>
    <tr><td rowspan="2">A</td><td>B</td><td>C</td><td rowspan="2">D</td></tr>
    <tr><td colspan="2">E-F</td></tr><tr><td>G</td><td colspan="3">H-I-J</td></tr></tbody></table>""")
    assert t.rectangular
    assert t.text == {(0, 0): "H1", (0, 1): "H2-3", (0, 3): "H4", (1, 0): "A", (1, 1): "B", (1, 2): "C",
                      (1, 3): "D", (2, 1): "E-F", (3, 0): "G", (3, 1): "H-I-J"}
    assert t.headings == {(0, 0), (0, 1), (0, 3)}
    for r in range(4):
        assert t.heading_cells((r, 0), "left") == set()
    for c in (0, 1, 3):
        assert t.heading_cells((0, c), "up") == set()
    assert t.heading_cells((1, 1), "left") == t.heading_cells((1, 2), "left") == t.heading_cells((1, 3), "left") == {(1, 0)}
    assert t.heading_cells((3, 1), "up") == {(0, 1), (0, 3)}


def test_parse_three_header_levels():
    t = only("""<table><thead><tr><th rowspan="3"></th><th colspan="6">Main</th></tr>
    <tr><th colspan="3">Sub A</th><th colspan="3">Sub B</th></tr>
    <tr><th>A1</th><th>A2</th><th>A3</th><th>B1</th><th>B2</th><th>B3</th></tr></thead>
    <tbody><tr><td>Row 1</td><td>10</td><td>20</td><td>30</td><td>40</td><td>50</td><td>60</td></tr>
    <tr><td>Row 2</td><td>15</td><td>25</td><td>35</td><td>45</td><td>55</td><td>65</td></tr></tbody></table>""")
    assert t.rectangular and t.text[0, 0] == "" and t.text[1, 4] == "Sub B" and t.text[2, 6] == "B3"
    assert t.headings == {(0, 0), (0, 1), (1, 1), (1, 4)} | {(2, c) for c in range(1, 7)}
    assert {(0, 1), (1, 1), (2, 1)} <= t.heading_cells((3, 1), "up")
    assert {(0, 1), (1, 4), (2, 4)} <= t.heading_cells((3, 4), "up")
    assert t.heading_cells((3, 1), "left") == {(3, 0)} and t.heading_cells((4, 1), "left") == {(4, 0)}


def test_parse_left_headings_with_row_spans():
    rows = "".join(f"<tr>{'<th rowspan=3>' + region + '</th>' if i == 0 else ''}<th>{kind}</th>"
                   + "".join(f"<td>{v}</td>" for v in values) + "</tr>"
                   for region, block in (("North", [100, 50, 50]), ("South", [200, 100, 100]))
                   for i, (kind, base) in enumerate(zip(("Sales", "Cost", "Profit"), block))
                   for values in [[base + 10 * k for k in range(6)]])
    t = only(f"""<table><thead><tr><th rowspan="2" colspan="2"></th><th colspan="3">Quarter 1</th>
    <th colspan="3">Quarter 2</th></tr><tr>{''.join(f'<th>{m}</th>' for m in 'Jan Feb Mar Apr May Jun'.split())}</tr>
    </thead><tbody>{rows}</tbody></table>""")
    assert t.rectangular and (t.text[0, 2], t.text[0, 5], t.text[1, 3]) == ("Quarter 1", "Quarter 2", "Feb")
    assert (t.text[2, 0], t.text[3, 1], t.text[5, 0], t.text[2, 2], t.text[5, 2]) == ("North", "Cost", "South", "100", "200")
    assert {(0, 2), (1, 2), (2, 0), (2, 1), (5, 0)} <= t.headings
    assert {(2, 0), (2, 1)} <= t.heading_cells((2, 2), "left")
    assert {(2, 0), (3, 1)} <= t.heading_cells((3, 2), "left")
    assert {(5, 0), (5, 1)} <= t.heading_cells((5, 3), "left")
    assert {(0, 2), (1, 2)} <= t.heading_cells((2, 2), "up")


def test_parse_nested_header_groups():
    months = "".join(f"<th>{m}</th>" for m in "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split())
    t = only(f"""<table><thead><tr><th rowspan="4">Region</th><th rowspan="4">Store</th><th colspan="12">Year</th></tr>
    <tr><th colspan="6">First Half</th><th colspan="6">Second Half</th></tr>
    <tr><th colspan="3">Q1</th><th colspan="3">Q2</th><th colspan="3">Q3</th><th colspan="3">Q4</th></tr>
    <tr>{months}</tr></thead><tbody>
    <tr><td rowspan="2">West</td><td>Store A</td>{''.join(f'<td>{v}</td>' for v in range(10, 22))}</tr>
    <tr><td>Store B</td>{''.join(f'<td>{v}</td>' for v in range(22, 34))}</tr></tbody></table>""")
    assert t.rectangular and (t.text[1, 8], t.text[2, 11], t.text[3, 13], t.text[5, 2]) == ("Second Half", "Q4", "Dec", "22")
    assert {(0, 0), (0, 1), (0, 2), (1, 2), (2, 2), (3, 2)} <= t.headings
    assert {(0, 2), (1, 2), (2, 2), (3, 2)} <= t.heading_cells((4, 2), "up")
    assert {(0, 2), (1, 2), (2, 5), (3, 7)} <= t.heading_cells((4, 7), "up")
    assert {(0, 2), (1, 8), (2, 11), (3, 13)} <= t.heading_cells((4, 13), "up")
    assert t.heading_cells((5, 2), "left") == {(4, 0)}
    assert t.heading_cells((3, 2), "left") == {(0, 0), (0, 1)}


def test_parse_large_table_with_row_spans_is_rectangular():
    groups = [("Owners", 3), ("Staff", 3), ("Crafts", 4), ("Farms", 4), ("Other", 5)]
    body = "".join(f"<tr>{f'<td rowspan={size}>{name}</td>' if i == 0 else ''}<td>{name} {i}</td>"
                   + "<td>1.5</td><td>2,5</td>" * 6 + "</tr>" for name, size in groups for i in range(size))
    head = ("<thead><tr><th rowspan='2'>Group</th><th rowspan='2'>Class</th>"
            + "<th colspan='2'>Band</th>" * 6 + "</tr><tr>" + "<th>N</th><th>%</th>" * 6 + "</tr></thead>")
    assert only(f"<table>{head}<tbody>{body}</tbody></table>").rectangular


def test_parse_several_tables_one_not_rectangular():
    tables = html_tables("## Leaders\n\n<table><thead><tr><th>Date</th><th>Points</th></tr></thead>"
                         "<tbody><tr><td>Nov 1</td><td>20</td></tr></tbody></table>\n\n"
                         "<table><tr><th rowspan='2'>Model</th><th colspan='3'>Scores</th></tr>"
                         "<tr><th>A</th><th>B</th></tr><tr><td>x</td><td>1</td><td>2</td><td>3</td></tr></table>")
    assert [t.rectangular for t in tables] == [True, False]
