"""Schemas of ``python -m olmocr.report.plots`` (conf/report_plots.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from olmocr.config import StageConfig, store


@dataclass
class PlotsConfig(StageConfig):
    run_dir: str = MISSING  # a training run dir (its metrics.jsonl)
    dpi: int = 100  # the PNGs are 7 x 4 inches


store("report_plots_schema", PlotsConfig)
