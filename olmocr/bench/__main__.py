"""python -m olmocr.bench — score a folder of OCR outputs against an olmOCR-bench folder.

Writes results.json and report.md to the run dir: per-category and per-type pass rates, the overall
score with a bootstrap confidence interval, missing outputs, malformed test lines and every failed test
with the reason it failed; and report.html, which shows them with each page beside its output.
Pages whose truth has blocks (``pdfs/<name>.blocks.json``) are also scored for layout against the blocks each
output has beside it (:mod:`olmocr.bench.layout`: F1 per label, mean IoU, label and order accuracy, with
intervals), reported beside the text score. ``candidates=[a,b,…]`` scores any number of folders (results_b.json, report_b.md for the second, _c for the
third, …) and compares each with the first: compare.json and report.html give per-category deltas and the
tests whose verdicts differ, and report.html shows every output of a page side by side.
"""

from __future__ import annotations

import logging
import os
import time

from omegaconf import DictConfig

import olmocr.bench.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage
from olmocr.errors import UserError

log = logging.getLogger("olmocr.bench")


@stage("bench")
def run(cfg: DictConfig, output_dir: str) -> dict:
    from olmocr.bench import equations
    from olmocr.bench import layout as layout_checks
    from olmocr.bench.html import flipped_tests, letter, write_html
    from olmocr.bench.report import write_reports
    from olmocr.bench.score import (candidate_files, check_options, describe_makeup, describe_overall, load_bench,
                                    run_tests, summarize)
    from olmocr.utils.runinfo import write_run_info

    check_options(cfg.group_by, cfg.repeat_rule)  # before any scoring
    folders = [cfg.candidates] if isinstance(cfg.candidates, str) else list(cfg.candidates)
    if not folders or not all(isinstance(f, str) for f in folders):
        raise UserError(f"candidates: expected a folder or a list of folders [a, b, …], got {cfg.candidates}")
    for folder in folders:
        if not os.path.isdir(folder):
            raise UserError(f"candidates: {folder} is not a folder")
    bench = load_bench(cfg.bench_dir, skip_baseline=cfg.skip_baseline, skip_rejected=cfg.skip_rejected)
    for line in bench.malformed:
        log.warning("malformed test, skipped: %s", line)
    for line in bench.warnings:
        log.warning("%s", line)
    if not bench.tests:
        raise UserError(f"bench_dir: no valid tests in {cfg.bench_dir}")
    if any(test.type == "math" for _, test in bench.tests):
        equations.render("x")  # math tests need Node and KaTeX: fail now, not in a worker mid-run
    scored = []
    for folder in folders:
        start = time.perf_counter()
        results = run_tests(bench, folder, workers=cfg.workers or os.cpu_count() or 1, scoring=cfg.scoring)
        seconds = time.perf_counter() - start
        summary = summarize(results, cfg.group_by, cfg.repeat_rule, cfg.bootstrap_samples, cfg.confidence, cfg.seed)
        summary["tests_per_second"] = round(len(results) / max(seconds, 1e-9), 1)
        pages = sorted({(test.pdf, test.page) for _, test in bench.tests})
        layout = layout_checks.score_candidates(cfg.bench_dir, pages,
                                                lambda pdf, page, f=folder: candidate_files(f, pdf, page))
        if layout is not None:
            summary["layout"] = layout
        scored.append((folder, summary, results))
    unanswered = unanswered_line(scored)
    if unanswered:
        log.warning("%s", unanswered)
    runs = []
    for i, (folder, summary, results) in enumerate(scored):
        suffix = "" if i == 0 else f"_{letter(i).lower().lstrip('#')}"
        paths = write_reports(output_dir, summary, results, bench, bench_dir=cfg.bench_dir, candidates=folder,
                              max_failures_listed=cfg.max_failures_listed, suffix=suffix, notice=unanswered)
        runs.append((folder, summary, results, paths))
    folder, summary, results, (json_path, md_path) = runs[0]
    reports = [md_path, json_path]
    if len(runs) > 1:
        reports.append(write_comparison(os.path.join(output_dir, "compare.json"), runs))
    if cfg.html:
        reports.append(write_html(os.path.join(output_dir, "report.html"), cfg.bench_dir, scored, cfg.html_max_pages,
                                  notice=unanswered))
    write_run_info(output_dir, summary={k: summary[k] for k in ("overall", "ci", "overall_score", "share", "tests",
                                                                 "passed", "tests_per_second")})
    ci = summary["ci"]
    for name, row in summary["categories"].items():
        log.info("%-24s %5d tests  %5.1f%%", name, row["tests"], 100 * row["pass_rate"])
    log.info("%s scoring; %s", cfg.scoring, describe_makeup(summary["makeup"]))
    log.info("overall %.1f%% (%d%% CI %.1f-%.1f), plain share %.1f%% (%d of %d tests), overall_score %.1f%%, %d "
             "implicit baselines; %d pages missing, %d outputs unreadable, %d malformed lines, %d warnings; %.0f tests/s",
             100 * summary["overall"], round(100 * ci["confidence"]), 100 * ci["low"], 100 * ci["high"],
             100 * summary["share"], summary["passed"], len(results), 100 * summary["overall_score"],
             bench.implicit_baselines, len(summary["missing_pages"]), len(summary["unreadable_outputs"]),
             len(bench.malformed), len(bench.warnings), summary["tests_per_second"])
    log.info("%s", describe_overall(summary, each=False))
    if "layout" in summary:
        log.info("%s", layout_checks.describe(summary["layout"]))
    for folder, other, other_results, _ in runs[1:]:
        log.info("%s: overall %.1f%% (%+.1f points), plain share %.1f%%; %d tests flipped; %s", folder,
                 100 * other["overall"], 100 * (other["overall"] - summary["overall"]), 100 * other["share"],
                 len(flipped_tests(results, other_results)), describe_makeup(other["makeup"]))
    log.info("reports: %s", ", ".join(reports))
    return summary


def unanswered_line(runs: list[tuple[str, dict, list]]) -> str | None:
    """One line when a comparison has a side whose model answered no page: its figures are then its fallbacks'
    (the text layer) or nothing's, not the model's."""
    if len(runs) < 2:
        return None
    blank = [folder for folder, summary, _ in runs if not summary["makeup"]["answered"]]
    if not blank:
        return None
    return (f"not a comparison of models: the model answered no page in {' nor in '.join(blank)} "
            "(every page there fell back to the text layer, was empty or missing)")


def write_comparison(path: str, runs: list[tuple]) -> str:
    """compare.json: each candidate after the first against the first (``a``): overall and per-category deltas
    and the tests whose verdicts flipped, with both reasons."""
    import json

    from olmocr.bench.html import category_deltas, flipped_tests

    a = runs[0]
    payload = {"a": a[0], "comparisons": [
        {"b": b[0], "overall": {"a": a[1]["overall"], "b": b[1]["overall"], "delta": b[1]["overall"] - a[1]["overall"]},
         "share": {"a": a[1]["share"], "b": b[1]["share"], "delta": b[1]["share"] - a[1]["share"]},
         "categories": category_deltas(a[1], b[1]), "flipped": flipped_tests(a[2], b[2])} for b in runs[1:]]}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=2, ensure_ascii=False)
    return path


if __name__ == "__main__":
    run.main()
