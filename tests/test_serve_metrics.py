"""The service's figures: each way a job's conversion ends is counted under its own outcome; and its threads
kept to one glibc malloc arena (its memory flat over thousands of jobs: benchmarks/serve_load.py)."""

from __future__ import annotations

import re

import pytest

from olmocr.pipeline.failures import Cancelled, ServerFailed, StopWork, Unavailable
from olmocr.pipeline.worker import Output
from olmocr.pipeline.queue import Item
from olmocr.serve.metrics import Metrics


def figures(metrics: Metrics) -> dict[str, float]:
    """Every sample of the exposition (``name{labels}`` → value), as a scraper reads it."""
    text = metrics.exposition().decode()
    return {m[1]: float(m[2]) for m in re.finditer(r"^(\S+) (\S+)$", text, re.M) if not m[1].startswith("#")}


def test_each_way_a_conversion_ends_is_counted_apart():
    metrics = Metrics(waiting=lambda: 7)
    item = Item("a" * 40, ("doc.pdf",), 3)

    def ending(how):
        def process(_):
            if isinstance(how, BaseException):
                raise how
            return how
        return metrics.counting(process)

    ending(Output(b"{}\n", {"pages": 3, "fallback_pages": 1}))(item)
    for exc in (Cancelled("cancelled after 1 page(s)"), ServerFailed("server answered 500"),
                Unavailable("storage down"), ValueError("not a PDF"), StopWork("the model server is gone")):
        with pytest.raises(type(exc)):
            ending(exc)(item)
    got = figures(metrics)
    assert {outcome: got[f'olmocr_serve_items_total{{outcome="{outcome}"}}']
            for outcome in ("done", "cancelled", "unavailable", "failed")} == {
        "done": 1, "cancelled": 1, "unavailable": 2, "failed": 1}  # StopWork is the run's, not a job's
    assert got["olmocr_serve_model_server_errors_total"] == 1  # the server's failure, not the storage's
    assert (got['olmocr_serve_pages_total{by="model"}'], got['olmocr_serve_pages_total{by="fallback"}']) == (2, 1)
    assert got["olmocr_serve_convert_seconds_count"] == 1  # only what converted
    assert got["olmocr_serve_jobs_waiting"] == 7


ARENAS = """
import ctypes, re, sys, tempfile, threading
if sys.argv[1] == "one":
    from olmocr.serve.__main__ import fewer_malloc_arenas
    fewer_malloc_arenas()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = libc.fopen.restype = ctypes.c_void_p
held, together = [], threading.Barrier(5)
def allocate():  # glibc gives a thread an arena at its first malloc, a new one while the limit allows
    held.append(libc.malloc(64 * 1024))
    together.wait()
threads = [threading.Thread(target=allocate) for _ in range(4)]
for thread in threads:
    thread.start()
together.wait()
with tempfile.NamedTemporaryFile() as out:
    fp = ctypes.c_void_p(libc.fopen(out.name.encode(), b"w"))
    libc.malloc_info(0, fp)
    libc.fclose(fp)
    print(len(re.findall("<heap nr=", open(out.name).read())))
"""


def test_the_service_keeps_its_threads_to_one_malloc_arena():
    """After fewer_malloc_arenas() (the service's first act), four threads allocating at once share the main
    arena, where glibc would give each one of its own (malloc_info lists the arenas)."""
    import subprocess
    import sys

    from olmocr.config import PROJECT_ROOT

    def arenas(how: str) -> int:
        proc = subprocess.run([sys.executable, "-c", ARENAS, how], cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=60, check=True)
        return int(proc.stdout)

    assert (arenas("default"), arenas("one")) == (5, 1)
