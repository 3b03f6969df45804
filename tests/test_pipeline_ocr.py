"""Page conversion: retries, rotation and fallback against a scripted local chat server; Dolma documents,
markdown and bad PDFs through the pipeline stage (local and S3 workspaces); the real `transformers serve`
with the tiny model end to end, killed mid-run, failing to start; bench mode scored by olmocr.bench."""

from __future__ import annotations

import datetime
import glob
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest
from chat_server import (
    CUT_OFF,
    DROP,
    SERVER_ERROR,
    UNPARSEABLE,
    ChatServer,
    answer,
    good,
    pixels_key,
    rotated,
)
from conftest import SAMPLE, write_encrypted_pdf, write_pdf
from omegaconf import OmegaConf
from PIL import Image

import olmocr.pipeline.queue as wq
from olmocr.config import CONF_DIR, PROJECT_ROOT, compose
from olmocr.faults import Unreachable
from olmocr.pipeline.convert import TEMPERATURES, PageConverter, PageResult, turn
from olmocr.pipeline.server import ExternalServer
from olmocr.pipeline.workspace import Workspace
from work_helpers import done_records

SIDE = 200  # small renders keep the scripted tests fast; the real-server tests render at 1288


def steps(longest_side: int = SIDE) -> dict:
    cfg = OmegaConf.to_container(OmegaConf.load(os.path.join(CONF_DIR, "data", "steps", "prompt_v4.yaml")))
    cfg["render"]["longest_side"] = longest_side
    return cfg


def converter(server: ChatServer, tmp_path, **options) -> PageConverter:
    return PageConverter(ExternalServer(server.url, "scripted"), steps(), log_dir=str(tmp_path),
                         **{"max_tokens": 100, "concurrency": 4, "render_threads": 2, **options})


def convert_page(conv: PageConverter, pdf: str, page: int = 1) -> PageResult:
    with conv:
        return conv.run(conv.convert({"pdf_path": pdf, "page": page}, pdf))


def test_failed_attempts_retry_at_the_temperature_schedule(tmp_path):
    pdf = write_pdf(str(tmp_path / "a.pdf"), ["Words on the page"])
    with ChatServer([UNPARSEABLE, CUT_OFF, SERVER_ERROR, good("The page, read.")]) as server:
        result = convert_page(converter(server, tmp_path), pdf)
    assert [r.temperature for r in server.requests] == TEMPERATURES[:4]
    outcomes = [a["outcome"] for a in result.attempts]
    assert outcomes[0].startswith("unparseable: document does not start with a '---'")
    assert outcomes[1:] == ["cut off at max_tokens=100", 'HTTP 500: {"error": "scripted failure"}', "ok"]
    assert (result.text, result.fallback, result.meta.primary_language) == ("The page, read.", False, "en")
    assert (result.input_tokens, result.output_tokens) == (300, 30)  # every answered attempt is paid for
    # Every attempt sends the same page, rendered and prompted by the inference steps.
    from olmocr.formats.prompts import PROMPT_V4

    assert {r.text for r in server.requests} == {PROMPT_V4}
    assert len({pixels_key(r.image) for r in server.requests}) == 1 and max(server.requests[0].image.size) in (SIDE, SIDE + 1)


def test_a_dropped_connection_is_sent_again_without_spending_an_attempt(tmp_path):
    from olmocr.pipeline.client import MAX_DROPS

    pdf = write_pdf(str(tmp_path / "a.pdf"), ["A page"])
    with ChatServer([DROP, DROP, good("Read.")]) as server:
        result = convert_page(converter(server, tmp_path), pdf)
    assert len(server.requests) == 3 and [a["outcome"] for a in result.attempts] == ["ok"] and result.text == "Read."
    # A server that stays up but drops this page's connection every time: each attempt fails after a few.
    with ChatServer([DROP]) as server:
        result = convert_page(converter(server, tmp_path, temperatures=[0.1, 0.2]), pdf)
    assert len(server.requests) == 2 * MAX_DROPS and result.fallback
    assert all(a["outcome"].startswith(f"connection lost {MAX_DROPS} times") for a in result.attempts)


@pytest.mark.integration
def test_a_busy_server_is_asked_again_and_a_busy_or_refusing_one_sends_the_item_back(tmp_path):
    """429/5xx gateway answers are the server's state, not the page's: asked again without spending an
    attempt; busy past convert.busy_s, or refusing the key (401), the item goes back to the queue."""
    from olmocr.pipeline.failures import Unavailable, transient

    pdf = write_pdf(str(tmp_path / "a.pdf"), ["A page"])
    with ChatServer([answer("", status=503), answer("", status=429), good("Read.")]) as server:
        result = convert_page(converter(server, tmp_path), pdf)
    assert len(server.requests) == 3 and [a["outcome"] for a in result.attempts] == ["ok"] and result.text == "Read."
    for status, message in ((503, r"busy for 1 s \(convert.busy_s\): HTTP 503"), (401, "refused the request: HTTP 401")):
        with ChatServer([answer("", status=status)]) as server:
            with pytest.raises(Unavailable, match=message) as caught:
                convert_page(converter(server, tmp_path, busy_s=1), pdf)
        assert transient(caught.value)


def test_after_the_last_attempt_the_page_falls_back_to_its_text_layer(tmp_path):
    pdf = write_pdf(str(tmp_path / "a.pdf"), ["First page", "Second page has its own words"])
    with ChatServer([UNPARSEABLE]) as server:
        result = convert_page(converter(server, tmp_path, temperatures=[0.0, 0.4, 0.9]), pdf, page=2)
    assert [r.temperature for r in server.requests] == [0.0, 0.4, 0.9]
    assert result.fallback and result.text == "Second page has its own words"
    assert result.meta.primary_language is None and result.meta.is_rotation_valid


@pytest.mark.parametrize("direction, transposes", [
    ("clockwise", [None, Image.Transpose.ROTATE_270, Image.Transpose.ROTATE_180]),
    ("counterclockwise", [None, Image.Transpose.ROTATE_90, Image.Transpose.ROTATE_180]),
])
def test_a_page_the_model_finds_turned_is_sent_again_turned_back(tmp_path, direction, transposes):
    pdf = write_pdf(str(tmp_path / "a.pdf"), ["An upright page"])
    with ChatServer([rotated(90), rotated(90), good("Upright now.")]) as server:
        result = convert_page(converter(server, tmp_path, rotation_direction=direction), pdf)
    first = server.requests[0].image
    assert [pixels_key(r.image) for r in server.requests] == [
        pixels_key(first if t is None else first.transpose(t)) for t in transposes]
    assert [a["rotation"] for a in result.attempts] == [0, 90, 180]
    assert result.text == "Upright now." and result.meta.is_rotation_valid and not result.fallback
    assert result.turned == 180  # the clockwise turn of the reading kept
    assert turn(first, 90, direction).size == first.size[::-1]


def test_a_page_still_turned_after_every_attempt_keeps_the_models_last_reading(tmp_path):
    pdf = write_pdf(str(tmp_path / "a.pdf"), ["A page"])
    with ChatServer([rotated(180)]) as server:
        result = convert_page(converter(server, tmp_path, temperatures=[0.1, 0.2]), pdf)
    assert len(server.requests) == 2 and not result.fallback
    assert (result.text, result.meta.is_rotation_valid, result.meta.rotation_correction) == ("sideways text", False, 180)


def test_bad_options_fail_before_any_server_is_reached(tmp_path):
    server = ExternalServer("http://127.0.0.1:9/v1", "m")
    with pytest.raises(ValueError, match="temperatures"):
        PageConverter(server, steps(), temperatures=[])
    for option, match in [("rotation_direction=left", "rotation_direction: expected one of clockwise"),
                          ("max_tokens=0", "max_tokens: must be at least 1"),
                          ("concurrency=0", "concurrency: must be at least 1")]:
        with pytest.raises(ValueError, match=f"^convert.{match}"):
            compose("pipeline", [f"convert.{option}"])
    with pytest.raises(ValueError, match="'messages' step"):
        PageConverter(server, {k: v for k, v in steps().items() if k != "messages"})
    with pytest.raises(ValueError, match="server.url"):
        ExternalServer("localhost:8000", "m")


def test_guided_decoding_constrains_every_request_to_the_page_format(tmp_path):
    """convert.guided=true: every request carries vLLM's structured_outputs regex of the page format; a
    server that refuses it is one line at start (one check request, no page sent), and transformers serve,
    which cannot constrain decoding, is refused before it is started."""
    import re

    from chat_server import GOOD

    from olmocr.pipeline.convert import PAGE_REGEX
    from olmocr.pipeline.server import TransformersServer

    assert re.fullmatch(PAGE_REGEX, GOOD + "Text\n\nmore") and re.fullmatch(PAGE_REGEX, GOOD.rstrip("\n"))
    assert not re.fullmatch(PAGE_REGEX, "no front matter") and not re.fullmatch(PAGE_REGEX, GOOD.replace(": 0", ": 45"))
    pdf = write_pdf(str(tmp_path / "a.pdf"), ["A page"])
    with ChatServer([good("Read.")]) as server:
        result = convert_page(converter(server, tmp_path, guided=True), pdf)
    check, page = server.requests
    assert check.image is None and page.image is not None and result.text == "Read."
    assert check.body["structured_outputs"] == page.body["structured_outputs"] == {"regex": PAGE_REGEX}
    with ChatServer([good("Read.")]) as server:
        convert_page(converter(server, tmp_path), pdf)
    assert [("structured_outputs" in r.body) for r in server.requests] == [False]
    with ChatServer([answer("", status=400)]) as server:
        with pytest.raises(ValueError, match=r"^convert.guided: the server at http://127.0.0.1:\d+/v1 refuses requests "
                                             r"constrained to the page format \(structured_outputs\): HTTP 400"):
            convert_page(converter(server, tmp_path, guided=True), pdf)
        assert len(server.requests) == 1
    with pytest.raises(ValueError, match=r"^convert.guided: transformers serve does not constrain decoding"):
        PageConverter(TransformersServer(model=None), steps(), guided=True)


def pipeline_overrides(server: ChatServer, workspace: str, run_dir, *extra: str) -> list[str]:
    return [f"workspace={workspace}", "server=external", f"server.url={server.url}", "server.model_name=scripted",
            "work=ocr", "convert=default", f"convert.steps.render.longest_side={SIDE}", "convert.max_tokens=100",
            "workers=1", "progress=false", f"hydra.run.dir={run_dir}", *extra]


def run_pipeline(overrides: list[str], output_dir) -> dict:
    from olmocr.pipeline.__main__ import run

    return run(compose("pipeline", overrides), str(output_dir))


def page_keys(pdf: str, pages: int) -> list[str]:
    """What each page looks like to the model: rendered by the same steps the pipeline runs."""
    from olmocr.data.chain import build_pipeline

    render = build_pipeline(steps())
    return [pixels_key(render({"pdf_path": pdf, "page": n})["image"]) for n in range(1, pages + 1)]


def test_documents_become_dolma_lines_with_pages_in_order_and_bad_pdfs_are_counted(tmp_path):
    pdfs = tmp_path / "in"
    os.makedirs(pdfs / "sub")
    three = write_pdf(str(pdfs / "sub" / "three.pdf"), ["Page one", "Page two (blank to the model)", "Page three"])
    one = write_pdf(str(pdfs / "one.pdf"), ["Only page"])
    (pdfs / "corrupt.pdf").write_bytes(b"%PDF-1.7 this is not a PDF")
    (pdfs / "empty.pdf").write_bytes(b"")
    write_encrypted_pdf(str(pdfs / "locked.pdf"))
    keys = page_keys(three, 3)
    texts = {keys[0]: "First page text.", keys[1]: "", keys[2]: "Third page text."}

    def script(request):
        key = pixels_key(request.image)
        return good(texts.get(key, "The only page."))

    workspace = str(tmp_path / "ws")
    with ChatServer(script=script) as server:
        summary = run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run", f"pdfs=[{pdfs}]",
                                                  "work.page_results=true"), tmp_path / "run")
    counts = summary["work"]["counts"]
    assert counts == {"documents": 2, "pages": 4, "bad_documents": 3, "dropped_documents": 0, "fallback_pages": 0,
                      "input_tokens": 400, "output_tokens": 40, "bad_empty_document": 1, "bad_encrypted_pdf": 1,
                      "bad_unreadable_pdf": 1}
    listed = {row["source"]: row for path in glob.glob(f"{workspace}/bad/*.jsonl") for row in map(json.loads, open(path))}
    assert {source: (row["status"], row["reason"]) for source, row in listed.items()} == {
        str(pdfs / "corrupt.pdf"): ("bad", "unreadable_pdf"), str(pdfs / "empty.pdf"): ("bad", "empty_document"),
        str(pdfs / "locked.pdf"): ("bad", "encrypted_pdf")}
    assert all(row["detail"] and not row["detail"].startswith(row["reason"]) for row in listed.values())
    lines = [json.loads(line) for path in glob.glob(f"{workspace}/results/output_*.jsonl") for line in open(path)]
    docs = {d["metadata"]["Source-File"]: d for d in lines}
    assert set(docs) == {three, one}
    doc = docs[three]
    assert doc["text"] == "First page text.\nThird page text."
    assert doc["attributes"]["pdf_page_numbers"] == [[0, 17, 1], [17, 17, 2], [17, 33, 3]]
    assert doc["text"][0:17] == "First page text.\n" and doc["text"][17:33] == "Third page text."
    assert doc["attributes"]["primary_language"] == ["en", "en", "en"]
    assert doc["attributes"]["is_rotation_valid"] == [True] * 3
    assert doc["attributes"]["rotation_correction"] == [0] * 3
    assert doc["attributes"]["is_table"] == doc["attributes"]["is_diagram"] == [False] * 3
    assert doc["attributes"]["is_fallback"] == [False] * 3
    assert doc["metadata"] == {"Source-File": three, "olmocr-version": "0.1.0", "model": "scripted",
                               "pdf-total-pages": 3, "total-input-tokens": 300, "total-output-tokens": 30,
                               "total-fallback-pages": 0}
    assert doc["source"] == "olmocr" and doc["created"] == "2000-01-01"  # the PDF's own creation date
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    assert doc["added"] == today and len(doc["id"]) == 40
    assert docs[one]["text"] == "The only page." and docs[one]["id"] != doc["id"]
    # The markdown mirror of the PDF tree, and every page's record.
    assert open(f"{workspace}/markdown/{three.lstrip('/')[:-4]}.md").read() == doc["text"]
    assert open(f"{workspace}/markdown/{one.lstrip('/')[:-4]}.md").read() == "The only page."
    records = [json.loads(line) for path in glob.glob(f"{workspace}/pages/*.jsonl") for line in open(path)]
    assert sorted((r["source"], r["page"]) for r in records) == sorted([(three, 1), (three, 2), (three, 3), (one, 1)])
    assert all(r["attempts"] == [{"temperature": 0.1, "rotation": 0, "outcome": "ok"}] for r in records)


def test_a_document_with_too_many_fallback_pages_is_dropped(tmp_path):
    pdf = write_pdf(str(tmp_path / "two.pdf"), ["A good page", "A page the model cannot read"])
    bad = page_keys(pdf, 2)[1]

    def script(request):
        return UNPARSEABLE if pixels_key(request.image) == bad else good("Read well.")

    for rate, kept in (("0.004", False), ("0.5", True)):
        workspace = str(tmp_path / f"ws{rate}")
        with ChatServer(script=script) as server:
            summary = run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run", f"pdfs=[{pdf}]",
                                                      "convert.temperatures=[0.1,0.5]",
                                                      f"work.max_page_error_rate={rate}"), tmp_path / "run")
        counts = summary["work"]["counts"]
        assert counts["fallback_pages"] == 1 and counts["dropped_documents"] == (0 if kept else 1)
        lines = [json.loads(line) for path in glob.glob(f"{workspace}/results/*.jsonl") for line in open(path)]
        assert len(lines) == int(kept)
        listed = [json.loads(line) for path in glob.glob(f"{workspace}/bad/*.jsonl") for line in open(path)]
        assert listed == ([] if kept else [{"source": pdf, "status": "dropped", "reason": "fallback_pages", "detail":
                                            "1 of its 2 pages fell back to the text layer (more than "
                                            "max_page_error_rate 0.004)",
                                            "failed_attempts": {"unparseable": 2}}])
        if kept:
            assert lines[0]["text"] == "Read well.\nA page the model cannot read"
            assert lines[0]["metadata"]["total-fallback-pages"] == 1
            assert lines[0]["attributes"]["primary_language"] == ["en", None]
            assert lines[0]["attributes"]["is_fallback"] == [False, True]


def test_a_page_the_server_refuses_while_it_answers_others_is_that_pages_failure(tmp_path):
    """The server answers one page with HTTP 500 every time (as a vision processor refuses a shape) and every other
    page, and its check page, as usual: that page falls back to its text layer, marked refused by the server; its
    document is dropped for it (listed in bad/ with what the attempts came to); the other documents convert and the
    run ends, the worker never paused. The server is asked one other page for the refused page, not one an
    attempt."""
    poison = write_pdf(str(tmp_path / "poison.pdf"), ["The page the server refuses"])
    for name in "ab":
        write_pdf(str(tmp_path / f"{name}.pdf"), [f"Page of {name}"])
    refused = page_keys(poison, 1)[0]

    def script(request):
        return answer("", status=500) if pixels_key(request.image) == refused else good("Read.")

    workspace = str(tmp_path / "ws")
    with ChatServer(script=script) as server:
        began = time.monotonic()
        summary = run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run", f"pdfs=[{tmp_path}/*.pdf]",
                                                  "pages_per_group=1", "convert.temperatures=[0.1,0.2,0.3]",
                                                  "queue.retry_wait_s=30", "queue.pause_after=1"), tmp_path / "run")
        took = time.monotonic() - began
        # The start check, 3 attempts of the refused page, the 2 others, and one look for the refused page: the check
        # page, or the last page answered sent again
        assert len(server.checks) + len(server.requests) == 7
    work = summary["work"]
    assert (work["done"], work["failed"], work["unavailable"]) == (3, 0, 0) and took < 30  # no retry wait, no pause
    counts = work["counts"]
    assert (counts["documents"], counts["dropped_documents"], counts["refused_pages"], counts["fallback_pages"]) == (
        2, 1, 1, 1)
    listed = [json.loads(line) for path in glob.glob(f"{workspace}/bad/*.jsonl") for line in open(path)]
    assert [(e["source"], e["reason"], e["failed_attempts"]) for e in listed] == [
        (poison, "fallback_pages", {'HTTP 500': 3, "refused by the server, which answers other pages": 1})]


def test_a_server_that_answers_its_check_but_refuses_every_page_is_the_servers_fault_within_a_few_pages(tmp_path):
    """HTTP 500 for every real page while the check page is answered (a server that fails long generations) and no
    real page ever answered: the pages of the first documents look refused for themselves, but from the
    CHECK_ONLY_DOCUMENTS-th document in a row the failures are the server's: the items go back uncounted and the
    worker stops naming the server. With the server mended, everything not yet done converts."""
    from olmocr.pipeline.convert import CHECK_ONLY_DOCUMENTS

    for n in range(12):
        write_pdf(str(tmp_path / f"d{n:02d}.pdf"), [f"Document {n}"])
    workspace = str(tmp_path / "ws")
    options = ["pages_per_group=1", "convert.temperatures=[0.1]", "queue.retry_wait_s=0.2", "queue.retry_wait_max_s=0.5",
               "queue.give_up_after_s=2"]
    with ChatServer([answer("", status=500)]) as server:
        with pytest.raises(Unreachable, match="failed page 1 of .*HTTP 500"):
            run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run", f"pdfs=[{tmp_path}/*.pdf]", *options),
                         tmp_path / "run")
    done = list(done_records(Workspace(workspace)).values())
    assert len(done) == CHECK_ONLY_DOCUMENTS - 1 and all(d["counts"]["refused_pages"] == 1 for d in done)
    with ChatServer([good("Read.")]) as server:
        summary = run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run2", *options), tmp_path / "run2")
    assert summary["work"]["done"] == 12 - len(done) and summary["work"]["counts"]["documents"] == 12 - len(done)


def test_a_server_that_is_unreachable_or_refuses_the_key_stops_the_run_before_any_claim(tmp_path, monkeypatch):
    pdf = write_pdf(str(tmp_path / "a.pdf"), ["A page"])
    workspace = str(tmp_path / "ws")
    overrides = ["server=external", "server.model_name=m", f"workspace={workspace}", f"pdfs=[{pdf}]", "workers=1",
                 "progress=false"]
    with pytest.raises(Unreachable, match=r"^server http://127.0.0.1:9/v1: unreachable for 1 s \(server.unreachable_s\)"
                                          r" \(the items this worker held go back to the queue\)$"):
        run_pipeline([*overrides, "server.url=http://127.0.0.1:9/v1", "server.unreachable_s=1"], tmp_path / "run")
    monkeypatch.setenv("SERVER_KEY", "stale")
    with ChatServer(api_key="fresh") as server:
        with pytest.raises(ValueError, match=r"^server http://127.0.0.1:\d+/v1: refused the key in \$SERVER_KEY: "
                                             r"HTTP 401$"):
            run_pipeline([*overrides, f"server.url={server.url}", "server.api_key_env=SERVER_KEY"], tmp_path / "run2")
        assert not server.requests  # no page was sent
    assert glob.glob(f"{workspace}/workers/*.json")  # the workspace was checked …
    assert not glob.glob(f"{workspace}/claims/*") and not glob.glob(f"{workspace}/done/*")  # … and claimed nothing


def test_a_server_that_answers_no_page_stops_the_run_and_marks_nothing_done(tmp_path):
    """Every request answered 404 (a wrong URL path; a model name the server does not serve reads the same:
    tests/test_vllm.py has vLLM's): the start check's page request fails, one line, nothing claimed. A
    server that passes that check and then answers no page of an item: the item goes back uncounted and
    the worker stops after queue.give_up_after_s, one line naming the server, the status and what it said.
    With the server fixed, every document converts."""
    for name in "abc":
        write_pdf(str(tmp_path / f"{name}.pdf"), [f"Page {name}"])
    workspace = str(tmp_path / "ws")
    queue = ["queue.retry_wait_s=0.2", "queue.retry_wait_max_s=0.5", "queue.give_up_after_s=2"]
    not_found = answer("", status=404)
    with ChatServer([not_found], checks=not_found) as server:
        with pytest.raises(ValueError, match=r"^the server at http://127.0.0.1:\d+/v1 does not answer page requests for "
                                             r"model 'scripted': HTTP 404: \{\"error\": \"scripted failure\"\}$"):
            run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run", f"pdfs=[{tmp_path}/*.pdf]",
                                            "pages_per_group=1", *queue), tmp_path / "run")
        assert len(server.checks) == 1 and not server.requests
    assert not glob.glob(f"{workspace}/claims/*")
    with ChatServer([not_found]) as server:
        with pytest.raises(Unreachable) as info:
            run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run2", *queue), tmp_path / "run2")
    line = str(info.value)
    assert "\n" not in line and line.startswith("nothing could be done for ")
    assert re.search(rf"the server at {re.escape(server.url)} failed page 1 of {re.escape(str(tmp_path))}/[abc]\.pdf "
                     r"\(model scripted, 8 attempt\(s\)\): HTTP 404: \{\"error\": \"scripted failure\"\}", line), line
    assert not glob.glob(f"{workspace}/done/*") and not glob.glob(f"{workspace}/results/*")
    with ChatServer([good("Read.")]) as server:
        summary = run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run3", *queue), tmp_path / "run3")
    assert summary["work"]["done"] == 3 and summary["work"]["counts"]["documents"] == 3


@pytest.mark.parametrize("fault", ["HTTP 404", "HTTP 500", "HTTP 400 wrong model", "no answer"])
@pytest.mark.integration
def test_a_server_that_starts_failing_partway_through_an_item_drops_no_document(tmp_path, fault):
    """The server answers the start check and the first pages, then fails every request (a redeploy that
    lost the route, a crashing replica, another model behind the name, a hung server). None of the item's
    documents is dropped or marked done: the item goes back uncounted and the worker stops in one line
    naming the server, the page and what it said. With the server mended, the same command converts every
    document exactly once."""
    for name in "abcd":
        write_pdf(str(tmp_path / f"{name}.pdf"), [f"Page one of {name}", f"Page two of {name}"])
    failure, said = {"HTTP 404": (answer("", status=404), 'HTTP 404: {"error": "scripted failure"}'),
                     "HTTP 500": (answer("", status=500), 'HTTP 500: {"error": "scripted failure"}'),
                     "HTTP 400 wrong model": (answer("Server is pinned to model-v1", status=400),
                                              'HTTP 400: {"error": "Server is pinned to model-v1"}'),
                     "no answer": ({**good("late"), "delay_s": 3}, "no answer within 1 s (client timeout_s)")}[fault]
    answered = []

    def script(request):
        if len(answered) < 2:
            answered.append(request)
            return good("Read.")
        return failure

    workspace = str(tmp_path / "ws")
    options = ["queue.retry_wait_s=0.2", "queue.retry_wait_max_s=0.5", "queue.give_up_after_s=2",
               "convert.temperatures=[0.1,0.2]", "convert.timeout_s=1", "convert.concurrency=2"]
    # Failing for everything: its check page too, once the start check has passed.
    with ChatServer(script=script, checks=lambda n: good("") if n == 0 else failure) as server:
        with pytest.raises(Unreachable) as info:
            run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run", f"pdfs=[{tmp_path}/*.pdf]", *options),
                         tmp_path / "run")
    line = str(info.value)
    assert "\n" not in line and line.startswith("nothing could be done for "), line
    assert re.search(rf"the server at {re.escape(server.url)} failed page [12] of {re.escape(str(tmp_path))}/[abcd]\.pdf "
                     rf"\(model scripted, 2 attempt\(s\)\): {re.escape(said)}", line), line
    assert len(answered) == 2
    for folder in ("done", "results", "bad", "markdown"):
        assert not glob.glob(f"{workspace}/{folder}/*"), folder
    with ChatServer([good("Read.")]) as server:
        summary = run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run2", *options), tmp_path / "run2")
    counts = summary["work"]["counts"]
    assert (counts["documents"], counts["pages"], counts["fallback_pages"], counts["dropped_documents"]) == (4, 8, 0, 0)
    lines = [json.loads(line) for path in glob.glob(f"{workspace}/results/*.jsonl") for line in open(path)]
    assert sorted(d["metadata"]["Source-File"] for d in lines) == [str(tmp_path / f"{n}.pdf") for n in "abcd"]
    assert not glob.glob(f"{workspace}/bad/*")


@pytest.mark.integration
def test_a_silent_server_and_a_lingering_worker_say_what_they_wait_for_when_the_wait_begins(tmp_path, caplog):
    """The start check's request unanswered for 5 s is said, with how long it is waited for (convert.timeout_s);
    a worker whose only item another worker holds says that it waits, and for what, before it waits."""
    import logging

    from olmocr.pipeline.queue import WorkQueue
    from olmocr.pipeline.workspace import Workspace

    caplog.set_level(logging.INFO, logger="olmocr")
    write_pdf(str(tmp_path / "a.pdf"), ["A page"])
    workspace = str(tmp_path / "ws")
    slow = {**good("Read."), "delay_s": 6}
    with ChatServer([good("Read.")], checks=slow) as server:
        run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run", f"pdfs=[{tmp_path}/a.pdf]", "workers=0"),
                     tmp_path / "run")
        # Never renewed: it expires in 10 s, some seconds after the worker below is past its 6 s start check.
        held = WorkQueue(Workspace(workspace), "elsewhere", lease_s=10).claim_next()
        assert held is not None
        summary = run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run2", "convert.timeout_s=20"),
                               tmp_path / "run2")
    assert summary["work"]["done"] == 1 and summary["work"]["taken_over"] == 1
    said = [r.getMessage() for r in caplog.records]
    assert any(re.fullmatch(rf"the server at {re.escape(server.url)} has answered nothing for [56] s \(1 request\(s\) "
                            r"waiting, model scripted\); each waits up to 20 s \(convert.timeout_s\)", m) for m in said), said
    assert any(re.fullmatch(r"1 item\(s\) held by other workers or waiting to be tried again: waiting until they are "
                            r"done, to take over any whose claim expires \(the next in \d s\) \(queue.linger=false "
                            r"stops now\)", m) for m in said), said


def test_a_damaged_workspace_is_repaired_by_converting_exactly_what_was_lost(tmp_path, capsys):
    """Outside damage to finished items (a result's last line cut short, a done marker full of garbage, a
    result gone): stats warns, the viewer skips and lists the torn line; pipeline.repair finds exactly those
    items (check_only=true changes nothing) and puts them back; the same pipeline command converts them and
    nothing else, ending with every document exactly once and a whole viewer."""
    from olmocr.pipeline.repair import run as repair
    from olmocr.pipeline.stats import run as stats
    from olmocr.pipeline.workspace import Workspace
    from olmocr.report.viewer import run as viewer

    pdfs = [write_pdf(str(tmp_path / f"{name}.pdf"), [f"Page of {name}"]) for name in "abcd"]
    workspace = str(tmp_path / "ws")
    extra = [f"pdfs=[{tmp_path}/*.pdf]", "pages_per_group=1"]
    with ChatServer([good("Read.")]) as server:
        run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run", *extra), tmp_path / "run")
    ws = Workspace(workspace)
    ids = {item.pdfs[0]: item.id for item in wq.items(ws)}
    torn, garbage, lost, whole = (ids[p] for p in pdfs)
    result = os.path.join(workspace, ws.result_name(torn))
    with open(result, "r+b") as fh:
        fh.truncate(os.path.getsize(result) - 20)
    # The workspace is finished: its one part's done records are in its summary; one of them damaged from outside.
    [summary] = glob.glob(f"{workspace}/parts/*.json")
    kept = json.load(open(summary))
    kept["done"] = [r if r["id"] != garbage else "\x00\x17garbage" for r in kept["done"]]
    with open(summary, "w") as fh:
        json.dump(kept, fh)
    os.remove(os.path.join(workspace, ws.result_name(lost)))

    stats(compose("pipeline_stats", [f"workspace={workspace}", f"paths.cache={tmp_path}/cache"]))
    assert "1 done markers could not be read" in capsys.readouterr().out
    index = viewer(compose("report_viewer", [f"results={workspace}"]), str(tmp_path / "viewer"))
    page = open(index).read()
    assert f"results/output_{torn}.jsonl:1" in page and "not_a_dolma_line" in page and "2 of 2 documents shown" in page

    check = compose("pipeline_repair", [f"workspace={workspace}", "check_only=true"])
    assert sorted(repair(check)) == sorted([torn, garbage, lost])
    out = capsys.readouterr().out
    assert f"damaged  {torn}: result is not as written" in out and f"damaged  {lost}: result missing" in out
    assert f"damaged  {garbage}: done marker unreadable" in out and "4 done item(s)" in out and "nothing changed" in out
    assert os.path.exists(result) and len(wq.done_items(ws)) == 4
    assert sorted(repair(compose("pipeline_repair", [f"workspace={workspace}"]))) == sorted([torn, garbage, lost])
    assert "3 damaged, back in the queue" in capsys.readouterr().out
    assert list(done_records(ws)) == [whole]
    assert os.path.exists(f"{workspace}/damaged/output_{torn}.jsonl") and not os.path.exists(result)

    with ChatServer([good("Read again.")]) as server:
        began = time.monotonic()
        summary = run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run2", *extra), tmp_path / "run2")
    assert time.monotonic() - began < 60  # the repaired claims are free at once, not waited out for their lease
    assert summary["work"]["done"] == 3 and summary["work"]["taken_over"] == 0 and len(server.requests) == 3
    lines = [json.loads(line) for path in glob.glob(f"{workspace}/results/*.jsonl") for line in open(path)]
    assert sorted(d["metadata"]["Source-File"] for d in lines) == pdfs
    assert sorted(d["text"] for d in lines) == ["Read again."] * 3 + ["Read."]
    assert repair(compose("pipeline_repair", [f"workspace={workspace}"])) == []
    assert "4 done item(s) of" in capsys.readouterr().out
    page = open(viewer(compose("report_viewer", [f"results={workspace}"]), str(tmp_path / "viewer2"))).read()
    assert "4 of 4 documents shown; not converted: 0" in page


def test_bench_mode_writes_no_page_of_a_server_that_stopped_answering(tmp_path):
    """pipeline.bench keeps the candidates it finds, so a page written from the text layer because the server
    answered none of its requests would stay when the run is made again with the server mended. A page now
    and then is the page's (written from its text layer, as a failed page is); pages in a row are the
    server's: none written, the run stops in one line, and the re-run converts them."""
    from olmocr.formats.pdf import text_layer
    from olmocr.pipeline.bench import run as pipeline_bench

    def bench(server: ChatServer, run: str, *extra: str) -> dict:
        args = [f"bench_dir={SAMPLE}/eval", "server=external", f"server.url={server.url}", "server.model_name=scripted",
                f"convert.steps.render.longest_side={SIDE}", "convert.temperatures=[0.1,0.2]",
                f"candidates={tmp_path}/candidates", "repeats=2", "progress=false", *extra]
        os.makedirs(tmp_path / run, exist_ok=True)
        return pipeline_bench(compose("pipeline_bench", args), str(tmp_path / run))

    with ChatServer([answer("", status=500)]) as server:
        with pytest.raises(Unreachable, match=r"^the server at http://127.0.0.1:\d+/v1 answered no request for the "
                                             r"last 8 pages \(model scripted\): HTTP 500: \{\"error\": \"scripted "
                                             r"failure\"\}; they are not recorded \(pages written so far are kept; run "
                                             r"again to resume\)$"):
            bench(server, "run")
    assert not glob.glob(f"{tmp_path}/candidates/*")
    with ChatServer([answer("", status=503)]) as server:  # busy past convert.busy_s: a line, not a traceback
        with pytest.raises(Unreachable, match=r"^server http://127.0.0.1:\d+/v1 busy for 1 s \(convert.busy_s\): HTTP "
                                             r"503 .*\(pages written so far are kept; run again to resume\)$"):
            bench(server, "run1", "convert.busy_s=1")
    # The server mended, but one page it cannot answer (a request it rejects): that page is the page's fault.
    first = sorted(glob.glob(f"{SAMPLE}/eval/pdfs/*.pdf"))[0]
    [rejected] = page_keys(first, 1)
    with ChatServer(script=lambda r: answer("", status=400) if pixels_key(r.image) == rejected else good("Read.")) as server:
        summary = bench(server, "run2")
    assert (summary["written"], summary["fallback_pages"]) == (16, 2)
    stem = f"{tmp_path}/candidates/{os.path.basename(first)[:-4]}_pg1"
    assert open(f"{stem}_repeat1.md").read() == text_layer(first, 1) != "Read."
    # Resumed in its run dir after a kill cut the last line of pages.jsonl short: that line goes, the rest parse.
    with open(tmp_path / "run2" / "pages.jsonl", "a") as fh:
        fh.write('{"pdf": "torn')
    os.remove(f"{stem}_repeat2.md")
    with ChatServer([good("Read.")]) as server:
        assert bench(server, "run2")["written"] == 1
    assert len([json.loads(line) for line in open(tmp_path / "run2" / "pages.jsonl")]) == 17


@pytest.mark.integration
def test_pdfs_and_workspace_on_s3(tmp_path, s3_server, monkeypatch):
    import s3fs

    from olmocr.faults import Unreachable

    fs = s3fs.S3FileSystem(skip_instance_cache=True, client_kwargs={"endpoint_url": s3_server})
    fs.mkdir("corpus")
    fs.put_file(write_pdf(str(tmp_path / "a.pdf"), ["Remote page one", "Remote page two"]), "corpus/x/a.pdf")
    with ChatServer([good("Read remotely.")]) as server:
        summary = run_pipeline(pipeline_overrides(server, "s3://corpus/ws", tmp_path / "run",
                                                  "pdfs=[s3://corpus/x/*.pdf]", "work.page_results=true"),
                               tmp_path / "run")
    assert summary["work"]["counts"]["documents"] == 1 and summary["work"]["counts"]["pages"] == 2
    [result] = fs.glob("corpus/ws/results/*.jsonl")
    doc = json.loads(fs.cat_file(result))
    assert doc["metadata"]["Source-File"] == "s3://corpus/x/a.pdf" and doc["text"] == "Read remotely.\nRead remotely."
    assert fs.cat_file("corpus/ws/markdown/corpus/x/a.md").decode() == doc["text"]
    # Training pages from the S3 workspace into an S3 folder, each page cut from the remote PDF.
    from olmocr.formats.pdf import text_layer
    from olmocr.pipeline.export import run as export

    summary = export(compose("pipeline_export", ["workspace=s3://corpus/ws", "out_dir=s3://corpus/labels",
                                                 "progress=false"]), str(tmp_path / "export"))
    assert summary["exported"] == 2
    assert sorted(fs.find("corpus/labels")) == [f"corpus/labels/corpus/x/a_pg{n}.{x}" for n in (1, 2) for x in ("md", "pdf")]
    assert fs.cat_file("corpus/labels/corpus/x/a_pg2.md").decode().endswith("---\nRead remotely.\n")
    assert text_layer("s3://corpus/labels/corpus/x/a_pg2.pdf") == "Remote page two"
    # A re-run keeps what is there, known from a listing of each folder, not from a request a page: a
    # lookup of one page's object would be refused here.
    from support.faultproxy import FaultProxy

    with FaultProxy(s3_server, rate=1.0, faults=("access_denied",), methods=("HEAD",), paths=r"/labels/.") as proxy:
        os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint  # the s3_server fixture restores it
        again = export(compose("pipeline_export", ["workspace=s3://corpus/ws", "out_dir=s3://corpus/labels",
                                                   "progress=false"]), str(tmp_path / "export2"))
    assert (again["exported"], again["kept"]) == (0, 2) and not proxy.faulted()
    # Storage that stops answering is waited out (the client's own retries off): an outage while a source PDF
    # is read was a page skipped as an unreadable source, and one while a page is written ended the stage.
    with FaultProxy(s3_server, rate=0.0) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        proxy.outage_when("GET", r"/corpus/ws/pages/[^?]+\.jsonl", 1)  # was a workspace of no page results
        proxy.outage_when("GET", r"/corpus/x/a\.pdf$", 1)
        proxy.outage_when("PUT", r"/labels2/corpus/x/a_pg1\.md$", 1)
        waited = export(compose("pipeline_export", ["workspace=s3://corpus/ws", "out_dir=s3://corpus/labels2",
                                                    "progress=false"]), str(tmp_path / "export3"))
        assert proxy.counts["outage", "GET"] and proxy.counts["outage", "PUT"]
        assert (waited["exported"], waited["unreadable_sources"]) == (2, 0), waited
        # Past the wait: one line naming the place, nothing counted as the document's fault.
        proxy.outage_when("GET", r"/corpus/x/a\.pdf$", 600)
        with pytest.raises(Unreachable, match=r"^s3://corpus/x/a\.pdf: the storage did not answer for \d+ s"):
            export(compose("pipeline_export", ["workspace=s3://corpus/ws", "out_dir=s3://corpus/labels3",
                                               "progress=false", "storage_wait_s=1"]), str(tmp_path / "export4"))
    # Credentials refused on a source are said at once, not waited out.
    with FaultProxy(s3_server, rate=1.0, faults=("access_denied",), methods=("GET",), paths=r"/corpus/x/a\.pdf$") as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        with pytest.raises(Unreachable, match=r"^s3://corpus/x/a\.pdf: the storage refused the credentials \("):
            export(compose("pipeline_export", ["workspace=s3://corpus/ws", "out_dir=s3://corpus/labels3",
                                               "progress=false"]), str(tmp_path / "export5"))
    assert fs.cat_file("corpus/labels2/corpus/x/a_pg2.md") == fs.cat_file("corpus/labels/corpus/x/a_pg2.md")
    assert not fs.exists("corpus/labels3/corpus/x/a_pg1.md")


# --- the real model server ---------------------------------------------------------------------------------

def stage(module: str, args: list[str], cwd, timeout: int = 300, on_line=None) -> tuple[int, str]:
    """Run ``python -m <module>`` to the end, calling ``on_line`` with each line of its output and log."""
    env = {**os.environ, "PYTHONPATH": PROJECT_ROOT}
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = []
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            lines.append(line)
            if on_line:
                on_line(line)
        proc.wait()
    finally:
        timer.cancel()
    return proc.returncode, "".join(lines)


def server_pid(log: str) -> int | None:
    import re

    found = re.findall(r"transformers serve \(pid (\d+)\) starting", log)
    return int(found[-1]) if found else None


@pytest.mark.integration
def test_the_tiny_model_behind_transformers_serve_converts_the_bundled_pdfs_despite_a_killed_server(tmp_path, tiny):
    workspace, run_dir = tmp_path / "ws", tmp_path / "run"
    seen, killed = [], []

    def kill_after_first_answer(line: str) -> None:
        seen.append(line)
        # The server has answered a page (its log says so): kill it, with the rest of the pages to go.
        if not killed and "ready on" in line:
            pid = server_pid("".join(seen))
            log = run_dir / "server.log"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and "POST /v1/chat/completions" not in log.read_text():
                time.sleep(0.05)
            os.killpg(pid, 9)
            killed.append(pid)

    code, log = stage("olmocr.pipeline", [f"workspace={workspace}", f"pdfs=[{SAMPLE}/eval/pdfs]",
                                          f"model.cache_dir={os.path.dirname(tiny.path)}", "convert.max_tokens=64",
                                          "progress=false", f"hydra.run.dir={run_dir}"],
                      tmp_path, on_line=kill_after_first_answer)
    assert code == 0, log
    assert killed and "restart 1 of 3" in log
    server_log = (run_dir / "server.log").read_text()
    assert server_log.count("$ ") == 2 and server_pid(log) != killed[0]
    summary = json.loads((run_dir / "run_info.json").read_text())["summary"]
    assert summary["work"]["server_restarts"] == 1 and summary["work"]["done"] == 1
    pdfs = sorted(glob.glob(f"{SAMPLE}/eval/pdfs/*.pdf"))
    docs = [json.loads(line) for path in glob.glob(f"{workspace}/results/*.jsonl") for line in open(path)]
    assert sorted(d["metadata"]["Source-File"] for d in docs) == pdfs
    for doc in docs:
        assert set(doc) == {"id", "text", "source", "added", "created", "metadata", "attributes"}
        meta, attrs = doc["metadata"], doc["attributes"]
        assert meta["model"] == tiny.path and meta["pdf-total-pages"] == 1
        # The random model never answers in the page format: each page is its text layer, paid for twice.
        assert meta["total-fallback-pages"] == 1 and meta["total-input-tokens"] > 0
        assert 0 < meta["total-output-tokens"] <= 2 * 64
        assert attrs["pdf_page_numbers"] == [[0, len(doc["text"]), 1]] and doc["text"].strip()
        assert attrs["primary_language"] == [None] and attrs["is_fallback"] == [True]
        with open(f"{workspace}/markdown/{meta['Source-File'].lstrip('/')[:-4]}.md") as fh:
            assert fh.read() == doc["text"]
    done = list(done_records(Workspace(workspace)).values())
    assert sum(d["counts"]["pages"] for d in done) == len(pdfs)
    code, stats = stage("olmocr.pipeline.stats", [f"workspace={workspace}"], tmp_path)
    assert code == 0


def session(sid: int) -> list[int]:
    """The processes of session ``sid`` (a guarded server's: the guard leads it)."""
    members = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                if int(fh.read().rsplit(")", 1)[1].split()[3]) == sid:
                    members.append(int(entry))
        except OSError:
            pass  # gone meanwhile
    return members


@pytest.mark.integration
def test_a_worker_killed_outright_takes_its_model_server_along(tmp_path, tiny):
    """SIGKILL runs no cleanup in the worker: its server's guard sees it gone and ends the server."""
    proc = subprocess.Popen([sys.executable, "-m", "olmocr.pipeline", f"workspace={tmp_path / 'ws'}",
                             f"pdfs=[{SAMPLE}/eval/pdfs]", f"model.cache_dir={os.path.dirname(tiny.path)}",
                             "progress=false", f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": PROJECT_ROOT}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "ready on" in line:
            break
    guard = server_pid("".join(lines))
    assert guard and session(guard), "".join(lines)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while session(guard) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not session(guard), f"server processes left 10 s after the worker was killed: {session(guard)}"


@pytest.mark.integration
def test_a_server_that_never_starts_is_one_line_with_its_log(tmp_path):
    (tmp_path / "not_a_model").mkdir()
    code, log = stage("olmocr.pipeline.bench", ["model=olmocr2_7b", f"model.name_or_path={tmp_path}/not_a_model",
                                                f"hydra.run.dir={tmp_path}/run"], tmp_path)
    error = [line for line in log.splitlines() if line.startswith("error:")]
    assert code == 2 and len(error) == 1, log
    assert error[0].startswith("error: transformers serve exited with code 1 before answering on http://127.0.0.1:")
    assert f"(log: {tmp_path}/run/server.log)" in error[0]


@pytest.mark.integration
def test_workers_0_only_adds_and_a_later_run_converts_without_touching_the_index(tmp_path):
    pdf = write_pdf(str(tmp_path / "a.pdf"), ["A page"])
    workspace = str(tmp_path / "ws")
    with ChatServer([good("x")]) as server:
        run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run", f"pdfs=[{pdf}]", "workers=0"), tmp_path / "r0")
        before = {name: open(name, "rb").read() for name in glob.glob(f"{workspace}/index/*")}
        run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run"), tmp_path / "r1")
        with pytest.raises(ValueError, match=r"^workers=0 only adds PDFs, and pdfs= names none"):
            run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run", "workers=0"), tmp_path / "r2")
    assert {name: open(name, "rb").read() for name in glob.glob(f"{workspace}/index/*")} == before and before
    assert len(done_records(Workspace(workspace))) == 1


def test_a_teacher_labels_a_pdf_folder_into_training_pages_the_data_steps_load(tmp_path, cache_dir):
    from olmocr.data.__main__ import run as check_data
    from olmocr.data.chain import build_pipeline
    from olmocr.formats.frontmatter import parse_document
    from olmocr.formats.pdf import pdf_info
    from olmocr.pipeline.export import run as export

    os.makedirs(tmp_path / "in")
    three = write_pdf(str(tmp_path / "in" / "three.pdf"), ["First page", "Unreadable page", "Sideways page"])
    write_pdf(str(tmp_path / "in" / "one.pdf"), ["Always turned"])  # the model always finds it turned
    first, unreadable, sideways = page_keys(three, 3)
    render = build_pipeline(steps())
    upright = pixels_key(turn(render({"pdf_path": three, "page": 3})["image"], 90, "clockwise"))
    answers = {first: good("First page text."), unreadable: UNPARSEABLE, sideways: rotated(90),
               upright: answer("---\nprimary_language: de\nis_rotation_valid: True\nrotation_correction: 0\n"
                               "is_table: True\nis_diagram: False\n---\n| a | b |")}
    workspace, out = str(tmp_path / "ws"), str(tmp_path / "labels")
    with ChatServer(script=lambda request: answers.get(pixels_key(request.image), rotated(180))) as server:
        run_pipeline(pipeline_overrides(server, workspace, tmp_path / "run", f"pdfs=[{tmp_path}/in]",
                                        "work.page_results=true", "convert.temperatures=[0.1,0.2]",
                                        "work.max_page_error_rate=1"), tmp_path / "run")
    args = [f"workspace={workspace}", f"out_dir={out}", "progress=false"]
    summary = export(compose("pipeline_export", args), str(tmp_path / "export"))
    assert {k: summary[k] for k in ("pages", "exported", "fallback", "still_turned")} == {
        "pages": 4, "exported": 2, "fallback": 1, "still_turned": 1}
    stem = f"{out}/{three.lstrip('/')[:-4]}"
    assert sorted(glob.glob(f"{out}/**/*.*", recursive=True)) == [f"{stem}_pg{n}.{x}" for n in (1, 3) for x in ("md", "pdf")]
    meta, text = parse_document(open(f"{stem}_pg1.md").read())
    assert text == "First page text." and meta.is_rotation_valid and meta.rotation_correction == 0
    # The teacher read page 3 once it was turned 90° clockwise: that is the page's label.
    meta, text = parse_document(open(f"{stem}_pg3.md").read())
    assert text == "| a | b |" and (meta.is_rotation_valid, meta.rotation_correction) == (False, 90)
    assert (meta.primary_language, meta.is_table) == ("de", True)
    assert pdf_info(f"{stem}_pg3.pdf").num_pages == 1
    assert pixels_key(render({"pdf_path": f"{stem}_pg3.pdf", "page": 1})["image"]) == sideways
    again = export(compose("pipeline_export", args), str(tmp_path / "export2"))
    assert (again["exported"], again["kept"]) == (0, 2)
    # Sources that cannot be read now (their folder gone, as an unmounted one) stop the stage in one line; they
    # were counted as unreadable and skipped, the run ending as if it were whole.
    os.rename(tmp_path / "in", tmp_path / "moved")
    with pytest.raises(ValueError, match=rf"^export: {three}: {tmp_path}/in is not there \(an unmounted folder, .*"
                                         r"\(the pages exported so far are kept: run again to add the rest\)$"):
        export(compose("pipeline_export", [f"workspace={workspace}", f"out_dir={out}2", "progress=false"]),
               str(tmp_path / "export3"))
    assert not os.path.exists(f"{out}2/{three.lstrip('/')[:-4]}_pg1.md")
    os.rename(tmp_path / "moved", tmp_path / "in")
    checked = check_data(compose("check_data", ["data=folder", f"data.roots=[{out}]", f"data.eval_roots=[{out}]"]),
                         str(tmp_path / "check"))
    assert checked["loaded"] == 2 and checked["rejected"] == {}
    assert checked["sources"]["train/folder"]["rotated"] == 1


def test_a_model_that_writes_blocks_gets_them_into_every_output_with_furniture_dropped_or_kept(tmp_path):
    """The prompt the model is given (here on the command line; a trained model's record names it) fixes what it
    answers: blocks, whose markdown is the page's text and which every output keeps."""
    from olmocr.data.chain import build_pipeline
    from olmocr.formats.frontmatter import parse_document, write_document
    from olmocr.formats.prompts import PROMPT_BLOCKS
    from olmocr.formats.structure import blocks_from_record, format_blocks

    pdfs = sorted(glob.glob(f"{SAMPLE}/eval/pdfs/*.pdf"))[1:4]  # upright pages
    truth, answers = {}, {}
    for pdf in pdfs:
        with open(pdf[:-4] + ".blocks.json", encoding="utf-8") as fh:
            record = json.load(fh)
        with open(pdf[:-4] + ".md", encoding="utf-8") as fh:
            meta, body = parse_document(fh.read())
        truth[pdf] = (record, body)
        answers[page_keys(pdf, 1)[0]] = answer(write_document(meta, format_blocks(blocks_from_record(record))))
    inputs = tmp_path / "in"
    os.makedirs(inputs)
    for pdf in pdfs:
        os.symlink(pdf, inputs / os.path.basename(pdf))
    bad_box = good('<div data-label="text" data-bbox="10 20 1003 40">\nwords\n</div>')

    for furniture in (False, True):
        workspace = str(tmp_path / f"ws_{furniture}")
        with ChatServer(script=lambda r: answers.get(pixels_key(r.image), bad_box)) as server:
            run_pipeline(pipeline_overrides(server, workspace, tmp_path / f"run_{furniture}", f"pdfs=[{inputs}]",
                                            "convert.steps.prompt.version=blocks", f"convert.furniture={furniture}",
                                            "work.page_results=true"), tmp_path / f"run_{furniture}")
        assert {r.text for r in server.requests if not r.is_check()} == {PROMPT_BLOCKS}
        docs = {d["metadata"]["Source-File"]: d for path in glob.glob(f"{workspace}/results/output_*.jsonl")
                for d in map(json.loads, open(path))}
        assert set(docs) == {str(inputs / os.path.basename(p)) for p in pdfs}
        for pdf in pdfs:
            source = str(inputs / os.path.basename(pdf))
            record, body = truth[pdf]
            doc = docs[source]
            header, footer = record["blocks"][0]["text"], record["blocks"][-1]["text"]
            if furniture:
                assert doc["text"] == f"{header}\n\n{body}\n\n{footer}"
            else:
                assert doc["text"] == body and header not in doc["text"]
            [[start, end, page]] = doc["attributes"]["page_blocks"]
            assert (start, end) == (0, len(doc["text"]))
            assert page["page_size"] == record["page_size"]
            assert [(b["label"], b["box"], b["text"]) for b in page["blocks"]] == [
                (b["label"], b["box"], b["text"]) for b in record["blocks"]]
            assert page["blocks"][1]["box_pt"] == pytest.approx(record["blocks"][1]["box_pt"], abs=0.1)
            with open(f"{workspace}/markdown/{source.lstrip('/')[:-4]}.blocks.json", encoding="utf-8") as fh:
                mine = json.load(fh)
            assert mine == {"source": source, "model": "scripted", "pages": [{"page": 1, **page}]}
        pages = [json.loads(line) for path in glob.glob(f"{workspace}/pages/*.jsonl") for line in open(path)]
        assert all(p["blocks"] == docs[p["source"]]["attributes"]["page_blocks"][0][2]["blocks"] for p in pages)

    # Exported as training pages, each keeps its blocks: the folder trains a blocks prompt as the generator's do.
    from olmocr.pipeline.export import run as export

    labels = tmp_path / "labels"
    assert export(compose("pipeline_export", [f"workspace={tmp_path / 'ws_False'}", f"out_dir={labels}",
                                              "progress=false"]), str(tmp_path / "export"))["exported"] == 3
    target = build_pipeline({"front_matter": {"_target_": "olmocr.data.steps.ParseFrontMatter"},
                             "prompt": {"_target_": "olmocr.data.steps.BuildPrompt", "version": "blocks"},
                             "target": {"_target_": "olmocr.data.steps.BuildTarget"}})
    for pdf in pdfs:
        stem = f"{labels}/{str(inputs).lstrip('/')}/{os.path.basename(pdf)[:-4]}_pg1"
        taught = target({"md_path": f"{stem}.md", "pdf_path": f"{stem}.pdf"})["target"]
        assert taught == target({"md_path": pdf[:-4] + ".md", "pdf_path": pdf})["target"]

    # An answer whose blocks do not parse is a failed attempt that says why; the page falls back.
    with ChatServer([bad_box]) as server:
        conv = PageConverter(ExternalServer(server.url, "scripted"),
                             {**steps(), "prompt": {"_target_": "olmocr.data.steps.BuildPrompt", "version": "blocks"}},
                             log_dir=str(tmp_path), max_tokens=100, temperatures=[0.1], render_threads=1)
        result = convert_page(conv, pdfs[0])
    assert result.fallback and result.blocks is None and "blocks" not in result.record()
    assert result.attempts[0]["outcome"] == "unparseable blocks: block 1 (text): box 10 20 1003 40 is outside 0-1000"
