"""python -m olmocr.serve against real HTTP and the tiny model behind transformers serve: a document in, its Dolma
document out equal to the batch pipeline's; what it refuses, each in one JSON error, leaving nothing behind."""

from __future__ import annotations

import glob
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import SERVE_TOKEN, write_pdf
from test_serve_inputs import tar
from olmocr.config import PROJECT_ROOT
from olmocr.pipeline.workspace import Workspace
from work_helpers import done_records

SAMPLE_PDF = sorted(glob.glob(os.path.join(PROJECT_ROOT, "data", "sample", "eval", "pdfs", "*.pdf")))[0]
TOKEN = SERVE_TOKEN


def call(url: str, method: str = "GET", body: bytes | None = None, token: str | None = TOKEN) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        request.add_header("Content-Type", "application/pdf")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def send(url: str, method: str = "POST", token: str | None = TOKEN, **kwargs) -> tuple[int, dict]:
    """A request through httpx (forms, JSON), answered with one JSON object."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.request(method, url, headers=headers, timeout=60, **kwargs)
    return response.status_code, response.json()


@pytest.fixture
def service(start_service):
    return start_service()


def raw_post(base: str, headers: dict, chunks: list[bytes]) -> tuple[int, dict]:
    """A POST of ``chunks`` (chunked when so declared) that reads the answer even when the service answers before
    taking the whole body, as a service that refuses an upload does."""
    import http.client
    from urllib.parse import urlparse

    url = urlparse(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    conn.putrequest("POST", "/v1/jobs")
    for key, value in {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/pdf", **headers}.items():
        conn.putheader(key, value)
    conn.endheaders()
    try:
        for chunk in chunks:
            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        if chunks:
            conn.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # it answered and closed before the rest: the answer is there to read
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def wait_done(base: str, job: str) -> dict:
    """The job's status once it is finished, long-polled (wait=)."""
    deadline = time.time() + 180
    while time.time() < deadline:
        began = time.time()
        status, body = call(f"{base}/v1/jobs/{job}?wait=20")
        assert status == 200, body
        if body["status"] in ("done", "failed", "cancelled"):
            return body
        assert time.time() - began > 19  # a long poll answers early only for a finished job
    raise AssertionError(f"job {job} not done: {body}")


def batch_documents(tmp_path, pdfs: list[str]) -> dict[str, dict]:
    """The batch pipeline's Dolma documents of ``pdfs`` (the same model and settings as the service), by PDF."""
    batch = tmp_path / "batch"
    subprocess.run([sys.executable, "-m", "olmocr.pipeline", f"workspace={batch}", f"pdfs=[{','.join(pdfs)}]",
                    "progress=false", f"hydra.run.dir={tmp_path / 'batch_run'}"], cwd=PROJECT_ROOT, check=True,
                   capture_output=True)
    docs = [json.loads(line) for path in glob.glob(str(batch / "results" / "*.jsonl")) for line in open(path)]
    return {doc["metadata"]["Source-File"]: doc for doc in docs}


def page_texts(doc: dict) -> dict[int, tuple[str, bool]]:
    spans, fallback = doc["attributes"]["pdf_page_numbers"], doc["attributes"]["is_fallback"]
    return {page: (doc["text"][start:end].rstrip("\n"), fell) for (start, end, page), fell in zip(spans, fallback)}


@pytest.mark.integration
def test_a_document_by_body_form_url_or_s3_converts_as_the_batch_pipeline_converts_it(start_service, s3_server,
                                                                                       tmp_path):
    import boto3
    from test_serve_inputs import Files

    pdf = open(SAMPLE_PDF, "rb").read()
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket="docs")
    boto3.client("s3", endpoint_url=s3_server).put_object(Bucket="docs", Key="in/sample.pdf", Body=pdf)
    files = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    files.body = pdf
    threading.Thread(target=files.serve_forever, daemon=True).start()
    here = f"http://127.0.0.1:{files.server_address[1]}"
    base, workspace = start_service("fetch.allow_networks=[127.0.0.0/8]", "fetch.s3_prefixes=[s3://docs/in]")
    three = write_pdf(str(tmp_path / "three.pdf"), ["one", "two", "three"])
    one = write_pdf(str(tmp_path / "one.pdf"), ["only"])
    try:
        jobs = {
            "body": call(f"{base}/v1/jobs?filename=../../etc/passwd", "POST", pdf),
            "form": send(f"{base}/v1/jobs", files={"file": ("scan.pdf", pdf, "application/pdf")}),
            "url": send(f"{base}/v1/jobs", json={"url": f"{here}/to?/doc.pdf"}),  # through a redirect
            "s3": send(f"{base}/v1/jobs", json={"url": "s3://docs/in/sample.pdf"}),
            "range": send(f"{base}/v1/jobs", files={"file": ("three.pdf", open(three, "rb"), "application/pdf")},
                          data={"page_range": "3,1"}),
            "archive": send(f"{base}/v1/jobs", files={"file": ("docs.tar.gz", tar(
                {"in/sample.pdf": pdf, "notes.txt": b"no document", "one.pdf": open(one, "rb").read()}))}),
        }
    finally:
        files.shutdown()
        files.server_close()
    assert {how: status for how, (status, _) in jobs.items()} == dict.fromkeys(jobs, 202), jobs
    jobs = {how: job for how, (_, job) in jobs.items()}
    assert jobs["body"]["filename"] == "passwd"  # shown, never a path: the upload is stored under the job's id
    assert [jobs[how]["filename"] for how in ("form", "url", "s3")] == ["scan.pdf", "doc.pdf", "sample.pdf"]
    assert jobs["range"]["pages"] == 2 and jobs["archive"]["pages"] == 2  # max_pages=2: the pages converted
    assert sorted(os.listdir(workspace / "uploads")) == sorted(
        f"{job['id']}.{'tar.gz' if how == 'archive' else 'pdf'}" for how, job in jobs.items())
    results = {}
    deadline = time.time() + 120
    while (ready := call(f"{base}/ready"))[0] != 200 and time.time() < deadline:
        assert ready[1]["why"] == "the model server is starting", ready
        time.sleep(0.5)
    assert ready[0] == 200 and "the model server answered a page" in ready[1]["why"], ready
    for how, job in jobs.items():
        assert wait_done(base, job["id"])["status"] == "done", how
        status, results[how] = call(f"{base}/v1/jobs/{job['id']}/result")
        texts = [d["document"]["text"] for d in results[how]["documents"]]
        assert status == 200 and results[how]["markdown"] == "\n\n".join(texts)
    time.sleep(1.1)  # the service looks at the queue at most once a second
    figures = urllib.request.urlopen(urllib.request.Request(f"{base}/metrics", headers={
        "Authorization": f"Bearer {TOKEN}"}), timeout=30).read().decode()
    for line in ('olmocr_serve_jobs_submitted_total{input="body"} 1.0', 'olmocr_serve_jobs_submitted_total{input="form"} 3.0',
                 'olmocr_serve_jobs_submitted_total{input="url"} 2.0', 'olmocr_serve_items_total{outcome="done"} 6.0',
                 'olmocr_serve_pages_total{by="fallback"} 8.0', "olmocr_serve_jobs_waiting 0.0",
                 'olmocr_serve_responses_total{code="202"} 6.0', "olmocr_serve_convert_seconds_count 6.0"):
        assert line in figures.splitlines(), line
    # The batch pipeline on the same PDFs, the same model and settings, writes the same text, page by page.
    batch = batch_documents(tmp_path, [SAMPLE_PDF, three, one])
    for how in ("body", "form", "url", "s3"):
        assert {p["page"]: (p["text"], p["fallback"]) for p in results[how]["documents"][0]["pages"]} == page_texts(batch[SAMPLE_PDF])
    chosen = [(p["page"], p["text"], p["fallback"]) for p in results["range"]["documents"][0]["pages"]]
    whole = page_texts(batch[three])
    assert chosen == [(3, *whole[3]), (1, *whole[1])]  # the pages asked for, in that order, by their own numbers
    # An archive: each document its own, by its member name; what is not a document said, not converted.
    archive = results["archive"]
    assert [d["name"] for d in archive["documents"]] == ["in/sample.pdf", "one.pdf"]
    assert [{p["page"]: (p["text"], p["fallback"]) for p in d["pages"]} for d in archive["documents"]] == [
        page_texts(batch[SAMPLE_PDF]), page_texts(batch[one])]
    assert archive["not_converted"] == [{"name": "notes.txt", "reason": "not a PDF or an image"}]
    # One page while the request waits: an image, or a PDF's page chosen by page_range.
    status, page = send(f"{base}/v1/convert", files={"file": ("three.pdf", open(three, "rb"))}, data={"page_range": "2"})
    assert status == 200 and [(p["page"], p["text"], p["fallback"]) for p in page["documents"][0]["pages"]] == [(2, *whole[2])]
    status, body = send(f"{base}/v1/convert", files={"file": ("three.pdf", open(three, "rb"))})
    assert status == 413 and "POST /v1/convert converts one" in body["error"]


@pytest.mark.integration
def test_what_it_refuses_is_one_json_error_and_leaves_nothing(service, tmp_path):
    base, workspace = service
    pdf = open(SAMPLE_PDF, "rb").read()
    assert call(f"{base}/v1/jobs", "POST", pdf, token=None)[0] == 401
    status, body = call(f"{base}/v1/jobs", "POST", pdf, token="wrong")
    assert status == 401 and "token" in body["error"]
    assert call(f"{base}/health", token=None) == (200, {"status": "alive"})
    status, api = call(f"{base}/openapi.json", token=None)  # the description is open; what it describes is not
    assert status == 200 and {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/convert", "/ready", "/metrics"} <= set(api["paths"])
    assert call(f"{base}/metrics", token=None)[0] == 401
    # Over max_upload_mb=0.5: said by its length, refused before the body is read; sent without one (chunked),
    # refused once what arrived is over.
    status, body = raw_post(base, {"Content-Length": "600000"}, [])
    assert status == 413 and "600000 bytes" in body["error"]
    chunks = [b"%PDF-1.4" + b"0" * (2**16 - 8)] + [b"0" * 2**16] * 7 + [b"0" * 16]
    status, body = raw_post(base, {"Transfer-Encoding": "chunked"}, chunks)
    assert status == 413 and "over 524288 bytes" in body["error"]
    three = write_pdf(str(tmp_path / "three.pdf"), ["one", "two", "three"])
    status, body = call(f"{base}/v1/jobs", "POST", open(three, "rb").read())  # over max_pages=2
    assert status == 413 and "3 pages" in body["error"]
    status, body = call(f"{base}/v1/jobs", "POST", b"not a pdf at all")
    assert status == 422 and "neither a PDF nor an image" in body["error"]
    status, body = send(f"{base}/v1/jobs", files={"file": ("three.pdf", open(three, "rb"))}, data={"page_range": "2-5"})
    assert status == 422 and "outside the document's pages 1-3" in body["error"]
    status, body = send(f"{base}/v1/jobs", data={"page_range": "1"}, files={"other": ("x.pdf", pdf)})
    assert status == 400 and "a file part named 'file'" in body["error"]
    # URLs: the service's own machine is not the public internet, nor is a bucket it was not told to read.
    status, body = send(f"{base}/v1/jobs", json={"url": f"{base}/health"})
    assert status == 422 and "127.0.0.1, a loopback, private or link-local address" in body["error"]
    status, body = send(f"{base}/v1/jobs", json={"url": "http://169.254.169.254/latest/meta-data/"})
    assert status == 422 and "169.254.169.254" in body["error"]
    status, body = send(f"{base}/v1/jobs", json={"url": "file:///etc/passwd"})
    assert status == 422 and "file scheme" in body["error"]
    status, body = send(f"{base}/v1/jobs", json={"url": "s3://anything/doc.pdf"})
    assert status == 422 and "not under an s3:// prefix" in body["error"]
    status, body = send(f"{base}/v1/jobs", files={"file": ("x.tgz", tar({"notes.txt": b"no document"}))})
    assert status == 422 and "holds no PDF or image" in body["error"]
    status, body = send(f"{base}/v1/jobs", json={"link": "https://example.org/doc.pdf"})
    assert status == 400 and '{"url"' in body["error"]
    status, body = call(f"{base}/v1/jobs/{'0' * 32}")
    assert status == 404 and "no job" in body["error"]
    assert call(f"{base}/v1/jobs/..%2F..%2Fwork_index")[0] == 404
    status, body = call(f"{base}/v1/jobs/{'0' * 32}?wait=600")
    assert status == 422 and "wait" in body["error"] and "60" in body["error"]
    assert not (workspace / "uploads").exists() and not (workspace / "jobs").exists()


def test_without_a_token_it_listens_on_loopback_only():
    from olmocr.cli import stages
    from olmocr.config import compose

    check = stages()["olmocr.serve"].check
    with pytest.raises(ValueError, match="^host=0.0.0.0: without a token the service listens on loopback only"):
        check(compose("serve", ["host=0.0.0.0"]))
    check(compose("serve", ["host=0.0.0.0", "token_env=OLMOCR_TOKEN"]))  # the variable is read where it runs
    check(compose("serve", []))


def test_a_token_variable_that_is_not_set_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OLMOCR_NO_SUCH_VARIABLE"}
    proc = subprocess.run([sys.executable, "-m", "olmocr.serve", "token_env=OLMOCR_NO_SUCH_VARIABLE",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=PROJECT_ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == (
        "error: token_env=OLMOCR_NO_SUCH_VARIABLE: that environment variable is not set (or empty)")


@pytest.mark.integration
def test_a_cancelled_job_stops_between_pages_or_never_starts(start_service, tmp_path):
    base, workspace = start_service("max_pages=60", "workers=1")
    long = open(write_pdf(str(tmp_path / "long.pdf"), [f"page {n}" for n in range(1, 61)]), "rb").read()
    short = open(write_pdf(str(tmp_path / "short.pdf"), ["short"]), "rb").read()
    running = call(f"{base}/v1/jobs", "POST", long)[1]["id"]
    waiting = call(f"{base}/v1/jobs", "POST", short)[1]["id"]  # behind the long one: one worker
    status, body = send(f"{base}/v1/jobs/{waiting}", "DELETE")
    assert status == 200 and body["status"] == "cancelled"
    deadline = time.time() + 120
    while (body := call(f"{base}/v1/jobs/{running}")[1])["pages_done"] == 0 and time.time() < deadline:
        time.sleep(0.2)
    assert body["status"] == "running" and 0 < body["pages_done"] < 60, body
    status, body = send(f"{base}/v1/jobs/{running}", "DELETE")
    assert status == 200 and body["status"] in ("cancelling", "cancelled")
    while (body := call(f"{base}/v1/jobs/{running}")[1])["status"] == "cancelling" and time.time() < deadline:
        time.sleep(0.2)
    assert body["status"] == "cancelled", body
    # The work itself stopped: no result, no done marker, the worker said where it stopped; the waiting job was
    # never started, and the worker is free for the next.
    for job in (running, waiting):
        status, body = call(f"{base}/v1/jobs/{job}/result")
        assert status == 409 and "cancelled" in body["error"]
    assert not (workspace / "results").exists() and not (workspace / "done").exists()
    stopped = [line for line in open(tmp_path / "service.log") if "cancelled after" in line]
    assert len(stopped) == 1 and int(stopped[0].split("cancelled after ")[1].split()[0]) < 60, stopped
    after = call(f"{base}/v1/jobs", "POST", short)[1]["id"]
    assert wait_done(base, after)["status"] == "done"
    status, body = send(f"{base}/v1/jobs/{after}", "DELETE")
    assert status == 200 and body["status"] == "done"  # finished: cancelling changes nothing


@pytest.mark.integration
def test_a_full_queue_is_refused_with_retry_after_and_keeps_its_place(start_service, tmp_path):
    import httpx

    base, workspace = start_service("workers=0", "max_waiting=2")  # accepting only: batch workers would convert
    status, body = call(f"{base}/ready")
    assert status == 200 and "accepting jobs" in body["why"]
    pdf = open(SAMPLE_PDF, "rb").read()
    first, second = (call(f"{base}/v1/jobs", "POST", pdf)[1]["id"] for _ in range(2))
    assert call(f"{base}/v1/jobs/{second}")[1] | {"status": "queued", "ahead": 1} == call(f"{base}/v1/jobs/{second}")[1]
    time.sleep(1.1)  # the service looks at the queue at most once a second
    answer = httpx.post(f"{base}/v1/jobs", content=pdf, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert answer.status_code == 429 and answer.headers["Retry-After"] == "10"
    assert "2 jobs are waiting" in answer.json()["error"]
    assert len(os.listdir(workspace / "uploads")) == 2 and len(os.listdir(workspace / "jobs")) == 2
    send(f"{base}/v1/jobs/{first}", "DELETE")  # a cancelled job waits no more
    time.sleep(1.1)
    assert call(f"{base}/v1/jobs/{second}")[1]["ahead"] == 0
    assert call(f"{base}/v1/jobs", "POST", pdf)[0] == 202


@pytest.mark.integration
def test_replicas_share_the_work_and_a_killed_one_loses_nothing_and_converts_nothing_twice(start_service, tmp_path):
    import signal

    # Two replicas on one workspace; a claim lasts 6 s unless its worker renews it (a killed one cannot).
    overrides = ("max_pages=8", "workers=1", "queue.lease_s=6")
    first, workspace = start_service(*overrides, name="first")
    second, _ = start_service(*overrides, name="second")
    killed = start_service.procs[0]
    pdf = open(write_pdf(str(tmp_path / "eight.pdf"), [f"page {n}" for n in range(1, 9)]), "rb").read()
    jobs = [call(f"{(first, second)[n % 2]}/v1/jobs", "POST", pdf)[1]["id"] for n in range(8)]
    def first_is_mid_document() -> bool:
        """The first replica finished a job and holds a claim on another (between two jobs it holds nothing, and
        a kill there leaves nothing to take over). Its workers are named in its log."""
        named = re.search(r"\] - (\S+): \d+ worker thread", (tmp_path / "first.log").read_text())

        def its(folder: str) -> dict[str, dict]:
            found = {}
            for name in os.listdir(workspace / folder) if (workspace / folder).exists() else []:
                if name.startswith("."):
                    continue  # a file the store is writing, renamed into place when whole
                try:
                    found[name] = json.load(open(workspace / folder / name))
                except (ValueError, FileNotFoundError):
                    continue  # being written, or a claim given up since the listing
            return {name: r for name, r in found.items() if named and r["worker"].startswith(named[1])}

        done = done_records(Workspace(str(workspace)))
        finished = [r for r in done.values() if named and r["worker"].startswith(named[1])]
        held = {name[:-5] for name, claim in its("claims").items() if claim["expires"] > time.time()}
        return bool(finished) and bool(held - set(done))

    deadline = time.time() + 120
    while not first_is_mid_document():
        assert time.time() < deadline
        time.sleep(0.1)
    os.killpg(killed.pid, signal.SIGKILL)  # the first replica and its model server, mid-work
    killed.wait(30)
    restarted, _ = start_service(*overrides, name="restarted")
    for job in jobs:  # every job, whichever replica took it, asked of any replica
        assert wait_done(second, job)["status"] == "done", job
    done = list(done_records(Workspace(str(workspace))).values())
    assert len(done) == len(jobs) == len(os.listdir(workspace / "results"))  # each converted and kept once
    pids = {record["worker"].split(":")[1] for record in done}
    assert len(pids) >= 2, pids  # the work was shared
    # The document the killed replica held was taken over once its claim expired (it was busy: eight jobs of
    # about 2 s each for two workers, killed after the first finished).
    assert any(record["took_over"] for record in done), done
    results = [call(f"{restarted}/v1/jobs/{job}/result")[1] for job in jobs]
    pages = [r["documents"][0]["pages"] for r in results]
    assert len({json.dumps(p) for p in pages}) == 1 and len(pages[0]) == 8


@pytest.mark.integration
def test_results_expire_after_keep_results_h_and_a_slow_page_is_cancelled(start_service, tmp_path):
    base, workspace = start_service("keep_results_h=0.0005", "sync_timeout_s=0.05")  # kept 1.8 s
    pdf = open(SAMPLE_PDF, "rb").read()
    job = call(f"{base}/v1/jobs", "POST", pdf)[1]["id"]
    assert wait_done(base, job)["status"] == "done"
    deadline = time.time() + 30
    while (answer := call(f"{base}/v1/jobs/{job}/result"))[0] == 200 and time.time() < deadline:
        time.sleep(0.2)
    assert answer[0] == 410 and "no longer kept (keep_results_h)" in answer[1]["error"]
    assert call(f"{base}/v1/jobs/{job}")[0] == 410
    assert os.listdir(workspace / "uploads") == [] and os.listdir(workspace / "results") == []
    assert json.load(open(workspace / "expired" / f"{job}.json"))["expired"]  # the record stays, saying so
    # The queue retired its item: nothing of it is left but its part's totals.
    left = [p for folder in ("claims", "done", "pages", "progress") for p in glob.glob(f"{workspace}/{folder}/*")]
    assert left == [] and [json.load(open(p))["retired"] for p in glob.glob(f"{workspace}/parts/*")]
    # A page not converted within sync_timeout_s: 504, and its work cancelled, not left to run.
    status, body = call(f"{base}/v1/convert", "POST", pdf)
    assert status == 504 and "sync_timeout_s" in body["error"]
    (sync,) = {name.removesuffix(".json") for name in os.listdir(workspace / "jobs")} - {job}
    assert wait_done(base, sync)["status"] == "cancelled"  # idle workers look every second: it had not started


@pytest.mark.integration
def test_the_page_converts_an_upload_and_shows_each_page_beside_its_text(start_service, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base, _ = start_service()
    two = write_pdf(str(tmp_path / "two.pdf"), ["The first page.", "The second page."])
    browser.get_log("browser")
    browser.get(base + "/")  # the page needs no token; what it asks of the API does
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "file").send_keys(two)  # a real upload, as a chosen file
    WebDriverWait(browser, 120).until(lambda b: b.find_element(By.ID, "state").text.endswith("done, 2 page(s)")
                                      or "notice" in b.find_element(By.ID, "state").get_attribute("class"))
    assert browser.find_element(By.ID, "state").text == "two.pdf: done, 2 page(s)"
    WebDriverWait(browser, 30).until(lambda b: b.execute_script(
        "return [...document.images].length == 2 && [...document.images].every(i => i.complete && i.naturalWidth > 0)"))
    browser.save_screenshot(str(tmp_path / "page.png"))
    pairs = browser.find_elements(By.CSS_SELECTOR, ".pair")
    assert [p.get_attribute("data-page") for p in pairs] == ["1", "2"]
    # The text beside each image is the job's result for that page, as the API gives it.
    job = json.loads(urllib.request.urlopen(urllib.request.Request(
        f"{base}/v1/jobs/{os.listdir(tmp_path / 'ws' / 'jobs')[0].removesuffix('.json')}/result",
        headers={"Authorization": f"Bearer {TOKEN}"}), timeout=30).read())
    for pair, page in zip(pairs, job["documents"][0]["pages"]):
        assert pair.find_element(By.CSS_SELECTOR, ".markdown").text.split() == page["text"].split()
        assert ("text layer" in pair.text) == page["fallback"]
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    # Without the token, the page says why in one line and shows nothing.
    browser.get(base + "/")
    browser.execute_script("sessionStorage.clear()")
    browser.get(base + "/")
    browser.find_element(By.ID, "file").send_keys(two)
    WebDriverWait(browser, 30).until(lambda b: b.find_element(By.ID, "state").text)
    assert "a token is required" in browser.find_element(By.ID, "state").text
    assert browser.find_elements(By.CSS_SELECTOR, ".pair") == []


@pytest.mark.integration
def test_a_model_that_writes_blocks_has_each_pages_blocks_in_the_result(start_service):
    from chat_server import ChatServer, answer, pixels_key

    from olmocr.data.chain import build_pipeline
    from olmocr.formats.frontmatter import parse_document, write_document
    from olmocr.formats.structure import blocks_from_record, format_blocks

    pdf = sorted(glob.glob(os.path.join(PROJECT_ROOT, "data", "sample", "eval", "pdfs", "*.pdf")))[2]
    record = json.load(open(pdf[:-4] + ".blocks.json"))
    meta, body = parse_document(open(pdf[:-4] + ".md").read())
    render = build_pipeline({"check_pdf": {"_target_": "olmocr.data.steps.CheckPdf"},
                             "render": {"_target_": "olmocr.data.steps.RenderPage", "longest_side": 300}})
    key = pixels_key(render({"pdf_path": pdf, "page": 1})["image"])
    reply = answer(write_document(meta, format_blocks(blocks_from_record(record))))
    with ChatServer(script=lambda r: reply if pixels_key(r.image) == key else answer("not this page")) as chat:
        base, _ = start_service("server=external", f"server.url={chat.url}", "server.model_name=scripted",
                                "convert.steps.render.longest_side=300", "convert.steps.prompt.version=blocks",
                                "convert.max_tokens=4000")
        status, job = call(f"{base}/v1/jobs", "POST", open(pdf, "rb").read())
        assert status == 202, job
        assert wait_done(base, job["id"])["status"] == "done"
        status, result = call(f"{base}/v1/jobs/{job['id']}/result")
    assert status == 200 and result["markdown"] == body  # the furniture dropped from the markdown, kept as blocks
    [page] = result["documents"][0]["pages"]
    assert page["page_size"] == record["page_size"] and page["text"] == body
    assert [(b["label"], b["box"], b["text"]) for b in page["blocks"]] == [
        (b["label"], b["box"], b["text"]) for b in record["blocks"]]
    assert page["blocks"][0]["label"] == "page_header" and page["blocks"][-1]["label"] == "page_number"
