"""JSON-lines files that runs append to and read back when they resume: a line torn by a kill or a full disk
is left out by readers and cut off before a resumed writer appends (olmocr/utils/jsonl.py)."""

import json

import pytest

from olmocr.utils.jsonl import mend, parse_lines, read_rows

TORN = '{"step": 3, "train/lo'


def test_a_torn_last_line_is_left_out_and_a_broken_line_elsewhere_is_named(tmp_path):
    assert parse_lines('{"a": 1}\n\n{"a": 2}\n' + TORN, "m.jsonl") == [(1, {"a": 1}), (3, {"a": 2})]
    assert parse_lines('{"a": 1}\n{"a": 2}', "m.jsonl") == [(1, {"a": 1}), (2, {"a": 2})]  # whole, newline missing
    with pytest.raises(ValueError, match=r"^m.jsonl:2: not a JSON line \("):
        parse_lines('{"a": 1}\n' + TORN + '\n{"a": 2}\n', "m.jsonl")


@pytest.mark.parametrize("before, after, torn", [
    ('{"a": 1}\n' + TORN, '{"a": 1}\n', True),
    (TORN, "", True),
    ('{"a": 1}\n{"a": 2}', '{"a": 1}\n{"a": 2}\n', False),  # complete: it only lacked its newline
    ('{"a": 1}\n', '{"a": 1}\n', False),
    ("", "", False),
    ('{"a": 1}\n' + "x" * 200_000, '{"a": 1}\n', True),  # a torn line longer than a read block
])
def test_mend_cuts_a_torn_line_so_the_next_one_starts_on_its_own(tmp_path, before, after, torn):
    path = tmp_path / "rows.jsonl"
    path.write_text(before)
    assert mend(str(path)) is torn
    assert path.read_text() == after
    with open(path, "a") as fh:
        fh.write('{"a": 3}\n')
    assert read_rows(str(path))[-1] == {"a": 3}
    assert mend(str(tmp_path / "absent.jsonl")) is False


def test_rejected_samples_and_pairs_read_past_a_torn_line(tmp_path):
    from olmocr.data.chain import RejectReport
    from olmocr.data.preference import read_pairs
    from olmocr.data.steps import Reject

    report = tmp_path / "rejected.jsonl"
    report.write_text(json.dumps({"reason": "empty_md"}) + "\n" + '{"md": "a.md", "re')
    resumed = RejectReport(str(report))
    resumed.add({"md_path": "b.md"}, Reject("empty_md", "no text"))
    assert resumed.file_counts() == {"empty_md": 2}

    pairs = tmp_path / "pairs.jsonl"
    line = {"page_id": "a.pdf#1", "pdf_path": "a.pdf", "page": 1, "chosen": "x", "rejected": "y"}
    pairs.write_text(json.dumps(line) + "\n" + json.dumps({**line, "page_id": "b.pdf#1", "chosen": None}) + "\n"
                     + TORN)  # a pairs run killed while it wrote its last line
    found, without = read_pairs([str(pairs)])
    assert [p["page_id"] for p in found] == ["a.pdf#1"] and without == 1
