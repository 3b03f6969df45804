"""The service's sweep of expired jobs on a local folder and on a real S3 API (moto): a job done, one that failed and
one cancelled each expire with nothing of them left but their record (moved to ``expired/``) and their part's
totals; a sweep reads each job record once and asks the queue only about jobs not known finished, so its cost
follows the jobs kept; a workspace whose expired records are still in ``jobs/`` is read as it is."""

from __future__ import annotations

import glob
import json
import os

import pytest

from olmocr.config import PROJECT_ROOT
from olmocr.pipeline.stats import workspace_stats
from olmocr.pipeline.worker import Output, run_workers
from olmocr.pipeline.workspace import Workspace
from olmocr.serve.documents import Refused
from olmocr.serve.jobs import Jobs

PDF = open(sorted(glob.glob(os.path.join(PROJECT_ROOT, "data", "sample", "eval", "pdfs", "*.pdf")))[0], "rb").read()


def service_jobs(ws: Workspace, keep_s: float) -> Jobs:
    return Jobs(ws, max_bytes=10 << 20, max_pages=50, max_waiting=100, keep_s=keep_s, max_archive_members=10,
                max_unpacked=10 << 20)


def submit(jobs: Jobs, n: int) -> list:
    made = []
    for k in range(n):
        admitted = jobs.admit()
        try:
            made.append(jobs.submit(admitted, PDF, filename=f"doc_{k}.pdf"))
        finally:
            jobs.leave(admitted)
    return made


def convert(ws: Workspace, failing: set[str]) -> None:
    """Each item converted once, as a worker of the service would write it; those in ``failing`` raise."""

    def process(item) -> Output:
        if item.id in failing:
            raise RuntimeError("this page cannot be read")
        files = {f"markdown/{item.id}.md": b"# text\n"}
        return Output(json.dumps({"source": item.pdfs[0]}).encode() + b"\n", {"documents": 1, "pages": 1}, files)

    run_workers(ws, process, max_failures=1, retry_wait_s=0.0, progress=False)


class Reads:
    """The names ``ws.store`` reads, from here on."""

    def __init__(self, ws: Workspace):
        self.names: list[str] = []
        read = ws.store.read

        def counted(name):
            self.names.append(name)
            return read(name)

        ws.store.read = counted

    def take(self) -> list[str]:
        taken, self.names[:] = list(self.names), []
        return taken


def test_a_sweep_reads_each_job_once_and_asks_the_queue_only_about_jobs_not_finished(workspace_root):
    ws = Workspace(workspace_root)
    jobs = service_jobs(ws, keep_s=3600)
    made = submit(jobs, 4)
    for job in made:  # submitted two hours ago: older than keep_s, so the sweep asks the queue whether each finished
        record = json.loads(ws.store.read(f"jobs/{job.id}.json").data)
        ws.store.write(f"jobs/{job.id}.json", json.dumps({**record, "submitted": record["submitted"] - 7200}).encode())
    reads = Reads(ws)
    assert jobs.sweep() == 0
    first = reads.take()
    assert sorted(n for n in first if n.startswith("jobs/")) == sorted(f"jobs/{j.id}.json" for j in made)
    assert jobs.sweep() == 0  # nothing new: no job record read again; the queue asked about the 4 still queued
    second = reads.take()
    assert not [n for n in second if n.startswith("jobs/")] and second
    convert(ws, failing=set())
    reads.take()
    assert jobs.sweep() == 0  # learns that each finished, and when (now: kept an hour from it)
    assert {n.split("/")[0] for n in reads.take()} >= {"done"}
    assert jobs.sweep() == 0 and reads.take() == []  # nothing read at all
    later = submit(jobs, 1)
    jobs.sweep()
    assert [n for n in reads.take() if n.startswith("jobs/")] == [f"jobs/{later[0].id}.json"]


def test_done_failed_and_cancelled_jobs_expire_with_nothing_left_but_their_records_and_totals(workspace_root):
    ws = Workspace(workspace_root)
    jobs = service_jobs(ws, keep_s=0.0)
    done, failed, cancelled = submit(jobs, 3)
    jobs.cancel(cancelled)
    convert(ws, failing={failed.item})
    assert [jobs.status(j)["status"] for j in (done, failed, cancelled)] == ["done", "failed", "cancelled"]
    assert jobs.sweep() == 3
    for job in (done, failed, cancelled):
        with pytest.raises(Refused) as refused:
            jobs.status(jobs.find(job.id))
        assert refused.value.status == 410
    assert ws.store.list("jobs") == [] and sorted(ws.store.list("expired")) == sorted(
        f"{j.id}.json" for j in (done, failed, cancelled))
    left = {folder: ws.store.list(folder) for folder in ("claims", "done", "uploads", "results", "markdown",
                                                          "progress", "cancelled")}
    assert left == {folder: [] for folder in left}
    summaries = [json.loads(ws.store.read(f"parts/{name}").data) for name in ws.store.list("parts")]
    assert sorted((s["done_items"], s["cancelled_items"], s["failed_items"]) for s in summaries) == [
        (0, 0, 1), (0, 1, 0), (1, 0, 0)] and all(s["retired"] for s in summaries)
    stats = workspace_stats(ws)
    assert (stats["items"], stats["retired"], stats["given_up"], stats["live_items"]) == (3, 3, 0, 0)
    assert jobs.sweep() == 0  # expired once


def test_expired_records_left_in_jobs_by_an_older_service_are_moved_and_still_say_expired(tmp_path):
    ws = Workspace(str(tmp_path / "workspace"))
    jobs = service_jobs(ws, keep_s=3600)
    (old,) = submit(jobs, 1)
    record = json.loads(ws.store.read(f"jobs/{old.id}.json").data)
    ws.store.write(f"jobs/{old.id}.json", json.dumps({**record, "expired": 1.0}).encode())
    ws.store.write("jobs/not-a-job.json", b"[1, 2]")  # not a record: said and left alone
    assert service_jobs(ws, keep_s=3600).sweep() == 0
    assert ws.store.list("jobs") == ["not-a-job.json"] and ws.store.list("expired") == [f"{old.id}.json"]
    assert jobs.get(old.id).expired == 1.0
