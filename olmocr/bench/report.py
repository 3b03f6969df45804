"""The bench's reports: ``results.json`` (everything) and ``report.md`` (for people)."""

from __future__ import annotations

import json
import os

from olmocr.bench.score import Bench, TestResult


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def failures(results: list[TestResult]) -> list[dict]:
    return [{"id": r.test.id, "type": r.test.type, "category": r.category, "pdf": r.test.pdf, "page": r.test.page,
             "score": r.score, "repeats": r.repeats, "explanation": r.explanation}
            for r in results if r.score < 1.0]


def write_reports(output_dir: str, summary: dict, results: list[TestResult], bench: Bench, *, bench_dir: str,
                  candidates: str, max_failures_listed: int) -> tuple[str, str]:
    failed = failures(results)
    payload = {"bench_dir": bench_dir, "candidates": candidates, **summary, "skipped_rejected": bench.skipped,
               "malformed": bench.malformed, "failed": failed}
    json_path = os.path.join(output_dir, "results.json")
    with open(json_path, "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=2, ensure_ascii=False)

    ci = summary["ci"]
    lines = [
        f"# olmOCR-bench: `{candidates}`",
        "",
        f"**Overall {_pct(summary['overall'])}** ({round(100 * ci['confidence'])}% CI {_pct(ci['low'])}–"
        f"{_pct(ci['high'])}, {ci['bootstrap_samples']} bootstrap samples), the mean over "
        f"{len(summary['categories'])} categories; {summary['passed']} of {summary['tests']} tests passed "
        f"on every repeat. Bench: `{bench_dir}`.",
        "",
    ]
    for title, rows in (("Category", summary["categories"]), ("Test type", summary["types"])):
        lines += [f"| {title} | Tests | Pass rate |", "|---|---:|---:|"]
        lines += [f"| {name} | {row['tests']} | {_pct(row['pass_rate'])} |" for name, row in rows.items()]
        lines.append("")
    if summary["missing_pages"]:
        lines += [f"## Missing outputs ({len(summary['missing_pages'])} page(s), their tests count as failed)", ""]
        lines += [f"- {page}" for page in summary["missing_pages"]] + [""]
    if bench.malformed:
        lines += [f"## Malformed test lines ({len(bench.malformed)}, skipped)", ""]
        lines += [f"- `{_cell(line)}`" for line in bench.malformed] + [""]
    if bench.skipped:
        lines += [f"{bench.skipped} test(s) marked `checked: rejected` were not run.", ""]
    lines += [f"## Failed tests ({len(failed)})", ""]
    if failed:
        lines += ["| Test | Type | Category | Score | Why |", "|---|---|---|---:|---|"]
        lines += [f"| {_cell(f['id'])} | {f['type']} | {f['category']} | {f['score']:.2f} | {_cell(f['explanation'])} |"
                  for f in failed[:max_failures_listed]]
        if len(failed) > max_failures_listed:
            lines += ["", f"…and {len(failed) - max_failures_listed} more in results.json."]
    md_path = os.path.join(output_dir, "report.md")
    with open(md_path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    return json_path, md_path
