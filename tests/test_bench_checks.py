"""olmOCR-bench test types: pass and fail cases, and the synthetic truth scored against its own tests."""

import glob
import os
import re

import pytest

from conftest import SAMPLE
from olmocr.bench.normalize import normalize
from olmocr.bench.records import load_tests, parse_test
from olmocr.data.frontmatter import parse_document


def make(kind, **fields):
    return parse_test({"type": kind, "pdf": "p.pdf", "page": 1, "id": "t", **fields})


def test_normalize():
    assert normalize("**Bold** and __also__ *it* _x_ <br/>“q” ‘s’ – — − a\u00a0b\n\n c") == \
        "Bold and also it x \"q\" 's' - - - a b c"
    assert normalize("***both***") == "both"
    assert normalize("snake_case_name stays") == "snake_case_name stays"


@pytest.mark.parametrize("text, max_diffs, passed", [
    ("quick brown fox", 0, True), ("quick brwn fox", 0, False), ("quick brwn fox", 1, True),
    ("quikc brown fox", 1, False), ("quikc brown fox", 2, True), ("QUICK brown", 0, False),
])
def test_present_fuzzy_thresholds(text, max_diffs, passed):
    ok, why = make("present", text=text, max_diffs=max_diffs).run("The **quick** brown fox jumps.")
    assert ok is passed, why
    if not passed:
        assert "closest match" in why and "edit(s) away" in why


def test_present_case_and_windows():
    doc = "Heading Line\n\n" + "filler text " * 20 + "\n\nfinal words here"
    assert make("present", text="heading line", case_sensitive=False).run(doc)[0]
    assert not make("present", text="heading line").run(doc)[0]
    assert make("present", text="Heading", first_n=20).run(doc)[0]
    assert not make("present", text="final words", first_n=50).run(doc)[0]
    assert make("present", text="final words", last_n=30).run(doc)[0]
    assert not make("present", text="Heading", last_n=30).run(doc)[0]


def test_absent():
    doc = "Body text.\n\nPage 12"
    ok, why = make("absent", text="Page 12").run(doc)
    assert not ok and "Page 12" in why
    assert make("absent", text="Page 13").run(doc)[0]
    assert not make("absent", text="Page 13", max_diffs=1).run(doc)[0]
    assert make("absent", text="Page 12", first_n=5).run(doc)[0]


def test_order():
    doc = "Alpha first part. Then beta second part. Finally gamma."
    assert make("order", before="Alpha first", after="gamma").run(doc)[0]
    ok, why = make("order", before="gamma", after="Alpha first").run(doc)
    assert not ok and "after the last 'after'" in why
    assert make("order", before="Alpa first", after="gamma", max_diffs=1).run(doc)[0]
    ok, why = make("order", before="delta", after="gamma").run(doc)
    assert not ok and "'before' text not found" in why


HTML = ("<table><thead><tr><th>Name</th><th>Q1</th><th>Q2</th></tr></thead><tbody>"
        "<tr><td rowspan=\"2\">Alpha</td><td>1.5</td><td>2.5</td></tr><tr><td>3.5</td><td>4.5</td></tr>"
        "<tr><td colspan=\"2\">Total</td><td>9</td></tr></tbody></table>")
MARKDOWN = "| Name | Q1 | Q2 |\n|---|---|---|\n| Alpha | 1.5 | 2.5 |\n| Beta | 3.5 | 4.5 |"


@pytest.mark.parametrize("doc", [HTML, MARKDOWN])
def test_table_neighbours_and_headings(doc):
    assert make("table", cell="3.5", up="1.5", right="4.5", top_heading="Q1").run(doc)[0]
    ok, why = make("table", cell="3.5", up="2.5").run(doc)
    assert not ok and "up is '1.5', expected '2.5'" in why
    assert not make("table", cell="7.5").run(doc)[0]
    assert make("table", cell="2.5", left="1.5", top_heading="Q2").run(doc)[0]


def test_table_spans():
    # Alpha spans two rows: it is the left neighbour of both 1.5 and 3.5, and the cell below it is Total.
    assert make("table", cell="3.5", left="Alpha", left_heading="Alpha").run(HTML)[0]
    assert make("table", cell="Alpha", down="Total", right="1.5").run(HTML)[0]
    # Total spans two columns: its right neighbour is 9 and the cell above its first column is Alpha.
    assert make("table", cell="Total", right="9", up="Alpha").run(HTML)[0]
    assert make("table", cell="1.5x", max_diffs=1, right="2.5").run(HTML)[0]
    ok, why = make("table", cell="x").run("no tables here")
    assert not ok and "no table found" in why


def test_baseline():
    assert make("baseline").run("A normal page of text.")[0]
    ok, why = make("baseline").run("   \n ")
    assert not ok and why == "no text"
    ok, why = make("baseline", max_repeats=5).run("Text then " + "la " * 10)
    assert not ok and "repeated" in why
    assert make("baseline", max_repeats=30).run("Text then " + "la " * 10)[0]
    ok, why = make("baseline").run("Mixed 中文 text")
    assert not ok and "CJK" in why
    assert make("baseline", check_disallowed_characters=False).run("Mixed 中文 text")[0]
    assert make("baseline").run("Ελληνικά, кириллица, æøå, ∑ x² are fine")[0]


def test_baseline_blank_page():
    blank = make("baseline", max_length=0)
    assert blank.run("")[0] and blank.run("  \n\n ")[0]
    assert blank.run("![a figure](page_1_2_3_4.png)")[0]  # an image link is not text
    ok, why = blank.run("Page 12")
    assert not ok and "6 letters/digits" in why and "allows 0" in why
    assert make("baseline", max_length=6).run("Page 12")[0]


def synthetic_pages():
    for split in ("train", "eval"):
        tests, errors = load_tests(os.path.join(SAMPLE, split, "synth.jsonl"))
        assert errors == []
        truth = {}
        for md in glob.glob(os.path.join(SAMPLE, split, "pdfs", "*.md")):
            truth[os.path.basename(md)[:-3] + ".pdf"] = parse_document(open(md, encoding="utf-8").read())[1]
        yield tests, truth


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


def edit_row(pattern, text):
    """Brute-force semi-global edit distance: the last DP row (free start and end in the text)."""
    prev = [0] * (len(text) + 1)
    for i in range(1, len(pattern) + 1):
        cur = [i] + [0] * len(text)
        for j in range(1, len(text) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (pattern[i - 1] != text[j - 1]))
        prev = cur
    return prev


def test_fuzzy_search_equals_brute_force():
    import random

    from olmocr.bench.fuzzy import _scan, best_match, match_ends

    rng = random.Random(0)
    for _ in range(500):
        pattern = "".join(rng.choice("abc ") for _ in range(rng.randint(1, 12)))
        text = "".join(rng.choice("abc ") for _ in range(rng.randint(1, 40)))
        row = edit_row(pattern, text)
        assert best_match(pattern, text)[0] == min(row)
        k = rng.randint(0, 3)
        assert [e for e, _ in match_ends(pattern, text, k)] == [j for j in range(1, len(text) + 1) if row[j] <= k]
    words = ["alpha", "beta", "gamma", "delta", "table", "value", "of", "the"]
    for _ in range(200):  # long texts take the pigeonhole-filtered path
        text = " ".join(rng.choice(words) for _ in range(rng.randint(50, 200)))
        start = rng.randint(0, len(text) - 40)
        pattern = list(text[start:start + rng.randint(12, 40)])
        for _ in range(rng.randint(0, 3)):
            pattern[rng.randrange(len(pattern))] = rng.choice("xyz")
        k = rng.randint(0, 3)
        assert match_ends("".join(pattern), text, k) == _scan("".join(pattern), text, k)
