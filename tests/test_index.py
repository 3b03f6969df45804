"""The dataset index and datasets on a folder seeded with bad pairs, locally and on a real S3 server."""

import glob
import json
import os

import pytest
from conftest import v4_steps, write_encrypted_pdf, write_md, write_pdf

from olmocr.data.dataset import build_datasets
from olmocr.data.index import index_root

STEPS = v4_steps(256, drop=("tokenize",))


@pytest.fixture
def messy(tmp_path):
    """Three good pairs (one nested) and one of every kind of bad pair."""
    root = tmp_path / "messy"
    (root / "nested" / "deeper").mkdir(parents=True)
    for i, where in enumerate(["", "nested", "nested/deeper"]):
        write_pdf(str(root / where / f"good{i}.pdf"), [f"Good page {i}"])
        write_md(str(root / where / f"good{i}.md"), f"Good page {i}")
    write_md(str(root / "corrupt.md"))
    (root / "corrupt.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage\n%%EOF")
    write_md(str(root / "encrypted.md"))
    write_encrypted_pdf(str(root / "encrypted.pdf"))
    write_md(str(root / "twopage.md"))
    write_pdf(str(root / "twopage.pdf"), ["one", "two"])
    write_md(str(root / "empty.md"))
    (root / "empty.pdf").write_bytes(b"")
    write_md(str(root / "orphan.md"))
    write_pdf(str(root / "brokenfm.pdf"), ["fine pdf"])
    (root / "brokenfm.md").write_text("---\nprimary_language: en\nis_table: perhaps\n---\ntext")
    write_pdf(str(root / "pdf_only.pdf"), ["no truth"])
    return root


EXPECTED_BAD = {"corrupt": "unreadable_pdf", "encrypted": "encrypted_pdf", "twopage": "too_many_pages",
                "empty": "empty_pdf", "orphan": "missing_pdf", "brokenfm": "front_matter"}


def test_index_finds_pairs_and_flags_listing_problems(messy, tmp_path):
    index = index_root(str(messy), cache_dir=str(tmp_path / "cache"))
    assert sorted(r.stem for r in index.pairs) == sorted(
        ["good0", "nested/good1", "nested/deeper/good2", "corrupt", "encrypted", "twopage"])
    assert {r.stem: r.problem for r in index.problems} == {"empty": "empty_pdf", "orphan": "missing_pdf",
                                                           "brokenfm": "front_matter"}
    assert index.stats["pdf_without_md"] == 1
    assert "is_table: expected True or False" in next(r for r in index.problems if r.stem == "brokenfm").detail


def test_manifest_reuses_unchanged_and_rereads_changed(messy, tmp_path):
    cache = str(tmp_path / "cache")
    cold = index_root(str(messy), cache)
    assert cold.reused == 0 and cold.parsed == 9
    warm = index_root(str(messy), cache)
    assert warm.reused == 9 and warm.parsed == 0
    assert [(r.stem, r.meta, r.problem) for r in warm.pairs + warm.problems] == \
        [(r.stem, r.meta, r.problem) for r in cold.pairs + cold.problems]
    # Fix the broken front matter and add a new pair: only those two are read again.
    write_md(str(messy / "brokenfm.md"), "now fine", primary_language="no")
    write_pdf(str(messy / "new.pdf"), ["new"])
    write_md(str(messy / "new.md"), "new")
    again = index_root(str(messy), cache)
    assert again.parsed == 2 and again.reused == 8
    fixed = next(r for r in again.pairs if r.stem == "brokenfm")
    assert fixed.meta.primary_language == "no"
    os.remove(messy / "new.md")
    assert "new" not in [r.stem for r in index_root(str(messy), cache).pairs]


def test_links_to_nothing_and_fifos_are_problems_and_an_unreadable_md_is_read_again_next_start(tmp_path):
    """A dangling symbolic link (or a file deleted while the folder was listed) ended the index with a
    traceback; a FIFO named .md blocked the start for ever; an .md that could not be read was remembered as
    unreadable until it changed."""
    root = tmp_path / "links"
    root.mkdir()
    write_pdf(str(root / "good.pdf"), ["Good"])
    write_md(str(root / "good.md"), "Good")
    write_md(str(root / "nopdf.md"), "Its PDF is a link to nothing")
    os.symlink(tmp_path / "elsewhere" / "nopdf.pdf", root / "nopdf.pdf")
    write_pdf(str(root / "later.pdf"), ["Later"])
    os.symlink(tmp_path / "elsewhere" / "later.md", root / "later.md")
    write_pdf(str(root / "fifo.pdf"), ["Fifo"])
    os.mkfifo(root / "fifo.md")
    cache = str(tmp_path / "cache")
    index = index_root(str(root), cache)
    assert [r.stem for r in index.pairs] == ["good"]
    assert {r.stem: (r.problem, r.detail) for r in index.problems} == {
        "nopdf": ("missing_pdf", f"{root}/nopdf.pdf is not a regular file (a link to nothing?)"),
        "later": ("unreadable_md", f"{root}/later.md is not a regular file (a link to nothing?)"),
        "fifo": ("unreadable_md", f"{root}/fifo.md is not a regular file (a link to nothing?)")}
    # Unchanged, the unreadable ones are looked at again (an NFS hiccup passes), the others come from the manifest.
    again = index_root(str(root), cache)
    assert (again.reused, again.parsed) == (2, 2)
    (tmp_path / "elsewhere").mkdir()  # the link's target appears (a mount comes back)
    write_md(str(tmp_path / "elsewhere" / "later.md"), "Later")
    assert sorted(r.stem for r in index_root(str(root), cache).pairs) == ["good", "later"]


def test_missing_root_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="is not a directory"):
        index_root(str(tmp_path / "nope"))


def test_bad_pairs_are_skipped_counted_and_reported(messy, tmp_path):
    report_path = str(tmp_path / "run" / "rejected.jsonl")
    train, evals, report = build_datasets({"messy": {"roots": [str(messy)]}}, {}, STEPS,
                                          cache_dir=str(tmp_path / "cache"), report_path=report_path)
    samples = [train[i] for i in range(len(train))]
    good = [s for s in samples if s is not None]
    assert sorted(os.path.basename(s["md_path"]) for s in good) == ["good0.md", "good1.md", "good2.md"]
    assert all(s["image"].size[1] == 256 for s in good)
    lines = [json.loads(line) for line in open(report_path)]
    got = {os.path.splitext(os.path.basename(line["md"] or line["pdf"]))[0]: line["reason"] for line in lines}
    assert got == {**EXPECTED_BAD, "pdf_only": "missing_md"}  # the PDF without its .md named, not only counted
    assert all(line["detail"] for line in lines)
    assert report.file_counts() == {reason: 1 for reason in got.values()}


def test_a_folder_read_for_training_and_its_held_out_share_reports_each_bad_file_once(messy, tmp_path):
    from olmocr.data.dataset import sources

    report_path = str(tmp_path / "run" / "rejected.jsonl")
    data = {"roots": [str(messy)], "eval_roots": [], "eval_fraction": 0.5, "steps": STEPS}
    build_datasets(*sources(data), STEPS, report_path=report_path)
    files = [json.loads(line)["md"] or json.loads(line)["pdf"] for line in open(report_path)]
    assert len(files) == len(set(files)) == 4  # the listing's problems and the PDF without .md, once each
    # A held-out share too small to hold a pair says so, not that the folder has no pairs.
    with pytest.raises(ValueError, match=r"^data source 'folder': its held-out share \(1e-09\) of the 6 pairs under "
                                         r".* holds none; raise data.eval_fraction"):
        build_datasets(*sources({**data, "eval_fraction": 1e-9}), STEPS)


def test_mixture_weights_are_repeat_factors(sample_copy, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    for i in range(4):
        write_pdf(str(other / f"p{i}.pdf"), [f"page {i}"])
        write_md(str(other / f"p{i}.md"), f"page {i}")
    train, _, _ = build_datasets({"sample": {"roots": [sample_copy], "weight": 0.5},
                                  "other": {"roots": [str(other)], "weight": 2.0}}, {}, STEPS)
    n_sample = len(train.sources["sample"][0])
    assert len(train) == round(n_sample * 0.5) + 8
    names = [train.index[i][0] for i in range(len(train))]
    assert names.count("other") == 8
    first = [i for name, i in train.index if name == "sample"]
    train.set_epoch(1)
    second = [i for name, i in train.index if name == "sample"]
    assert len(first) == len(second) and first != second


def test_empty_source_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="'nothing' has no usable md\\+pdf pairs"):
        build_datasets({"nothing": {"roots": [str(tmp_path / "empty")]}}, {}, STEPS)


def test_folder_data_holds_out_a_stable_share(sample_copy, tmp_path):
    from olmocr.data.dataset import sources

    data = {"roots": [sample_copy], "eval_roots": [], "eval_fraction": 0.25, "steps": STEPS}
    train, evals, _ = build_datasets(*sources(data), STEPS)
    train_md = {r.md_path for r in train.sources["folder"][0].records}
    eval_md = {r.md_path for r in evals["folder"].records}
    assert train_md and eval_md and not train_md & eval_md
    assert len(train_md | eval_md) == len(glob.glob(os.path.join(sample_copy, "*.md")))
    assert 0.1 < len(eval_md) / len(train_md | eval_md) < 0.4
    # the same on the next run, and a new page does not move the others
    write_pdf(os.path.join(sample_copy, "zz_new.pdf"), ["new page"])
    write_md(os.path.join(sample_copy, "zz_new.md"), "new page")
    again, again_evals, _ = build_datasets(*sources(data), STEPS)
    assert {r.md_path for r in again_evals["folder"].records} - {os.path.join(sample_copy, "zz_new.md")} == eval_md
    # other folders for eval instead
    train, evals, _ = build_datasets(*sources({**data, "eval_roots": [sample_copy]}), STEPS)
    assert len(evals["folder"]) == len(train.sources["folder"][0])
    # or none: every page trains (a held-out bench may score the run)
    train, evals, _ = build_datasets(*sources({**data, "eval_fraction": 0}), STEPS)
    assert evals == {} and len(train.sources["folder"][0]) == len(train_md | eval_md) + 1
    with pytest.raises(ValueError, match="data.eval_fraction: expected a fraction"):
        sources({**data, "eval_fraction": 1.5})
    with pytest.raises(ValueError, match="part 'held_out' with holdout 0.0"):
        build_datasets({"x": {"roots": [sample_copy], "part": "held_out"}}, {}, STEPS)


def test_s3_roots_index_and_load(s3_server, messy, tmp_path, monkeypatch):
    import boto3

    from olmocr.utils.io import filesystem

    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket="pages")
    fs = filesystem("s3://pages")
    fs.put(str(messy) + "/", "s3://pages/messy/", recursive=True)
    index = index_root("s3://pages/messy", cache_dir=str(tmp_path / "cache"))
    assert sorted(r.stem for r in index.pairs) == sorted(
        ["good0", "nested/good1", "nested/deeper/good2", "corrupt", "encrypted", "twopage"])
    assert {r.stem for r in index.problems} == {"empty", "orphan", "brokenfm"}
    assert index_root("s3://pages/messy", cache_dir=str(tmp_path / "cache")).reused == 9

    report_path = str(tmp_path / "rejected.jsonl")
    train, _, _ = build_datasets({"s3": {"roots": ["s3://pages/messy"]}}, {}, STEPS, report_path=report_path)
    # Each remote PDF is fetched once per sample: checked, measured and rendered from the same bytes.
    import collections

    import olmocr.data.steps
    import olmocr.formats.pdf
    import olmocr.utils.io

    reads = collections.Counter()
    original = olmocr.utils.io.read_bytes

    def counting(path, access=None, wait_s=0.0):
        reads[path] += 1
        return original(path, access, wait_s)

    for module in (olmocr.utils.io, olmocr.data.steps, olmocr.formats.pdf):
        monkeypatch.setattr(module, "read_bytes", counting)
    good = [s for s in (train[i] for i in range(len(train))) if s is not None]
    assert {path: n for path, n in reads.items() if path.endswith(".pdf")} == {
        f"s3://pages/messy/{stem}.pdf": 1 for stem in
        ("good0", "nested/good1", "nested/deeper/good2", "corrupt", "encrypted", "twopage")}
    assert sorted(s["md_path"] for s in good) == [
        "s3://pages/messy/good0.md", "s3://pages/messy/nested/deeper/good2.md", "s3://pages/messy/nested/good1.md"]
    assert good[0]["image"].size[1] == 256
    rows = [json.loads(line) for line in open(report_path)]
    got = {(row["md"] or row["pdf"]).rsplit("/", 1)[1].rsplit(".", 1)[0]: row["reason"] for row in rows}
    assert got == {**EXPECTED_BAD, "pdf_only": "missing_md"}


def test_unreachable_s3_endpoint_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    from olmocr.faults import Unreachable

    with pytest.raises(Unreachable, match=r"^s3://pages/x: the storage did not answer for \d+ s \(EndpointConnectionError"):
        index_root("s3://pages/x")


@pytest.mark.integration
def test_storage_failing_while_an_s3_root_is_indexed_drops_no_page_now_or_later(s3_server, messy, tmp_path,
                                                                                monkeypatch):
    """The .md reads of indexing meet refused credentials, then errors past s3fs's own retries: the index says so
    in one line, never takes the pages for unreadable, and remembers nothing of it in its manifest."""
    import boto3

    from olmocr.faults import Unreachable
    from support.faultproxy import FaultProxy
    from olmocr.utils.io import filesystem

    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket="pages")
    filesystem("s3://pages").put(str(messy) + "/", "s3://pages/messy/", recursive=True)
    cache = str(tmp_path / "cache")
    for fault, error in [("access_denied", r"the storage refused the credentials \(PermissionError: Access Denied\)"),
                         ("internal_error", r"the storage did not answer for \d+ s \(OSError: ")]:
        with FaultProxy(s3_server, rate=1.0, faults=(fault,), paths=r"\.md$") as proxy:
            monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
            with pytest.raises(Unreachable, match=rf"^s3://pages/messy/\S+\.md: {error}"):
                index_root("s3://pages/messy", cache_dir=cache, storage_wait_s=1)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    index = index_root("s3://pages/messy", cache_dir=cache)
    assert index.reused == 0 and len(index.pairs) == 6 and {r.stem for r in index.problems} == {"empty", "orphan",
                                                                                                 "brokenfm"}
