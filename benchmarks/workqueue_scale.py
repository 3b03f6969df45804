"""What the queue's operations cost as its workspace grows: per addition, claim and finish, stats, and a worker's
memory, at 1,000 to 1,000,000 items queued, on a local folder and on a local S3 (moto, 127.0.0.1); then the same
operations on an in-memory store that counts S3's requests and bytes, in workspaces of up to 200M documents.

    python benchmarks/workqueue_scale.py [--sizes 1000 100000 1000000] [--stores local s3] [--sample 400]
                                         [--workers 8] [--single-adds 10000] [--simulate 2e6 2e7 2e8]

Per store and size, a fresh workspace:

- **Additions**: ``size`` one-PDF items queued in additions of 1,000 (one adder, its index kept between additions,
  as a long-running ``pipeline`` adding list after list); time and requests of the last 20 additions (median).
- **Claim and finish**: ``--workers`` worker processes (each a ``WorkQueue`` joining now) claim and finish
  ``--sample`` items between them (a result of one line each); the median time of a claim and of a finish over
  every worker, the store requests per item processed (the joins included), and the largest worker RSS.
- **Stats**: ``pipeline.stats`` of the workspace, time and requests: a first look (it reads every live index part
  and done marker) and a later one (what it read is remembered in its cache: it lists, and reads what is new).
- **One at a time**: ``--single-adds`` additions of one item each, as the service makes them (known new, one part
  each): the median time over the first and the last hundred.

Requests are counted as S3 bills them (a listing is one request a thousand names, ``read_many`` one request an
object) by a store wrapped around the real one. Each figure is printed beside its value at the smallest size
(the ratio is the goal's: within 1.5×).

**Simulated** (``--simulate``, documents): a workspace of that many documents of 10 pages, in items of 500 pages
(50 documents each), 1,000 items a part, as it stands two thirds through its run (the first two thirds of its
parts finished and compacted, the rest queued): the objects are there (names listed, contents made when read),
in memory. Eight workers join and process 2,000 items in turns; printed: requests and bytes per document processed,
index bytes a worker joining late reads, and the requests and bytes of one more addition of 1,000 items.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from olmocr.pipeline.store import Store, Versioned  # noqa: E402

PAGE = 1000  # names an S3 listing returns a request


class Counted(Store):
    """A store that passes every call to ``inner`` and counts requests (as S3 bills them) and bytes."""

    def __init__(self, inner: Store):
        self.inner, self.root = inner, inner.root
        self.requests: Counter = Counter()
        self.read_bytes = self.written_bytes = 0

    def total(self) -> int:
        return sum(self.requests.values())

    def url(self, name):
        return self.inner.url(name)

    def read(self, name):
        self.requests["get"] += 1
        found = self.inner.read(name)
        self.read_bytes += len(found.data) if found else 0
        return found

    def read_many(self, names):
        self.requests["get"] += len(names)
        found = self.inner.read_many(names)
        self.read_bytes += sum(map(len, found.values()))
        return found

    def version(self, name):
        self.requests["head"] += 1
        return self.inner.version(name)

    def exists(self, name):
        self.requests["head"] += 1
        return self.inner.exists(name)

    def _listed(self, names):
        self.requests["list"] += max(1, -(-len(names) // PAGE))
        return names

    def list(self, folder):
        return self._listed(self.inner.list(folder))

    def tags(self, folder, after=""):
        return self._listed(self.inner.tags(folder, after))

    def list_after(self, folder, after=""):
        return self._listed(self.inner.list_after(folder, after))

    def write(self, name, data):
        self.requests["put"] += 1
        self.written_bytes += len(data)
        return self.inner.write(name, data)

    def create(self, name, data):
        self.requests["put"] += 1
        self.written_bytes += len(data)
        return self.inner.create(name, data)

    def replace(self, name, data, tag):
        self.requests["put"] += 1
        self.written_bytes += len(data)
        return self.inner.replace(name, data, tag)

    def delete(self, name):
        self.requests["delete"] += 1
        return self.inner.delete(name)

    def confirm_root(self):
        return self.inner.confirm_root()


def workspace(root: str, endpoint: str | None):
    from olmocr.pipeline.store import open_store
    from olmocr.pipeline.workspace import Workspace
    from olmocr.utils.io import Access

    store = Counted(open_store(root, Access(endpoint=endpoint)))
    return Workspace(root, store=store)


def pdf_names(start: int, count: int) -> list[str]:
    return [f"s3://corpus/pdfs/{i // 1000:05d}/doc_{i:09d}.pdf" for i in range(start, start + count)]


# --- one worker process --------------------------------------------------------------------------------------

def work(root: str, endpoint: str | None, quota: int, out) -> None:
    from olmocr.pipeline.queue import WorkQueue

    ws = workspace(root, endpoint)
    queue = WorkQueue(ws, f"bench{os.getpid()}", lease_s=600)
    claim_s, finish_s = [], []
    while len(finish_s) < quota:
        began = time.perf_counter()
        claim = queue.claim_next()
        if claim is None:
            break
        claim_s.append(time.perf_counter() - began)
        began = time.perf_counter()
        queue.complete(claim, json.dumps({"item": claim.item.id}).encode() + b"\n", {"documents": 1, "pages": 1})
        finish_s.append(time.perf_counter() - began)
    out.put({"claim_s": claim_s, "finish_s": finish_s, "requests": ws.store.total(), "rss_mb": peak_rss_mb()})


def peak_rss_mb() -> float:
    """This process's peak resident memory since it started its program (VmHWM; getrusage's maxrss would count the
    parent's pages a spawned process shared before its exec)."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024


# --- one size on one store -----------------------------------------------------------------------------------

def measure(root: str, endpoint: str | None, size: int, args) -> dict:
    from olmocr.pipeline import queue
    from olmocr.pipeline.stats import workspace_stats

    ws = workspace(root, endpoint)
    adder = queue.Index(ws.store, pdfs=set())
    add_s, add_requests = [], []
    for start in range(0, size, 1000):
        before, began = ws.store.total(), time.perf_counter()
        queue.add(ws, pdf_names(start, min(1000, size - start)), pages_per_group=1, sample=0, index=adder)
        add_s.append(time.perf_counter() - began)
        add_requests.append(ws.store.total() - before)
    del adder

    context = multiprocessing.get_context("spawn")  # a clean process: its RSS is a worker's, not this one's
    out = context.Queue()
    quota = -(-args.sample // args.workers)
    procs = [context.Process(target=work, args=(root, endpoint, quota, out)) for _ in range(args.workers)]
    began = time.perf_counter()
    [p.start() for p in procs]
    rows = [out.get(timeout=3600) for _ in procs]
    [p.join() for p in procs]
    wall = time.perf_counter() - began
    processed = sum(len(r["finish_s"]) for r in rows)

    # A first look (nothing remembered: every live index part read) and a later one (what it read remembered).
    cache = tempfile.mkdtemp(prefix="stats-", dir=args.scratch)
    looks = []
    for _ in range(2):
        stats_store = workspace(root, endpoint)
        began = time.perf_counter()
        stats = workspace_stats(stats_store, cache_dir=cache)
        looks.append((time.perf_counter() - began, stats_store.store.total()))
        if stats["done"] != processed or stats["items"] != size:
            raise RuntimeError(f"stats says {stats['done']} of {stats['items']} done, the workers finished {processed} "
                               f"of {size}")

    # The control: what the store itself takes to list a folder with nothing in it, beside everything there is (a
    # server that lists by scanning every key, as moto does, grows here where S3 does not).
    empty = []
    for _ in range(20):
        began = time.perf_counter()
        ws.store.list("nothing-here")
        empty.append(time.perf_counter() - began)

    single = workspace(root, endpoint)
    parts = queue.Index(single.store, names_only=True)
    one_s = []
    for k in range(args.single_adds):
        began = time.perf_counter()
        queue.add(single, [f"s3://uploads/job_{k:07d}.pdf"], pages_per_group=2**62, sample=0, unique=True, index=parts)
        one_s.append(time.perf_counter() - began)
    hundred = min(100, len(one_s))
    return {
        "add_ms": 1000 * statistics.median(add_s[-20:]), "add_requests": statistics.median(add_requests[-20:]),
        "claim_ms": 1000 * statistics.median(t for r in rows for t in r["claim_s"]),
        "finish_ms": 1000 * statistics.median(t for r in rows for t in r["finish_s"]),
        "requests_per_item": sum(r["requests"] for r in rows) / max(processed, 1),
        "rss_mb": max(r["rss_mb"] for r in rows), "stats_first_s": looks[0][0], "stats_first_requests": looks[0][1],
        "stats_s": looks[1][0], "stats_requests": looks[1][1],
        "one_first_ms": 1000 * statistics.median(one_s[:hundred]) if one_s else float("nan"),
        "one_last_ms": 1000 * statistics.median(one_s[-hundred:]) if one_s else float("nan"),
        "processed": processed, "claims_s": processed / wall, "empty_list_ms": 1000 * statistics.median(empty),
    }


FIGURES = [("add_ms", "an addition of 1,000 items, ms", "{:.1f}"), ("add_requests", "  its requests", "{:.0f}"),
           ("claim_ms", "a claim, ms (median)", "{:.2f}"), ("finish_ms", "a finish, ms (median)", "{:.2f}"),
           ("requests_per_item", "requests per item processed", "{:.2f}"),
           ("rss_mb", "a worker's RSS, MB (largest)", "{:.0f}"),
           ("stats_first_s", "pipeline.stats, a first look, s", "{:.4f}"), ("stats_first_requests", "  its requests", "{:.0f}"),
           ("stats_s", "pipeline.stats, a later look, s", "{:.4f}"), ("stats_requests", "  its requests", "{:.0f}"),
           ("one_first_ms", "a one-item addition, first 100, ms", "{:.2f}"),
           ("one_last_ms", "a one-item addition, last 100, ms", "{:.2f}"),
           ("empty_list_ms", "control: the store lists an empty folder, ms", "{:.3f}")]


def table(store: str, results: dict[int, dict], args) -> None:
    sizes = sorted(results)
    base = results[sizes[0]]
    print(f"\n{store}: {args.workers} worker processes, {args.sample} items claimed and finished per size")
    print(f"{'':<40}" + "".join(f"{s:>22,}" for s in sizes))
    for key, label, fmt in FIGURES:
        cells = []
        for s in sizes:
            value = results[s][key]
            ratio = value / base[key] if base[key] else float("nan")
            cells.append(f"{fmt.format(value)} ({ratio:.2f}×)" if s != sizes[0] else fmt.format(value))
        print(f"{label:<40}" + "".join(f"{c:>22}" for c in cells))
    print(f"{f'claims/s ({args.workers} processes, with joins)':<40}" + "".join(f"{results[s]['claims_s']:>22.1f}" for s in sizes))


# --- the simulation ------------------------------------------------------------------------------------------

class Memory(Store):
    """A workspace in memory: objects in a dict, and index parts and part summaries that exist by name, their
    contents made when first read (a 200M-document workspace's index would not fit here). Conditional writes as
    S3 applies them; one thread."""

    def __init__(self, made: dict[str, object]):
        self.root = "mem://ws"
        self.objects: dict[str, tuple[bytes, int]] = {}
        self.made = made  # name -> a function that makes its bytes
        self.serial = 0

    def _get(self, name):
        if name not in self.objects and name in self.made:
            self._put(name, self.made.pop(name)())
        return self.objects.get(name)

    def _put(self, name, data):
        self.serial += 1
        self.objects[name] = (data, self.serial)

    def read(self, name):
        found = self._get(name)
        return None if found is None else Versioned(found[0], str(found[1]))

    def read_many(self, names):
        return {n: f[0] for n in names if (f := self._get(n)) is not None}

    def version(self, name):
        found = self._get(name)
        return None if found is None else str(found[1])

    def exists(self, name):
        return name in self.objects or name in self.made

    def _names(self, folder):
        prefix = f"{folder.rstrip('/')}/" if folder else ""
        return sorted({n[len(prefix):] for n in (*self.objects, *self.made) if n.startswith(prefix)
                       and "/" not in n[len(prefix):]})

    def list(self, folder):
        return self._names(folder)

    def tags(self, folder, after=""):
        return {n: self.version(f"{folder}/{n}") for n in self._names(folder) if n > after}

    def list_after(self, folder, after=""):
        return [n for n in self._names(folder) if n > after]

    def write(self, name, data):
        self._put(name, data)

    def create(self, name, data):
        if self.exists(name):
            return None
        self._put(name, data)
        return str(self.serial)

    def replace(self, name, data, tag):
        found = self._get(name)
        if found is None or str(found[1]) != tag:
            return None
        self._put(name, data)
        return str(self.serial)

    def delete(self, name):
        self.objects.pop(name, None)
        self.made.pop(name, None)


DOCS_PER_ITEM, ITEMS_PER_PART = 50, 1000


def simulate(documents: int, sample: int = 2000, workers: int = 8) -> dict:
    from olmocr.pipeline import queue
    from olmocr.pipeline.queue.names import part_name, summary_name  # the benchmark lays out a workspace as the queue does
    from olmocr.pipeline.workspace import Workspace

    items = -(-documents // DOCS_PER_ITEM)
    parts = -(-items // ITEMS_PER_PART)
    finished = parts * 2 // 3

    def index_part(part):
        def make():
            first = (part - 1) * ITEMS_PER_PART * DOCS_PER_ITEM
            rows = []
            for k in range(ITEMS_PER_PART):
                pdfs = pdf_names(first + k * DOCS_PER_ITEM, DOCS_PER_ITEM)
                rows.append(json.dumps({"id": queue.item_id(pdfs), "pdfs": pdfs, "pages": 500}))
            return gzip.compress(("\n".join(rows) + "\n").encode())
        return make

    def summary(part):
        return lambda: json.dumps({"part": part, "items": ITEMS_PER_PART, "finished": time.time() - 60,
                                   "done": [], "cancelled": [], "retired": None}).encode()

    made = {part_name(p): index_part(p) for p in range(1, parts + 1)}
    made.update({summary_name(p): summary(p) for p in range(1, finished + 1)})
    store = Counted(Memory(made))
    ws = Workspace("mem://ws", store=store)
    queues = [queue.WorkQueue(ws, f"sim{k}", lease_s=600) for k in range(workers)]
    joined_bytes = queues[-1].index.read_bytes
    before, before_bytes = store.total(), store.read_bytes + store.written_bytes
    done, idle = 0, 0
    while done < sample and idle < workers:
        idle = 0
        for q in queues:
            claim = q.claim_next()
            if claim is None:
                idle += 1
                continue
            q.complete(claim, b'{"item": 1}\n', {"documents": DOCS_PER_ITEM})
            done += 1
    per_doc_requests = (store.total() - before) / (done * DOCS_PER_ITEM)
    per_doc_bytes = (store.read_bytes + store.written_bytes - before_bytes) / (done * DOCS_PER_ITEM)
    late = queue.WorkQueue(ws, "late", lease_s=600)
    before, before_bytes = store.total(), store.read_bytes + store.written_bytes
    queue.add(ws, pdf_names(10**12, ITEMS_PER_PART * DOCS_PER_ITEM), pages_per_group=500, sample=0, unique=True)
    return {"documents": documents, "parts": parts, "live_parts": parts - finished,
            "requests_per_doc": per_doc_requests, "bytes_per_doc": per_doc_bytes,
            "join_index_mb": late.index.read_bytes / 2**20, "first_join_index_mb": joined_bytes / 2**20,
            "add_requests": store.total() - before, "add_mb": (store.read_bytes + store.written_bytes - before_bytes) / 2**20}


# --- main ----------------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000, 1_000_000])
    parser.add_argument("--stores", nargs="+", default=["local", "s3"], choices=["local", "s3"])
    parser.add_argument("--sample", type=int, default=400)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--single-adds", type=int, default=10_000)
    parser.add_argument("--simulate", type=float, nargs="*", default=[2e6, 2e7, 2e8])
    args = parser.parse_args()

    scratch = args.scratch = tempfile.mkdtemp(prefix="workqueue-scale-")
    try:
        for store in args.stores:
            server = None
            if store == "s3":
                sys.path.insert(0, os.path.join(ROOT, "tests"))
                from support.s3server import S3Server  # the test tools, tests/support/

                server = S3Server().start()
                os.environ.update(server.environment())  # its test credentials, for this process and the workers
                server.make_bucket("scale")
            results = {}
            for size in args.sizes:
                root = f"s3://scale/ws{size}" if server else os.path.join(scratch, f"ws{size}")
                results[size] = measure(root, server.endpoint if server else None, size, args)
                print(f"{store} {size:,} items: " + ", ".join(f"{k} {v:.3g}" for k, v in results[size].items()),
                      flush=True)
            table(store, results, args)
            if server is not None:
                server.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    if args.simulate:
        print(f"\nsimulated in memory: documents of 10 pages, {DOCS_PER_ITEM} an item (500 pages), {ITEMS_PER_PART} "
              "items a part, two thirds of the parts finished; 8 workers process 2,000 items")
        print(f"{'documents':>14} {'parts':>7} {'live':>6} {'requests/doc':>13} {'bytes/doc':>10} "
              f"{'late join index MB':>19} {'one addition: requests':>23} {'MB':>6}")
        for documents in args.simulate:
            row = simulate(int(documents))
            print(f"{row['documents']:>14,} {row['parts']:>7,} {row['live_parts']:>6,} {row['requests_per_doc']:>13.4f} "
                  f"{row['bytes_per_doc']:>10.1f} {row['join_index_mb']:>19.2f} {row['add_requests']:>23} "
                  f"{row['add_mb']:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
