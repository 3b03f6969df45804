"""``report.html``: the bench results as one self-contained page. Pass rates per category and test type
with their bootstrap intervals; per page, the rendered page beside the candidate's markdown (tables and
equations drawn) and its tests, failures explained and, where a failure points at text in the output,
that text highlighted. With two candidates: per-category deltas, the tests that flipped, and each page
with both outputs side by side."""

from __future__ import annotations

import logging
import os

from olmocr.bench.score import TestResult, describe_makeup, read_outputs, verdict
from olmocr.formats.html import bars_svg, document, esc, image_data_url, markdown_html

log = logging.getLogger("olmocr.bench")


def _marks(result: TestResult) -> list[str]:
    """Text of the output a failed test points at: what must be absent but is there, the fragments of an
    order or the cell of a table test that were misplaced, the text in the wrong format."""
    test = result.test
    if result.passed == result.repeats:
        return []
    return [getattr(test, name, "") or "" for name in {"absent": ("text",), "order": ("before", "after"),
                                                        "table": ("cell",), "format": ("text",)}.get(test.type, ())]


def _passed(result: TestResult) -> bool:
    return verdict(result, "majority") == 1.0


def flipped_tests(a: list[TestResult], b: list[TestResult]) -> list[dict]:
    """Tests whose verdict differs between two candidates (same bench, so the same tests)."""
    by_id = {r.test.id: r for r in b}
    flips = []
    for ra in a:
        rb = by_id.get(ra.test.id)
        if rb is not None and _passed(ra) != _passed(rb):
            flips.append({"id": ra.test.id, "type": ra.test.type, "category": ra.category, "pdf": ra.test.pdf,
                          "page": ra.test.page, "a": _passed(ra), "b": _passed(rb),
                          "explanation_a": ra.explanation, "explanation_b": rb.explanation})
    return flips


def category_deltas(a: dict, b: dict) -> dict:
    return {name: {"a": a["categories"][name]["pass_rate"], "b": row["pass_rate"],
                   "delta": row["pass_rate"] - a["categories"][name]["pass_rate"]}
            for name, row in b["categories"].items() if name in a["categories"]}


def _rates(summary: dict) -> str:
    def rows(table: dict) -> list:
        return [(name, row["pass_rate"], row.get("low"), row.get("high")) for name, row in table.items()]

    return (f"<h3>Categories</h3>{bars_svg(rows(summary['categories']))}"
            f"<h3>Test types</h3>{bars_svg(rows(summary['types']))}")


def _tests(results: list[TestResult]) -> str:
    items = []
    for r in results:
        ok = r.passed == r.repeats and r.repeats > 0
        items.append(f'<li class="test {"pass" if ok else "fail"}" data-test-id="{esc(r.test.id)}">'
                     f'<span class="badge">{"PASS" if ok else "FAIL"}</span> {esc(r.test.type)} '
                     f'<span class="muted">{esc(r.test.id)} ({r.passed}/{r.repeats})</span>'
                     + ("" if ok else f"<br>{esc(r.explanation)}") + "</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _output(candidates: str, pdf: str, page: int, results: list[TestResult]) -> str:
    texts, unreadable = read_outputs(candidates, pdf, page)
    said = "".join(f'<p class="fail">cannot read {esc(item)}</p>' for item in unreadable)
    if not texts:
        return said + f'<p class="fail">no output for this page in {esc(candidates)}</p>'
    path, text = texts[0]
    marks = [m for r in results for m in _marks(r)]
    more = f" (first of {len(texts)} repeats)" if len(texts) > 1 else ""
    return (said + f'<p class="muted">{esc(os.path.basename(path))}{more}</p>'
            f'<div class="markdown">{markdown_html(text, marks)}</div>')


def _page_image(bench_dir: str, pdf: str, page: int) -> str:
    from olmocr.formats.render import RenderError, render_page

    try:
        image = render_page(os.path.join(bench_dir, "pdfs", pdf), page, longest_side=900)
    except (RenderError, OSError) as exc:
        return f'<p class="fail">cannot render the page: {esc(exc)}</p>'
    return f'<img alt="{esc(pdf)} page {page}" src="{image_data_url(image)}">'


def write_html(path: str, bench_dir: str, runs: list[tuple[str, dict, list[TestResult]]], max_pages: int,
               notice: str | None = None) -> str:
    """``runs``: one or two (candidates folder, summary, results). Pages with failing (or flipped) tests
    come first; at most ``max_pages`` pages are shown. ``notice``: a line shown first (a comparison that
    compares no model)."""
    from tqdm import tqdm

    names = [c for c, _, _ in runs]
    pages: dict[tuple[str, int], list[list[TestResult]]] = {}
    for i, (_, _, results) in enumerate(runs):
        for r in results:
            pages.setdefault((r.test.pdf, r.test.page), [[] for _ in runs])[i].append(r)
    flips = flipped_tests(runs[0][2], runs[1][2]) if len(runs) == 2 else []
    flipped_pages = {(f["pdf"], f["page"]) for f in flips}

    def interest(key):
        failing = any(r.passed < r.repeats or not r.repeats for rs in pages[key] for r in rs)
        return (key not in flipped_pages, not failing, key)

    order = sorted(pages, key=interest)
    body = [f"<h1>olmOCR-bench: {' vs '.join(esc(n) for n in names)}</h1>"]
    if notice:
        body.append(f'<p class="notice" id="notice">{esc(notice)}</p>')
    body.append(f'<p class="muted">bench {esc(bench_dir)}, {esc(runs[0][1]["scoring"])} scoring</p>')
    for name, summary, _ in runs:
        ci = summary["ci"]
        body.append(f"<h2>{esc(name)}</h2><p><b>Overall {100 * summary['overall']:.1f}%</b> "
                    f"({round(100 * ci['confidence'])}% CI {100 * ci['low']:.1f}–{100 * ci['high']:.1f}), "
                    f"{summary['passed']} of {summary['tests']} tests passed, overall_score "
                    f"{100 * summary['overall_score']:.1f}%.</p>"
                    f'<p class="makeup">{esc(describe_makeup(summary["makeup"]))}.</p>{_rates(summary)}')
    if len(runs) == 2:
        deltas = category_deltas(runs[0][1], runs[1][1])
        rows = "".join(f'<tr><td>{esc(n)}</td><td>{100 * d["a"]:.1f}</td><td>{100 * d["b"]:.1f}</td>'
                       f'<td class="{"delta-up" if d["delta"] > 0 else "delta-down" if d["delta"] < 0 else ""}">'
                       f'{100 * d["delta"]:+.1f}</td></tr>' for n, d in deltas.items())
        body.append(f"<h2>Per category (B − A, points)</h2><table class='data' id='deltas'><tr><th>Category</th>"
                    f"<th>A</th><th>B</th><th>Δ</th></tr>{rows}</table>")
        rows = "".join(f'<tr class="flipped" data-test-id="{esc(f["id"])}"><td>{esc(f["id"])}</td><td>{esc(f["type"])}'
                       f'</td><td>{esc(f["pdf"])} p{f["page"]}</td><td class="{"pass" if f["b"] else "fail"}">'
                       f'{"fail → pass" if f["b"] else "pass → fail"}</td><td>{esc(f["explanation_b"] or f["explanation_a"])}'
                       f"</td></tr>" for f in flips)
        body.append(f"<h2>Flipped tests ({len(flips)})</h2><table class='data' id='flips'><tr><th>Test</th><th>Type"
                    f"</th><th>Page</th><th>A → B</th><th>Why</th></tr>{rows}</table>")
    shown = order[:max_pages]
    body.append(f"<h2>Pages ({len(shown)} of {len(pages)} shown{', failing first' if len(runs) == 1 else ''})</h2>")
    columns = "grid-template-columns:" + " ".join(["minmax(0,1fr)"] * (len(runs) + 1))
    for pdf, page in tqdm(shown, desc="report pages", unit="page", disable=len(shown) < 20):
        cells = [_page_image(bench_dir, pdf, page)]
        for (candidates, _, _), results in zip(runs, pages[(pdf, page)]):
            title = f"<h4>{esc(candidates)}</h4>" if len(runs) == 2 else ""
            cells.append(f"<div>{title}{_output(candidates, pdf, page, results)}{_tests(results)}</div>")
        body.append(f'<section class="page pair" style="{columns}" data-pdf="{esc(pdf)}" data-page="{page}">'
                    f'<div><h3>{esc(pdf)} — page {page}</h3>{cells[0]}</div>{"".join(cells[1:])}</section>')
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(document(f"olmOCR-bench: {' vs '.join(names)}", "\n".join(body)))
    return path
