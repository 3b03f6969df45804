"""No document stops the service: hostile and careless uploads and load against the running service (real HTTP, the
tiny model behind transformers serve, or a workspace on moto S3): each refused in one JSON error that leaves nothing
in the workspace, or accepted and finished with its reason; the service's memory and /health latency measured before
and after; every other job converted exactly once."""

from __future__ import annotations

import json
import os
import socket
import statistics
import threading
import time

import httpx
import pytest

from conftest import write_pdf
from support import hostile
from test_serve import TOKEN, call, send, wait_done
from olmocr.pipeline.workspace import Workspace
from work_helpers import done_records

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024


class HealthWatch:
    """/health asked every 50 ms on a thread of its own, each answer's time kept."""

    def __init__(self, base: str):
        self.base, self.times, self.stop = base, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        with httpx.Client(timeout=30) as client:
            while not self.stop.wait(0.05):
                began = time.monotonic()
                assert client.get(f"{self.base}/health").status_code == 200
                self.times.append(time.monotonic() - began)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def workspace_files(workspace) -> set[str]:
    return {os.path.relpath(os.path.join(root, name), workspace) for root, _, files in os.walk(workspace)
            for name in files if not name.startswith(".") and not root.endswith(("progress", "workers"))}


def raw(base: str, head: bytes, body: bytes = b"", wait_s: float = 10.0) -> bytes:
    """What the service answers to a request sent as these bytes (and then nothing more), read until it closes."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait_s) as sock:
        sock.sendall(head + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def json_answer(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.mark.integration
def test_hostile_uploads_end_in_one_json_error_or_a_finished_job_and_the_service_stays_bounded(start_service, tmp_path):
    base, workspace = start_service("max_upload_mb=2", "max_pages=4", "max_archive_members=100", "workers=2",
                                    "header_timeout_s=2", "body_timeout_s=2", "fetch.timeout_s=3",
                                    "fetch.concurrency=3", "fetch.allow_networks=[127.0.0.2/32]",
                                    "+convert.steps.render.max_aspect=100000")
    pid = start_service.procs[-1].pid
    deadline = time.time() + 120
    while call(f"{base}/ready")[0] != 200:
        assert time.time() < deadline, "the model server never answered"
        time.sleep(0.5)
    pdf = lambda name, text: open(write_pdf(str(tmp_path / name), text), "rb").read()  # noqa: E731
    normal = [pdf(f"n{n}.pdf", [f"A normal document, number {n}", "Its second page"]) for n in range(6)]
    one = normal[0]
    jobs = [call(f"{base}/v1/jobs", "POST", normal[0])[1]["id"]]
    for job in jobs:
        wait_done(base, job)
    before_rss = rss_mb(pid)
    with HealthWatch(base) as idle:
        time.sleep(2)
    before = set(os.listdir(workspace / "uploads"))

    # Refused at submission: one JSON error each, with the status it means, and nothing stored.
    def body(data: bytes, kind: str = "application/pdf"):
        answer = httpx.post(f"{base}/v1/jobs", content=data, headers={**AUTH, "Content-Type": kind}, timeout=60)
        return answer.status_code, answer.json(), answer.headers

    refusals = {
        "zero-sized page": (body(hostile.zero_pdf()), 422, "page 1 is 0 x 0 pt"),
        "page wider than PDF allows": (body(hostile.sliver_pdf()), 422, "page 1 is 200000 x 1 pt"),
        "page tree too deep": (body(hostile.deep_tree_pdf()), 422, "Maximum page tree depth"),
        "a name twice": (body(hostile.tar_of([("a.pdf", one), ("a.pdf", one)])), 422, "names 'a.pdf' twice"),
        "outputs in each other's way": (body(hostile.tar_of([("x", one), ("x.md/y.pdf", one)])), 422,
                                        "is where the second one's folder goes"),
        "a name too long to store": (body(hostile.tar_of([("n" * 253 + ".pdf", one)])), 422, "too long to store"),
        "200,000 folders": (body(hostile.folder_bomb_tgz()), 413, "more than 100 entries (max_archive_members)"),
        "a 1 GiB member": (body(hostile.zeros_member_tgz()), 413, "is 1073741824 bytes; a document is at most"),
        "JSON nested 60,000 deep": (body(hostile.deep_json(), "application/json"), 400, "nested too deeply"),
        "a URL that is none": (body(b'{"url": "http://[::1"}', "application/json"), 422, "is not a URL"),
        "loopback through NAT64": (body(b'{"url": "http://[64:ff9b::7f00:1]/x.pdf"}', "application/json"), 422,
                                   "a loopback, private or link-local address"),
    }
    answer = httpx.post(f"{base}/v1/jobs", headers=AUTH, files=[("file", ("a.pdf", one)), ("file", ("b.pdf", one))])
    refusals["two file parts"] = ((answer.status_code, answer.json(), answer.headers), 400, "Too many files")
    answer = httpx.post(f"{base}/v1/jobs", headers=AUTH, files={"file": ("a.pdf", one)}, data={"page_range": "1" * 70000})
    refusals["a field over the form's limit"] = ((answer.status_code, answer.json(), answer.headers), 400, "64KB")
    answer = httpx.get(f"{base}/v2/anything", headers=AUTH)
    refusals["an unknown route"] = ((answer.status_code, answer.json(), answer.headers), 404, "no such endpoint: GET /v2")
    answer = httpx.put(f"{base}/v1/jobs", headers=AUTH)
    refusals["a method the route does not take"] = ((answer.status_code, answer.json(), answer.headers), 405,
                                                    "the endpoint takes POST")
    for what, ((status, found, headers), expected, said) in refusals.items():
        assert status == expected and set(found) == {"error"} and said in found["error"], (what, status, found)
        assert headers["content-type"] == "application/json", what
    # A body shorter than its Content-Length, and headers that never end: 408, the connection closed.
    status, found = json_answer(raw(base, b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                                    TOKEN.encode() + b"\r\nContent-Type: application/pdf\r\nContent-Length: 1000\r\n\r\n",
                                    b"%PDF-1.4 only this"))
    assert status == 408 and "nothing of the request's body arrived for 2 s" in found["error"]
    began = time.monotonic()
    sockets = []
    for _ in range(200):  # half-sent requests, held open as a slow client (or an attacker) does
        sock = socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])))
        sock.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        sockets.append(sock)
    with HealthWatch(base) as under_slow_clients:
        answers = []
        for sock in sockets:
            sock.settimeout(30)
            answers.append(sock.recv(65536))
            assert sock.recv(65536) == b""  # closed
            sock.close()
    assert all(a.startswith(b"HTTP/1.1 408") and b"header_timeout_s" in a for a in answers)
    assert time.monotonic() - began < 15
    assert set(os.listdir(workspace / "uploads")) == before and len(os.listdir(workspace / "jobs")) == 1

    # URLs that never answer: fetched on threads of their own, each within fetch.timeout_s; past fetch.concurrency,
    # refused at once; /health meanwhile answers as when idle.
    hung = socket.socket()
    hung.bind(("127.0.0.2", 0))
    hung.listen(64)  # accepts, reads nothing, answers nothing
    url = f"http://127.0.0.2:{hung.getsockname()[1]}/doc.pdf"
    fetched = []

    def submit_url():
        answer = httpx.post(f"{base}/v1/jobs", json={"url": url}, headers=AUTH, timeout=60)
        fetched.append((answer.status_code, answer.json(), answer.headers.get("retry-after")))

    with HealthWatch(base) as under_fetches:
        threads = [threading.Thread(target=submit_url) for _ in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    hung.close()
    assert sorted(s for s, _, _ in fetched) == [422] * 3 + [503] * 9, fetched
    assert all("took longer than 3 s" in f["error"] for s, f, _ in fetched if s == 422)
    assert all("fetch.concurrency" in f["error"] and retry == "5" for s, f, retry in fetched if s == 503)

    # Accepted, and finished with their reasons: a page the model server refuses (its processor: an aspect ratio
    # over 200) while it answers the others; an archive of links, devices and FIFOs beside a document; a page tree
    # that lies about its count; with normal jobs between them, each converted once.
    poison = {"refused page": call(f"{base}/v1/jobs", "POST", hostile.sliver_pdf(14000, 10))[1]["id"],
              "links": call(f"{base}/v1/jobs", "POST", hostile.links_and_devices_tar(one))[1]["id"],
              "lying count": call(f"{base}/v1/jobs", "POST", hostile.lying_count_pdf())[1]["id"]}
    with HealthWatch(base) as converting:
        jobs += [call(f"{base}/v1/jobs", "POST", doc)[1]["id"] for doc in normal[1:]]
        for job in [*poison.values(), *jobs]:
            assert wait_done(base, job)["status"] == "done", job
    refused = call(f"{base}/v1/jobs/{poison['refused page']}")[1]
    assert refused["counts"]["refused_pages"] == 1 and refused["counts"]["fallback_pages"] == 1, refused
    status, result = call(f"{base}/v1/jobs/{poison['refused page']}/result")
    assert status == 200 and [p["fallback"] for d in result["documents"] for p in d["pages"]] in ([True], [])
    status, result = call(f"{base}/v1/jobs/{poison['links']}/result")
    assert status == 200 and [d["name"] for d in result["documents"]] == ["doc.pdf"]
    assert [(n["name"], n["reason"]) for n in result["not_converted"]] == [
        ("to-passwd", "not a regular file (a symbolic link)"), ("hard", "not a regular file (a hard link)"),
        ("pipe", "not a regular file (a FIFO)"), ("null", "not a regular file (a character device)")]
    page = httpx.get(f"{base}/v1/jobs/{poison['links']}/pages/1.jpg", headers=AUTH, timeout=60)
    assert page.status_code == 200 and page.content[:2] == b"\xff\xd8"  # an archive's page, drawn from its member
    lying = poison["lying count"]  # its page tree says 10^9 pages; it has one, which poppler does not draw
    for number, expected, said in ((1, 422, "page 1 of job"), (2, 404, "has no page 2 (its pages: 1-1)"),
                                   (10**12, 422, "page: Input should be less than or equal to")):
        page = httpx.get(f"{base}/v1/jobs/{lying}/pages/{number}.jpg", headers=AUTH, timeout=60)
        assert page.status_code == expected and (said is None or said in page.json()["error"]), page.text
    # Every job converted exactly once: one done marker and one result each, one log line each.
    done = list(done_records(Workspace(str(workspace))).values())
    assert len(done) == len(jobs) + len(poison) == len(os.listdir(workspace / "results"))
    log = open(tmp_path / "service.log").read()
    assert sorted(log.count(f"item {d['id']} converted") for d in done) == [1] * len(done)
    assert "Traceback" not in log and "the service's workers stopped" not in log

    after_rss = rss_mb(pid)
    with HealthWatch(base) as after:
        time.sleep(2)
    print(f"RSS {before_rss:.0f} -> {after_rss:.0f} MB; /health median idle {statistics.median(idle.times) * 1000:.1f} ms, "
          f"under slow clients {statistics.median(under_slow_clients.times) * 1000:.1f} ms, under hung fetches "
          f"{statistics.median(under_fetches.times) * 1000:.1f} ms (max {max(under_fetches.times) * 1000:.0f}), "
          f"converting {statistics.median(converting.times) * 1000:.1f} ms, after "
          f"{statistics.median(after.times) * 1000:.1f} ms")
    # Bounds: the hostile uploads once took 1.3 GB and /health 11 s.
    assert after_rss - before_rss < 150, (before_rss, after_rss)
    for watch in (under_slow_clients, under_fetches, converting, after):
        assert statistics.median(watch.times) < 0.05 and max(watch.times) < 1.0, watch.times


@pytest.mark.integration
def test_admissions_are_exact_and_a_workspace_outage_or_a_cancelled_job_says_so(start_service, s3_server, tmp_path):
    """max_waiting=5 and 30 submissions at once: exactly 5 let in. A cancelled job's result says cancelled and
    asks for no retry. The workspace (S3, through a proxy) gone: submissions and status answer 503 with
    Retry-After, in JSON; back, the service goes on."""
    from support.faultproxy import FaultProxy

    import boto3

    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket="work")
    proxy = FaultProxy(s3_server, rate=0.0).start()
    try:
        base, _ = start_service("workers=0", "max_waiting=5", "workspace=s3://work/ws",
                                f"workspace_access.endpoint={proxy.endpoint}")
        one = open(write_pdf(str(tmp_path / "one.pdf"), ["one"]), "rb").read()
        answers = []

        def submit():
            answer = httpx.post(f"{base}/v1/jobs", content=one, headers=AUTH, timeout=60)
            answers.append((answer.status_code, answer.json()))

        threads = [threading.Thread(target=submit) for _ in range(30)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(s for s, _ in answers) == [202] * 5 + [429] * 25, answers
        job = next(body["id"] for status, body in answers if status == 202)
        assert send(f"{base}/v1/jobs/{job}", "DELETE")[1]["status"] == "cancelled"
        answer = httpx.get(f"{base}/v1/jobs/{job}/result", headers=AUTH)
        assert answer.status_code == 409 and "retry-after" not in answer.headers
        assert answer.json() == {"error": f"job {job} cancelled: cancelled before it started; it has no result",
                                 "status": "cancelled", "reason": "cancelled before it started"}
        proxy.outage(20)
        time.sleep(1.1)  # the service looks at the queue at most once a second: the next look meets the outage
        for answer in (httpx.post(f"{base}/v1/jobs", content=one, headers=AUTH, timeout=60),
                       httpx.get(f"{base}/v1/jobs/{job}", headers=AUTH, timeout=60)):
            assert answer.status_code == 503 and answer.headers["retry-after"] == "10", answer.text
            assert "the workspace does not answer now" in answer.json()["error"]
        while proxy.down:
            time.sleep(0.2)
        assert call(f"{base}/v1/jobs/{job}")[1]["status"] == "cancelled"
    finally:
        proxy.stop()
