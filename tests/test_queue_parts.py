"""The queue's parts on a local folder and on a real S3 API (moto server): a workspace made before parts is read as
it is and converted exactly once; additions are parts of their own, each read once; finished parts are compacted
so that what a look lists holds live work only; retired parts leave nothing but their totals, which stats counts;
and no module outside the queue names a queue object."""

from __future__ import annotations

import ast
import gzip
import json
import os
import time

import pytest

import olmocr.pipeline.queue as wq
from olmocr.config import PROJECT_ROOT
from olmocr.pipeline.queue import WorkQueue
from olmocr.pipeline.stats import workspace_stats
from olmocr.pipeline.worker import Output, run_workers
from olmocr.pipeline.workspace import Workspace
from work_helpers import done_records


@pytest.fixture
def root(workspace_root) -> str:
    return workspace_root


class Counting:
    """One line per PDF, a markdown file and a page file per item; how many times each item was converted."""

    def __init__(self):
        self.calls: dict[str, int] = {}

    def __call__(self, item) -> Output:
        self.calls[item.id] = self.calls.get(item.id, 0) + 1
        lines = "".join(json.dumps({"source": p, "item": item.id}) + "\n" for p in item.pdfs)
        files = {f"markdown/{item.id}.md": b"# text\n", f"pages/output_{item.id}.jsonl": b'{"page": 1}\n'}
        return Output(lines.encode(), {"documents": len(item.pdfs), "pages": len(item.pdfs)}, files)


def names(ws: Workspace) -> set[str]:
    """Every object of the workspace but the workers' sign-ins."""
    found = set()
    for folder in ("", "index", "totals", "claims", "done", "parts", "results", "markdown", "pages", "progress", "cancelled"):
        found |= {f"{folder}/{n}" if folder else n for n in ws.store.list(folder)
                  if folder or n.endswith(".gz")}
    return found


def legacy_workspace(ws: Workspace, pdfs: list[str]) -> list[str]:
    """A workspace as the code before parts left it: the whole index in one object, two items done (done markers
    without the objects they wrote), one claim expired mid-item; the ids of the items, in index order."""
    items = [wq.item_id([p]) for p in pdfs]
    rows = "".join(json.dumps({"id": i, "pdfs": [p], "pages": 1}) + "\n" for i, p in zip(items, pdfs))
    ws.store.write("work_index.jsonl.gz", gzip.compress(rows.encode()))
    now = time.time()
    for item in items[:2]:
        ws.store.write(ws.result_name(item), json.dumps({"item": item}).encode() + b"\n")
        ws.store.create(f"claims/{item}.json", json.dumps({"worker": "old", "claimed": now - 60, "expires": now + 240,
                                                            "failures": 0}).encode())
        ws.store.create(f"done/{item}.json", json.dumps({"id": item, "worker": "old", "claimed": now - 60,
                                                          "finished": now - 30, "pdfs": 1, "pages_estimated": 1,
                                                          "counts": {"documents": 1, "pages": 1}}).encode())
    ws.store.create(f"claims/{items[2]}.json", json.dumps({"worker": "dead", "claimed": now - 600,
                                                           "expires": now - 300, "failures": 0}).encode())
    return items


def test_a_workspace_made_before_parts_is_read_as_it_is_and_converted_exactly_once(root, tmp_path):
    ws = Workspace(root)
    pdfs = [str(tmp_path / f"doc_{i}.pdf") for i in range(6)]
    items = legacy_workspace(ws, pdfs)
    assert [i.id for i in wq.items(ws)] == items and {i.part for i in wq.items(ws)} == {0}

    work = Counting()
    report = run_workers(ws, work, workers=2, lease_s=30, progress=False)
    assert sorted(work.calls) == sorted(items[2:]) and set(work.calls.values()) == {1}
    assert report.done == 4 and report.taken_over == 1
    assert set(done_records(ws)) == set(items)
    # Finished: part 0 is one summary; its claims and done markers are gone; the old index stays, never rewritten.
    left = names(ws)
    assert "parts/000000000000.json" in left and "work_index.jsonl.gz" in left
    assert not [n for n in left if n.startswith(("claims/", "done/", "index/"))], left
    assert not wq.anything_left(ws)
    again = Counting()
    assert run_workers(ws, again, workers=1, lease_s=30, progress=False).done == 0 and not again.calls

    # A later addition is a part of its own; the PDFs of part 0 are known and not queued again.
    added = wq.add(ws, pdfs[:2] + [str(tmp_path / "new.pdf")], pages_per_group=1, sample=0)
    assert (added.pdfs_new, added.pdfs_known, added.items_new) == (1, 2, 1)
    assert [i.part for i in added.items] == [1] and ws.store.exists("index/000000000001.jsonl.gz")
    run_workers(ws, work, workers=1, lease_s=30, progress=False)
    assert sum(work.calls.values()) == 5 and set(work.calls.values()) == {1}
    stats = workspace_stats(ws)
    assert (stats["items"], stats["done"], stats["finished_parts"]) == (7, 7, 2)


def test_what_a_look_lists_is_live_work_and_each_part_is_read_once(tmp_path):
    """Three additions, the first finished: its claims and done markers leave the listings, and a new worker reads
    the live parts' index as it reaches them, the finished one's never."""
    ws = Workspace(str(tmp_path / "ws"))
    for n in range(3):
        wq.add(ws, [str(tmp_path / f"p{n}_{i}.pdf") for i in range(4)], pages_per_group=1, sample=0)
    first = [i.id for i in wq.items(ws) if i.part == 1]
    q = WorkQueue(ws, "one", lease_s=30)
    claims = []
    while (claim := q.claim_next()) is not None:
        claims.append(claim)
    assert len(claims) == 12
    for claim in claims:  # the first part done, the others given back
        if claim.item.part == 1:
            assert q.complete(claim, b"{}\n", {"documents": 1})
        else:
            q.release(claim)
    assert ws.store.exists("parts/000000000001.json")
    assert not {f"{i}.json" for i in first} & (set(ws.store.list("claims")) | set(ws.store.list("done")))

    # A worker joining now reads the lowest live part only, the next when it needs its items, the finished never.
    late = WorkQueue(ws, "late", lease_s=30)
    assert sorted(late.index.parts) == [2] and late.unread == [3] and late.remaining() == 4
    taken = []
    while (claim := late.claim_next()) is not None:
        taken.append(claim.item.part)
    assert sorted(taken) == [2] * 4 + [3] * 4  # given back by the first worker: taken as given back
    assert sorted(late.index.parts) == [2, 3] and not set(first) & set(late.items)


def test_retired_parts_leave_nothing_but_their_totals_which_stats_counts(root, tmp_path):
    ws = Workspace(root)
    old = [str(tmp_path / f"old_{i}.pdf") for i in range(3)]
    new = [str(tmp_path / f"new_{i}.pdf") for i in range(2)]
    wq.add(ws, old, pages_per_group=1, sample=0)
    work = Counting()
    run_workers(ws, work, workers=1, lease_s=30, progress=False)
    wq.add(ws, new, pages_per_group=1, sample=0)
    for item in wq.items(ws):  # progress noted on every item: the first part's as if left by a worker's last look
        wq.note_progress(ws, item.id, 0)
    ws.store.write("progress/kept.json", b"{}")  # not the queue's to retire: no part names it
    before = names(ws)
    first = {f"{folder}/{name}" for item in work.calls for folder, name in
             (("results", f"output_{item}.jsonl"), ("markdown", f"{item}.md"), ("pages", f"output_{item}.jsonl"),
              ("progress", f"{item}.json"))}
    assert first <= before

    assert wq.retire(ws, older_than_s=3600) == wq.Retired(0, 0)  # finished seconds ago: kept
    assert names(ws) == before
    retired = wq.retire(ws, older_than_s=0)
    assert retired == wq.Retired(1, 3)
    after = names(ws)
    # Everything the first part's items left is gone, its index part too (the second part's number counts from the
    # one above it); the live part and its items are as they were.
    assert after == before - first - {"index/000000000001.jsonl.gz"}
    assert "parts/000000000001.json" in after
    summary = json.loads(ws.store.read("parts/000000000001.json").data)
    assert summary["retired"] and summary["done_items"] == 3 and summary["counts"] == {"documents": 3, "pages": 3}
    assert "done" not in summary  # the records went with the items
    stats = workspace_stats(ws)
    assert (stats["items"], stats["done"], stats["retired"], stats["finished_parts"]) == (5, 3, 3, 0)
    assert [i.part for i in wq.items(ws)] == [2, 2]  # the retired part's index is gone with it
    assert wq.item_state(ws, sorted(work.calls)[0], 1).state == "retired"
    assert wq.retire(ws, older_than_s=0) == wq.Retired(0, 0)  # retired once

    run_workers(ws, work, workers=1, lease_s=30, progress=False)  # the live part converts as ever
    assert len(work.calls) == 5 and set(work.calls.values()) == {1}
    assert wq.retire(ws, older_than_s=0) == wq.Retired(1, 2)
    stats = workspace_stats(ws)
    assert (stats["items"], stats["done"], stats["retired"]) == (5, 5, 5)
    # The highest index part stays: the next addition is part 3, and the retired PDFs are new to it.
    assert [n for n in names(ws) if n.startswith("index/")] == ["index/000000000002.jsonl.gz"]
    assert wq.add(ws, [str(tmp_path / "third.pdf")], pages_per_group=1, sample=0).items[0].part == 3


class Listings:
    """A store that passes every call on and notes where each listing of a folder started."""

    def __init__(self, inner):
        self.inner, self.started = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def list(self, folder):
        self.started.append((folder, ""))
        return self.inner.list(folder)

    def list_after(self, folder, after=""):
        self.started.append((folder, after))
        return self.inner.list_after(folder, after)

    def tags(self, folder, after=""):
        self.started.append((folder, after))
        return self.inner.tags(folder, after)

    def read_many(self, names):
        self.started += [("read", n) for n in names]
        return self.inner.read_many(names)


def test_looks_list_finished_parts_from_the_oldest_part_not_retired(root, tmp_path):
    """A service's workspace holds a part for every job ever submitted: once retired, a job's index part goes (the
    highest only once a higher one is there), so the index's oldest part is the oldest not retired, and workers,
    retirement and stats' later looks list ``parts/`` from there, not every part ever finished; stats still
    counts every retired item, and nothing is converted twice."""
    ws = Workspace(root)
    work = Counting()
    for job in range(6):  # each job retired once done, as the service's sweep does, the last while the highest
        wq.add(ws, [f"s3://uploads/job_{job}.pdf"], pages_per_group=1, sample=0, unique=True)
        run_workers(ws, work, workers=1, lease_s=30, progress=False)
        if job != 4:
            assert wq.retire_item(ws, job + 1) == 1
    assert wq.retire_item(ws, 5) == 1  # retired after job 6 was queued: its index part goes at once
    assert ws.store.list("index") == ["000000000006.jsonl.gz"]
    cache = str(tmp_path / "cache")
    first = workspace_stats(ws, cache_dir=cache)
    assert (first["items"], first["done"], first["retired"]) == (6, 6, 6)

    wq.add(ws, ["s3://uploads/job_6.pdf"], pages_per_group=1, sample=0, unique=True)  # part 7; 6 stays retired
    assert wq.retire_item(ws, 7) == 0  # not converted yet
    seen = ws.store = Listings(ws.store)
    stats = workspace_stats(ws, cache_dir=cache)
    assert (stats["items"], stats["done"], stats["retired"]) == (7, 6, 6)
    assert ("parts", "000000000006") in seen.started and ("parts", "") not in seen.started
    assert ("index", "000000000006.jsonl.gz") in seen.started and ("index", "") not in seen.started  # what was added
    assert not [n for kind, n in seen.started if kind == "read" and n.startswith("parts/")]  # remembered

    seen.started.clear()
    WorkQueue(ws, "late")
    assert [s for s in seen.started if s[0] == "parts"] == [("parts", "000000000006")]
    run_workers(ws, work, workers=1, lease_s=30, progress=False)
    assert len(work.calls) == 7 and set(work.calls.values()) == {1}
    assert wq.retire_item(ws, 7) == 1
    assert ws.store.list("index") == ["000000000007.jsonl.gz"]  # 6 went once 7 was there
    stats = workspace_stats(ws, cache_dir=cache)
    assert (stats["items"], stats["done"], stats["retired"]) == (7, 7, 7)
    assert workspace_stats(Workspace(root))["retired"] == 7  # a first look, with nothing remembered, lists them all


def test_stats_remembering_a_workspace_made_again_at_the_same_place_counts_the_new_one(root, tmp_path):
    """What a look remembers is checked against the workspace (its index's last name): a workspace removed and made
    again at the same place, with other work, is counted as it is now, not as the cache saw it."""
    import shutil

    import s3fs

    cache = str(tmp_path / "cache")
    ws = Workspace(root)
    wq.add(ws, [f"s3://corpus/old_{i}.pdf" for i in range(3)], pages_per_group=1, sample=0)
    wq.add(ws, ["s3://corpus/old_3.pdf"], pages_per_group=1, sample=0)
    assert workspace_stats(ws, cache_dir=cache)["items"] == 4
    if root.startswith("s3://"):
        s3fs.S3FileSystem(skip_instance_cache=True).rm(root, recursive=True)
    else:
        shutil.rmtree(root)
    again = Workspace(root)
    wq.add(again, [f"s3://corpus/new_{i}.pdf" for i in range(2)], pages_per_group=1, sample=0)
    stats = workspace_stats(again, cache_dir=cache)
    assert (stats["items"], stats["done"]) == (2, 0)
    wq.add(again, ["s3://corpus/new_2.pdf"], pages_per_group=1, sample=0)
    assert workspace_stats(again, cache_dir=cache)["items"] == 3


def test_an_item_listed_free_before_its_part_finished_and_compacted_is_not_claimed_again(root):
    """A worker converts one item while others take and finish the rest of its part, and a look compacts it (its
    claims and done markers go): the items this worker's listing (or any listing made before) had seen free are not
    claimed again."""
    from olmocr.pipeline.queue.parts import compact

    ws = Workspace(root)
    wq.add(ws, [f"s3://corpus/doc_{i}.pdf" for i in range(6)], pages_per_group=1, sample=0)
    slow, fast, idle = WorkQueue(ws, "slow"), WorkQueue(ws, "fast"), WorkQueue(ws, "idle")
    held = slow.claim_next()  # its listing saw all six free
    idle._list_unclaimed()  # a listing, and its claim is made only after the part finished (items of a few ms)
    taken = []
    while (claim := fast.claim_next()) is not None:
        taken.append(claim)
    assert len(taken) == 5
    for claim in taken:
        assert fast.complete(claim, b"{}\n", {"pages": 1})
    assert slow.complete(held, b"{}\n", {"pages": 1})
    assert compact(ws.store, 1, wq.items(ws))  # a look (stats, another worker's) saw the part finished
    assert ws.store.list("claims") == [] and ws.store.list("done") == []
    assert slow.claim_next() is None and idle.claim_next() is None and ws.store.list("claims") == []
    assert wq.anything_left(ws) is False


def test_a_part_whose_last_items_finish_at_once_is_compacted_by_the_next_look(root):
    """Two workers each hold one of a part's last two items, each one's listing showing the other's still free, so
    neither finish lists the done markers: the part is finished, and the next look (finding each item done one by
    one) compacts it, so its claims and done markers do not stay in every later listing."""
    ws = Workspace(root)
    wq.add(ws, ["s3://corpus/a.pdf", "s3://corpus/b.pdf"], pages_per_group=1, sample=0)
    first, second = WorkQueue(ws, "first"), WorkQueue(ws, "second")
    one = first.claim_next()
    first._free.clear()  # as when its next create lost the race for the other item (its listing saw it free)
    second._list_unclaimed()
    two = second.claim_next()
    assert {one.item.id, two.item.id} == {i.id for i in wq.items(ws)}
    assert first.complete(one, b"{}\n", {"pages": 1}) and second.complete(two, b"{}\n", {"pages": 1})
    assert not ws.store.exists("parts/000000000001.json")  # neither finish saw the part finished
    assert first.claim_next() is None
    assert ws.store.exists("parts/000000000001.json")
    assert ws.store.list("claims") == [] and ws.store.list("done") == []


def test_stats_lists_live_parts_totals_and_reads_only_a_part_without_them(root):
    """Each addition names its part's totals (items, pages) in ``totals/``, so a first look of stats reads no index
    part; a part whose totals are missing (its adder was refused that write) is read; a finished part's go."""
    ws = Workspace(root)
    for n in range(3):
        wq.add(ws, [f"s3://corpus/p{n}_{i}.pdf" for i in range(4 + n)], pages_per_group=1, sample=0)
    assert sorted(ws.store.list("totals")) == [f"{p:012d}.{4 + p - 1}.{4 + p - 1}" for p in (1, 2, 3)]
    ws.store.delete(f"totals/{2:012d}.5.5")
    read, read_many = [], ws.store.read_many
    ws.store.read_many = lambda names: (read.extend(names), read_many(names))[1]
    stats = workspace_stats(ws)
    assert (stats["items"], stats["live_items"], stats["waiting"]) == (15, 15, 15)
    assert [n for n in read if n.startswith("index/")] == ["index/000000000002.jsonl.gz"]
    q = WorkQueue(ws, "one", lease_s=30)
    while (claim := q.claim_next()) is not None and claim.item.part == 1:
        assert q.complete(claim, b"{}\n", {"documents": 1})
    q.release(claim)
    assert ws.store.exists("parts/000000000001.json") and sorted(ws.store.list("totals")) == [f"{3:012d}.6.6"]
    stats = workspace_stats(ws)
    assert (stats["items"], stats["done"], stats["live_items"]) == (15, 4, 11)


def test_a_large_addition_is_consecutive_parts_and_racing_adders_keep_every_pdf_once(root, tmp_path, monkeypatch):
    import threading

    import olmocr.pipeline.queue.index as index

    monkeypatch.setattr(index, "ITEMS_PER_PART", 3)
    paths = [str(tmp_path / f"doc_{i:03d}.pdf") for i in range(40)]
    added = wq.add(Workspace(root), paths[:8], pages_per_group=1, sample=0)
    assert [i.part for i in added.items] == [1, 1, 1, 2, 2, 2, 3, 3] and added.items_new == 8
    start, results = threading.Barrier(4), []

    def add(k):
        start.wait()
        results.append(wq.add(Workspace(root), paths[k * 8: k * 8 + 16], pages_per_group=1, sample=0))

    threads = [threading.Thread(target=add, args=(k,)) for k in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    ws = Workspace(root)
    queued = [p for item in wq.items(ws) for p in item.pdfs]
    assert sorted(queued) == sorted(paths) and len(queued) == len(paths)
    assert sum(r.pdfs_new for r in results) == 32  # each PDF counted new by exactly one adder
    parts = sorted({i.part for i in wq.items(ws)})
    assert parts == list(range(1, len(parts) + 1)) and all(len(v) <= 3 for v in
                                                           [[i for i in wq.items(ws) if i.part == p] for p in parts])


def test_replicas_adding_one_job_at_a_time_each_get_a_part_of_their_own(root):
    """Two service replicas, each with its own view of the parts (listed once, then written one after the other),
    submit at once: every job is queued, in a part of its own."""
    import threading

    start, parts = threading.Barrier(2), {0: [], 1: []}

    def submit(replica):
        ws, index = Workspace(root), wq.Index(Workspace(root).store, names_only=True)
        start.wait()
        for k in range(15):
            added = wq.add(ws, [f"s3://uploads/r{replica}_{k}.pdf"], pages_per_group=2**62, sample=0, unique=True,
                           index=index)
            parts[replica] += [i.part for i in added.items]

    threads = [threading.Thread(target=submit, args=(r,)) for r in (0, 1)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    queued = wq.items(Workspace(root))
    assert len(queued) == 30 and sorted(parts[0] + parts[1]) == list(range(1, 31))
    assert sorted(p for i in queued for p in i.pdfs) == sorted(f"s3://uploads/r{r}_{k}.pdf" for r in (0, 1)
                                                             for k in range(15))


QUEUE_FOLDERS = {"claims", "done", "index", "totals", "parts", "progress", "cancelled"}
STORE_CALLS = {"list", "list_after", "tags", "read", "read_many", "write", "create", "replace", "delete", "exists"}


def queue_names(source: str) -> list[str]:
    """What a module names of the queue's objects: a store call on a queue folder or object, the old index's name
    anywhere, or an import of the queue's insides (its package is the one way in)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"import {m}" for m in modules if m.startswith("olmocr.pipeline.queue.")]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "work_index" in node.value:
            found.append(node.value)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STORE_CALLS
              and node.args):
            first = node.args[0]
            if isinstance(first, ast.JoinedStr) and first.values and isinstance(first.values[0], ast.Constant):
                first = first.values[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                if first.value.split("/", 1)[0] in QUEUE_FOLDERS:
                    found.append(f".{node.func.attr}({first.value!r})")
    return found


def test_no_module_outside_the_queue_names_a_queue_object():
    package = os.path.join(PROJECT_ROOT, "olmocr")
    queue = os.path.join(package, "pipeline", "queue")
    offenders = {}
    for folder, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", "node_modules")]
        if folder == queue or folder.startswith(queue + os.sep):
            continue
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                found = queue_names(open(path, encoding="utf-8").read())
                if found:
                    offenders[os.path.relpath(path, PROJECT_ROOT)] = found
    assert not offenders, offenders
    # The check sees each way a module could touch the queue behind its back.
    assert queue_names('store.list("claims")\nstore.delete(f"done/{item}.json")\n') == [
        ".list('claims')", ".delete('done/')"]
    assert queue_names("from olmocr.pipeline.queue.names import CLAIMS\nx = 'work_index.jsonl.gz'\n") == [
        "import olmocr.pipeline.queue.names", "work_index.jsonl.gz"]
    assert queue_names('store.read("results/x")\nfrom olmocr.pipeline.queue import add\n') == []
