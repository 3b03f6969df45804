"""Rewards against hand-computed values."""

import pytest

from olmocr.rewards.text import completion_text, edit_distance, element_count, front_matter, medoid, rectangular_tables

FM = "---\nprimary_language: {lang}\nis_rotation_valid: True\nrotation_correction: 0\nis_table: {table}\nis_diagram: False\n---\n"


def test_completion_text_accepts_strings_and_messages():
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "assistant", "content": "chat"}]) == "chat"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "a"},
                                                              {"type": "text", "text": "b"}]}]) == "ab"


def test_medoid_hand_computed():
    # d(aaaa, aaab) = 1, d(aaaa, abbb) = 3, d(aaab, abbb) = 2: sums 4, 3, 5 -> medoid "aaab".
    rewards = medoid(["aaaa", "aaab", "abbb"], prompts=["p", "p", "p"])
    assert rewards == pytest.approx([1 - 1 / 3, 1.0, 1 - 2 / 3])


def test_medoid_groups_by_prompt_and_handles_identical_groups():
    rewards = medoid(["x", "x", "abc", "abd"], prompts=[[{"role": "user", "content": "1"}]] * 2 + ["q", "q"])
    assert rewards[:2] == [1.0, 1.0]  # identical completions: no spread, all score 1
    assert rewards[2:] == [1.0, 0.0]  # two members: the tie goes to the first, the other is 1 - 1/1
    assert medoid(["only"]) == [1.0]


def test_edit_distance():
    assert edit_distance(["abcd", "abcd"], reference=["abcd", "abce"]) == pytest.approx([1.0, 0.75])
    assert edit_distance(["", "x"], reference=["", None]) == [1.0, 0.0]
    assert edit_distance(["anything"]) == [0.0]


def test_front_matter():
    ref = FM.format(lang="en", table="False") + "text"
    good = FM.format(lang="en", table="False") + "mine"
    two_wrong = FM.format(lang="de", table="True") + "mine"
    assert front_matter([good, two_wrong], reference=[ref, ref]) == pytest.approx([1.0, 0.8])
    assert front_matter(["no front matter at all"], reference=[ref]) == [0.0]
    assert front_matter([FM.format(lang="en", table="maybe")], reference=[ref]) == [0.0]
    assert front_matter([good]) == [0.5]  # parses, nothing to compare with
    assert front_matter([""], reference=[ref]) == [0.0]  # empty completion


def test_element_count():
    ref = FM.format(lang="en", table="True") + "<table><tr><td>1</td></tr></table> and \\(x\\) and \\[y\\]"
    both = "<table><tr><td>9</td></tr></table> \\(a\\) \\[b\\]"
    tables_only = "<table><tr><td>9</td></tr></table> no math"
    neither = "plain"
    assert element_count([both, tables_only, neither], reference=[ref] * 3) == [1.0, 0.5, 0.0]
    assert element_count([both]) == [None]
    assert element_count([""], reference=["plain"]) == [1.0]  # no tables, no math on either side


def test_rectangular_tables():
    square = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>"
    ragged = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td></tr></table>"
    spans = ("<table><tr><td rowspan='2'>a</td><td>b</td></tr><tr><td>c</td></tr>"
             "<tr><td colspan='2'>d</td></tr></table>")
    assert rectangular_tables([square, ragged, spans, "no tables", square + ragged]) == [1.0, 0.0, 1.0, 1.0, 0.5]
