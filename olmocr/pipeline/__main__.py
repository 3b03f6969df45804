"""python -m olmocr.pipeline — queue PDFs in a shared workspace and work on them.

``pdfs=[…]`` (paths, folders, globs, s3:// globs, text files listing them) are added to the workspace's
index in items of about ``pages_per_group`` pages; adding is idempotent and safe from many machines at
once. Then ``workers`` threads claim items one at a time (exactly once, through conditional writes on
the workspace: a local folder or s3://bucket/prefix, with ``s3_endpoint`` for MinIO and the like), run
``work`` on each, and write ``results/output_<item>.jsonl`` and a done marker. Start it on as many
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
from olmocr.cli import stage
from olmocr.config import build

log = logging.getLogger("olmocr.pipeline")


@stage("pipeline")
def run(cfg: DictConfig, output_dir: str) -> dict:
    from olmocr.pipeline.inputs import expand
    from olmocr.pipeline.store import store_errors
    from olmocr.pipeline.worker import StopWork, run_workers
    from olmocr.pipeline.workspace import Workspace
    from olmocr.utils.runinfo import write_run_info

    if cfg.workers < 0:
        raise ValueError(f"workers: must be 0 (only add PDFs) or more, got {cfg.workers}")
    if cfg.s3_endpoint:
        # Every S3 client of this process (the workspace's, and reading s3:// PDFs) goes to this endpoint.
        os.environ["AWS_ENDPOINT_URL"] = cfg.s3_endpoint
    root, pdfs = cfg.workspace, list(cfg.pdfs)
    if root is None:  # a sample run; a real workspace never gets the sample PDFs by default
        root, pdfs = cfg.paths.sample_workspace, pdfs or [os.path.join(cfg.paths.sample_data, "eval", "pdfs")]
    summary: dict = {"workspace": root}
    try:
        workspace = Workspace(root)
        # Built (and so checked) before any PDF is read or any server started.
        work = None
        if cfg.workers:
            server = build(cfg.server, model=build(cfg.model))
            work = build(cfg.work, converter=build(cfg.convert, server=server, log_dir=output_dir),
                         workspace=workspace, progress=cfg.progress)
        if pdfs:
            added = workspace.add(expand(pdfs), pages_per_group=cfg.pages_per_group, sample=cfg.sample,
                                  seed=cfg.seed)
            log.info("added %d PDFs (%d already queued) in %d items of ~%d pages (%d in total); page counts "
                     "sampled from %d PDFs, %d of them unreadable", added.pdfs_new, added.pdfs_known,
                     added.items_new, cfg.pages_per_group, added.items_total, added.sampled,
                     added.unreadable_in_sample)
            summary["added"] = vars(added)
        if work is not None:
            # Work that needs a model server starts it here and stops it at the end, whatever happens.
            with work if hasattr(work, "__enter__") else contextlib.nullcontext():
                report = run_workers(workspace, work, workers=cfg.workers, replica=cfg.replica,
                                     lease_s=cfg.queue.lease_s, max_failures=cfg.queue.max_failures,
                                     linger=cfg.queue.linger, poll_s=cfg.queue.poll_s, progress=cfg.progress)
            summary["work"] = {**{k: v for k, v in vars(report).items() if k != "counts"},
                               "counts": dict(report.counts)}
            if hasattr(work, "converter"):
                summary["work"]["server_restarts"] = work.converter.server.restarts
            log.info("finished %d items in %.1f s (%s); %d failed, %d taken over from dead workers, %d lost to "
                     "others while stalled, %d finished twice", report.done, report.seconds,
                     ", ".join(f"{v} {k}" for k, v in sorted(report.counts.items())) or "nothing",
                     report.failed, report.taken_over, report.lost, report.duplicates)
    except store_errors() as exc:
        raise ValueError(f"workspace {root}: {exc}") from None
    except StopWork as exc:
        raise ValueError(f"{exc} (unfinished items were given back to the queue)") from None
    write_run_info(output_dir, summary=summary)
    return summary


if __name__ == "__main__":
    run.main()
