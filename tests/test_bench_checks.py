"""olmOCR-bench test types: thresholds, windows, tables, baseline, the synthetic truth against its own
tests, and the fast paths against the libraries whose results they reproduce."""

import glob
import os
import random
import re

import pytest
from conftest import SAMPLE
from fuzzysearch.levenshtein import find_near_matches_levenshtein
from rapidfuzz import fuzz

from olmocr.bench.checks import repeated_tail
from olmocr.bench.fuzzy import match_starts, near_matches
from olmocr.bench.normalize import normalize
from olmocr.bench.records import load_tests, parse_test
from olmocr.formats.frontmatter import parse_document
from olmocr.formats.tables import MalformedTable, html_tables, markdown_tables


def make(kind, **fields):
    return parse_test({"type": kind, "pdf": "p.pdf", "page": 1, "id": "t", **fields})


def test_normalize():
    assert normalize("**Bold** and __also__ *it* _x_ <br/>“q” ‘s’ – — − µ a\u00a0b\n\n c") == \
        "Bold and also it x \"q\" 's' - - - μ a b c"
    # Paired markers go wherever they pair up (snake_case joins), inside one line only; whitespace is
    # collapsed but not stripped; <b>/<i> tags go; <BR> (upper case) stays.
    assert normalize("snake_case_name stays") == "snakecasename stays"
    assert normalize("*a\nb*") == "*a b*"
    assert normalize("  <b>x</b> <i>y</i>\t") == " x y "
    assert normalize("a<BR>b") == "a<BR>b"
    assert normalize("cafe\u0301") == "caf\u00e9"


@pytest.mark.parametrize("text, max_diffs, passed", [
    ("quick brown fox", 0, True), ("quick brwn fox", 0, False),
    ("quick brwn fox", 1, True),  # partial ratio 0.929 >= 1 - 1/14
    ("quikc brown fox", 1, False),  # a swap costs two: 0.867 < 0.933
    ("quikc brown fox", 2, True),
    ("QUICK brown", 0, False),
])
def test_present_threshold_is_a_partial_ratio(text, max_diffs, passed):
    ok, why = make("present", text=text, max_diffs=max_diffs).run("The **quick** brown fox jumps.")
    assert ok is passed, why
    if not passed:
        assert "needs similarity" in why and "closest is" in why


def test_present_windows_apply_after_normalisation():
    doc = "**Heading** Line\n\n" + "filler text " * 20 + "\n\nfinal words here"
    assert make("present", text="heading line", case_sensitive=False).run(doc)[0]
    assert not make("present", text="heading line").run(doc)[0]
    # the window counts normalised characters: "Heading Line" is 12 of them, the ** markers are gone
    assert make("present", text="Heading Line", first_n=12).run(doc)[0]
    assert not make("present", text="final words", first_n=50).run(doc)[0]
    assert make("present", text="final words", last_n=30).run(doc)[0]
    # with both, the head and the tail are joined: a text spanning the join is found
    assert make("present", text="Heading Linehere", first_n=12, last_n=4).run(doc)[0]
    assert not make("present", text="filler", first_n=12, last_n=4).run(doc)[0]


def test_published_scoring_finds_a_short_output_inside_the_text_sought():
    # rapidfuzz's partial_ratio looks for the shorter string in the longer one: olmOCR-bench's verdicts
    assert make("present", text="the complete sentence here").run("complete sentence", scoring="published")[0]
    assert not make("present", text="the complete sentence here").run("", scoring="published")[0]
    sentence = make("present", text="an expression of good will from you", max_diffs=2)
    for fragment in (" ", "good", "from you", "an expression of good"):
        assert sentence.run(fragment, scoring="published")[0], fragment
        assert not make("absent", text=sentence.text, max_diffs=2).run(fragment, scoring="published")[0]


SENTENCE = "an expression of good will from you"
SHORT_OUTPUTS = ["", " ", "\n" * 48, "good", "from you", "will", "an expression of good", "of good will from"]


@pytest.mark.parametrize("output", SHORT_OUTPUTS)
@pytest.mark.parametrize("max_diffs", [0, 2, 5])
def test_strict_scoring_passes_no_output_shorter_than_the_text_sought(output, max_diffs):
    ok, why = make("present", text=SENTENCE, max_diffs=max_diffs).run(output)  # strict is the default
    assert not ok and "shorter than the text sought" in why
    assert make("absent", text=SENTENCE, max_diffs=max_diffs).run(output)[0]
    # wrapped in formatting, or beside a footnote marker: the same
    for test, wrapped in ((make("format", text=SENTENCE, format="bold", max_diffs=max_diffs), f"**{output}**"),
                          (make("format", text=SENTENCE, format="heading", max_diffs=max_diffs), f"# {output}"),
                          (make("footnote", marker="1", appears_before_marker=SENTENCE, max_diffs=max_diffs),
                           f"{output}[^1]")):
        assert not test.run(wrapped)[0], (test.type, wrapped)


def test_strict_scoring_keeps_every_other_verdict():
    # the whole sentence, one typo within max_diffs, inside a longer page: found as before
    page = "Dear Sir,\n\nWe thank you for an expresion of good will from you and hope to hear soon."
    for scoring in ("strict", "published"):
        assert make("present", text=SENTENCE, max_diffs=2).run(page, scoring=scoring)[0]
        assert not make("present", text=SENTENCE).run(page, scoring=scoring)[0]
        assert not make("absent", text=SENTENCE, max_diffs=2).run(page, scoring=scoring)[0]
        assert make("format", text=SENTENCE, format="bold", max_diffs=2).run(f"**{page}**", scoring=scoring)[0]
    # an output missing one character of the sentence is near enough, compared whole
    assert make("present", text=SENTENCE, max_diffs=2).run(SENTENCE[:-1])[0]
    # a threshold max_diffs would put at or below 0 (every output passes, blank included) is held at 0.5
    assert make("present", text="ab", max_diffs=3).run("", scoring="published")[0]
    assert not make("present", text="ab", max_diffs=3).run("")[0]
    assert make("present", text="ab", max_diffs=3).run("xx ab")[0]
    with pytest.raises(ValueError, match="scoring: expected one of strict, published, got 'loose'"):
        make("present", text="ab").run("ab", scoring="loose")


def test_absent():
    doc = "Body text.\n\nPage 12"
    ok, why = make("absent", text="Page 12").run(doc)
    assert not ok and "'Page 12' appears" in why
    assert make("absent", text="Page 13").run(doc)[0]
    assert not make("absent", text="Page 13", max_diffs=1).run(doc)[0]
    assert make("absent", text="Page 12", first_n=5).run(doc)[0]


def test_order():
    doc = "Alpha first part. Then beta second part. Finally gamma."
    assert make("order", before="Alpha first", after="gamma").run(doc)[0]
    ok, why = make("order", before="gamma", after="Alpha first").run(doc)
    assert not ok and "not before any 'after'" in why
    assert make("order", before="Alpa first", after="gamma", max_diffs=1).run(doc)[0]
    ok, why = make("order", before="delta", after="gamma").run(doc)
    assert not ok and "'before' text not found" in why
    with pytest.raises(ValueError, match="more than half"):
        make("order", before="abcd", after="efghij", max_diffs=3)


def random_case(rng):
    alphabet = rng.choice(["ab", "abc ", "the quick brown fox jumps over a lazy dog ."])
    if " " in alphabet and rng.random() < 0.5:
        text = " ".join(rng.choice(alphabet.split()) for _ in range(rng.randint(0, 60)))
    else:
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 150)))
    if text and rng.random() < 0.7:
        start = rng.randrange(len(text))
        pattern = list(text[start:start + rng.randint(1, 50)])
        for _ in range(rng.randint(0, 3)):
            pattern[rng.randrange(len(pattern))] = rng.choice(alphabet)
    else:
        pattern = [rng.choice(alphabet) for _ in range(rng.randint(1, 20))]
    return "".join(pattern), text, rng.randint(1, max(1, min(5, len(pattern) // 2)))


def test_near_matches_are_fuzzysearchs():
    """The order check's n-gram search yields exactly fuzzysearch's matches, in its order (repetitive
    texts included, where extension ties decide)."""
    rng = random.Random(0)
    for _ in range(1500):
        pattern, text, k = random_case(rng)
        assert near_matches(pattern, text, k) == [(m.start, m.end, m.dist)
                                                   for m in find_near_matches_levenshtein(pattern, text, k)]


def test_match_starts():
    assert match_starts("ab", "xabyab", 0) == [1, 4]
    assert match_starts("aa", "aaa", 0) == [0, 1]  # exact occurrences may overlap
    # overlapping fuzzy matches are one group; the closest (then longest, then earliest) stands for it
    assert match_starts("alpha beta", "xx alpha bet xx alpha beta", 1) == [3, 16]


def test_repeated_tail():
    assert repeated_tail("abc" + "la " * 40, 30) == (3, 40)
    assert repeated_tail("x" + " \n " * 50, 30)[1] == 1  # whitespace runs count as one space
    # the repeat reaches back past a long blank tail; past `enough`, counting may stop early
    assert repeated_tail("x " * 100 + " " * 5000, 10 ** 6) == (2, 100)
    assert repeated_tail("x " * 100 + " " * 5000, 30)[1] > 30
    rng = random.Random(1)
    for _ in range(2000):
        text = "".join(rng.choice(["a", "b", "ab", " ", "\n", "x y "]) for _ in range(rng.randint(0, 300)))
        enough = rng.randint(0, 40)
        full = repeated_tail(text, 10 ** 6)
        got = repeated_tail(text, enough)
        assert (got[1] > enough) == (full[1] > enough)
        if full[1] <= enough:
            assert got == full


def test_baseline():
    assert make("baseline").run("A normal page of text.")[0]
    ok, why = make("baseline").run("   \n ")
    assert not ok and why == "no letters or digits"
    ok, why = make("baseline", max_repeats=5).run("Text then " + "la " * 10)
    assert not ok and "repeated over 5 times" in why
    assert make("baseline", max_repeats=30).run("Text then " + "la " * 10)[0]
    ok, why = make("baseline").run("Mixed 中文 text")
    assert not ok and "中文" in why
    ok, why = make("baseline").run("Smile 😊")
    assert not ok and "😊" in why
    assert make("baseline", check_disallowed_characters=False).run("Mixed 中文 text")[0]
    # scripts of the bench's languages are fine, Arabic, Hebrew, Thai and Hangul included
    assert make("baseline").run("Ελληνικά, кириллица, æøå, ∑ x², العربية, עברית, ภาษาไทย, 한국어")[0]


def test_baseline_blank_page():
    blank = make("baseline", max_length=0)
    assert blank.run("")[0] and blank.run("  \n\n ")[0]
    ok, why = blank.run("Page 12")
    assert not ok and "6 letters/digits" in why and "allows 0" in why
    assert make("baseline", max_length=6).run("Page 12")[0]
    # image links count, unless the test says to skip them; their alt text may hold brackets
    figure = "![a [nested] figure 12](page_1_2_3_4.png)"
    assert not blank.run(figure)[0]
    assert make("baseline", max_length=0, max_length_skips_image_alt_tags=True).run(figure)[0]


HTML = ("<table><thead><tr><th>Name</th><th>Q1</th><th>Q2</th></tr></thead><tbody>"
        "<tr><td rowspan=\"2\">Alpha</td><td>1.5</td><td>2.5</td></tr><tr><td>3.5</td><td>4.5</td></tr>"
        "<tr><td colspan=\"2\">Total</td><td>9</td></tr></tbody></table>")
MARKDOWN = "| Name | Q1 | Q2 |\n|---|---|---|\n| Alpha | 1.5 | 2.5 |\n| Beta | 3.5 | 4.5 |"


@pytest.mark.parametrize("doc", [HTML, MARKDOWN, MARKDOWN.replace("|---|---|---|\n", "")])
def test_table_neighbours_and_headings(doc):
    assert make("table", cell="3.5", up="1.5", right="4.5", top_heading="Q1").run(doc)[0]
    ok, why = make("table", cell="3.5", up="2.5").run(doc)
    assert not ok and "up is '1.5', expected '2.5'" in why
    assert not make("table", cell="7.5").run(doc)[0]
    assert make("table", cell="2.5", left="1.5", top_heading="Q2").run(doc)[0]


def test_table_spans_cover_every_position():
    # Alpha spans two rows: both 1.5 and 3.5 are its right neighbours; Total spans two columns: both
    # Alpha... (above its first column) and 3.5 (above its second) are its up neighbours.
    assert make("table", cell="Alpha", right="1.5").run(HTML)[0]
    assert make("table", cell="Alpha", right="3.5").run(HTML)[0]
    assert make("table", cell="Total", up="Alpha").run(HTML)[0]
    assert make("table", cell="Total", up="3.5").run(HTML)[0]
    assert make("table", cell="3.5", left="Alpha", left_heading="Alpha").run(HTML)[0]
    # a header spanning columns heads every column under it
    wide = ("<table><tr><th colspan='2'>Sales</th></tr><tr><th>Q1</th><th>Q2</th></tr>"
            "<tr><td>10</td><td>20</td></tr></table>")
    assert make("table", cell="20", top_heading="Sales").run(wide)[0]
    assert make("table", cell="Sales", down="Q2").run(wide)[0]
    assert make("table", cell="1.5x", max_diffs=1, right="2.5").run(HTML)[0]  # ratio 0.86 >= 0.75
    ok, why = make("table", cell="x").run("no tables here")
    assert not ok and "no table found" in why


def test_markdown_tables_can_be_ignored():
    assert not make("table", cell="3.5", ignore_markdown_tables=True).run(MARKDOWN)[0]
    assert make("table", cell="3.5", ignore_markdown_tables=True).run(HTML)[0]


def test_html_tables_follow_the_bench_parser_tree_rules():
    """Cells are the direct <td>/<th> children of each <tr>; nothing closes implicitly; an end tag
    closes everything opened after its tag; text of comments, scripts and templates is not cell
    text; entities and <br> are read as text (cases checked against BeautifulSoup's html.parser)."""
    def cells(doc):
        return [[[text for text in t.text.values()] for t in html_tables(doc)]][0]

    assert cells("<table><tr><td>a<td>b</tr></table>") == [["ab"]]  # the 2nd td is inside the 1st
    assert cells("<table><tr><td>a</td></td></p><td>b</td></tr></table>") == [["a", "b"]]
    assert cells("<table><tr><td>a<!-- c -->b<script>x=1</script><template>t</template>c</td></tr></table>") == [["abc"]]
    assert cells("<table><tr><td>&nbsp;&amp;&foo;&#x41;&#65;&lt;&gt &#150;</td></tr></table>") == \
        [["\xa0&&fooAA<> \u2013".strip()]]
    assert cells("<table><tr><td>a<br>b<br/>c<img src=x>d</td></tr></table>") == [["a\nb\ncd"]]
    assert cells("<table><tr><td>x</td><td/>y</tr></table>") == [["x", ""]]
    nested = cells("<table><tr><td>a<table><tr><td>in</td></tr></table>b</td><td>c</td></tr></table>")
    assert nested == [["ainb", "c", "in"], ["in"]]  # the inner rows are rows of the outer table too
    head = html_tables("<thead><table><tr><td>x</td></tr></table></thead>")[0]
    assert head.headings == {(0, 0)}  # a <thead> anywhere above the row makes it a heading row


def test_column_span_over_a_row_span_fails_like_the_bench():
    doc = ("<table><tr><td>b</td><td rowspan='3'>a</td></tr>"
           "<tr><td colspan='2'>c</td></tr></table>")
    with pytest.raises(MalformedTable):
        html_tables(doc)
    ok, why = make("table", cell="b").run(doc + "\n| b | c |\n| d | e |")
    assert not ok and "cannot be laid out" in why


def test_markdown_table_blocks():
    # a run of two or more lines with a pipe is a table; lines of only dashes, colons and pipes are skipped
    tables = markdown_tables("intro\n| a | b |\n|:--|--:|\n| c | d |\n\ntext | with one pipe\n")
    assert len(tables) == 1 and tables[0].text == {(0, 0): "a", (0, 1): "b", (1, 0): "c", (1, 1): "d"}
    assert tables[0].headings == {(0, 0), (0, 1), (1, 0)}  # first row and first column


def test_format_and_footnote():
    assert make("format", text="Results", format="heading").run("## Results\nbody")[0]
    assert make("format", text="key", format="bold").run("a <strong>key</strong> word")[0]
    assert not make("format", text="key", format="italic").run("a **key** word")[0]
    ok, why = make("format", text="Results", format="heading").run("Results")
    assert not ok and "0 heading span(s)" in why
    with pytest.raises(ValueError, match="heading, bold, italic"):
        make("format", text="x", format="underline")
    note = make("footnote", marker="2", appears_before_marker="the claim", appears_after_marker="see Smith")
    assert note.run("We make the claim² here.\n\n² See Smith, 2020.")[0]
    assert not make("footnote", marker="2").run("x^2 and [^12]")[0]
    assert make("footnote", marker="†").run("text<sup>†</sup>")[0]
    with pytest.raises(ValueError, match="spaces"):
        make("footnote", marker="a b")


def synthetic_pages():
    for split in ("train", "eval"):
        loaded = load_tests(os.path.join(SAMPLE, split, "synth.jsonl"))
        assert loaded.errors == loaded.warnings == []
        truth = {}
        for md in glob.glob(os.path.join(SAMPLE, split, "pdfs", "*.md")):
            truth[os.path.basename(md)[:-3] + ".pdf"] = parse_document(open(md, encoding="utf-8").read())[1]
        yield loaded.tests, truth


def test_synthetic_truth_passes_its_own_tests():
    """Generator/bench consistency: every test of every bundled page passes on the page's own truth."""
    checked = set()
    for tests, truth in synthetic_pages():
        for t in tests:
            ok, why = t.run(truth[t.pdf])
            assert ok, (t.id, why)
            checked.add("blank" if t.type == "baseline" and t.max_length is not None else t.type)
    assert checked == {"present", "absent", "order", "table", "math", "baseline", "blank"}


def test_damaged_truth_fails_the_expected_tests():
    for tests, truth in synthetic_pages():
        for t in tests:
            text = truth[t.pdf]
            if t.type == "present" and t.first_n is None:
                assert not t.run(text.replace(t.text, ""))[0], t.id
            elif t.type == "absent":
                assert not t.run(text + "\n\n" + t.text)[0], t.id
            elif t.type == "order":
                swapped = text.replace(t.before, "\0").replace(t.after, t.before).replace("\0", t.after)
                assert not t.run(swapped)[0], t.id
            elif t.type == "table":
                assert not t.run(text.replace(f">{t.cell}<", "><"))[0], t.id
            elif t.type == "math":
                # the same equation with one number changed is a different equation
                changed = re.sub(r"\d+", lambda m: str(int(m.group()) + 1), t.math, count=1)
                assert not t.run(text.replace(t.math, changed))[0], t.id
            elif t.type == "baseline" and t.max_length is None:
                assert not t.run(text + " ok" * 40)[0], t.id
            elif t.type == "baseline":
                assert not t.run(text + "Page 7")[0], t.id


def test_exact_fast_paths_agree_with_partial_ratio():
    """present/absent decide without rapidfuzz when the answer is certain: check against it directly."""
    rng = random.Random(2)
    for _ in range(3000):
        pattern, text, _ = random_case(rng)
        if not normalize(pattern).strip():
            continue
        k = rng.choice([0, 0, 1, 2, 4])
        expected = fuzz.partial_ratio(normalize(pattern), normalize(text)) / 100.0 >= 1 - k / len(normalize(pattern))
        assert make("present", text=pattern, max_diffs=k).run(text, scoring="published")[0] is expected, \
            (pattern, text, k)
