"""python -m olmocr.serve against real HTTP and the tiny model behind transformers serve: a document in, its Dolma
document out equal to the batch pipeline's; what it refuses, each in one JSON error, leaving nothing behind."""

from __future__ import annotations

import glob
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from conftest import write_pdf
from olmocr.config import PROJECT_ROOT

SAMPLE_PDF = sorted(glob.glob(os.path.join(PROJECT_ROOT, "data", "sample", "eval", "pdfs", "*.pdf")))[0]
TOKEN = "s3cret-token-for-tests"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


@pytest.fixture
def service(tmp_path, cache_dir):
    port = free_port()
    workspace = tmp_path / "ws"
    env = dict(os.environ, OLMOCR_TEST_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "olmocr.serve", f"port={port}", f"workspace={workspace}",
                             "token_env=OLMOCR_TEST_TOKEN", "max_upload_mb=0.5", "max_pages=2",
                             f"hydra.run.dir={tmp_path / 'run'}"], cwd=PROJECT_ROOT, env=env,
                            stdout=open(tmp_path / "service.log", "w"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            urllib.request.urlopen(base + "/health", timeout=2)
            break
        except OSError:
            assert proc.poll() is None, (tmp_path / "service.log").read_text()
            time.sleep(0.3)
    yield base, workspace
    proc.terminate()
    proc.wait(30)


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
    deadline = time.time() + 180
    while time.time() < deadline:
        status, body = call(f"{base}/v1/jobs/{job}")
        assert status == 200, body
        if body["status"] in ("done", "failed"):
            return body
        time.sleep(0.5)
    raise AssertionError(f"job {job} not done: {body}")


@pytest.mark.integration
def test_a_document_converts_as_the_batch_pipeline_converts_it(service, tmp_path):
    base, workspace = service
    status, job = call(f"{base}/v1/jobs?filename=../../etc/passwd", "POST", open(SAMPLE_PDF, "rb").read())
    assert status == 202 and job["status"] == "queued" and job["pages"] == 1
    assert job["filename"] == "passwd"  # shown, never a path: the upload is stored under the job's id
    assert sorted(os.listdir(workspace / "uploads")) == [f"{job['id']}.pdf"]
    assert wait_done(base, job["id"])["status"] == "done"
    status, result = call(f"{base}/v1/jobs/{job['id']}/result")
    assert status == 200 and result["markdown"] == result["document"]["text"]
    assert [p["page"] for p in result["pages"]] == [1]
    # The batch pipeline on the same PDF, the same model and settings, writes the same document text.
    batch = tmp_path / "batch"
    subprocess.run([sys.executable, "-m", "olmocr.pipeline", f"workspace={batch}", f"pdfs=[{SAMPLE_PDF}]",
                    "progress=false", f"hydra.run.dir={tmp_path / 'batch_run'}"], cwd=PROJECT_ROOT, check=True,
                   capture_output=True)
    docs = [json.loads(line) for path in glob.glob(str(batch / "results" / "*.jsonl")) for line in open(path)]
    assert [d["text"] for d in docs] == [result["document"]["text"]]
    assert [d["attributes"]["is_fallback"] for d in docs] == [[p["fallback"] for p in result["pages"]]]


@pytest.mark.integration
def test_what_it_refuses_is_one_json_error_and_leaves_nothing(service, tmp_path):
    base, workspace = service
    pdf = open(SAMPLE_PDF, "rb").read()
    assert call(f"{base}/v1/jobs", "POST", pdf, token=None)[0] == 401
    status, body = call(f"{base}/v1/jobs", "POST", pdf, token="wrong")
    assert status == 401 and "token" in body["error"]
    assert call(f"{base}/health", token=None) == (200, {"status": "alive"})
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
    assert status == 422 and "not a PDF" in body["error"]
    status, body = call(f"{base}/v1/jobs/{'0' * 32}")
    assert status == 404 and "no job" in body["error"]
    assert call(f"{base}/v1/jobs/..%2F..%2Fwork_index")[0] == 404
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
