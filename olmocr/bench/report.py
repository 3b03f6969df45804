"""The bench's reports: ``results.json`` (everything, every test's verdict) and ``report.md`` (for people)."""

from __future__ import annotations

import json
import os

from olmocr.bench.layout import describe as describe_layout
from olmocr.bench.score import Bench, TestResult, describe_makeup, describe_overall, verdict


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _ratio(x: float | None) -> str:
    return "n/a" if x is None else _pct(x)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def verdicts(results: list[TestResult], repeat_rule: str) -> list[dict]:
    return [{"id": r.test.id, "type": r.test.type, "category": r.category, "pdf": r.test.pdf, "page": r.test.page,
             "passed": verdict(r, "majority") == 1.0, "value": verdict(r, repeat_rule), "repeats_passed": r.passed,
             "repeats": r.repeats, "explanation": r.explanation} for r in results]


def write_reports(output_dir: str, summary: dict, results: list[TestResult], bench: Bench, *, bench_dir: str,
                  candidates: str, max_failures_listed: int, suffix: str = "",
                  notice: str | None = None) -> tuple[str, str]:
    """``results<suffix>.json`` and ``report<suffix>.md`` in ``output_dir``; ``notice``, a line said first."""
    rows = verdicts(results, summary["repeat_rule"])
    payload = {"bench_dir": bench_dir, "candidates": candidates, **summary,
               "implicit_baselines": bench.implicit_baselines, "skipped": dict(bench.skipped),
               "malformed": bench.malformed, "warnings": bench.warnings, "results": rows}
    json_path = os.path.join(output_dir, f"results{suffix}.json")
    with open(json_path, "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=2, ensure_ascii=False)

    ci = summary["ci"]
    rule = ("a test passes when more than half of its repeats pass" if summary["repeat_rule"] == "majority"
            else "a test scores the share of its repeats that pass")
    lines = [f"# olmOCR-bench: `{candidates}`", ""]
    if notice:
        lines += [f"**{notice}.**", ""]
    lines += [
        f"**Overall {_pct(summary['overall'])}** ({round(100 * ci['confidence'])}% CI {_pct(ci['low'])}–"
        f"{_pct(ci['high'])}, {ci['bootstrap_samples']} bootstrap samples; {rule}); plain share of tests passed "
        f"**{_pct(summary['share'])}** ({summary['passed']} of {summary['tests']}); overall_score (mean repeat "
        f"average over all tests) {_pct(summary['overall_score'])}. Bench: `{bench_dir}`; {summary['scoring']} scoring.",
        "",
        f"How overall is made: {describe_overall(summary)}.",
        "",
        f"What it is made of: {describe_makeup(summary['makeup'])}.",
        "",
    ]
    for title, source, what in (("Category", summary["categories"], "Pass rate"),
                                ("Test type", summary["types"], "Mean repeat average")):
        lines += [f"| {title} | Tests | {what} | {round(100 * ci['confidence'])}% CI |", "|---|---:|---:|---:|"]
        lines += [f"| {name} | {row['tests']} | {_pct(row['pass_rate'])} | {_pct(row['low'])}–{_pct(row['high'])} |"
                  for name, row in source.items()]
        lines.append("")
    if "layout" in summary:
        layout = summary["layout"]
        lines += [f"Layout ({layout['pages']} pages with truth blocks; mean and 95% CI): {describe_layout(layout)}.",
                  "", "| Label | Truth blocks | Answer blocks | F1 | 95% CI |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {name} | {row['truth']} | {row['answer']} | {_ratio(row['mean'])} | {_ratio(row['low'])}–"
                  f"{_ratio(row['high'])} |" for name, row in layout["f1_by_label"].items()]
        lines.append("")
        for item in layout["unreadable"]:
            lines += [f"- unreadable blocks, counted as none: `{_cell(item)}`"]
    if bench.implicit_baselines:
        lines += [f"{bench.implicit_baselines} PDF(s) without a baseline test got one (category `baseline`).", ""]
    for why, count in sorted(bench.skipped.items()):
        lines += [f"{count} test(s) not run: {why}.", ""]
    if summary["missing_pages"]:
        lines += [f"## Missing outputs ({len(summary['missing_pages'])} page(s), their tests count as failed)", ""]
        lines += [f"- {page}" for page in summary["missing_pages"]] + [""]
    if summary["unreadable_outputs"]:
        lines += [f"## Unreadable outputs ({len(summary['unreadable_outputs'])} file(s), left out of their pages' "
                  "repeats)", ""]
        lines += [f"- `{_cell(item)}`" for item in summary["unreadable_outputs"]] + [""]
    for title, items in ((f"Malformed test lines ({len(bench.malformed)}, skipped)", bench.malformed),
                         (f"Warnings ({len(bench.warnings)})", bench.warnings)):
        if items:
            lines += [f"## {title}", ""] + [f"- `{_cell(item)}`" for item in items] + [""]
    failed = [row for row in rows if row["repeats_passed"] < row["repeats"] or not row["repeats"]]
    lines += [f"## Tests failing on some repeat ({len(failed)})", ""]
    if failed:
        lines += ["| Test | Type | Category | Repeats passed | Why |", "|---|---|---|---:|---|"]
        lines += [f"| {_cell(f['id'])} | {f['type']} | {f['category']} | {f['repeats_passed']}/{f['repeats']} | "
                  f"{_cell(f['explanation'])} |" for f in failed[:max_failures_listed]]
        if len(failed) > max_failures_listed:
            lines += ["", f"…and {len(failed) - max_failures_listed} more in results.json."]
    md_path = os.path.join(output_dir, f"report{suffix}.md")
    with open(md_path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    return json_path, md_path
