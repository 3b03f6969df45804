"""Schemas of ``python -m olmocr.report.plots`` and ``olmocr.report.viewer`` (conf/report_plots.yaml,
conf/report_viewer.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from omegaconf import MISSING

from olmocr.config import NonNegative, Range, StageConfig, store
from olmocr.utils.io import STORAGE_WAIT_S


@dataclass
class PlotsConfig(StageConfig):
    run_dir: str = MISSING  # a training run dir (its metrics.jsonl)
    dpi: Annotated[int, Range(at_least=10)] = 100  # the PNGs are 7 x 4 inches


@dataclass
class ViewerConfig(StageConfig):
    # A workspace, or Dolma JSONL paths/globs (one, or a list); local or s3://. By default the workspace
    # of a pipeline run without workspace= (the bundled eval PDFs).
    results: Any = "${paths.sample_workspace}"
    # shown, in file order; the rest are counted
    max_documents: Annotated[int | None, Range(at_least=1, null="all")] = None
    longest_side: Annotated[int, Range(at_least=16)] = 700  # of the page images, in pixels
    # how long a remote read waits out storage that does not answer before the stage stops (0: not at all)
    storage_wait_s: NonNegative = STORAGE_WAIT_S


store("report_plots_schema", PlotsConfig)
store("report_viewer_schema", ViewerConfig)
