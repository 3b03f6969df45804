"""The batch workspace and its queue, on a local folder and on a real S3 API (moto server): conditional
writes, exactly-once claims, takeover of expired claims, idempotent and concurrent additions, stats, and
worker processes killed with SIGKILL until the queue is empty."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import SAMPLE, write_encrypted_pdf, write_pdf
import olmocr.pipeline.queue as wq
from olmocr.faults import Unreachable
from olmocr.pipeline.inputs import expand
from olmocr.pipeline.queue import WorkQueue, anything_left, cancel, item_state
from olmocr.pipeline.stats import workspace_stats
from olmocr.pipeline.store import open_store
from olmocr.pipeline.worker import Output, run_workers
from olmocr.pipeline.queue import item_id
from olmocr.pipeline.queue.names import INDEX
from olmocr.pipeline.workspace import Workspace
from work_helpers import Slow, done_records

TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def root(workspace_root) -> str:
    return workspace_root


def corpus(folder, count: int, pages=lambda i: 1) -> list[str]:
    """``count`` PDFs; those with the same page count are hard links of one file (cheap at 1,000)."""
    os.makedirs(folder, exist_ok=True)
    made: dict[int, str] = {}
    paths = []
    for i in range(count):
        n = pages(i)
        if n not in made:
            made[n] = write_pdf(os.path.join(folder, f"base_{n}.pdf.src"), [f"page {p}" for p in range(n)])
        path = os.path.join(folder, f"doc_{i:04d}.pdf")
        os.link(made[n], path)
        paths.append(path)
    return paths


def queue(ws: Workspace, name: str, lease_s: float = 30.0, **kw) -> WorkQueue:
    return WorkQueue(ws, name, lease_s=lease_s, **kw)


def test_store_writes_only_when_its_condition_holds(root):
    store = open_store(root)
    tag = store.create("claims/a.json", b"first")
    assert tag is not None and store.create("claims/a.json", b"second") is None
    assert store.read("claims/a.json").data == b"first"
    newer = store.replace("claims/a.json", b"third", tag)
    assert newer is not None and newer != tag
    assert store.replace("claims/a.json", b"stale", tag) is None  # the tag read before was overwritten
    assert store.replace("claims/missing.json", b"x", tag) is None
    assert store.read("claims/a.json") == store.read("claims/a.json")
    assert store.read("claims/a.json").data == b"third" and store.read("claims/a.json").tag == newer
    store.write("done/x.json", b"1")
    store.write("done/x.json", b"2")
    assert sorted(store.list("claims")) == ["a.json"] and store.list("nothing") == []
    assert store.read_many(["claims/a.json", "done/x.json", "done/none.json"]) == {
        "claims/a.json": b"third", "done/x.json": b"2"}
    assert store.read("claims/none.json") is None and not store.exists("claims/none.json")
    assert store.exists("claims/a.json") and store.exists("done/x.json") and not store.exists("nothing/x.json")
    store.delete("done/x.json")
    assert not store.exists("done/x.json")


def test_each_s3_read_is_the_one_request_s3_bills(tmp_path, s3_server):
    """What the queue's cost figures count is what goes on the wire: a read, present or not, is one GET (s3fs's
    open and cat ask HEAD first, and for a missing object list its name as a folder too), read_many one GET an
    object, exists one HEAD."""
    from collections import Counter

    import s3fs

    s3fs.S3FileSystem(skip_instance_cache=True, client_kwargs={"endpoint_url": s3_server}).mkdir("wire")
    store = open_store("s3://wire/ws")
    store.write("done/a.json", b"1")
    store.write("done/b.json", b"2")
    sent: Counter = Counter()
    store.fs.call_s3("list_buckets")  # makes the client whose calls are counted
    store.fs.s3.meta.events.register("before-call.s3", lambda model, **_: sent.update([model.name]))

    def requests(call) -> dict:
        sent.clear()
        call()
        return dict(sent)

    assert requests(lambda: store.read("done/a.json")) == {"GetObject": 1}
    assert requests(lambda: store.read("done/none.json")) == {"GetObject": 1}
    assert requests(lambda: store.read_many(["done/a.json", "done/b.json", "done/none.json"])) == {"GetObject": 3}
    assert requests(lambda: store.exists("done/none.json")) == {"HeadObject": 1}
    assert store.read("done/a.json").tag == store.version("done/a.json")


def test_an_item_is_claimed_once_and_an_expired_claim_taken_over_by_exactly_one(root, tmp_path):
    ws = Workspace(root)
    wq.add(ws, corpus(tmp_path / "pdfs", 1), pages_per_group=10)
    holder = queue(ws, "holder", lease_s=0.8)
    claim = holder.claim_next()
    assert claim is not None and queue(ws, "other").claim_next() is None
    time.sleep(0.9)  # the holder stalls past its lease
    won, start = [], threading.Barrier(8)

    def race(k):
        q = queue(ws, f"taker{k}")
        start.wait()
        got = q.claim_next()
        if got is not None:
            won.append((q, got))

    threads = [threading.Thread(target=race, args=(k,)) for k in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(won) == 1
    taker, taken = won[0]
    assert taken.took_over == "holder" and taken.item == claim.item
    # The stalled holder finds out before finishing: its output is dropped, nothing is marked done.
    assert not holder.complete(claim, b"stale\n", {}) and claim.taken
    assert claim.item.id not in done_records(ws)
    assert taker.complete(taken, b'{"fresh": 1}\n', {"pages": 1})
    assert ws.store.read(ws.result_name(claim.item.id)).data == b'{"fresh": 1}\n'
    assert done_records(ws)[claim.item.id]["took_over"] == "holder"
    assert queue(ws, "late").claim_next() is None and workspace_stats(ws)["done"] == 1


def test_renewal_keeps_a_slow_item_claimed_past_its_lease(tmp_path):
    ws = Workspace(str(tmp_path / "ws"))
    wq.add(ws, corpus(tmp_path / "pdfs", 1), pages_per_group=10)
    reports = []
    worker = threading.Thread(target=lambda: reports.append(
        run_workers(ws, Slow(2.0), lease_s=0.6, progress=False)))
    worker.start()
    while not ws.store.list("claims"):
        time.sleep(0.01)
    deadline = time.time() + 1.8
    while time.time() < deadline:  # three leases go by; the keeper renews, nobody else gets the item
        assert queue(ws, "other", lease_s=0.6).claim_next() is None
        time.sleep(0.1)
    worker.join()
    assert reports[0].done == 1 and reports[0].lost == 0 and reports[0].taken_over == 0


def test_serving_workers_take_what_is_added_while_they_run_and_stop_when_told(tmp_path):
    """A service's workers (until=): an empty workspace is no reason to stop; an item added later is done; once
    told to stop they return, each item done once."""
    ws = Workspace(str(tmp_path / "ws"))
    pdfs = corpus(tmp_path / "pdfs", 3)
    wq.add(ws, pdfs[:1], pages_per_group=1)
    until, reports = threading.Event(), []
    worker = threading.Thread(target=lambda: reports.append(
        run_workers(ws, Slow(0.0), workers=2, lease_s=5.0, poll_s=0.1, progress=False, until=until)))
    worker.start()
    deadline = time.time() + 30
    while len(done_records(ws)) < 1 and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # nothing left: a batch worker would have returned by now
    assert worker.is_alive()
    wq.add(ws, pdfs[1:], pages_per_group=1)  # two more items, added while it waits
    while len(done_records(ws)) < 3 and time.time() < deadline:
        time.sleep(0.05)
    assert len(done_records(ws)) == 3
    until.set()
    worker.join(10)
    assert not worker.is_alive() and reports[0].done == 3 and reports[0].duplicates == 0


def test_nudged_serving_workers_take_new_work_at_once_not_at_their_next_poll(tmp_path):
    ws = Workspace(str(tmp_path / "ws"))
    pdfs = corpus(tmp_path / "pdfs", 2)
    wq.add(ws, pdfs[:1], pages_per_group=1)
    until, nudged = threading.Event(), threading.Event()
    worker = threading.Thread(target=run_workers, args=(ws, Slow(0.0)), kwargs=dict(
        workers=1, lease_s=120.0, poll_s=30.0, progress=False, until=until, nudged=nudged))
    worker.start()
    deadline = time.time() + 30
    while len(done_records(ws)) < 1 and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # idle now, for its 30 s poll
    wq.add(ws, pdfs[1:], pages_per_group=1)
    added = time.time()
    nudged.set()
    while len(done_records(ws)) < 2 and time.time() < deadline:
        time.sleep(0.05)
    taken = time.time() - added
    until.set()
    worker.join(10)
    assert len(done_records(ws)) == 2 and taken < 5, taken  # within the join loop's 0.2 s and the work


@pytest.mark.integration
def test_a_failed_item_waits_before_its_next_attempt_and_only_its_own_failures_give_it_up(root, tmp_path):
    ws = Workspace(root)
    wq.add(ws, corpus(tmp_path / "pdfs", 1), pages_per_group=1)
    a, b = (queue(ws, name, max_failures=2, retry_wait_s=1.0, retry_wait_max_s=10) for name in "ab")
    name = wq.names.claim_name(wq.items(ws)[0].id)

    def fail(q, claim, transient: bool) -> dict:
        before = time.time()
        q.release(claim, error="RuntimeError: cannot convert", transient=transient)
        body = json.loads(ws.store.read(name).data)
        body["wait_bounds"] = (body["retry_at"] - time.time(), body["retry_at"] - before)  # the wait lies in between
        return body

    def waits_between(body, low: float, high: float) -> bool:
        least, most = body["wait_bounds"]
        return low <= most and least <= high

    def after_wait(q, claim_body: dict):
        claim = q.claim_next()
        if claim is None:
            time.sleep(max(claim_body["retry_at"] - time.time(), 0) + 0.05)
            claim = q.claim_next()
        assert claim is not None and time.time() >= claim_body["retry_at"]  # nobody takes it before its wait is over
        return claim

    assert anything_left(ws)  # unclaimed
    body = fail(a, a.claim_next(), transient=False)
    assert (body["failures"], body["given_up"]) == (1, False) and waits_between(body, 0.5, 1.0)
    assert anything_left(ws)  # waiting to be tried again
    body = fail(b, after_wait(b, body), transient=True)  # from outside the item: not counted, the wait doubles
    assert (body["failures"], body["transient_failures"]) == (1, 1) and waits_between(body, 1.0, 2.0)
    body = fail(a, after_wait(a, body), transient=False)
    assert body["failures"] == 2 and body["given_up"] and body["error"] == "RuntimeError: cannot convert"
    assert b.claim_next() is None and workspace_stats(ws)["given_up"] == 1
    assert not anything_left(ws)  # no server is started for it


def test_adding_groups_by_sampled_pages_and_is_idempotent(root, tmp_path):
    paths = corpus(tmp_path / "pdfs", 12, pages=lambda i: 1 + i % 4)  # 1-4 pages, 30 in all
    ws = Workspace(root)
    added = wq.add(ws, paths, pages_per_group=8, sample=100)
    items = wq.items(ws)
    assert added.pdfs_new == 12 and added.sampled == 12 and added.items_total == len(items)
    assert sorted(p for item in items for p in item.pdfs) == sorted(paths)
    assert sum(item.pages for item in items) == 30 and all(item.pages <= 8 for item in items)
    assert all(item.id == item_id(item.pdfs) for item in items)
    before = ws.store.tags(INDEX)
    again = wq.add(ws, list(reversed(paths)), pages_per_group=3)
    assert (again.pdfs_new, again.pdfs_known, again.items_new) == (0, 12, 0)
    assert ws.store.tags(INDEX) == before  # no part added, none rewritten
    # Unsampled PDFs count the sample's mean.
    more = corpus(tmp_path / "more", 10, pages=lambda i: 4)
    added = wq.add(ws, more, pages_per_group=8, sample=2)
    assert added.sampled == 2 and added.items_new == 5 and added.pages_estimated == 40
    late = corpus(tmp_path / "late", 2)
    for bad, error in (({"pages_per_group": 0}, "pages_per_group: must be at least 1, got 0"),
                       ({"sample": -1}, "sample: must be 0 or more (PDFs whose pages are counted to size the items), "
                                        "got -1")):
        with pytest.raises(ValueError) as info:
            wq.add(ws, late, **bad)
        assert str(info.value) == error
    assert len(wq.items(ws)) == len(items) + 5  # nothing queued by a refused call


@pytest.mark.integration
def test_concurrent_additions_keep_every_pdf(root, tmp_path):
    paths = corpus(tmp_path / "pdfs", 64)
    ws = Workspace(root)
    start, attempts = threading.Barrier(8), []

    def add(k):
        mine = paths[k * 6: k * 6 + 16]  # overlapping slices
        start.wait()
        attempts.append(wq.add(Workspace(root), mine, pages_per_group=4, sample=4).attempts)

    threads = [threading.Thread(target=add, args=(k,)) for k in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    queued = [p for item in wq.items(ws) for p in item.pdfs]
    assert sorted(queued) == sorted(set(paths[:58])) and len(queued) == len(set(queued))
    print("index writes per addition:", sorted(attempts))
    # Two real processes adding at once (the stage with workers=0), then both lists again.
    lists = []
    for k, part in enumerate((paths[40:], paths[50:] + paths[:3])):
        lists.append(str(tmp_path / f"list{k}.txt"))
        with open(lists[-1], "w") as fh:
            fh.write("# a list of PDFs\n" + "\n".join(part) + "\n")
    run = [sys.executable, "-m", "olmocr.pipeline", f"workspace={root}", "workers=0", "pages_per_group=4"]
    for _ in range(2):
        procs = [subprocess.Popen([*run, f"pdfs=[{lst}]", f"hydra.run.dir={tmp_path}/run{k}"], cwd=tmp_path,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for k, lst in enumerate(lists)]
        for proc in procs:
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0, out
        queued = [p for item in wq.items(ws) for p in item.pdfs]
        assert sorted(queued) == sorted(paths) and len(queued) == len(paths)


def test_pdfs_entries_expand_to_every_document_once(tmp_path, s3_server):
    import s3fs

    paths = corpus(tmp_path / "a" / "b", 3)
    listing = tmp_path / "list.txt"
    listing.write_text("# relative to the list\n\na/b/doc_0000.pdf\n" + paths[1] + "\n")
    local = expand([str(tmp_path / "a"), str(tmp_path / "**" / "doc_0002.pdf"), str(listing), paths[0]])
    assert local == paths[:3] and all(os.path.isabs(p) for p in local)
    fs = s3fs.S3FileSystem(skip_instance_cache=True, client_kwargs={"endpoint_url": s3_server})
    fs.mkdir("docs")
    for p in paths:
        fs.put_file(p, f"docs/in/{os.path.basename(p)}")
    fs.pipe_file("docs/in/notes.txt", b"x")
    assert expand(["s3://docs/in/*.pdf"]) == [f"s3://docs/in/doc_000{i}.pdf" for i in range(3)]
    assert expand(["s3://docs/in"]) == expand(["s3://docs/in/doc_000*.pdf"])
    with pytest.raises(ValueError, match=r"pdfs: '.*nothing/\*\.pdf' names no document"):
        expand([str(tmp_path / "nothing" / "*.pdf")])
    listing.write_text("gone.pdf\n")
    with pytest.raises(ValueError, match=r"gone.pdf' \(listed in .*list.txt\) names no document"):
        expand([str(listing)])


def test_stats_on_a_half_done_workspace(root, tmp_path):
    ws = Workspace(root)
    wq.add(ws, corpus(tmp_path / "pdfs", 10, pages=lambda i: 2), pages_per_group=2)  # 10 items of 2 pages
    done = queue(ws, "done")
    for _ in range(4):
        claim = done.claim_next()
        assert done.complete(claim, b"{}\n", {"documents": 1, "pages": 2, "fallback_pages": 1,
                                               "input_tokens": 100, "output_tokens": 40})
    assert queue(ws, "busy", lease_s=600).claim_next() is not None
    assert queue(ws, "dead", lease_s=0.01).claim_next() is not None
    time.sleep(0.05)
    cache = str(tmp_path / "cache")
    stats = workspace_stats(ws, cache_dir=cache)
    assert (stats["items"], stats["done"], stats["active"], stats["expired"], stats["waiting"]) == (10, 4, 1, 1, 4)
    assert stats["counts"] == {"documents": 4, "pages": 8, "fallback_pages": 4, "input_tokens": 400,
                               "output_tokens": 160}
    assert stats["pages_remaining_estimated"] == 12 and stats["pages_per_s"] > 0
    assert stats["projected_finish_s"] == pytest.approx(12 / stats["pages_per_s_recent"])
    proc = subprocess.run([sys.executable, "-m", "olmocr.pipeline.stats", f"workspace={root}", "json=true"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    assert {k: printed[k] for k in ("items", "done", "active", "expired", "waiting", "counts")} == {
        k: stats[k] for k in ("items", "done", "active", "expired", "waiting", "counts")}
    proc = subprocess.run([sys.executable, "-m", "olmocr.pipeline.stats", f"workspace={root}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert ("10 total: 4 done, 1 being worked on, 1 claims expired, 0 waiting to be tried again after a failure, 0 given "
            "up, 0 cancelled, 4 waiting") in proc.stdout
    assert "8 done, 4 from the text layer (fallback), ~12 to go" in proc.stdout
    assert not glob.glob(str(tmp_path / "outputs")) and not glob.glob(str(tmp_path / "*.log"))  # a query only
    # A later look reads no done marker it has read (on S3, every read of one is refused here) …
    if root.startswith("s3://"):
        from support.faultproxy import FaultProxy

        with FaultProxy(os.environ["AWS_ENDPOINT_URL"], rate=1.0, faults=("access_denied",), methods=("GET",),
                        paths=r"/done/[^?]*\.json") as proxy, pytest.MonkeyPatch.context() as env:
            env.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
            again = workspace_stats(Workspace(root), cache_dir=cache)
        assert again["counts"] == stats["counts"] and again["done"] == 4 and not proxy.faulted()
        # Credentials refused outright: one line that says so (was the bare "Forbidden").
        from olmocr.config import compose
        from olmocr.pipeline.stats import run as stats_stage

        with FaultProxy(os.environ["AWS_ENDPOINT_URL"], rate=1.0, faults=("access_denied",)) as proxy, \
                pytest.MonkeyPatch.context() as env:
            env.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
            with pytest.raises(Unreachable, match=rf"^workspace {root}: the storage refused the credentials "
                                                 r"\(PermissionError: "):
                stats_stage(compose("pipeline_stats", [f"workspace={root}"]))
    # … and reads one written again (a look cut short left a torn line: that costs a read, not a wrong figure).
    [marker] = [n for n in ws.store.list("done")][:1]
    record = json.loads(ws.store.read(f"done/{marker}").data)
    ws.store.write(f"done/{marker}", json.dumps({**record, "counts": {**record["counts"], "pages": 20}}).encode())
    [kept] = glob.glob(f"{cache}/done-*.jsonl")
    with open(kept, "a") as fh:
        fh.write('["torn')
    again = workspace_stats(ws, cache_dir=cache)
    assert again["counts"] == {**stats["counts"], "pages": 26} and again["unreadable_done_markers"] == 0


def test_the_stage_inventories_the_sample_pdfs_bad_ones_counted_and_reruns_as_a_no_op(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "corrupt.pdf").write_bytes(b"%PDF-1.4 this is not a PDF")
    write_encrypted_pdf(str(bad / "locked.pdf"))
    run = [sys.executable, "-m", "olmocr.pipeline", f"pdfs=[{SAMPLE}/eval/pdfs,{bad}]", "workers=2", "work=inventory"]
    proc = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "added 10 PDFs (0 already queued) in 1 items" in proc.stdout
    ws = Workspace(str(tmp_path / "outputs" / "pipeline" / "sample"))  # no workspace= given
    [item] = wq.items(ws)
    rows = {os.path.basename(r["source"]): r for r in map(json.loads, ws.store.read(ws.result_name(item.id)).data.
                                                          decode().splitlines())}
    assert len(rows) == 10 and all(rows[n]["pages"] == 1 for n in rows if n.startswith("synth_"))
    assert rows["corrupt.pdf"]["error"].startswith("unreadable_pdf") and "pages" not in rows["corrupt.pdf"]
    assert rows["locked.pdf"]["error"].startswith("encrypted_pdf")
    assert rows["synth_s0_01000.pdf"]["sha256"] == hashlib.sha256(
        open(os.path.join(SAMPLE, "eval", "pdfs", "synth_s0_01000.pdf"), "rb").read()).hexdigest()
    done = done_records(ws)[item.id]
    assert done["counts"] == {"documents": 8, "pages": 8, "bad_documents": 2}
    again = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "added 0 PDFs (10 already queued)" in again.stdout and "finished 0 items" in again.stdout
    assert done_records(ws)[item.id] == done
    # Conversion on a workspace with nothing left to do starts no model server (vLLM's takes minutes with a 7B).
    served = subprocess.run([sys.executable, "-m", "olmocr.pipeline", "work=ocr", "server=vllm"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert served.returncode == 0, served.stderr[-2000:]
    assert "every item is done or given up, nothing to convert; no model server started" in served.stdout
    assert "serve (pid" not in served.stdout + served.stderr and "finished 0 items" in served.stdout
    # The stats read the sample workspace when none is named, as the run wrote it.
    stats = subprocess.run([sys.executable, "-m", "olmocr.pipeline.stats"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
    assert stats.returncode == 0, stats.stderr
    assert "1 total: 1 done" in stats.stdout and "nothing left: every item is done, given up or cancelled" in stats.stdout
    # retire_after_h=0 retires every finished part: its result goes, stats counts it as retired.
    retire = subprocess.run([sys.executable, "-m", "olmocr.pipeline", "workers=0", "retire_after_h=0"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert retire.returncode == 0, retire.stderr[-2000:]
    assert ws.store.read(ws.result_name(item.id)) is None and wq.items(ws) == [item]  # the highest part stays
    stats = subprocess.run([sys.executable, "-m", "olmocr.pipeline.stats"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
    assert "1 total: 1 done" in stats.stdout and "1 of the done and cancelled retired" in stats.stdout, stats.stdout


def test_an_unreachable_s3_endpoint_is_one_line(tmp_path):
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y", "AWS_MAX_ATTEMPTS": "1"}
    proc = subprocess.run([sys.executable, "-m", "olmocr.pipeline.stats", "workspace=s3://work/ws",
                           "workspace_access.endpoint=http://127.0.0.1:9"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith("error: workspace s3://work/ws: the storage or a service did not "
                                                   "answer (EndpointConnectionError: Could not connect to the endpoint")


def worker_command(root: str, run_dir: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "olmocr.pipeline", f"workspace={root}", "progress=false", "work=inventory", "workers=1",
            f"hydra.run.dir={run_dir}", *extra]


def test_sigterm_gives_the_claim_back(tmp_path):
    root = str(tmp_path / "ws")
    ws = Workspace(root)
    wq.add(ws, corpus(tmp_path / "pdfs", 1), pages_per_group=10)
    env = {**os.environ, "PYTHONPATH": TESTS}
    proc = subprocess.Popen(worker_command(root, str(tmp_path / "run"), "work._target_=work_helpers.Slow",
                                           "+work.seconds=60"), cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 60
    while not ws.store.list("claims") and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "SIGTERM: gave back 1 claim(s)" in out
    claim = json.loads(ws.store.read(wq.names.claim_name(wq.items(ws)[0].id)).data)
    assert claim["expires"] == 0 and claim["failures"] == 0
    assert queue(ws, "next").claim_next() is not None  # at once, no lease to wait out


ITEMS, WORKERS, KILLS = 200, 8, 10


@pytest.mark.integration
@pytest.mark.parametrize("root", ["local"], indirect=True)  # S3: workers are killed in tests/test_faults.py
def test_workers_killed_at_random_leave_every_item_done_exactly_once(root, tmp_path):
    """8 worker processes over 200 items of 0.2 s each; every ~0.5 s one of them that is working (not still
    starting: its log says it began) is SIGKILLed and replaced, 10 times. A worker holds an item most of the
    time, so most kills leave a claim for another worker to take over."""
    paths = corpus(tmp_path / "pdfs", ITEMS)
    ws = Workspace(root)
    wq.add(ws, paths, pages_per_group=1)
    items = {item.id: item for item in wq.items(ws)}
    assert len(items) == ITEMS
    rng, runs = random.Random(0), iter(range(10_000))
    env = {**os.environ, "PYTHONPATH": TESTS}

    def start():
        run = tmp_path / f"run{next(runs)}"
        run.mkdir()
        with open(run / "output.log", "w") as log:
            # Items that take a while, so a kill lands on a worker holding one whose claim must be taken over.
            return subprocess.Popen(worker_command(root, str(run), "queue.lease_s=4", "queue.poll_s=2",
                                                   "work._target_=work_helpers.Slow", "+work.seconds=0.2"),
                                    cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)

    def log_of(proc) -> str:
        return next(a.split("=", 1)[1] for a in proc.args if a.startswith("hydra.run.dir=")) + "/output.log"

    live = [start() for _ in range(WORKERS)]
    killed, begin = 0, time.time()
    done, looked = 0, begin
    while killed < KILLS and done < 0.95 * ITEMS and time.time() - begin < 240:
        time.sleep(rng.uniform(0.3, 0.7))
        if time.time() - looked > 3:  # listing hundreds of markers is not free for the server
            done, looked = len(done_records(ws)), time.time()
        ready = [k for k, proc in enumerate(live) if "worker thread(s) on" in open(log_of(proc)).read()]
        if not ready:
            continue
        victim = live.pop(rng.choice(ready))
        victim.kill()
        victim.wait()
        killed += 1
        live.append(start())
    for proc in live:
        assert proc.wait(timeout=240) == 0, open(log_of(proc)).read()
    print(f"{killed} workers killed; {time.time() - begin:.1f} s")
    done = set(done_records(ws))
    assert done == set(items)
    results = ws.store.read_many([ws.result_name(i) for i in items])
    assert len(results) == ITEMS
    sources = []
    for name, data in results.items():
        rows = [json.loads(line) for line in data.decode().splitlines()]
        assert {row["item"] for row in rows} == {name[len("results/output_"):-len(".jsonl")]}
        sources += [row["source"] for row in rows]
    assert sorted(sources) == sorted(paths)  # every PDF once: none missing, none twice
    stats = workspace_stats(ws)
    assert (stats["done"], stats["active"], stats["expired"], stats["waiting"]) == (ITEMS, 0, 0, 0)
    records = [done_records(ws)[i] for i in items]
    took_over = sum(r["took_over"] is not None for r in records)
    assert took_over >= 1  # the kills hit workers holding items, whose claims were taken over
    finished = [json.load(open(p))["summary"]["work"] for p in glob.glob(str(tmp_path / "run*" / "run_info.json"))]
    assert sum(r["duplicates"] for r in finished) == 0
    print(f"{took_over} items taken over from killed workers; survivors finished "
          f"{sum(r['done'] for r in finished)} items, dropped {sum(r['lost'] for r in finished)} lost claims")


def test_an_item_whose_side_file_cannot_be_written_yet_is_written_when_it_can_not_converted_again(tmp_path):
    """The workspace refuses the item's markdown for a while (a file stands where its folder goes): the
    worker writes it again until it lands, then the result and the done marker; the item is processed once."""
    from olmocr.pipeline.worker import Output

    ws = Workspace(str(tmp_path / "ws"))
    wq.add(ws, [write_pdf(str(tmp_path / "a.pdf"), ["A page"])], pages_per_group=1)
    blocker = tmp_path / "ws" / "markdown"
    blocker.write_text("not a folder")
    calls = []

    def process(item):
        calls.append(item.id)
        return Output(b'{"source": "a"}\n', {"documents": 1}, {"markdown/a.md": b"text", "bad/x.jsonl": b"{}\n"})

    threading.Timer(2.0, blocker.unlink).start()
    report = run_workers(ws, process, retry_wait_s=0.2, retry_wait_max_s=0.5, progress=False)
    assert (report.done, report.failed, report.unavailable) == (1, 0, 0) and calls == [wq.items(ws)[0].id]
    assert (tmp_path / "ws" / "markdown" / "a.md").read_bytes() == b"text"
    assert (tmp_path / "ws" / "bad" / "x.jsonl").read_bytes() == b"{}\n"
    assert workspace_stats(ws)["done"] == 1


def test_an_output_the_workspace_cannot_hold_is_the_items_failure_and_never_pauses_the_worker(tmp_path):
    """One item's markdown has a name too long for the file system (the workspace takes other writes there): that
    is the item's own failure, counted until it is given up with the reason; the worker never pauses or waits on it
    as on an outage, and the other items convert."""
    ws = Workspace(str(tmp_path / "ws"))
    pdfs = [write_pdf(str(tmp_path / f"{n}.pdf"), [f"Page {n}"]) for n in "ab"]
    wq.add(ws, pdfs, pages_per_group=1, sample=0)
    poison = item_id([pdfs[0]])

    def process(item):
        name = "x" * 300 if item.id == poison else item.id
        return Output(b'{"source": "a"}\n', {"documents": 1}, {f"markdown/{name}.md": b"text"})

    began = time.monotonic()
    report = run_workers(ws, process, max_failures=2, retry_wait_s=0.1, retry_wait_max_s=0.2, pause_after=1,
                         give_up_after_s=5, progress=False)
    assert (report.done, report.failed, report.unavailable) == (1, 2, 0) and time.monotonic() - began < 5
    state = item_state(ws, poison)
    assert state.state == "failed" and "OutputRefused: the workspace does not take the item's markdown/xxx" in state.error
    assert "(File name too long), though it takes other writes in markdown/" in state.error
    assert not [n for n in os.listdir(tmp_path / "ws" / "markdown") if n.startswith(".")]  # its look left nothing


def test_a_write_lost_to_a_moment_of_outage_is_not_taken_for_the_items_fault(tmp_path):
    """The store fails the item's markdown once and is back by the look that follows (an outage ending between
    the two): the file is written again, the item is done, converted once and never counted as failed."""
    ws = Workspace(str(tmp_path / "ws"))
    wq.add(ws, [write_pdf(str(tmp_path / "a.pdf"), ["A page"])], pages_per_group=1, sample=0)
    store, calls, failed = ws.store, [], []
    real_write = store.write

    def write(name, data):
        if name.startswith("markdown/") and not failed:
            failed.append(name)
            raise ConnectionError("the storage was away for a moment")
        return real_write(name, data)

    store.write = write

    def process(item):
        calls.append(item.id)
        return Output(b'{"source": "a"}\n', {"documents": 1}, {"markdown/a.md": b"text"})

    report = run_workers(ws, process, max_failures=1, retry_wait_s=0.1, retry_wait_max_s=0.2, progress=False)
    assert (report.done, report.failed, report.unavailable) == (1, 0, 0) and len(calls) == 1 and failed
    assert (tmp_path / "ws" / "markdown" / "a.md").read_bytes() == b"text"


def test_cancel_ends_an_item_whatever_it_waits_for(tmp_path):
    """Cancelled while it waits to be tried again after a failure, an item is given up at once (no worker takes it
    again); never claimed, it is given up before any worker takes it; done, it stays done."""
    ws = Workspace(str(tmp_path / "ws"))
    pdfs = [write_pdf(str(tmp_path / f"{n}.pdf"), [f"Page {n}"]) for n in "abc"]
    wq.add(ws, pdfs, pages_per_group=1, sample=0)
    waiting, never, done = (item_id([p]) for p in pdfs)
    calls = []

    def process(item):
        calls.append(item.id)
        if item.id == waiting:
            raise ValueError("a failure of its own")
        return Output(b"{}\n", {"documents": 1})

    q = queue(ws, "w", retry_wait_s=600, retry_wait_max_s=600)
    claims = [q.claim_next() for _ in range(3)]
    by_id = {c.item.id: c for c in claims}
    q.release(by_id[waiting], error="ValueError: a failure of its own")  # to be tried again in 5 to 10 minutes
    q.release(by_id[never])
    assert q.complete(by_id[done], b"{}\n", {"documents": 1})
    assert [item_state(ws, i).state for i in (waiting, never, done)] == ["queued", "queued", "done"]
    for item in (waiting, never, done):
        cancel(ws, item)
    assert [item_state(ws, i).state for i in (waiting, never, done)] == ["cancelled", "cancelled", "done"]
    report = run_workers(ws, process, retry_wait_s=0.1, retry_wait_max_s=0.2, progress=False)
    assert calls == [] and report.done == 0


@pytest.mark.integration
def test_a_cancel_stops_an_item_whose_page_the_model_server_holds(tmp_path):
    """The model server holds the item's only page (no answer for a minute): the cancel is seen within watch_s,
    not after the page; the request is cancelled, the item given up, nothing written."""
    from chat_server import ChatServer, good

    from olmocr.config import compose
    from olmocr.pipeline.__main__ import run

    pdf = write_pdf(str(tmp_path / "held.pdf"), ["A page the server holds"])
    workspace = str(tmp_path / "ws")
    ws = Workspace(workspace)
    wq.add(ws, [pdf], sample=0)
    with ChatServer([{**good("late"), "delay_s": 60}]) as server:
        def cancel_once_asked():
            while not server.requests:
                time.sleep(0.05)
            cancel(ws, wq.items(ws)[0].id)

        threading.Thread(target=cancel_once_asked, daemon=True).start()
        began = time.monotonic()
        summary = run(compose("pipeline", [f"workspace={workspace}", "server=external", f"server.url={server.url}",
                                           "server.model_name=scripted", "work=ocr", "convert=default",
                                           "convert.steps.render.longest_side=200", "convert.timeout_s=120",
                                           "work.watch_s=0.5", "progress=false", f"hydra.run.dir={tmp_path / 'run'}"]),
                      str(tmp_path / "run"))
        took = time.monotonic() - began
    assert summary["work"]["cancelled"] == 1 and took < 30, (summary, took)
    assert item_state(ws, wq.items(ws)[0].id).state == "cancelled"
    assert not glob.glob(f"{workspace}/done/*") and not glob.glob(f"{workspace}/results/*")
