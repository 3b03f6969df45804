"""Rewards against hand-computed values."""

import os

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


def bench_tests():
    rows = [
        {"type": "present", "pdf": "p.pdf", "page": 1, "id": "p1", "text": "alpha beta"},
        {"type": "present", "pdf": "p.pdf", "page": 1, "id": "p2", "text": "gamma delta"},
        {"type": "present", "pdf": "p.pdf", "page": 1, "id": "p3", "text": "epsilon"},
        {"type": "absent", "pdf": "p.pdf", "page": 1, "id": "a1", "text": "Page 7"},
        {"type": "baseline", "pdf": "p.pdf", "page": 1, "id": "b1"},
    ]
    return rows


def test_bench_micro_and_macro_hand_computed():
    from olmocr.rewards.unit_tests import bench

    tests = bench_tests()
    # present 1/3 (alpha beta), absent 1/1, baseline 1/1: micro 3/5; macro (1/3 + 1 + 1) / 3.
    text = "alpha beta and more"
    assert bench([text], tests=[tests]) == pytest.approx([3 / 5])
    assert bench([text], tests=[tests], macro=True) == pytest.approx([(1 / 3 + 1 + 1) / 3])
    # Front matter is not page text: "is_table" etc. must not count towards present/absent tests.
    with_fm = FM.format(lang="en", table="False") + "alpha beta gamma delta epsilon\n\nPage 7"
    assert bench([with_fm], tests=[tests]) == pytest.approx([4 / 5])  # absent fails, all else passes
    # Empty completion: only the absent test passes (baseline needs text).
    assert bench([""], tests=[tests]) == pytest.approx([1 / 5])
    # No tests for the page: not applicable.
    assert bench(["x", "y"], tests=[[], None]) == [None, None]
    assert bench(["x"]) == [None]


def test_bench_accepts_records_json_and_chat_completions():
    import json

    from olmocr.bench.records import parse_test
    from olmocr.rewards.unit_tests import bench

    tests = bench_tests()
    chat = [{"role": "assistant", "content": "alpha beta gamma delta epsilon"}]
    expected = [1.0]
    assert bench([chat], tests=[json.dumps(tests)]) == expected
    assert bench([chat], tests=[[parse_test(t) for t in tests]]) == expected
    # fields no test type knows are ignored (the bench loader warns about them); a broken record is an error
    assert bench([chat], tests=[[{**t, "reviewer": "me"} for t in tests]]) == expected
    with pytest.raises(ValueError, match="missing field 'text'"):
        bench(["x"], tests=[[{k: v for k, v in tests[0].items() if k != "text"}]])


def test_eos():
    from olmocr.rewards.text import eos

    ids = [[5, 6, 2], [5, 6, 7], [], [9, 3]]
    assert eos(["a", "b", "", "c"], completion_ids=ids, eos_token_ids=[2, 3]) == [1.0, 0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="completion_ids"):
        eos(["a"], eos_token_ids=[2])
    with pytest.raises(ValueError, match="eos_token_ids"):
        eos(["a"], completion_ids=[[2]])


def test_medoid_groups_by_page_id_when_given():
    same_prompt = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "OCR"}]}]] * 4
    rewards = medoid(["aa", "ab", "zz", "zz"], prompts=same_prompt, page_id=["p1", "p1", "p2", "p2"])
    assert rewards == [1.0, 0.0, 1.0, 1.0]


def test_reward_configs_build_and_validate():
    import yaml
    from omegaconf import OmegaConf

    from olmocr.config import CONF_DIR, validate
    from olmocr.rewards import build_rewards

    with open(os.path.join(CONF_DIR, "rewards", "olmocr2.yaml")) as fh:
        entries = yaml.safe_load(fh)
    cfg = validate(OmegaConf.create({"rewards": entries}))
    funcs, weights = build_rewards(OmegaConf.to_container(cfg.rewards), eos_token_ids=[2], processor=object())
    assert [f.__name__ for f in funcs] == ["bench", "front_matter", "eos"] and weights == [1.0, 1.0, 1.0]
    completion = FM.format(lang="en", table="False") + "alpha beta gamma delta epsilon"
    got = [f(completions=[completion], completion_ids=[[4, 2]], tests=[bench_tests()], reference=[None],
             prompts=["p"], trainer_state=None) for f in funcs]
    assert got == [[1.0], [0.5], [1.0]]  # all five tests pass; front matter parses, no reference
    bad = {"rewards": {"bench": {"_target_": "olmocr.rewards.unit_tests.bench", "macr": True}}}
    with pytest.raises(ValueError, match=r"rewards\.bench\.macr"):
        validate(OmegaConf.create(bad))
    wrong = {"rewards": {"bench": {"_target_": "olmocr.rewards.unit_tests.bench", "weight": "heavy"}}}
    with pytest.raises(ValueError, match=r"rewards\.bench\.weight"):
        validate(OmegaConf.create(wrong))


def test_structure_rewards_score_a_completions_blocks_against_the_pages_truth_blocks():
    import json

    from omegaconf import OmegaConf

    from olmocr.config import compose
    from olmocr.formats.structure import Block, format_blocks, page_record
    from olmocr.rewards import build_rewards
    from olmocr.rewards.layout import block_labels, block_order, box_iou

    truth = [Block("title", (100, 80, 500, 110), "# A"), Block("text", (100, 130, 900, 300), "Words."),
             Block("page_number", (480, 950, 520, 965), "3")]
    record = json.dumps(page_record(truth, (612, 792)))
    front = FM.format(lang="en", table="False")
    exact = front + format_blocks(truth)
    # the title's box a fifth narrower (IoU 0.8), the text labelled a caption, header and text swapped
    shifted = front + format_blocks([Block("caption", (100, 130, 900, 300), "Words."),
                                     Block("title", (100, 80, 420, 110), "# A"), truth[2]])
    completions = [exact, shifted, front + "# A\n\nWords.", front + '<div data-label="text" data-bbox="1 2">x</div>',
                   exact]
    column = [record] * 4 + [None]  # the last page has no truth blocks: the rewards do not apply
    assert box_iou(completions, blocks=column) == pytest.approx([1.0, (0.8 + 1.0) / 3, 0.0, 0.0, None])
    assert block_labels(completions, blocks=column) == pytest.approx([1.0, 2 / 3, 0.0, 0.0, None])
    # pairs title-text (not both found: text was written as a caption), text-number
    assert block_order(completions, blocks=column) == pytest.approx([1.0, 0.0, 0.0, 0.0, None])
    cfg = compose("train", ["+experiment=grpo_tiny", "rewards=layout"])
    funcs, weights = build_rewards(OmegaConf.to_container(cfg.rewards), eos_token_ids=[2], processor=object())
    assert [f.__name__ for f in funcs][-3:] == ["box_iou", "block_labels", "block_order"] and weights[-3:] == [1, .5, .5]
