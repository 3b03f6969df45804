"""python -m olmocr.bench — score a folder of OCR outputs against an olmOCR-bench folder.

Writes results.json and report.md to the run dir: per-category and per-type pass rates, the overall
score with a bootstrap confidence interval, missing outputs, malformed test lines and every failed test
with the reason it failed.
"""

from __future__ import annotations

import logging
import os
import time

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import olmocr.bench.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.config import run_stage, start, validate

log = logging.getLogger("olmocr.bench")


def run(cfg: DictConfig, output_dir: str) -> dict:
    from olmocr.bench import equations
    from olmocr.bench.report import write_reports
    from olmocr.bench.score import check_options, load_bench, run_tests, summarize
    from olmocr.utils.runinfo import write_run_info

    validate(cfg)
    check_options(cfg.group_by, cfg.repeat_rule)  # before any scoring
    if not os.path.isdir(cfg.candidates):
        raise ValueError(f"candidates: {cfg.candidates} is not a folder")
    bench = load_bench(cfg.bench_dir, skip_baseline=cfg.skip_baseline, skip_rejected=cfg.skip_rejected)
    for line in bench.malformed:
        log.warning("malformed test, skipped: %s", line)
    for line in bench.warnings:
        log.warning("%s", line)
    if not bench.tests:
        raise ValueError(f"bench_dir: no valid tests in {cfg.bench_dir}")
    if any(test.type == "math" for _, test in bench.tests):
        equations.render("x")  # math tests need Node and KaTeX: fail now, not in a worker mid-run
    start = time.perf_counter()
    results = run_tests(bench, cfg.candidates, workers=cfg.workers or os.cpu_count() or 1)
    seconds = time.perf_counter() - start
    summary = summarize(results, cfg.group_by, cfg.repeat_rule, cfg.bootstrap_samples, cfg.confidence, cfg.seed)
    json_path, md_path = write_reports(output_dir, summary, results, bench, bench_dir=cfg.bench_dir,
                                       candidates=cfg.candidates, max_failures_listed=cfg.max_failures_listed)
    summary["tests_per_second"] = round(len(results) / max(seconds, 1e-9), 1)
    write_run_info(output_dir, summary={k: summary[k] for k in ("overall", "ci", "overall_score", "tests",
                                                                 "passed", "tests_per_second")})
    ci = summary["ci"]
    for name, row in summary["categories"].items():
        log.info("%-24s %5d tests  %5.1f%%", name, row["tests"], 100 * row["pass_rate"])
    log.info("overall %.1f%% (%d%% CI %.1f-%.1f), overall_score %.1f%%, over %d tests (%d implicit baselines); "
             "%d pages missing, %d malformed lines, %d warnings; %.0f tests/s", 100 * summary["overall"],
             round(100 * ci["confidence"]), 100 * ci["low"], 100 * ci["high"], 100 * summary["overall_score"],
             len(results), bench.implicit_baselines, len(summary["missing_pages"]), len(bench.malformed),
             len(bench.warnings), summary["tests_per_second"])
    log.info("reports: %s, %s", md_path, json_path)
    return summary


@hydra.main(config_path="../../conf", config_name="bench", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_stage(run, cfg, HydraConfig.get().runtime.output_dir)


if __name__ == "__main__":
    start(main, "olmocr.bench", "bench", __doc__)
