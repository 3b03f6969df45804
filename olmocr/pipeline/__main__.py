"""python -m olmocr.pipeline — queue PDFs in a shared workspace and work on them.

``pdfs=[…]`` (PDFs, images, tar archives of them; folders, globs, s3:// prefixes and globs, text files
listing them) are added to the workspace's index in items of about ``pages_per_group`` pages; adding is idempotent and safe from many machines at
once. Then ``workers`` threads claim items one at a time (exactly once, through conditional writes on
the workspace: a local folder or s3://bucket/prefix, reached with ``workspace_access``; PDFs with
``pdf_access``), run ``work`` on each, and write ``results/output_<item>.jsonl`` and a done marker.
Failures of an item's own count against it; failures from outside it (storage, credentials, network,
server, tools) send it back to the queue to wait, and a worker for which nothing works stops with the
cause after ``queue.give_up_after_s`` (docs/pipeline.md: Failures). Start it on as many
machines as you like; each stops when nothing is left. ``python -m olmocr.pipeline.stats workspace=…``
shows progress.

``work=ocr`` (``ocr_tiny`` by default) converts pages through the model server ``server=`` starts
(``transformers``, ``vllm``) or reaches (``external``), serving ``model=``, into Dolma JSONL documents
and markdown; ``work=inventory`` lists the PDFs instead.
"""

from __future__ import annotations

import contextlib
import logging
import os

from omegaconf import DictConfig

import olmocr.pipeline.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import Launch, stage
from olmocr.config import build
from olmocr.data.presented import presents_as_trained
from olmocr.errors import UserError

log = logging.getLogger("olmocr.pipeline")


def add_pdfs(workspace, pdfs: list[str], cfg: DictConfig, pdf_access) -> dict:
    """Queue ``pdfs`` in ``workspace`` (what was added, for the run's summary)."""
    from olmocr.faults import Unreachable
    from olmocr.pipeline.failures import StopWork
    from olmocr.pipeline.inputs import expand
    from olmocr.pipeline.queue import add
    from olmocr.pipeline.worker import Breaker, when_answering

    # Listing remote PDFs and writing the index in a brownout wait as a worker does for its workspace.
    q = cfg.queue
    found = expand(pdfs, pdf_access, wait_s=q.give_up_after_s)
    breaker = Breaker(q.pause_after, q.give_up_after_s, q.retry_wait_s, q.retry_wait_max_s)
    try:
        added = add(workspace, found, pages_per_group=cfg.pages_per_group, sample=cfg.sample, seed=cfg.seed,
                    pdf_access=pdf_access,
                    wait_out=lambda call: when_answering(call, breaker, f"workspace {workspace.root}"))
    except StopWork as exc:
        raise Unreachable(f"workspace {workspace.root}: adding {len(found)} PDFs: {exc}; run again to add them "
                          "(PDFs queued already are skipped)") from None
    log.info("added %d PDFs (%d already queued) in %d items of ~%d pages (%d in total); page counts sampled from "
             "%d PDFs, %d of them unreadable", added.pdfs_new, added.pdfs_known, added.items_new, cfg.pages_per_group,
             added.items_total, added.sampled, added.unreadable_in_sample)
    return {k: v for k, v in vars(added).items() if k != "items"}


_QUEUED: set[tuple[str, tuple[str, ...]]] = set()  # what this process queued: jobs of one sweep share it


def queue_before_submitting(cfg: DictConfig) -> None:
    """Add ``pdfs=`` to the workspace here, once, before a cluster job's workers start (they only work);
    the jobs of a sweep (``-m replica='range(N)'``) queue their PDFs once between them."""
    from olmocr.faults import named, storage_fault, store_errors
    from olmocr.pipeline.workspace import Workspace
    from olmocr.utils.io import Access

    if not cfg.pdfs:
        return
    if cfg.workspace is None:
        raise UserError("workspace: a cluster job's workers share a workspace (s3://bucket/prefix, or a folder every "
                        "machine mounts); set workspace=")
    key = (cfg.workspace, tuple(cfg.pdfs))
    if key in _QUEUED:
        return
    try:
        add_pdfs(Workspace(cfg.workspace, Access(**cfg.workspace_access)), list(cfg.pdfs), cfg, Access(**cfg.pdf_access))
    except store_errors() as exc:
        raise storage_fault(exc, f"workspace {cfg.workspace}: {named(exc)}") from exc
    _QUEUED.add(key)


# Workers are independent (one process per replica, no rendezvous); the PDFs are queued before submitting.
LAUNCH = Launch(prepare=queue_before_submitting, prepared=("pdfs",))


def check(cfg: DictConfig) -> None:
    from olmocr.pipeline.queue import check_queue

    if cfg.workers == 0 and not cfg.pdfs and cfg.workspace is not None:
        raise UserError("workers=0 only adds PDFs, and pdfs= names none: give pdfs=[…], or workers=1 or more to work")
    check_queue(cfg.queue.retry_wait_s, cfg.queue.retry_wait_max_s)


@stage("pipeline", launch=LAUNCH, check=check, present=presents_as_trained({"convert.steps": "model.name_or_path"}))
def run(cfg: DictConfig, output_dir: str) -> dict:
    from olmocr.formats.pdf import MissingTool
    from olmocr.pipeline.failures import StopWork
    from olmocr.pipeline import queue
    from olmocr.pipeline.queue import anything_left
    from olmocr.faults import Unreachable, named, storage_fault, store_errors
    from olmocr.pipeline.worker import Breaker, WorkReport, run_workers, when_answering
    from olmocr.pipeline.workspace import Workspace
    from olmocr.utils.io import Access
    from olmocr.utils.runinfo import write_run_info

    root, pdfs = cfg.workspace, list(cfg.pdfs)
    if root is None:  # a sample run; a real workspace never gets the sample PDFs by default
        root, pdfs = cfg.paths.sample_workspace, pdfs or [os.path.join(cfg.paths.sample_data, "eval", "pdfs")]
    pdf_access = Access(**cfg.pdf_access)
    summary: dict = {"workspace": root}
    try:
        workspace = Workspace(root, Access(**cfg.workspace_access))
        # Built (and so checked) before any PDF is read or any server started.
        work = None
        if cfg.workers:
            server = build(cfg.server, model=build(cfg.model))
            work = build(cfg.work, converter=build(cfg.convert, server=server, log_dir=output_dir),
                         workspace=workspace, progress=cfg.progress, pdf_access=pdf_access,
                         filter=None if cfg.filter is None else build(cfg.filter))
        if pdfs:
            summary["added"] = add_pdfs(workspace, pdfs, cfg, pdf_access)
        if work is not None:
            # Before a server starts or an item is claimed; a workspace that does not answer is waited for.
            q = cfg.queue
            breaker = Breaker(q.pause_after, q.give_up_after_s, q.retry_wait_s, q.retry_wait_max_s)
            when_answering(lambda: queue.check(workspace, writable=True), breaker, "the workspace")
            # Work that needs a model server starts it here and stops it at the end, whatever happens; not for a
            # workspace with nothing left to do (a 7B takes minutes to load, per replica).
            serves = hasattr(work, "__enter__")
            if serves and not when_answering(lambda: anything_left(workspace), breaker, "the workspace"):
                log.info("%s: every item is done or given up, nothing to convert; no model server started", root)
                report = WorkReport()
            else:
                with work if serves else contextlib.nullcontext():
                    report = run_workers(workspace, work, workers=cfg.workers, replica=cfg.replica, lease_s=q.lease_s,
                                         max_failures=q.max_failures, retry_wait_s=q.retry_wait_s,
                                         retry_wait_max_s=q.retry_wait_max_s, pause_after=q.pause_after,
                                         give_up_after_s=q.give_up_after_s, linger=q.linger, poll_s=q.poll_s,
                                         progress=cfg.progress)
            summary["work"] = {**{k: v for k, v in vars(report).items() if k != "counts"},
                               "counts": dict(report.counts)}
            if hasattr(work, "converter"):
                summary["work"]["server_restarts"] = work.converter.server.restarts
            log.info("finished %d items in %.1f s (%s); %d failed, %d given back after failures from outside them, "
                     "%d taken over from dead workers, %d lost to others while stalled, %d finished twice",
                     report.done, report.seconds, ", ".join(f"{v} {k}" for k, v in sorted(report.counts.items()))
                     or "nothing", report.failed, report.unavailable, report.taken_over, report.lost,
                     report.duplicates)
        if cfg.retire_after_h is not None:
            retired = queue.retire(workspace, cfg.retire_after_h * 3600)
            summary["retired"] = {"parts": retired.parts, "items": retired.items}
    except store_errors() as exc:
        raise storage_fault(exc, f"workspace {root}: {named(exc)}") from exc
    except MissingTool as exc:
        raise UserError(str(exc)) from None
    except StopWork as exc:
        unreleased = getattr(exc, "unreleased", 0)
        raise Unreachable(f"{exc} (" + (f"{unreleased} item(s) this worker held could not be given back: they return to "
                                        f"the queue when their claims expire, within queue.lease_s={cfg.queue.lease_s:g} s)"
                                        if unreleased else "the items this worker held go back to the queue)")) from exc
    write_run_info(output_dir, summary=summary)
    return summary


if __name__ == "__main__":
    run.main()
