"""Schema of ``python -m olmocr.bench`` (conf/bench.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from omegaconf import MISSING

from olmocr.config import OneOf, Range, StageConfig, store


@dataclass
class BenchConfig(StageConfig):
    bench_dir: str = MISSING  # test files (*.jsonl, one category each) and pdfs/
    # A folder of <pdf path without .pdf>_pg<page>_repeat<n>.md files, or a list [a, b, …] compared with the first
    candidates: Any = MISSING
    # categories: one per test file (olmOCR-bench), or one per test type
    group_by: Annotated[str, OneOf("file", "type")] = "file"
    # strict: an output shorter than the text sought passes no present test (a blank page earns nothing);
    # published: olmOCR-bench's verdicts exactly, for figures set beside its leaderboard (olmocr.bench.checks)
    scoring: Annotated[str, OneOf("strict", "published")] = "strict"
    # a test passes on most repeats (olmOCR-bench), or "mean": share passing
    repeat_rule: Annotated[str, OneOf("majority", "mean")] = "majority"
    skip_baseline: bool = False  # drop every baseline test, the implicit ones (one per PDF) included
    skip_rejected: bool = False  # leave out tests marked checked: rejected (olmOCR-bench runs them)
    workers: Annotated[int | None, Range(at_least=1, null="one per core")] = None  # processes scoring pages
    bootstrap_samples: Annotated[int, Range(at_least=0)] = 1000
    confidence: Annotated[float, Range(above=0, below=1)] = 0.95
    seed: int = 0
    max_failures_listed: Annotated[int, Range(at_least=0)] = 200  # in report.md; results.json lists them all
    html: bool = True  # report.html: rates, and pages with their outputs and tests
    # pages shown in report.html (failing or flipped first)
    html_max_pages: Annotated[int, Range(at_least=0)] = 300


store("bench_schema", BenchConfig)


@dataclass
class SplitConfig(StageConfig):
    pages: str = MISSING  # a folder of single-page X.pdf + X.md (pipeline.export's out_dir)
    out_dir: str = MISSING  # gets train/ (pages to train on) and heldout/ (an olmOCR-bench folder)
    # share of the source documents held out, whole documents
    heldout: Annotated[float, Range(above=0, below=1)] = 0.2
    seed: int = 0  # which documents, and which table cells
    # present tests: the page's longest sentences (order tests between them)
    present_per_page: Annotated[int, Range(at_least=0)] = 3
    # table tests: cells with their right or lower neighbour
    table_cells_per_page: Annotated[int, Range(at_least=0)] = 3


store("bench_split_schema", SplitConfig)
