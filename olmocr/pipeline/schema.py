"""Schemas of ``python -m olmocr.pipeline`` and ``python -m olmocr.pipeline.stats`` (conf/pipeline.yaml,
conf/pipeline_stats.yaml, conf/work/)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from olmocr.config import StageConfig, store


@dataclass
class QueueConfig:
    lease_s: float = 300.0  # a claim lasts this long unless renewed (every third of it, while working)
    max_failures: int = 3  # an item whose processing raised this many times is given up
    linger: bool = True  # wait while other workers hold items, to take over the claims of any that die
    poll_s: float | None = None  # how often a lingering worker looks again; null: a quarter lease, ≤30 s


@dataclass
class PipelineConfig(StageConfig):
    # A local folder or s3://bucket/prefix, shared by every worker; null: a sample run, the bundled eval
    # PDFs (unless pdfs= names others) in outputs/pipeline/sample
    workspace: str | None = None
    s3_endpoint: str | None = None  # S3 API endpoint (MinIO, Ceph, …) for the workspace and s3:// PDFs
    pdfs: list[str] = field(default_factory=list)  # added before working: paths, folders, globs, list files
    pages_per_group: int = 500  # pages per work item, estimated from a sample of page counts
    sample: int = 100  # PDFs whose pages are counted to size the items
    seed: int = 0
    workers: int = 1  # worker threads in this process; 0: only add the PDFs
    # This process's number among those started together: a sweep -m replica='range(16)' with cluster=…
    # starts 16 worker jobs (a SLURM job array, 16 Beaker jobs); it names the workers in claims.
    replica: int = 0
    work: Any = MISSING  # what a worker does with an item (conf/work/)
    queue: QueueConfig = field(default_factory=QueueConfig)
    progress: bool = True


@dataclass
class StatsConfig(StageConfig):
    workspace: str = MISSING
    s3_endpoint: str | None = None
    window_min: float = 15.0  # the recent throughput (and the projected finish) is over this window
    json: bool = False  # print the figures as JSON


store("pipeline_schema", PipelineConfig)
store("pipeline_stats_schema", StatsConfig)
