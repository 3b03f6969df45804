"""python -m olmocr.datasets: miniature snapshots in each release's real layout become the folders the stages
read; faults are listed, re-runs change nothing, a killed run resumes to the same tree, S3 and the Hub as
sources, and data.local_cache."""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from hub_snapshots import bench as bench_snapshot
from hub_snapshots import mix_1025

from olmocr.config import PROJECT_ROOT, compose
from olmocr.datasets.__main__ import run
from olmocr.faults import Unreachable
from olmocr.formats.frontmatter import parse_document
from olmocr.utils.io import filesystem


def prepare(tmp_path, *overrides: str) -> dict:
    return run(compose("datasets", list(overrides)), str(tmp_path / "runs" / str(time.monotonic_ns())))


def tree(root) -> dict[str, bytes]:
    """Every file under ``root`` but Hub downloads, with its bytes."""
    out = {}
    for path in glob.glob(os.path.join(root, "**"), recursive=True) + glob.glob(os.path.join(root, ".prepare", "*")):
        rel = os.path.relpath(path, root)
        if os.path.isfile(path) and not rel.startswith(".download"):
            with open(path, "rb") as fh:
                out[rel] = fh.read()
    return out


def stamps(root) -> dict[str, int]:
    return {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(root, "**"), recursive=True)}


def rejected(out) -> dict[str, set[str]]:
    reasons: dict[str, set[str]] = {}
    with open(os.path.join(out, ".prepare", "rejected.jsonl")) as fh:
        for line in fh:
            row = json.loads(line)
            reasons.setdefault(row["reason"], set()).add(row["id"])
    return reasons


MIX_FAULTS = {"row_without_pdf": {"no-pdf-here"}, "pdf_without_row": {"orphan"},
              "bad_response": {"tilted", "book99/broken-1"}}


def test_every_dataset_option_composes_and_builds():
    from olmocr.config import build

    for name in ("olmocr_mix_1025", "olmocr_mix_0225", "olmocr_bench", "olmocr_synthmix_1025"):
        cfg = compose("datasets", [f"dataset={name}"])
        release = build(cfg.dataset)
        assert release.repo_id.startswith("allenai/") and release.revision
    paths = compose("datasets").paths
    assert compose("datasets").out == paths.olmocr_mix
    assert compose("datasets", ["dataset=olmocr_bench"]).out == paths.olmocr_bench
    assert compose("datasets", ["dataset=olmocr_synthmix_1025"]).out == paths.synthmix
    assert compose("datasets", ["dataset=olmocr_mix_0225"]).out == paths.olmocr_mix_0225


def test_mix_becomes_the_pairs_data_olmocr_mix_trains_on(tmp_path, monkeypatch, cache_dir):
    snap = tmp_path / "snap"
    good = mix_1025(str(snap), rows=2, tarballs=2)
    monkeypatch.setenv("OLMOCR_DATASETS", str(tmp_path / "datasets"))
    summary = prepare(tmp_path, f"source={snap}", "workers=2")  # out: the default, paths.olmocr_mix
    out = str(tmp_path / "datasets" / "olmOCR-mix-1025")

    for key, pages in good.items():
        for pid, (pdf, fields, text, _) in pages.items():
            base = os.path.join(out, key, pid)
            assert open(base + ".pdf", "rb").read() == pdf
            meta, body = parse_document(open(base + ".md", encoding="utf-8").read())
            assert meta.to_dict() == fields and body.strip() == text.strip()
        assert sorted(os.listdir(os.path.join(out, key))) == sorted(
            {p.split("/")[0] + ("" if "/" in p else s) for p in pages for s in (".md", ".pdf")})
    assert rejected(out) == MIX_FAULTS
    assert summary["pages"] == 16 and summary["rejected"] == {"bad_response": 2, "pdf_without_row": 1,
                                                               "row_without_pdf": 1}
    assert summary["parts"]["00_documents/train"]["pages"] == 2
    urls = [json.loads(line) for line in open(os.path.join(out, "urls", "00_documents_train.jsonl"))]
    assert {u["id"]: u["url"] for u in urls} == {pid: v[3] for pid, v in good["00_documents/train"].items()}
    assert urls[0]["extras"] == {"source": "sample"}

    before, files = stamps(out), tree(out)
    again = prepare(tmp_path, f"source={snap}", "workers=2")
    assert stamps(out) == before and tree(out) == files and again == summary  # a re-run is a no-op

    # What training reads: every page loads through the production steps, nothing rejected.
    from olmocr.data.__main__ import run as check_data

    checked = check_data(compose("check_data", ["data=olmocr_mix", "data.steps.render.longest_side=256"]),
                         str(tmp_path / "check"))
    assert checked["rejected"] == {} and checked["loaded"] == checked["samples"] == 8
    assert {name: s["pairs"] for name, s in checked["sources"].items()} == {
        f"{split}/{name}": 2 for split in ("train", "eval")
        for name in ("documents", "books", "loc_transcripts", "national_archives")}
    # And the recipe resolves to it with no data override.
    train = compose("train", ["+experiment=sft_qwen25"])
    assert train.data.train.documents.roots == [os.path.join(out, "00_documents", "train")]


def test_a_slice_and_a_selection(tmp_path):
    snap = tmp_path / "snap"
    mix_1025(str(snap), rows=3)
    out = tmp_path / "out"
    summary = prepare(tmp_path, f"source={snap}", f"out={out}", "subsets=[00_documents,01_books]",
                      "splits=[train]", "limit=1")
    assert sorted(summary["parts"]) == ["00_documents/train", "01_books/train"]
    assert all(p["pages"] == 1 and p["limit"] == 1 for p in summary["parts"].values())
    assert sorted(os.listdir(out / "00_documents" / "train")) == ["synth_s0_00000-0.md", "synth_s0_00000-0.pdf"]
    # A kill while a file was written leaves it half-written aside; the next run clears it away.
    stray = out / "00_documents" / "train" / "synth_s0_00001-1.pdf.4242.1.partial"
    stray.write_bytes(b"%PDF-1.4 cut short")
    full = prepare(tmp_path, f"source={snap}", f"out={out}", "subsets=[00_documents]", "splits=[train]")
    assert not stray.exists()
    assert full["parts"]["00_documents/train"]["pages"] == 3  # a slice is not taken for the whole
    with pytest.raises(ValueError, match="subsets: allenai/olmOCR-mix-1025 has no subset 'nope'"):
        prepare(tmp_path, f"source={snap}", f"out={out}", "subsets=[nope]")
    with pytest.raises(ValueError, match="splits: .* has no split 'test'"):
        prepare(tmp_path, f"source={snap}", f"out={out}", "splits=[test]")
    with pytest.raises(ValueError, match="not a folder"):
        prepare(tmp_path, f"source={tmp_path / 'missing'}", f"out={out}")


def _upload(folder, bucket_path: str) -> None:
    fs = filesystem(bucket_path)
    for path in glob.glob(os.path.join(folder, "**"), recursive=True):
        if os.path.isfile(path):
            fs.put_file(path, f"{bucket_path}/{os.path.relpath(path, folder)}")


@pytest.mark.integration
def test_a_killed_run_resumes_to_the_same_tree_and_s3_gives_the_local_one(tmp_path, s3_server):
    """From a local S3 server through a proxy that stalls every request (so the kill lands mid-run): the
    run is killed once its first tarball is done; the next run finishes what is left and the tree is the
    one an uninterrupted run gives, which is the one a local snapshot gives."""
    from support.faultproxy import FaultProxy

    snap = tmp_path / "snap"
    mix_1025(str(snap), rows=4, tarballs=4)
    filesystem("s3://hub").mkdir("hub")
    _upload(snap, "s3://hub/olmOCR-mix-1025")
    common = ["source=s3://hub/olmOCR-mix-1025", "subsets=[00_documents]", "splits=[train]", "workers=1"]

    straight = tmp_path / "straight"
    prepare(tmp_path, *common, f"out={straight}")
    local = tmp_path / "local"
    prepare(tmp_path, f"source={snap}", "subsets=[00_documents]", "splits=[train]", f"out={local}")
    differs = {k for k in set(tree(straight)) | set(tree(local)) if tree(straight).get(k) != tree(local).get(k)}
    assert differs == {"prepared.json"}  # it names its source

    resumed = tmp_path / "resumed"
    with FaultProxy(s3_server, rate=1.0, faults=("stall",), stall_s=(0.2, 0.3)) as proxy:
        env = {**os.environ, "AWS_ENDPOINT_URL": proxy.endpoint}
        proc = subprocess.Popen([sys.executable, "-m", "olmocr.datasets", *common, f"out={resumed}",
                                 f"hydra.run.dir={tmp_path / 'killed'}"], cwd=PROJECT_ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while not glob.glob(str(resumed / ".prepare" / "tarball__*.json")) and proc.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    markers = glob.glob(str(resumed / ".prepare" / "tarball__*.json"))
    assert 1 <= len(markers) < 4 and not (resumed / "prepared.json").exists()
    prepare(tmp_path, *common, f"out={resumed}")
    assert tree(resumed) == tree(straight)


@pytest.mark.integration
def test_a_source_that_stops_answering_is_waited_out_and_gives_the_same_tree(tmp_path, s3_server, monkeypatch):
    """Outages (the client's own retries off) as the parquet is read, as a tarball is streamed and as the
    rows are converted: the run waits and ends with the tree an outage-free run gives; past the wait, one line
    naming the file, finished parts kept."""
    from support.faultproxy import FaultProxy

    mix_1025(str(tmp_path / "snap"), rows=3, tarballs=2)
    filesystem("s3://hub").mkdir("hub")
    _upload(tmp_path / "snap", "s3://hub/mix")
    common = ["source=s3://hub/mix", "subsets=[00_documents]", "splits=[train]", "workers=1"]
    straight = tmp_path / "straight"
    prepare(tmp_path, *common, f"out={straight}")
    with FaultProxy(s3_server, rate=0.0) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        for method, path in (("GET", r"/hub/mix/00_documents_train\.parquet"), ("GET", r"/hub/mix/pdf_tarballs/"),
                             ("GET", r"/hub/mix/00_documents_train\.parquet"), ("HEAD", r"/hub/mix/")):
            proxy.outage_when(method, path, 1)
        waited = tmp_path / "waited"
        prepare(tmp_path, *common, f"out={waited}")
        assert proxy.counts["outage", "GET"] >= 3 and proxy.counts["outage", "HEAD"]
        assert tree(waited) == tree(straight)

        proxy.outage_when("GET", r"/hub/mix/pdf_tarballs/", 600)
        with pytest.raises(Unreachable, match=r"^source s3://hub/mix → .*: s3://hub/mix/pdf_tarballs/\S+: the storage "
                                             r"did not answer for \d+ s \(.*run again to continue$"):
            prepare(tmp_path, *common, f"out={tmp_path / 'short'}", "storage_wait_s=1")
        proxy.outage(0)


def test_a_source_refusing_the_credentials_is_one_line(tmp_path, s3_server, monkeypatch):
    from support.faultproxy import FaultProxy

    mix_1025(str(tmp_path / "snap"), rows=1)
    filesystem("s3://hub").mkdir("hub")
    _upload(tmp_path / "snap", "s3://hub/mix")
    with FaultProxy(s3_server, rate=1.0, faults=("access_denied",)) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        for source in ("s3://hub/mix", "s3://hub"):  # a bucket's root was "nothing there"
            with pytest.raises(Unreachable, match=rf"^source {source} → \S+: {source}\S*: the storage refused the "
                                                 r"credentials \(PermissionError: .*run again to continue$"):
                prepare(tmp_path, f"source={source}", f"out={tmp_path / 'out'}")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    with pytest.raises(ValueError, match=r"^source s3://nobucket: nothing there \(expected a snapshot"):
        prepare(tmp_path, "source=s3://nobucket", f"out={tmp_path / 'out'}")


def _truth_candidates(bench_dir, folder) -> None:
    """Perfect outputs: each page's own source text, where the OCR output would be."""
    for md in glob.glob(os.path.join(bench_dir, "pdfs", "**", "*.md"), recursive=True):
        rel = os.path.relpath(md, os.path.join(bench_dir, "pdfs"))[:-3]
        os.makedirs(os.path.dirname(os.path.join(folder, rel)), exist_ok=True)
        shutil.copy(md, os.path.join(folder, rel + "_pg1_repeat1.md"))


def test_bench_and_synthmix_become_bench_folders(tmp_path, processor):
    from omegaconf import OmegaConf

    from olmocr.bench.__main__ import run as bench
    from olmocr.data.bench_prompts import build_prompt_dataset

    bench_snapshot(str(tmp_path / "bench_snap"))
    out = tmp_path / "bench"
    summary = prepare(tmp_path, "dataset=olmocr_bench", f"source={tmp_path / 'bench_snap'}", f"out={out}")
    assert summary["parts"]["synth"]["pages"] == 8
    assert rejected(out) == {"missing_pdf": {"gone.pdf"}, "malformed_test": {"bench_data/synth.jsonl:71"}}
    assert open(out / "synth.jsonl", "rb").read() == open(tmp_path / "bench_snap/bench_data/synth.jsonl", "rb").read()
    # olmocr.bench scores it: perfect outputs (the pages' sources) pass the page tests; a missing PDF's fail.
    candidates = tmp_path / "candidates"
    _truth_candidates(os.path.join(PROJECT_ROOT, "data", "sample", "eval"), str(candidates))
    os.makedirs(tmp_path / "scored")
    scored = bench(compose("bench", [f"bench_dir={out}", f"candidates={candidates}", "workers=1"]),
                   str(tmp_path / "scored"))
    assert scored["overall"] > 0.5

    bench_snapshot(str(tmp_path / "synth_snap"), references=True)
    monkeypatch_out = tmp_path / "synthmix"
    summary = prepare(tmp_path, "dataset=olmocr_synthmix_1025", f"source={tmp_path / 'synth_snap'}",
                      f"out={monkeypatch_out}", "limit=3")
    assert summary["parts"]["synth"]["pages"] == 3
    assert rejected(monkeypatch_out) == {"bad_reference": {"general/synth_s0_01000.pdf"},
                                          "malformed_test": {"bench_data/synth.jsonl:71"}}
    assert sorted(os.listdir(monkeypatch_out / "pdfs" / "general")) == [
        "synth_s0_01000.pdf", "synth_s0_01001.md", "synth_s0_01001.pdf", "synth_s0_01002.md", "synth_s0_01002.pdf"]
    # What GRPO reads (data=synthmix): every page a prompt, references where checked, nothing rejected.
    cfg = compose("train", ["algo=grpo", "rewards=olmocr2", "data=synthmix", f"paths.synthmix={monkeypatch_out}"])
    data = OmegaConf.to_container(cfg.data, resolve=True)
    report = tmp_path / "rejected.jsonl"
    prompts = build_prompt_dataset(data["train"], data["steps"], str(report), processor=processor)
    assert len(prompts) == 3 and not report.exists()
    rows = [prompts[i] for i in range(3)]
    assert sum(r["reference"] is not None for r in rows) == 2


def test_the_hub_as_source(tmp_path, monkeypatch):
    """The Hub is faked where it begins (huggingface_hub's two calls): a pinned revision resolved once, only
    the files a step needs fetched, a slice fetching only the tarballs its rows name."""
    import huggingface_hub

    snap = tmp_path / "snap"
    mix_1025(str(snap), rows=3, tarballs=3)
    fetched, asked = [], []

    class Info:
        sha = "0123456789abcdef0123456789abcdef01234567"

    def dataset_info(self, repo_id, revision=None):
        asked.append((repo_id, revision))
        return Info()

    def snapshot_download(repo_id, repo_type, revision, allow_patterns, local_dir):
        assert repo_type == "dataset" and revision == Info.sha
        for path in glob.glob(os.path.join(snap, "**"), recursive=True):
            rel = os.path.relpath(path, snap)
            if os.path.isfile(path) and any(fnmatch.fnmatchcase(rel, p) for p in allow_patterns):
                os.makedirs(os.path.dirname(os.path.join(local_dir, rel)), exist_ok=True)
                shutil.copy(path, os.path.join(local_dir, rel))
                fetched.append(rel)
        return local_dir

    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", dataset_info)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    out = tmp_path / "out"
    summary = prepare(tmp_path, f"out={out}", "subsets=[02_loc_transcripts]", "splits=[train]", "limit=1")
    assert asked[0] == ("allenai/olmOCR-mix-1025", "d3c0450") and summary["commit"] == Info.sha
    assert sorted(fetched) == ["02_loc_transcripts_train.parquet",
                               "pdf_tarballs/02_loc_transcripts_train_00000.tar.gz"]
    assert summary["parts"]["02_loc_transcripts/train"]["pages"] == 1
    assert (out / ".download" / "02_loc_transcripts_train.parquet").exists()

    bench_snapshot(str(snap))
    bench_out = tmp_path / "bench"
    bench = prepare(tmp_path, "dataset=olmocr_bench", f"out={bench_out}")
    assert bench["parts"]["synth"]["pages"] == 8 and "bench_data/pdfs/synth_s0_01000.pdf" in fetched

    def unreachable(*args, error="[Errno -3] Temporary failure in name resolution", **kwargs):
        import httpx

        raise httpx.ConnectError(error)

    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", unreachable)
    # Finished folders need no Hub: re-runs are no-ops offline.
    assert prepare(tmp_path, f"out={out}", "subsets=[02_loc_transcripts]", "splits=[train]", "limit=1") == summary
    assert prepare(tmp_path, "dataset=olmocr_bench", f"out={bench_out}") == bench
    # A name that does not resolve is no outage: said at once, with the default wait, and no empty folder left
    # to read later as a dataset without files.
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"^dataset allenai/olmOCR-mix-1025: the Hub cannot be reached from this "
                                         r"machine \(Temporary failure in name resolution: offline, or no DNS\); "
                                         r"give source="):
        prepare(tmp_path, f"out={tmp_path / 'other'}")
    assert time.monotonic() - start < 10 and not (tmp_path / "other").exists()
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info",
                        lambda *a, **k: unreachable(error="[Errno 111] Connection refused"))
    with pytest.raises(Unreachable, match=r"^source allenai/olmOCR-mix-1025 → \S+: dataset allenai/olmOCR-mix-1025: the "
                                          r"Hub did not answer for 0 s \(ConnectError: .*source=.*run again to continue$"):
        prepare(tmp_path, f"out={tmp_path / 'other'}", "storage_wait_s=0")
    assert not (tmp_path / "other").exists()


@pytest.mark.integration
def test_a_hub_that_stops_answering_is_waited_out_and_a_refusal_is_said_at_once(tmp_path, monkeypatch, caplog):
    """The Hub faked where it begins, as above: a download cut off time and again (a 503, a read timeout) by a
    Hub that answers a little more each time is waited out to the end, the wait starting again whenever a file
    more has come, though the whole lasts longer than the wait; a refused token and offline mode are said at once."""
    import httpx
    import huggingface_hub
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    snap = tmp_path / "snap"
    mix_1025(str(snap), rows=3, tarballs=3)
    request = httpx.Request("GET", "https://huggingface.co/api/datasets/allenai/olmOCR-mix-1025")
    cuts = [HfHubHTTPError("503 Service Unavailable", response=httpx.Response(503, request=request)),
            httpx.ReadTimeout("The read operation timed out"), httpx.ReadTimeout("The read operation timed out")]

    class Info:
        sha = "0123456789abcdef0123456789abcdef01234567"

    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", lambda self, repo_id, revision=None: Info())

    def snapshot_download(repo_id, repo_type, revision, allow_patterns, local_dir):
        for path in sorted(glob.glob(os.path.join(snap, "**"), recursive=True)):
            rel = os.path.relpath(path, snap)
            target = os.path.join(local_dir, rel)
            if os.path.isfile(path) and any(fnmatch.fnmatchcase(rel, p) for p in allow_patterns) and not (
                    os.path.exists(target)):
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copy(path, target)
                if cuts:  # one file a look, then the Hub is gone again
                    time.sleep(0.6)
                    raise cuts.pop(0)
        return local_dir

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    caplog.set_level("WARNING", logger="olmocr.io")
    start = time.monotonic()
    prepare(tmp_path, f"out={tmp_path / 'out'}", "subsets=[00_documents]", "splits=[train]", "storage_wait_s=1")
    assert not cuts and time.monotonic() - start > 2  # longer than the wait in all, each cut a new outage
    prepare(tmp_path, f"out={tmp_path / 'local'}", f"source={snap}", "subsets=[00_documents]", "splits=[train]")
    local, hub = tree(tmp_path / "local"), tree(tmp_path / "out")
    assert {k for k in set(local) | set(hub) if local.get(k) != hub.get(k)} == {"prepared.json"}
    assert caplog.text.count("the Hub does not answer") == 3 and "the Hub answers again" in caplog.text

    for error, said in [(HfHubHTTPError("401 Unauthorized", response=httpx.Response(401, request=request)),
                         r"the Hub answered 401 \(HF_TOKEN refused\)"),
                        (OfflineModeIsEnabled("Cannot reach the Hub: offline mode is enabled."),
                         r"the Hub cannot be reached \(OfflineModeIsEnabled: ")]:
        def refusing(self, repo_id, revision=None, error=error):
            raise error

        monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", refusing)
        start = time.monotonic()
        with pytest.raises(ValueError, match=rf"^dataset allenai/olmOCR-mix-1025: {said}"):
            prepare(tmp_path, f"out={tmp_path / 'refused'}")
        assert time.monotonic() - start < 10  # not waited out


def test_local_cache_copies_remote_roots_once(tmp_path, s3_server):
    from olmocr.data.cache import local_copy_path
    from olmocr.data.dataset import sources

    filesystem("s3://pages").mkdir("pages")
    _upload(os.path.join(PROJECT_ROOT, "data", "sample", "train", "pdfs"), "s3://pages/train")
    cache = str(tmp_path / "cache")
    data = {"roots": ["s3://pages/train"], "eval_roots": [], "eval_fraction": 0.1, "local_cache": cache}
    train, _ = sources(data)
    local = local_copy_path("s3://pages/train", cache)
    assert train["folder"]["roots"] == [local] and len(os.listdir(local)) == 3 * 32  # PDF, truth, blocks
    before = stamps(local)
    sources(data)
    assert stamps(local) == before  # nothing fetched again
    fs = filesystem("s3://pages")
    fs.pipe_file("s3://pages/train/synth_s0_00000.md", b"---\nprimary_language: en\n---\nchanged\n")
    fs.rm_file("s3://pages/train/synth_s0_00001.md")
    sources(data)
    assert open(os.path.join(local, "synth_s0_00000.md")).read().endswith("changed\n")
    assert not os.path.exists(os.path.join(local, "synth_s0_00001.md")) and len(os.listdir(local)) == 3 * 32 - 1


@pytest.mark.integration
def test_local_cache_waits_out_storage_that_stops_answering_mid_copy(tmp_path, s3_server, monkeypatch, caplog):
    """An outage longer than s3fs and botocore wait out by themselves (~10 s), as the first files land: the copy
    waits and ends whole; credentials refused end it at once in one line."""
    import threading

    from olmocr.data.cache import local_copy_path
    from olmocr.data.dataset import sources
    from olmocr.faults import Unreachable
    from support.faultproxy import FaultProxy

    filesystem("s3://pages").mkdir("pages")
    folder = os.path.join(PROJECT_ROOT, "data", "sample", "train", "pdfs")
    _upload(folder, "s3://pages/train")
    cache = str(tmp_path / "cache")
    local = local_copy_path("s3://pages/train", cache)
    data = {"roots": ["s3://pages/train"], "eval_fraction": 0, "local_cache": cache, "storage_wait_s": 120}
    caplog.set_level("WARNING", logger="olmocr.io")
    with FaultProxy(s3_server, rate=1.0, faults=("stall",), stall_s=(0.05, 0.1)) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)

        def outage_when_files_land():
            while not (os.path.isdir(local) and any(not n.endswith(".partial") for n in os.listdir(local))):
                time.sleep(0.005)
            proxy.outage(15)

        watcher = threading.Thread(target=outage_when_files_land, daemon=True)
        watcher.start()
        sources(data)
        watcher.join(timeout=1)
        assert proxy.faulted()["outage"] > 0 and "the storage answers again, after " in caplog.text
        assert sorted(os.listdir(local)) == sorted(os.listdir(folder))
        assert all(open(os.path.join(local, n), "rb").read() == open(os.path.join(folder, n), "rb").read()
                   for n in os.listdir(folder))

        filesystem("s3://pages").pipe_file("s3://pages/train/new.md", b"new\n")
        proxy.faults, proxy.stall_s = ("access_denied",), (0, 0)
        start = time.monotonic()
        with pytest.raises(Unreachable, match=r"^s3://pages/train: the storage refused the credentials \("):
            sources(data)
        assert time.monotonic() - start < 10  # not waited out
