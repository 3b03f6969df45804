"""Reports people look at, opened in a real headless browser (Debian's chromium through Selenium):
the bench's report.html for one candidate and for three compared."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import SAMPLE

BENCH = os.path.join(SAMPLE, "eval")


def open_page(browser, path: str, screenshot: str) -> list[dict]:
    """Open a report from disk; its console errors (none expected), after saving a screenshot."""
    browser.get_log("browser")  # what earlier pages logged
    browser.get(f"file://{path}")
    browser.save_screenshot(screenshot)
    return [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def bench(tmp_path, name: str, *overrides: str) -> str:
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "olmocr.bench", f"bench_dir={BENCH}", *overrides, "workers=1",
                           f"hydra.run.dir={out}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(out)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> tuple[str, str]:
    """Two candidate folders for the bundled eval bench: A is each page's own text layer; B is A with one
    wrongly kept header removed (an absent test goes fail → pass) and one sentence dropped (a present test
    goes pass → fail)."""
    from olmocr.formats.pdf import text_layer

    root = tmp_path_factory.mktemp("candidates")
    a, b = root / "a", root / "b"
    a.mkdir(), b.mkdir()
    for pdf in sorted(os.listdir(os.path.join(BENCH, "pdfs"))):
        if pdf.endswith(".pdf"):
            text = text_layer(os.path.join(BENCH, "pdfs", pdf))
            (a / f"{pdf[:-4]}_pg1_repeat1.md").write_text(text)
            if pdf == "synth_s0_01000.pdf":
                assert "Einem Wasser Analyse · 2014" in text and "Ebene ist zweite erste jeder" in text
                text = text.replace("Einem Wasser Analyse · 2014", "").replace(
                    "Ebene ist zweite erste jeder das Modell Stadt auch das Energie.", "")
            (b / f"{pdf[:-4]}_pg1_repeat1.md").write_text(text)
    return str(a), str(b)


def test_bench_html_shows_every_page_and_failed_test(tmp_path, browser, outputs):
    out = bench(tmp_path, "one", f"candidates={outputs[0]}")
    results = json.load(open(os.path.join(out, "results.json")))
    failed = [r for r in results["results"] if r["repeats_passed"] < r["repeats"]]
    pages = {(r["pdf"], r["page"]) for r in results["results"]}
    errors = open_page(browser, os.path.join(out, "report.html"), os.path.join(out, "report.png"))
    assert errors == []
    assert len(browser.find_elements("css selector", "section.page")) == len(pages) == 8
    shown_failures = browser.find_elements("css selector", "li.test.fail")
    assert len(shown_failures) == len(failed) > 0
    assert {e.get_attribute("data-test-id") for e in shown_failures} == {r["id"] for r in failed}
    assert len(browser.find_elements("css selector", "li.test.pass")) == len(results["results"]) - len(failed)
    assert len(browser.find_elements("css selector", "section.page img")) == 8  # every page rendered
    # An absent test that failed points at text in the output: it is highlighted there.
    marked = [m.text for m in browser.find_elements("css selector", "section.page mark")]
    assert "Einem Wasser Analyse · 2014" in marked
    # Rates with their intervals, per category and test type.
    assert results["categories"]["synth"]["low"] <= results["categories"]["synth"]["pass_rate"] <= \
        results["categories"]["synth"]["high"]
    assert len(browser.find_elements("css selector", "svg.bars")) == 2
    assert os.path.getsize(os.path.join(out, "report.png")) > 10_000


def test_the_bench_report_draws_a_pages_list_numbers_and_heading_levels_as_written(tmp_path, browser, outputs):
    """A page whose text has a list that starts at 7 and headings of three levels: the report draws "7." and
    "8." (not "1." and "2."), and each heading level smaller than the one above it and larger than the text."""
    written = tmp_path / "written"
    shutil.copytree(outputs[0], written)
    page = next(iter(sorted(glob.glob(str(written / "*.md")))))
    with open(page, "a") as fh:
        fh.write("\n\n# Part one\n\n## Section seven\n\n### Rules\n\n7. seventh rule\n8. eighth rule\n")
    out = bench(tmp_path, "report", f"candidates={written}")
    assert open_page(browser, os.path.join(out, "report.html"), os.path.join(out, "report.png")) == []
    [box] = [b for b in browser.find_elements("css selector", ".markdown") if "seventh rule" in b.text]
    numbers = browser.execute_script(
        "const ol = [...arguments[0].querySelectorAll('ol')].pop(); return [ol.start, ...Array.from(ol.children,"
        " li => getComputedStyle(li).display)];", box)
    assert numbers == [7, "list-item", "list-item"]  # drawn from 7 on
    sizes = {tag: float(browser.execute_script(f"return parseFloat(getComputedStyle(arguments[0].querySelector("
                                                f"'{tag}')).fontSize)", box)) for tag in ("h1", "h2", "h3", "li")}
    assert sizes["h1"] > sizes["h2"] > sizes["h3"] > sizes["li"], sizes
    assert [h.text for h in box.find_elements("css selector", "h1, h2, h3")] == ["Part one", "Section seven", "Rules"]


def test_three_candidates_in_one_report_with_their_counts_and_the_tests_whose_verdicts_differ(tmp_path, browser,
                                                                                              outputs):
    """A, B (one absent test fail → pass, one present test pass → fail) and C (A's outputs again, in another
    folder): one report, each compared with A, every figure with its test count."""
    a, b = outputs
    c = str(tmp_path / "c")
    shutil.copytree(a, c)
    out = bench(tmp_path, "three", f"candidates=[{a},{b},{c}]")
    ab, ac = json.load(open(os.path.join(out, "compare.json")))["comparisons"]
    assert (ab["b"], ac["b"]) == (b, c)
    flipped = {(f["id"], f["a"], f["b"]) for f in ab["flipped"]}
    assert ("synth_s0_01000_absent_04", False, True) in flipped
    assert ("synth_s0_01000_present_00", True, False) in flipped
    assert ac["flipped"] == [] and ac["overall"]["delta"] == 0
    # The same verdicts read from each candidate's own results.
    verdicts = [{r["id"]: r["passed"] for r in json.load(open(os.path.join(out, name)))["results"]}
                for name in ("results.json", "results_b.json", "results_c.json")]
    assert flipped == {(t, verdicts[0][t], verdicts[1][t]) for t in verdicts[0] if verdicts[0][t] != verdicts[1][t]}
    assert ab["categories"]["synth"]["delta"] == pytest.approx(ab["overall"]["delta"])
    assert open_page(browser, os.path.join(out, "report.html"), os.path.join(out, "report.png")) == []
    overview = browser.find_elements("css selector", "#overview tr[data-candidate]")
    assert [r.get_attribute("data-candidate") for r in overview] == [a, b, c]
    rows = {r.get_attribute("data-test-id"): [td.text for td in r.find_elements("css selector", "td")][3:6]
            for r in browser.find_elements("css selector", "#flips tr.flipped")}
    assert set(rows) == {f[0] for f in flipped}
    assert rows["synth_s0_01000_absent_04"] == ["fail", "pass", "fail"]
    first = browser.find_elements("css selector", "section.page")[0]
    assert first.get_attribute("data-pdf") == "synth_s0_01000.pdf"  # the page whose verdicts differ first
    assert len(first.find_elements("css selector", "div.markdown")) == 3  # every output side by side
    # Each figure with its count, and how overall is made beside the plain share of tests passed.
    summary = json.load(open(os.path.join(out, "results.json")))
    synth = summary["categories"]["synth"]
    section = browser.find_elements("css selector", "section.candidate")[0]
    rates = [t.text for t in section.find_elements("css selector", "svg.bars text.rate")]
    assert f"{100 * synth['pass_rate']:.1f}% ({round(synth['pass_rate'] * synth['tests'])}/{synth['tests']} tests)" in rates
    made = section.find_element("css selector", "p.overall-made").text
    assert f"synth {100 * synth['pass_rate']:.1f}% of {synth['tests']}" in made
    assert f"the plain share of tests passed is {100 * summary['share']:.1f}% ({summary['passed']} of " \
           f"{summary['tests']})" in made
    assert summary["share"] == pytest.approx(summary["passed"] / summary["tests"])


# Training runs' plots: tests/test_bench_eval.py (SFT), tests/test_grpo.py (GRPO).
def figure_series(png: str) -> dict:
    from PIL import Image

    with Image.open(png) as image:
        return json.loads(image.text["olmocr:series"])


def expected(rows: list[dict], kind: str, key: str) -> list[list]:
    points = {r["step"]: r[key] for r in rows if r["kind"] == kind and key in r}
    return [sorted(points), [points[s] for s in sorted(points)]]


def test_pipeline_viewer_shows_each_page_beside_its_text_with_fallback_pages_marked(tmp_path, browser, monkeypatch):
    from chat_server import UNPARSEABLE, ChatServer, good, pixels_key
    from conftest import write_pdf
    from test_pipeline_ocr import page_keys, pipeline_overrides, run_pipeline

    from olmocr.config import compose
    from olmocr.report.viewer import run

    os.makedirs(tmp_path / "in")
    three = write_pdf(str(tmp_path / "in" / "three.pdf"), ["First page", "Second page words", "Third page"])
    one = write_pdf(str(tmp_path / "in" / "one.pdf"), ["Only page with a table"])
    (tmp_path / "in" / "broken<b>.pdf").write_bytes(b"%PDF-1.4 <script>no</script>")
    bad = page_keys(three, 3)[1]
    answers = {k: good(f"Model text of page {n} | with \\(x^2\\)") for n, k in enumerate(page_keys(three, 3), 1)}

    def script(request):
        key = pixels_key(request.image)
        if key == bad:
            return UNPARSEABLE
        return answers.get(key, good("## Results\n\n7. seventh\n8. eighth\n\n<table><tr><td>cell</td></tr></table>"))

    workspace = str(tmp_path / "ws")
    with ChatServer(script=script) as server:
        run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run", f"pdfs=[{tmp_path}/in]",
                                        "convert.temperatures=[0.1]", "work.max_page_error_rate=1"), tmp_path / "run")
    out = str(tmp_path / "viewer")
    index = run(compose("report_viewer", [f"results={workspace}"]), out)
    assert open_page(browser, index, os.path.join(out, "index.png")) == []
    rows = browser.find_elements("css selector", "#documents tr[data-name]")
    assert sorted(r.find_element("css selector", "a").text for r in rows) == sorted([three, one])
    # What the workspace did not convert, with its reason (names and details shown as text, never run).
    bad = browser.find_elements("css selector", "#not-converted tr[data-name]")
    assert [r.text for r in bad] == [f"{tmp_path}/in/broken<b>.pdf bad unreadable_pdf " +
                                     bad[0].find_elements("css selector", "td")[3].text]
    assert "not converted: 1 (bad: unreadable_pdf 1)" in browser.find_element("css selector", "#summary").text
    search = browser.find_element("css selector", "#search")
    search.send_keys("THREE")  # by name, any case
    assert [r.is_displayed() for r in rows] == [three in r.text for r in rows]
    assert "broken" not in " ".join(r.text for r in bad if r.is_displayed())
    # A page per document: each page's image (a file beside the pages, not inlined) beside its text.
    links = {a.get_attribute("textContent"): a.get_attribute("href")  # hidden rows have no .text
             for a in (r.find_element("css selector", "a") for r in rows)}
    browser.get(links[three])
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    browser.save_screenshot(os.path.join(out, "document.png"))
    assert browser.find_element("css selector", "section.document").get_attribute("data-source") == three
    pages = browser.find_elements("css selector", "div.page")
    images = browser.find_elements("css selector", "div.page img")
    assert len(pages) == 3 and len(images) == 3
    assert all(browser.execute_script("return arguments[0].naturalWidth", img) > 100 for img in images)
    assert all(img.get_attribute("src").startswith("file://") for img in images)
    fallback = browser.find_elements("css selector", "div.page.fallback")
    assert [p.get_attribute("data-page") for p in fallback] == ["2"]
    assert "Second page words" in fallback[0].text  # the text layer, shown as such
    assert "text layer" in fallback[0].text
    assert browser.find_elements("css selector", "div.markdown math")  # equations drawn as MathML
    assert "is_table False" in pages[0].text
    browser.get(links[one])
    assert browser.find_elements("css selector", "div.markdown table td")  # tables as tables
    # and the page's list numbers and heading level as written
    [box] = browser.find_elements("css selector", "div.markdown")
    assert browser.execute_script("const ol = arguments[0].querySelector('ol'); return [ol.start, ol.children.length]",
                                  box) == [7, 2]
    assert [h.text for h in box.find_elements("css selector", "h2")] == ["Results"]
    assert os.path.getsize(os.path.join(out, "document.png")) > 10_000
    assert len(os.listdir(os.path.join(out, "pages"))) == 4
    # Run again into the same dir: the pages written are kept, a missing one is written again.
    written = {p: os.path.getmtime(p) for p in glob.glob(os.path.join(out, "docs", "*.html"))}
    os.remove(min(written))
    run(compose("report_viewer", [f"results={workspace}"]), out)
    again = {p: os.path.getmtime(p) for p in glob.glob(os.path.join(out, "docs", "*.html"))}
    assert again.keys() == written.keys() and [p for p in written if again[p] != written[p]] == [min(written)]
    assert json.load(open(os.path.join(out, "run_info.json")))["summary"]["kept"] == 1
    # Without results=, the viewer shows the workspace a pipeline run without workspace= writes.
    cfg = compose("report_viewer", [])
    shutil.copytree(workspace, tmp_path / "cwd" / cfg.paths.sample_workspace)
    monkeypatch.chdir(tmp_path / "cwd")
    default = run(cfg, str(tmp_path / "viewer_default"))
    assert open(default).read().count("<tr data-name=") == 3  # two documents, one not converted


def test_model_output_is_drawn_but_never_run():
    from olmocr.formats.html import markdown_html

    html = markdown_html('A ![a chart](page_1_2_3_4.png) <script>alert(1)</script> <img src=x onerror="alert(2)">'
                         ' <table><tr><td colspan="2" onclick="x()">cell</td></tr></table> \\(a^2\\) \\[\\frac{1}{2}\\]'
                         ' \\(\\badmacro\\)', marks=["cell"])
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "onerror" not in html and "onclick" not in html and "src=" not in html
    assert '[figure: a chart]' in html and '<td colspan="2"><mark>cell</mark></td>' in html
    assert html.count("<math") == 2 and 'display="inline"' in html and 'display="block"' in html
    assert '<code class="fail" title="KaTeX cannot parse this">\\badmacro</code>' in html


@pytest.mark.integration
def test_a_stage_whose_storage_refuses_or_does_not_answer_ends_in_one_line_naming_the_remote_places(tmp_path,
                                                                                                  s3_server):
    """s3fs's errors name no bucket: the line gives the error's gist and the config's remote places."""
    import boto3

    from olmocr.faults import outside
    from support.faultproxy import FaultProxy

    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket="converted")
    command = [sys.executable, "-m", "olmocr.report.viewer", "results=s3://converted/ws", "storage_wait_s=0",
               f"hydra.run.dir={tmp_path}/run"]
    for fault, expected in [("access_denied", "error: the storage refused the credentials (PermissionError: Access "
                                              "Denied); the config's remote places: results=s3://converted/ws"),
                            ("outage", r"error: the storage or a service did not answer \(EndpointConnectionError: "
                                       r"Could not connect to the endpoint URL: \"http://127\.0\.0\.1:\d+/converted\?"
                                       r"[^\"]+\"\); the config's remote places: results=s3://converted/ws")]:
        with FaultProxy(s3_server, rate=1.0, faults=("access_denied",)) as proxy:
            if fault == "outage":
                proxy.outage(600)
            run = subprocess.run(command, cwd=tmp_path, env={**os.environ, "AWS_ENDPOINT_URL": proxy.endpoint},
                                 capture_output=True, text=True, timeout=120)
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-3000:]
        assert re.fullmatch(re.escape(expected) if fault == "access_denied" else expected,
                            run.stderr.strip().splitlines()[-1]), run.stderr[-1000:]
    assert outside(PermissionError(13, "Permission denied", "/data/runs")) == "permission denied: /data/runs"
    assert outside(RuntimeError("a bug")) is None


@pytest.mark.integration
def test_the_viewer_waits_out_storage_and_never_keeps_a_page_unreadable_because_of_an_outage(tmp_path, s3_server,
                                                                                            monkeypatch):
    """A document page is kept by later runs: an outage while its PDF was read wrote 'cannot read' into it for
    good. Reads wait the storage out (the client's own retries off here); refused credentials end the run in
    one line, no page written."""
    import s3fs
    from conftest import write_pdf

    from olmocr.config import compose
    from olmocr.faults import Unreachable
    from olmocr.report.viewer import run
    from support.faultproxy import FaultProxy

    fs = s3fs.S3FileSystem(skip_instance_cache=True, client_kwargs={"endpoint_url": s3_server})
    fs.mkdir("converted")
    fs.put_file(write_pdf(str(tmp_path / "a.pdf"), ["Remote page one", "Remote page two"]), "converted/pdfs/a.pdf")
    texts = ["Page one read", "Page two read"]
    doc = {"id": "d1", "text": "\n".join(texts), "source": "olmocr",
           "metadata": {"Source-File": "s3://converted/pdfs/a.pdf", "pdf-total-pages": 2, "total-input-tokens": 9,
                        "total-output-tokens": 9, "total-fallback-pages": 0},
           "attributes": {"pdf_page_numbers": [[0, 14, 1], [14, 27, 2]], "primary_language": ["en", "en"],
                          "is_rotation_valid": [True, True], "rotation_correction": [0, 0], "is_table": [False, False],
                          "is_diagram": [False, False], "is_fallback": [False, False]}}
    fs.pipe_file("converted/ws/results/output_x.jsonl", (json.dumps(doc) + "\n").encode())
    fs.pipe_file("converted/ws/bad/x.jsonl", json.dumps({"source": "s3://converted/pdfs/b.pdf", "status": "bad",
                                                         "reason": "unreadable_pdf", "detail": "truncated"}).encode())
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with FaultProxy(s3_server, rate=0.0) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        for path in ("/converted/ws/results/output_x", "/converted/pdfs/a", "/converted/ws/bad/x"):
            proxy.outage_when("GET", rf"{path}\.(jsonl|pdf)$", 1)
        index = run(compose("report_viewer", ["results=s3://converted/ws"]), str(tmp_path / "viewer"))
        assert proxy.counts["outage", "GET"] >= 3
    [page] = glob.glob(str(tmp_path / "viewer" / "docs" / "*.html"))
    html = open(page).read()
    assert "cannot read" not in html and html.count('<img alt="page') == 2 and "Page two read" in html
    assert "unreadable_pdf" in open(index).read()
    with FaultProxy(s3_server, rate=1.0, faults=("access_denied",), methods=("GET",), paths=r"/pdfs/a\.pdf$") as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        with pytest.raises(Unreachable, match=r"^s3://converted/pdfs/a\.pdf: the storage refused the credentials"):
            run(compose("report_viewer", ["results=s3://converted/ws"]), str(tmp_path / "viewer2"))
    assert not glob.glob(str(tmp_path / "viewer2" / "docs" / "*.html"))


def test_the_viewer_draws_each_block_where_its_text_is_on_the_page_coloured_by_label(tmp_path, browser):
    """A model that writes blocks (scripted: the page's own truth blocks): the viewer draws each block's box over
    the page image where poppler finds the block's text, its label and text on hover."""
    from chat_server import ChatServer, answer, pixels_key
    from test_pipeline_ocr import page_keys, pipeline_overrides, run_pipeline

    from olmocr.config import compose
    from olmocr.formats.frontmatter import parse_document, write_document
    from olmocr.formats.structure import blocks_from_record, format_blocks
    from olmocr.report.viewer import LABEL_COLOURS, run

    pdf = os.path.join(BENCH, "pdfs", "synth_s0_01003.pdf")
    record = json.load(open(pdf[:-4] + ".blocks.json"))
    meta, _ = parse_document(open(pdf[:-4] + ".md").read())
    reply = answer(write_document(meta, format_blocks(blocks_from_record(record))))
    key = page_keys(pdf, 1)[0]
    os.makedirs(tmp_path / "in")
    shutil.copy(pdf, tmp_path / "in" / "page.pdf")
    workspace = str(tmp_path / "ws")
    with ChatServer(script=lambda r: reply if pixels_key(r.image) == key else answer("?")) as server:
        run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run", f"pdfs=[{tmp_path}/in]",
                                        "convert.steps.prompt.version=blocks", "convert.max_tokens=4000"),
                     tmp_path / "run")
    out = str(tmp_path / "viewer")
    index = run(compose("report_viewer", [f"results={workspace}"]), out)
    assert open_page(browser, index, os.path.join(out, "index.png")) == []
    browser.get(browser.find_element("css selector", "#documents a").get_attribute("href"))
    browser.set_window_size(1400, 1800)
    browser.save_screenshot(os.path.join(out, "blocks.png"))
    [image] = browser.find_elements("css selector", "div.blocks img")
    frame = image.rect
    drawn = browser.find_elements("css selector", "div.blocks div.block")
    assert [d.get_attribute("data-label") for d in drawn] == [b["label"] for b in record["blocks"]]
    # Where poppler finds each line of text, in the image's pixels: inside the box drawn for its block.
    words = subprocess.run(["pdftotext", "-bbox-layout", pdf, "-"], capture_output=True, text=True).stdout
    lines = [tuple(float(v) for v in m) for m in re.findall(
        r'<line xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)"', words)]
    width, height = record["page_size"]
    sx, sy = frame["width"] / width, frame["height"] / height
    rects = [d.rect for d in drawn]
    for x0, y0, x1, y1 in lines:
        cx, cy = frame["x"] + (x0 + x1) / 2 * sx, frame["y"] + (y0 + y1) / 2 * sy
        holders = [r for r in rects if r["x"] <= cx <= r["x"] + r["width"] and r["y"] <= cy <= r["y"] + r["height"]]
        assert len(holders) == 1, (x0, y0, x1, y1)
    for d, block in zip(drawn, record["blocks"]):
        bx0, by0, bx1, by1 = block["box"]
        assert d.rect["x"] - frame["x"] == pytest.approx(bx0 / 1000 * frame["width"], abs=1.5)
        assert d.rect["height"] == pytest.approx((by1 - by0) / 1000 * frame["height"], abs=1.5)
        assert d.get_attribute("title") == f"{block['label']}: {block['text']}"
        colour = browser.execute_script("return getComputedStyle(arguments[0]).borderTopColor", d)
        hexed = "#" + "".join(f"{int(v):02x}" for v in re.findall(r"\d+", colour)[:3])
        assert hexed == LABEL_COLOURS[block["label"]]
