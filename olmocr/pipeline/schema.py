"""Schemas of ``python -m olmocr.pipeline`` and its side commands (``.bench``, ``.stats``, ``.requeue``,
``.repair``, ``.export``: conf/pipeline*.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from omegaconf import MISSING

import olmocr.models.schema  # noqa: F401 - the model group a started server serves (model=…)
from olmocr.config import AccessConfig, NonNegative, Positive, Range, StageConfig, store
from olmocr.utils.io import STORAGE_WAIT_S


@dataclass
class QueueConfig:
    lease_s: Positive = 300.0  # a claim lasts this long unless renewed (every third of it, while working)
    # an item whose own processing failed this many times is given up
    max_failures: Annotated[int, Range(at_least=1)] = 3
    # A failed item waits before its next attempt: retry_wait_s, doubling with each failure, at most
    # retry_wait_max_s (jittered; kept in its claim, so every worker honours it).
    retry_wait_s: Annotated[float, Range(at_least=0)] = 15.0
    retry_wait_max_s: Annotated[float, Range(at_least=0)] = 600.0
    # Failures from outside the items (storage, credentials, network, server, tools) in a row: from the
    # pause_after-th on the worker pauses (the same growing waits); when they have lasted give_up_after_s it
    # stops with their cause. Items are never given up for them.
    pause_after: Annotated[int, Range(at_least=1)] = 3
    give_up_after_s: Positive = 900.0
    linger: bool = True  # wait while other workers hold items, to take over the claims of any that die
    # how often a lingering worker looks again
    poll_s: Annotated[float | None, Range(above=0, null="a quarter lease, ≤30 s")] = None


@dataclass
class PipelineConfig(StageConfig):
    # A local folder or s3://bucket/prefix, shared by every worker; null: a sample run, the bundled eval
    # PDFs (unless pdfs= names others) in paths.sample_workspace
    workspace: str | None = None
    workspace_access: AccessConfig = field(default_factory=AccessConfig)
    pdfs: list[str] = field(default_factory=list)  # added before working: paths, folders, globs, list files
    pdf_access: AccessConfig = field(default_factory=AccessConfig)  # the PDFs' account, often not the workspace's
    # pages per work item, estimated from a sample of page counts
    pages_per_group: Annotated[int, Range(at_least=1)] = 500
    sample: Annotated[int, Range(at_least=0)] = 100  # PDFs whose pages are counted to size the items
    seed: int = 0
    # Items in flight in this process (threads sharing one server and one page limit): two, so an item's
    # last pages never leave the server idle; 0: only add the PDFs.
    workers: Annotated[int, Range(at_least=0)] = 2
    # This process's number among those started together: a sweep -m replica='range(16)' with cluster=…
    # starts 16 worker jobs (a SLURM job array, 16 Beaker jobs); it names the workers in claims.
    replica: Annotated[int, Range(at_least=0)] = 0
    work: Any = MISSING  # what a worker does with an item (conf/work/)
    filter: Any = None  # documents work=ocr does not convert (conf/filter/); null: every readable one
    convert: Any = MISSING  # how work=ocr turns a page into text (conf/convert/)
    server: Any = MISSING  # the model server page conversion talks to (conf/server/)
    model: Any = MISSING  # what a started server serves (conf/model/)
    queue: QueueConfig = field(default_factory=QueueConfig)
    # Parts of the queue whose items all finished more than this many hours ago are retired after the work:
    # results, markdown, page text, claims and done markers removed, their totals kept (stats counts them as
    # retired). null: kept for ever (a batch workspace's results are what it is for); 0: every finished part.
    retire_after_h: Annotated[float | None, Range(at_least=0, null="never")] = None
    progress: bool = True


@dataclass
class StatsConfig(StageConfig):
    workspace: str = "${paths.sample_workspace}"
    workspace_access: AccessConfig = field(default_factory=AccessConfig)
    # the recent throughput (and the projected finish) is over this window
    window_min: Positive = 15.0
    json: bool = False  # print the figures as JSON


@dataclass
class BenchConfig(StageConfig):
    bench_dir: str = MISSING  # an olmOCR-bench folder: test files (*.jsonl) and pdfs/
    candidates: str | None = None  # where the .md files go; null: <run dir>/candidates
    repeats: Annotated[int, Range(at_least=1)] = 1  # conversions of every tested page (the bench scores each)
    convert: Any = MISSING  # how a page becomes text (conf/convert/)
    server: Any = MISSING  # the model server (conf/server/)
    model: Any = MISSING  # what a started server serves (conf/model/)
    progress: bool = True


@dataclass
class RequeueConfig(StageConfig):
    workspace: str = "${paths.sample_workspace}"
    workspace_access: AccessConfig = field(default_factory=AccessConfig)
    items: list[str] = field(default_factory=list)  # these given-up items; empty: every given-up item


@dataclass
class RepairConfig(StageConfig):
    workspace: str = "${paths.sample_workspace}"
    workspace_access: AccessConfig = field(default_factory=AccessConfig)
    check_only: bool = False  # say which done items are damaged, change nothing


@dataclass
class ExportConfig(StageConfig):
    workspace: str = "${paths.sample_workspace}"  # a workspace converted with work.page_results=true
    workspace_access: AccessConfig = field(default_factory=AccessConfig)  # the workspace's and out_dir's
    pdf_access: AccessConfig = field(default_factory=AccessConfig)  # the converted PDFs' (cut into pages)
    out_dir: str = MISSING  # the training folder (local or s3://): <pdf path>_pg<page>.pdf and .md
    # how long a remote read or write waits out storage that does not answer before the stage stops
    storage_wait_s: NonNegative = STORAGE_WAIT_S
    progress: bool = True


@dataclass
class TesseractConfig(StageConfig):
    bench_dir: str = MISSING  # an olmOCR-bench folder: test files (*.jsonl) and pdfs/
    candidates: str | None = None  # where the .md files go; null: <run dir>/candidates
    # the page image tesseract reads: the pipeline's render step (a model's convert.steps.render), so the
    # engine and the model read the same pixels
    render: Any = field(default_factory=lambda: {"_target_": "olmocr.data.steps.RenderPage", "longest_side": 1288})
    lang: str = "eng"  # tesseract's language data (Debian's tesseract-ocr-eng is installed with it)
    psm: Annotated[int, Range(at_least=0)] = 3  # page segmentation: 3 finds the blocks, 6 takes one block
    workers: Annotated[int, Range(at_least=0)] = 0  # pages read at once (one core each); 0: every core
    page_timeout_s: Positive = 120.0  # a page tesseract takes longer on is written empty, counted and said
    progress: bool = True


store("pipeline_schema", PipelineConfig)
store("pipeline_tesseract_schema", TesseractConfig)
store("pipeline_bench_schema", BenchConfig)
store("pipeline_stats_schema", StatsConfig)
store("pipeline_export_schema", ExportConfig)
store("pipeline_requeue_schema", RequeueConfig)
store("pipeline_repair_schema", RepairConfig)
