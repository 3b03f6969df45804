"""Schema of ``python -m olmocr.bench`` (conf/bench.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from olmocr.config import StageConfig, store


@dataclass
class BenchConfig(StageConfig):
    bench_dir: str = MISSING  # test files (*.jsonl, one category each) and pdfs/
    # A folder of <pdf path without .pdf>_pg<page>_repeat<n>.md files, or [a, b] to compare two
    candidates: Any = MISSING
    group_by: str = "file"  # categories: one per test file (olmOCR-bench), or one per test type
    repeat_rule: str = "majority"  # a test passes on most repeats (olmOCR-bench), or "mean": share passing
    skip_baseline: bool = False  # drop every baseline test, the implicit ones (one per PDF) included
    skip_rejected: bool = False  # leave out tests marked checked: rejected (olmOCR-bench runs them)
    workers: int | None = None  # processes scoring pages; null: one per core
    bootstrap_samples: int = 1000
    confidence: float = 0.95
    seed: int = 0
    max_failures_listed: int = 200  # in report.md; results.json lists them all
    html: bool = True  # report.html: rates, and pages with their outputs and tests
    html_max_pages: int = 300  # pages shown in report.html (failing or flipped first)


store("bench_schema", BenchConfig)


@dataclass
class SplitConfig(StageConfig):
    pages: str = MISSING  # a folder of single-page X.pdf + X.md (pipeline.export's out_dir)
    out_dir: str = MISSING  # gets train/ (pages to train on) and heldout/ (an olmOCR-bench folder)
    heldout: float = 0.2  # share of the source documents held out, whole documents
    seed: int = 0  # which documents, and which table cells
    present_per_page: int = 3  # present tests: the page's longest sentences (order tests between them)
    table_cells_per_page: int = 3  # table tests: cells with their right or lower neighbour


store("bench_split_schema", SplitConfig)
