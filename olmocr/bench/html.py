"""``report.html``: the bench results as one self-contained page. Pass rates per category and test type
with their bootstrap intervals and test counts, how overall is made and the plain share of tests passed;
per page, the rendered page beside the candidate's markdown (tables and equations drawn) and its tests,
failures explained and, where a failure points at text in the output, that text highlighted. With several
candidates (any number, the first the reference): an overview, per-category rates and deltas against the
first, the tests whose verdicts differ, and each page with every output side by side."""

from __future__ import annotations

import logging
import os

from olmocr.bench.score import TestResult, describe_makeup, describe_overall, read_outputs, verdict
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


def differing_tests(runs: list[list[TestResult]]) -> list[tuple[TestResult, list[bool]]]:
    """Tests whose verdict is not the same for every candidate (same bench, so the same tests): the first run's
    result and every run's verdict."""
    by_id = [{r.test.id: r for r in results} for results in runs[1:]]
    out = []
    for r in runs[0]:
        others = [ids.get(r.test.id) for ids in by_id]
        if None in others:
            continue
        verdicts = [_passed(r), *(_passed(o) for o in others)]
        if len(set(verdicts)) > 1:
            out.append((r, verdicts))
    return out


def letter(i: int) -> str:
    """A candidate's short name in a report: A, B, … (its folder is said once, in the overview)."""
    return chr(ord("A") + i) if i < 26 else f"#{i + 1}"


def _rates(summary: dict) -> str:
    counted = summary["repeat_rule"] == "majority"  # a category's rate is then its passed tests over its tests

    def note(row: dict, passed: bool) -> str:
        return f"{round(row['pass_rate'] * row['tests'])}/{row['tests']} tests" if passed else f"{row['tests']} tests"

    def rows(table: dict, passed: bool) -> list:
        return [(name, row["pass_rate"], row.get("low"), row.get("high"), note(row, passed))
                for name, row in table.items()]

    return (f"<h3>Categories</h3>{bars_svg(rows(summary['categories'], counted))}"
            f"<h3>Test types (mean repeat average)</h3>{bars_svg(rows(summary['types'], False))}")


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


def _summary(i: int, name: str, summary: dict, several: bool) -> str:
    ci = summary["ci"]
    title = f"{letter(i)}: {name}" if several else name
    return (f'<section class="candidate" data-candidate="{esc(name)}"><h2>{esc(title)}</h2><p><b>Overall '
            f"{100 * summary['overall']:.1f}%</b> ({round(100 * ci['confidence'])}% CI {100 * ci['low']:.1f}–"
            f"{100 * ci['high']:.1f}); plain share of tests passed <b>{100 * summary['share']:.1f}%</b> "
            f"({summary['passed']} of {summary['tests']}); overall_score {100 * summary['overall_score']:.1f}%.</p>"
            f'<p class="overall-made">How overall is made: {esc(describe_overall(summary))}.</p>'
            f'<p class="makeup">{esc(describe_makeup(summary["makeup"]))}.</p>{_rates(summary)}</section>')


def _comparison(runs: list[tuple[str, dict, list[TestResult]]], differing: list) -> list[str]:
    """The overview of every candidate, per-category rates with deltas against the first, and the tests whose
    verdicts differ."""
    first = runs[0][1]

    def overview(i: int, name: str, s: dict) -> str:
        delta = "" if i == 0 else f"{100 * (s['overall'] - first['overall']):+.1f}"
        return (f'<tr data-candidate="{esc(name)}"><td>{letter(i)}</td><td>{esc(name)}</td>'
                f"<td>{100 * s['overall']:.1f}</td><td>{delta}</td><td>{100 * s['share']:.1f} ({s['passed']}/"
                f"{s['tests']})</td><td>{s['makeup']['answered']}/{s['makeup']['pages']}</td>"
                f"<td>{s['makeup']['fallback']}</td></tr>")

    rows = "".join(overview(i, name, s) for i, (name, s, _) in enumerate(runs))
    out = [f"<h2>Candidates ({len(runs)})</h2><table class='data' id='overview'><tr><th></th><th>Candidates</th>"
           f"<th>Overall %</th><th>Δ vs A</th><th>Tests passed %</th><th>Pages answered</th><th>Fallbacks</th></tr>"
           f"{rows}</table>"]
    head = "".join(f"<th>{letter(i)}</th>" + ("" if i == 0 else f"<th>Δ {letter(i)}</th>") for i in range(len(runs)))
    cells = []
    for category, row in first["categories"].items():
        cell = f"<td>{esc(category)}</td><td>{row['tests']}</td><td>{100 * row['pass_rate']:.1f}</td>"
        for _, summary, _ in runs[1:]:
            other = summary["categories"].get(category)
            if other is None:
                cell += "<td></td><td></td>"
                continue
            delta = other["pass_rate"] - row["pass_rate"]
            trend = "delta-up" if delta > 0 else "delta-down" if delta < 0 else ""
            cell += f'<td>{100 * other["pass_rate"]:.1f}</td><td class="{trend}">{100 * delta:+.1f}</td>'
        cells.append(f"<tr>{cell}</tr>")
    out.append(f"<h2>Per category (pass rate %, Δ in points against A)</h2><table class='data' id='deltas'><tr>"
               f"<th>Category</th><th>Tests</th>{head}</tr>{''.join(cells)}</table>")
    explained = {}  # a differing test's explanation: the first candidate's that failed it
    for _, _, results in reversed(runs):
        explained.update({r.test.id: r.explanation for r in results if r.explanation and not _passed(r)})
    rows = "".join(
        f'<tr class="flipped" data-test-id="{esc(r.test.id)}"><td>{esc(r.test.id)}</td><td>{esc(r.test.type)}</td>'
        f"<td>{esc(r.test.pdf)} p{r.test.page}</td>"
        + "".join(f'<td class="{"pass" if v else "fail"}">{"pass" if v else "fail"}</td>' for v in verdicts)
        + f"<td>{esc(explained.get(r.test.id, ''))}</td></tr>"
        for r, verdicts in differing)
    out.append(f"<h2>Tests whose verdicts differ ({len(differing)})</h2><table class='data' id='flips'><tr><th>Test</th>"
               f"<th>Type</th><th>Page</th>{''.join(f'<th>{letter(i)}</th>' for i in range(len(runs)))}<th>Why</th></tr>"
               f"{rows}</table>")
    return out


def write_html(path: str, bench_dir: str, runs: list[tuple[str, dict, list[TestResult]]], max_pages: int,
               notice: str | None = None) -> str:
    """``runs``: one or more (candidates folder, summary, results), the first the one the others are compared
    with. Pages with tests whose verdicts differ come first, then pages with failing tests; at most ``max_pages``
    pages are shown. ``notice``: a line shown first (a comparison that compares no model)."""
    from tqdm import tqdm

    names = [c for c, _, _ in runs]
    several = len(runs) > 1
    pages: dict[tuple[str, int], list[list[TestResult]]] = {}
    for i, (_, _, results) in enumerate(runs):
        for r in results:
            pages.setdefault((r.test.pdf, r.test.page), [[] for _ in runs])[i].append(r)
    differing = differing_tests([results for _, _, results in runs]) if several else []
    differing_pages = {(r.test.pdf, r.test.page) for r, _ in differing}

    def interest(key):
        failing = any(r.passed < r.repeats or not r.repeats for rs in pages[key] for r in rs)
        return (key not in differing_pages, not failing, key)

    order = sorted(pages, key=interest)
    title = " vs ".join(names) if len(runs) <= 3 else f"{len(runs)} candidates"
    body = [f"<h1>olmOCR-bench: {esc(title)}</h1>"]
    if notice:
        body.append(f'<p class="notice" id="notice">{esc(notice)}</p>')
    body.append(f'<p class="muted">bench {esc(bench_dir)}, {esc(runs[0][1]["scoring"])} scoring</p>')
    if several:
        body += _comparison(runs, differing)
    body += [_summary(i, name, summary, several) for i, (name, summary, _) in enumerate(runs)]
    shown = order[:max_pages]
    body.append(f"<h2>Pages ({len(shown)} of {len(pages)} shown, "
                f"{'those whose verdicts differ first, then ' if several else ''}failing first)</h2>")
    # Up to three outputs beside the page; more wrap onto rows of their own.
    columns = ("grid-template-columns:" + " ".join(["minmax(0,1fr)"] * (len(runs) + 1)) if len(runs) <= 3
               else "grid-template-columns:repeat(auto-fill,minmax(360px,1fr))")
    for pdf, page in tqdm(shown, desc="report pages", unit="page", disable=len(shown) < 20):
        cells = [_page_image(bench_dir, pdf, page)]
        for i, ((candidates, _, _), results) in enumerate(zip(runs, pages[(pdf, page)])):
            heading = f"<h4>{letter(i)}: {esc(candidates)}</h4>" if several else ""
            cells.append(f"<div>{heading}{_output(candidates, pdf, page, results)}{_tests(results)}</div>")
        body.append(f'<section class="page pair" style="{columns}" data-pdf="{esc(pdf)}" data-page="{page}">'
                    f'<div><h3>{esc(pdf)} — page {page}</h3>{cells[0]}</div>{"".join(cells[1:])}</section>')
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(document(f"olmOCR-bench: {title}", "\n".join(body)))
    return path
