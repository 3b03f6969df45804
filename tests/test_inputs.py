"""Images and archives as inputs: what pdfs= picks up (types by their bytes), archive members named
<archive>::<member> and read without unpacking, every page once through the pipeline, locally and from
S3, bad inputs counted with their reason; the tiny model converting the mixed folder end to end."""

from __future__ import annotations

import glob
import json
import os
import re
import tarfile

import pytest
from chat_server import ChatServer, good
from conftest import SAMPLE, write_pdf
from mixed_inputs import build, encoded, page_image

import olmocr.pipeline.queue as wq
from olmocr.config import compose
from olmocr.formats.document import DocumentError
from olmocr.pipeline.inputs import document_pages, expand, read_documents


def run_pipeline(overrides: list[str], output_dir) -> dict:
    from olmocr.pipeline.__main__ import run

    return run(compose("pipeline", overrides), str(output_dir))


def upload(fs, folder: str, prefix: str) -> dict[str, str]:
    """The folder's files under ``s3://<prefix>``; local path → remote path."""
    out = {}
    for path in glob.glob(f"{folder}/*"):
        remote = f"{prefix}/{os.path.basename(path)}"
        fs.put_file(path, remote)
        out[path] = f"s3://{remote}"
    return out


def as_remote(documents: dict[str, int], local_to_remote: dict[str, str]) -> dict[str, int]:
    out = {}
    for doc, pages in documents.items():
        archive, sep, member = doc.partition("::")
        out[local_to_remote[archive] + sep + member] = pages
    return out


def test_pdfs_picks_up_images_and_archive_members_and_tells_types_by_their_bytes(tmp_path):
    documents = build(str(tmp_path / "in"))
    corrupt = str(tmp_path / "in" / "corrupt.png")
    assert sorted(expand([str(tmp_path / "in")])) == sorted([*documents, corrupt])
    assert expand([str(tmp_path / "in" / "*.tar.gz")]) == [d for d in documents if "::" in d]
    # Named outright, a file whose name says nothing is what its bytes are; a .pdf holding a PNG is an image.
    os.makedirs(tmp_path / "odd")
    unnamed = tmp_path / "odd" / "scan_0001"
    unnamed.write_bytes(encoded(page_image("no suffix"), "PNG"))
    misnamed = tmp_path / "odd" / "photo.pdf"
    misnamed.write_bytes(encoded(page_image("a PNG called .pdf"), "PNG"))
    assert expand([str(unnamed), str(misnamed)]) == [str(unnamed), str(misnamed)]
    found = read_documents([str(unnamed), str(misnamed)])
    assert [document_pages(p, data).kind for p, data in found.items()] == ["image", "image"]
    # A damaged archive: what could be listed, and the archive itself, which its worker reports as bad.
    data = open(tmp_path / "in" / "crawl.tar.gz", "rb").read()
    damaged = tmp_path / "odd" / "damaged.tar.gz"
    damaged.write_bytes(data[: len(data) * 2 // 3])
    listed = expand([str(damaged)])
    assert listed[-1] == str(damaged) and all(p.startswith(f"{damaged}::") for p in listed[:-1])
    with pytest.raises(ValueError, match=r"names no document \(expected a PDF, an image, a tar archive"):
        expand([str(tmp_path / "nothing" / "*.png")])


def test_archive_members_are_read_in_one_pass_and_bad_ones_say_why(tmp_path):
    documents = build(str(tmp_path / "in"))
    archive = str(tmp_path / "in" / "crawl.tar.gz")
    members = [d for d in documents if d.startswith(archive)]
    found = read_documents([*members, f"{archive}::docs/absent.pdf", str(tmp_path / "in" / "corrupt.png")])
    assert all(isinstance(found[m], bytes) for m in members)
    assert str(found[f"{archive}::docs/absent.pdf"]) == f"missing_member: {archive} has no member docs/absent.pdf"
    with pytest.raises(DocumentError, match="unreadable_image: .*corrupt.png: frame 1: image file is truncated"):
        document_pages("corrupt.png", found[str(tmp_path / "in" / "corrupt.png")])
    # Plain tar too, and a member hidden behind damage is bad with the reason.
    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w") as tar:
        for name in ("a.pdf", "b.pdf"):
            tar.add(write_pdf(str(tmp_path / name), [name]), arcname=name)
    cut = tmp_path / "cut.tar"
    cut.write_bytes(plain.read_bytes()[:1200])
    found = read_documents([f"{plain}::b.pdf", f"{cut}::b.pdf"])
    assert document_pages("b", found[f"{plain}::b.pdf"]).kind == "pdf"
    assert str(found[f"{cut}::b.pdf"]).startswith(f"unreadable_archive: {cut}::b.pdf: the archive is damaged before it")


def test_a_directory_or_a_fifo_at_a_queued_path_is_a_bad_document_at_once(tmp_path):
    """What a path holds is looked at before it is read: a directory (once retried without end) and a FIFO
    (once a read blocked for ever) are bad documents, and the item's other documents convert."""
    import time

    from olmocr.pipeline.workspace import Workspace

    pdfs = [write_pdf(str(tmp_path / f"{name}.pdf"), [f"Page of {name}"]) for name in ("good", "folder", "pipe")]
    workspace = Workspace(str(tmp_path / "ws"))
    wq.add(workspace, pdfs, pages_per_group=10)
    os.remove(pdfs[1])
    os.mkdir(pdfs[1])
    os.remove(pdfs[2])
    os.mkfifo(pdfs[2])
    found = read_documents(pdfs)
    assert isinstance(found[pdfs[0]], bytes)
    assert str(found[pdfs[1]]) == f"not_a_file: {pdfs[1]} is a directory, not a file"
    assert str(found[pdfs[2]]) == f"not_a_file: {pdfs[2]} is a FIFO, not a file"
    start = time.monotonic()
    with ChatServer([good("Read.")]) as server:
        summary = run_pipeline([f"workspace={workspace.root}", "server=external", f"server.url={server.url}",
                                "server.model_name=scripted", "convert.steps.render.longest_side=120",
                                "progress=false"], tmp_path / "run")
    assert time.monotonic() - start < 60
    counts = summary["work"]["counts"]
    assert (summary["work"]["done"], counts["documents"], counts["bad_documents"]) == (1, 1, 2)
    docs = [json.loads(line) for path in glob.glob(f"{workspace.root}/results/*.jsonl") for line in open(path)]
    assert [d["metadata"]["Source-File"] for d in docs] == [pdfs[0]] and docs[0]["text"] == "Read."
    # On record in the workspace, each with its reason, and counted by reason.
    listed = [json.loads(line) for path in glob.glob(f"{workspace.root}/bad/*.jsonl") for line in open(path)]
    assert sorted((row["source"], row["status"], row["reason"]) for row in listed) == [
        (pdfs[1], "bad", "not_a_file"), (pdfs[2], "bad", "not_a_file")]
    assert listed[0]["detail"].endswith(", not a file") and counts["bad_not_a_file"] == 2
    from olmocr.pipeline.stats import describe, workspace_stats

    text = describe(workspace_stats(workspace))
    assert "1 done, 2 unreadable (not_a_file 2), 0 dropped" in text
    assert f"listed     each document with its reason in {workspace.root}/bad/ (unreadable and dropped)" in text


@pytest.mark.integration
def test_pdfs_listed_from_storage_that_stops_answering_or_refuses_are_waited_for_or_named(tmp_path, s3_server,
                                                                                           monkeypatch):
    """Queuing a prefix, a glob, a list file and an archive on S3 through outages (the client's own retries off)
    queues what an outage-free run does; past queue.give_up_after_s, or with credentials refused, one line names
    the PDFs' place, not the (local) workspace, and nothing is queued."""
    import s3fs

    from olmocr.faults import Unreachable
    from olmocr.pipeline.workspace import Workspace
    from support.faultproxy import FaultProxy

    build(str(tmp_path / "in"))
    fs = s3fs.S3FileSystem(skip_instance_cache=True, client_kwargs={"endpoint_url": s3_server})
    fs.mkdir("scans")
    upload(fs, str(tmp_path / "in"), "scans/mixed")
    fs.pipe_file("scans/list.txt", b"s3://scans/mixed/crawl.tar.gz\ns3://scans/mixed/*.png\n")
    pdfs = "pdfs=[s3://scans/mixed,s3://scans/mixed/*.pdf,s3://scans/list.txt]"
    options = ["workers=0", "progress=false", "sample=0", pdfs]
    straight = run_pipeline([f"workspace={tmp_path / 'straight'}", *options], tmp_path / "run1")
    with FaultProxy(s3_server, rate=0.0) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        for method, path in (("GET", r"/scans\?list-type=2"), ("GET", r"/scans/list\.txt"),
                             ("GET", r"/scans/mixed/crawl\.tar\.gz")):
            proxy.outage_when(method, path, 1)
        waited = run_pipeline([f"workspace={tmp_path / 'waited'}", *options, "queue.give_up_after_s=60"],
                              tmp_path / "run2")
        assert proxy.counts["outage", "GET"] >= 3
        assert waited["added"]["pdfs_new"] == straight["added"]["pdfs_new"] > 8
        assert sorted(p for i in wq.items(Workspace(str(tmp_path / "waited"))) for p in i.pdfs) == sorted(
            p for i in wq.items(Workspace(str(tmp_path / "straight"))) for p in i.pdfs)

        proxy.outage_when("GET", r"/scans/list\.txt", 600)
        with pytest.raises(Unreachable, match=r"^s3://scans/list\.txt: the storage did not answer for \d+ s \("):
            run_pipeline([f"workspace={tmp_path / 'short'}", *options, "queue.give_up_after_s=1"], tmp_path / "run3")
        proxy.outage(0)
    assert not (tmp_path / "short").exists() or not list(wq.items(Workspace(str(tmp_path / "short"))))
    with FaultProxy(s3_server, rate=1.0, faults=("access_denied",)) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        with pytest.raises(Unreachable, match=r"^s3://scans/mixed: the storage refused the credentials \(PermissionError"):
            run_pipeline([f"workspace={tmp_path / 'refused'}", *options], tmp_path / "run4")


@pytest.mark.integration
def test_adding_pdfs_to_a_workspace_that_stops_answering_waits_or_says_so_in_one_line(tmp_path, s3_server,
                                                                                      monkeypatch):
    """The work index's read and write wait out a workspace that does not answer as a worker does, going on
    within seconds of it answering again (not at the end of the pause); past queue.give_up_after_s, one line
    naming the workspace, nothing queued."""
    import time

    import s3fs

    from olmocr.faults import Unreachable
    from olmocr.pipeline.queue.names import INDEX, LEGACY_INDEX
    from olmocr.pipeline.workspace import Workspace
    from support.faultproxy import FaultProxy

    s3fs.S3FileSystem(skip_instance_cache=True, client_kwargs={"endpoint_url": s3_server}).mkdir("queue")
    options = ["workers=0", "progress=false", "sample=0", f"pdfs=[{os.path.join(SAMPLE, 'eval', 'pdfs')}]",
               "queue.pause_after=1", "queue.retry_wait_s=30"]
    straight = run_pipeline([f"workspace={tmp_path / 'straight'}", *options], tmp_path / "run1")
    with FaultProxy(s3_server, rate=0.0) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        proxy.outage_when("HEAD", rf"/queue/waited/{LEGACY_INDEX}", 1)
        proxy.outage_when("PUT", rf"/queue/waited/{INDEX}/", 3)
        start = time.monotonic()
        waited = run_pipeline(["workspace=s3://queue/waited", *options, "queue.give_up_after_s=60"], tmp_path / "run2")
        assert time.monotonic() - start < 20  # the pause is 30 s; the store answered again after 3
        assert proxy.counts["outage", "HEAD"] >= 1 and proxy.counts["outage", "PUT if-none-match"] >= 1, proxy.counts
        assert waited["added"]["pdfs_new"] == straight["added"]["pdfs_new"] == 8
        assert wq.items(Workspace("s3://queue/waited")) == wq.items(Workspace(str(tmp_path / "straight")))

        proxy.outage_when("PUT", rf"/queue/short/{INDEX}/", 600)
        with pytest.raises(Unreachable) as info:
            run_pipeline(["workspace=s3://queue/short", *options, "queue.give_up_after_s=2"], tmp_path / "run3")
        assert re.fullmatch(r"workspace s3://queue/short: adding 8 PDFs: nothing could be done for \d+ s.*; run again "
                            r"to add them \(PDFs queued already are skipped\)", str(info.value)), info.value
        proxy.outage(0)
        assert wq.items(Workspace("s3://queue/short")) == []


@pytest.mark.parametrize("workers", [0, 1])
def test_a_workspace_path_that_cannot_be_one_is_said_at_once_not_waited_for(tmp_path, workers):
    """A file where the workspace's folder must be is a wrong path, not storage that will answer later."""
    import time

    (tmp_path / "a_file").write_text("")
    start = time.monotonic()
    with pytest.raises(ValueError) as info:
        run_pipeline([f"workspace={tmp_path / 'a_file' / 'ws'}", f"workers={workers}", "progress=false",
                      f"pdfs=[{os.path.join(SAMPLE, 'eval', 'pdfs')}]", "queue.give_up_after_s=60"], tmp_path / "run")
    assert time.monotonic() - start < 30
    assert str(info.value).startswith(f"workspace {tmp_path / 'a_file' / 'ws'}: NotADirectoryError: [Errno 20] ")


def test_a_mixed_folder_locally_and_from_s3_is_converted_page_by_page(tmp_path, s3_server):
    """Two PDFs, a PNG, a JPEG, a three-frame TIFF, a .tar.gz of two PDFs and a PNG and a corrupt image,
    from a local folder and from S3 in one run: one Dolma document per readable input, every page once."""
    import s3fs

    local = build(str(tmp_path / "in"))
    fs = s3fs.S3FileSystem(skip_instance_cache=True, client_kwargs={"endpoint_url": s3_server})
    fs.mkdir("scans")
    remote = as_remote(local, upload(fs, str(tmp_path / "in"), "scans/mixed"))
    workspace = str(tmp_path / "ws")
    with ChatServer(script=lambda request: good(f"read {max(request.image.size)}")) as server:
        summary = run_pipeline([f"workspace={workspace}", "server=external", f"server.url={server.url}",
                                "server.model_name=scripted", "work=ocr", "convert=default",
                                "convert.steps.render.longest_side=120", "workers=2", "progress=false",
                                "pages_per_group=4", "work.page_results=true",
                                f"pdfs=[{tmp_path / 'in'},s3://scans/mixed]"], tmp_path / "run")
    expected = {**local, **remote}
    counts = summary["work"]["counts"]
    assert (counts["documents"], counts["bad_documents"], counts["pages"]) == (16, 2, 2 * 12)
    docs = {d["metadata"]["Source-File"]: d for p in glob.glob(f"{workspace}/results/*.jsonl") for d in map(json.loads, open(p))}
    assert {source: d["metadata"]["pdf-total-pages"] for source, d in docs.items()} == expected
    for source, doc in docs.items():
        pages = expected[source]
        assert doc["text"] == "\n".join(["read 120"] * pages) or doc["text"] == "\n".join(["read 121"] * pages)
        assert [span[2] for span in doc["attributes"]["pdf_page_numbers"]] == list(range(1, pages + 1))
    records = [json.loads(line) for p in glob.glob(f"{workspace}/pages/*.jsonl") for line in open(p)]
    assert sorted((r["source"], r["page"]) for r in records) == sorted((s, n) for s, k in expected.items() for n in range(1, k + 1))
    # An archive of more pages than an item holds is split across items; its members' markdown goes under it.
    from olmocr.pipeline.workspace import Workspace

    holders = {item.id for item in wq.items(Workspace(workspace)) for pdf in item.pdfs if "crawl.tar.gz::" in pdf}
    assert len(holders) >= 2
    archive = str(tmp_path / "in" / "crawl.tar.gz")
    assert open(f"{workspace}/markdown/{archive.lstrip('/')}/docs/second.md").read() == docs[f"{archive}::docs/second.pdf"]["text"]
    assert os.path.exists(f"{workspace}/markdown/scans/mixed/book.tiff.md")
    # Training pages from every kind: a PDF page cut out, an image page as a one-page PDF of its pixels.
    from olmocr.formats.pdf import pdf_info
    from olmocr.pipeline.export import run as export

    labels = tmp_path / "labels"
    done = export(compose("pipeline_export", [f"workspace={workspace}", f"out_dir={labels}", "progress=false"]),
                  str(tmp_path / "export"))
    assert done["exported"] == 24 and done["unreadable_sources"] == 0
    tiff_page = pdf_info(f"{labels}/{str(tmp_path / 'in' / 'book.tiff').lstrip('/')}_pg3.pdf")
    assert (tiff_page.num_pages, tiff_page.width, tiff_page.height) == (1, 300, 200)
    assert os.path.exists(f"{labels}/{archive.lstrip('/')}/docs/second_pg2.pdf")


@pytest.mark.integration
def test_the_tiny_model_converts_a_mixed_folder_locally_and_from_s3(tmp_path, tiny, s3_server):
    """The done-when run: the embedded model behind transformers serve over the mixed folder, local and S3
    copies in one run. The random model never answers in the page format: every page is its text layer
    (an image has none), so every readable input is a document and every page appears once."""
    import s3fs

    local = build(str(tmp_path / "in"))
    fs = s3fs.S3FileSystem(skip_instance_cache=True, client_kwargs={"endpoint_url": s3_server})
    fs.mkdir("scans")
    remote = as_remote(local, upload(fs, str(tmp_path / "in"), "scans/mixed"))
    workspace = str(tmp_path / "ws")
    summary = run_pipeline([f"workspace={workspace}", f"pdfs=[{tmp_path / 'in'},s3://scans/mixed]",
                            f"model.cache_dir={os.path.dirname(tiny.path)}", "convert.max_tokens=8",
                            "convert.temperatures=[0.1]", "pages_per_group=6", "progress=false"], tmp_path / "run")
    expected = {**local, **remote}
    counts = summary["work"]["counts"]
    assert (counts["documents"], counts["bad_documents"], counts["pages"], counts["fallback_pages"]) == (16, 2, 24, 24)
    docs = {d["metadata"]["Source-File"]: d for p in glob.glob(f"{workspace}/results/*.jsonl") for d in map(json.loads, open(p))}
    assert {source: d["metadata"]["pdf-total-pages"] for source, d in docs.items()} == expected
    archive = str(tmp_path / "in" / "crawl.tar.gz")
    assert docs[f"{archive}::docs/second.pdf"]["text"] == "Packed two\nPacked two, again"
    assert docs["s3://scans/mixed/report.pdf"]["text"] == "Report page one\nReport page two"
    assert docs["s3://scans/mixed/book.tiff"]["attributes"]["pdf_page_numbers"] == [[0, 1, 1], [1, 2, 2], [2, 2, 3]]
    assert all(d["metadata"]["total-input-tokens"] > 0 for d in docs.values())  # every page was sent
    from olmocr.pipeline.stats import workspace_stats
    from olmocr.pipeline.workspace import Workspace

    assert workspace_stats(Workspace(workspace))["counts"]["bad_documents"] == 2
