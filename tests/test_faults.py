"""The pipeline in bad weather: a fault-injecting proxy in front of a real S3 server (moto) — resets before
and after the server did the request, 500s, 503 SlowDown, stalls, a full outage — a PDF server that is
down or refuses the credentials, two S3 accounts reached by profile, given-up items put back, and the
checks a worker makes before its first claim."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from conftest import write_pdf
import olmocr.pipeline.queue as wq
from olmocr.faults import Unreachable
from olmocr.pipeline.stats import workspace_stats
from olmocr.pipeline.queue import Item
from olmocr.pipeline.workspace import Workspace
from olmocr.utils.io import Access
from support.faultproxy import FaultProxy
from work_helpers import done_records



def s3(endpoint: str):
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False,
                             client_kwargs={"endpoint_url": endpoint})


def upload_pdfs(endpoint: str, bucket: str, count: int, tmp_path) -> list[str]:
    """``count`` one-page PDFs at s3://bucket/pdfs/ (one file's bytes under many names)."""
    fs = s3(endpoint)
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    data = open(write_pdf(str(tmp_path / "one.pdf"), ["One page"]), "rb").read()
    keys = [f"{bucket}/pdfs/doc_{i:04d}.pdf" for i in range(count)]
    fs.pipe({key: data for key in keys})
    return [f"s3://{key}" for key in keys]


def worker(root: str, run_dir, *extra: str, threads: int = 1) -> list[str]:
    return [sys.executable, "-m", "olmocr.pipeline", f"workspace={root}", "work=inventory", f"workers={threads}",
            "progress=false", f"hydra.run.dir={run_dir}", *extra]


def check_every_pdf_once(ws: Workspace, pdfs: list[str]) -> dict:
    """Every item done, with its result; every PDF in exactly one result line; nothing given up."""
    items = {item.id for item in wq.items(ws)}
    done = set(done_records(ws))
    assert done == items, f"{len(items - done)} items lost"
    results = ws.store.read_many([ws.result_name(i) for i in items])
    assert len(results) == len(items), "done markers without their result"
    sources = [json.loads(line)["source"] for data in results.values() for line in data.decode().splitlines()]
    assert sorted(sources) == sorted(pdfs)  # none missing, none twice
    stats = workspace_stats(ws)
    assert (stats["given_up"], stats["active"], stats["expired"], stats["retrying"]) == (0, 0, 0, 0)
    return stats


def log_of(proc: subprocess.Popen) -> str:
    run_dir = next(a.split("=", 1)[1] for a in proc.args if a.startswith("hydra.run.dir="))
    return open(os.path.join(run_dir, "out.log")).read()


CHAOS_ITEMS, CHAOS_PROCESSES, CHAOS_THREADS, OUTAGE_S = 160, 2, 4, 30


@pytest.mark.integration
def test_every_pdf_exactly_once_through_a_faulty_network_an_outage_and_kills(tmp_path, s3_server):
    """Two workspaces at once, each worked on by 8 workers (2 processes of 4 threads) over 160 one-PDF
    items: one on S3 with its PDFs, and one local whose PDFs are on S3. Every request to S3 goes through a
    proxy that faults 10% of them (any kind of request, creates and If-Match rewrites included). Once a
    sixth of a workspace's items are done, one of its worker processes is SIGKILLed and another started;
    once a third of the items of either are done, S3 is unreachable for 30 s (three leases: claims expire
    and are taken over)."""
    kinds = ("GET", "HEAD", "PUT", "PUT if-none-match", "PUT if-match")
    proxy = FaultProxy(s3_server, rate=0.1, stall_s=(1.0, 2.0), seed=0, cover=kinds).start()
    pdfs = upload_pdfs(s3_server, "corpus", CHAOS_ITEMS, tmp_path)
    s3(s3_server).mkdir("work")
    spaces = {"s3": Workspace("s3://work/ws", Access(endpoint=s3_server)), "local": Workspace(str(tmp_path / "ws"))}
    for ws in spaces.values():
        wq.add(ws, pdfs, pages_per_group=1, sample=0)
    through = [f"pdf_access.endpoint={proxy.endpoint}", f"workspace_access.endpoint={proxy.endpoint}"]
    # Short leases and waits, so the test is quick; outlasting the outage needs give_up_after_s above it.
    queue = ["queue.lease_s=10", "queue.poll_s=2", "queue.retry_wait_s=1", "queue.retry_wait_max_s=3",
             f"queue.give_up_after_s={4 * OUTAGE_S}"]

    def start(name: str, k: int) -> subprocess.Popen:
        run = tmp_path / f"{name}{k}"
        run.mkdir()
        with open(run / "out.log", "w") as out:
            return subprocess.Popen(worker(spaces[name].root, run, *through, *queue, threads=CHAOS_THREADS),
                                    cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)

    procs = {(name, k): start(name, k) for name in spaces for k in range(CHAOS_PROCESSES)}
    begin, killed, outage_at = time.time(), set(), None
    # The outage starts as soon as either workspace is a third done, not after both kills: the local one runs far
    # ahead of the one on S3, and by the S3 one's kill its workers may all be waiting for the killed process's
    # leases, holding no item for the outage to send back.
    while outage_at is None or killed != set(spaces):
        assert time.time() - begin < 300 and all(p.poll() in (None, 0) for p in procs.values()), [
            log_of(p) for p in procs.values()]
        time.sleep(2)  # listings of hundreds of markers hold up the workers' requests to the one-at-a-time server
        done = {name: len(done_records(ws)) for name, ws in spaces.items()}
        for name in spaces:
            if name not in killed and done[name] >= CHAOS_ITEMS / 6:
                procs.pop((name, 0)).kill()  # working: it has finished items, and holds four claims
                procs[name, CHAOS_PROCESSES] = start(name, CHAOS_PROCESSES)
                killed.add(name)
        if outage_at is None and max(done.values()) >= CHAOS_ITEMS / 3:
            proxy.outage(OUTAGE_S)
            outage_at = time.time() - begin
    for proc in procs.values():
        assert proc.wait(timeout=600) == 0, log_of(proc)
    wall = time.time() - begin
    proxy.stop()
    for ws in spaces.values():
        stats = check_every_pdf_once(ws, pdfs)
        assert stats["counts"]["documents"] == CHAOS_ITEMS
    reports = [json.load(open(tmp_path / f"{name}{k}" / "run_info.json"))["summary"]["work"] for name, k in procs]
    faulted = proxy.faulted()
    faulted_kinds = {kind for (fault, kind) in proxy.counts if fault not in ("ok", "outage")}
    print(f"outage at {outage_at:.0f} s, finished after {wall:.0f} s; faults met: {dict(faulted)}; "
          f"given back after faults: {sum(r['unavailable'] for r in reports)}, taken over: "
          f"{sum(r['taken_over'] for r in reports)}, finished twice: {sum(r['duplicates'] for r in reports)}")
    assert set(faulted) == {"reset_before", "reset_after", "internal_error", "slow_down", "stall", "outage"}
    assert set(kinds) <= faulted_kinds  # each kind was made (and, covered, faulted at least once)
    assert sum(r["failed"] for r in reports) == 0  # no failure was counted against an item
    assert sum(r["unavailable"] for r in reports) > 0  # the outage sent items back, to wait
    assert sum(r["taken_over"] for r in reports) > 0  # the killed workers' claims, and those the outage let expire


GIVE_UP_S = 3


@pytest.mark.integration
def test_sigterm_while_a_read_never_returns_ends_the_worker_within_seconds(tmp_path, monkeypatch):
    """The PDFs' S3 holds every request for ten minutes (a hung mount reads the same): SIGTERM gives the
    claim back and the process ends within 10 s, whatever its reading thread is doing."""
    import signal

    from support.s3server import S3Server

    server = S3Server().start()
    for key, value in server.environment().items():
        monkeypatch.setenv(key, value)
    pdfs = upload_pdfs(server.endpoint, "corpus", 2, tmp_path)
    ws = Workspace(str(tmp_path / "ws"))
    wq.add(ws, pdfs, pages_per_group=10, sample=0)
    proxy = FaultProxy(server.endpoint, rate=1.0, faults=("stall",), stall_s=(600.0, 600.0)).start()
    proc = subprocess.Popen(worker(ws.root, tmp_path / "run", f"pdf_access.endpoint={proxy.endpoint}"), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ws.store.list("claims"):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "no claim"
            time.sleep(0.2)
        while not sum(proxy.counts.values()):  # the read went out and is held
            assert time.monotonic() < deadline
            time.sleep(0.2)
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - began
    finally:
        proc.kill()
        proxy.stop()
    assert took < 10, f"{took:.1f} s"
    assert proc.returncode == 128 + signal.SIGTERM and "SIGTERM: gave back 1 claim(s); stopping" in out + err, out[-3000:]
    claims = [json.loads(data) for data in ws.store.read_many([wq.names.claim_name(i.id) for i in wq.items(ws)]).values()]
    assert claims and all(c["expires"] <= time.time() for c in claims)
    assert not ws.store.list("done")


@pytest.mark.parametrize("trouble", ["server stopped", "credentials refused"])
@pytest.mark.integration
def test_a_worker_that_cannot_read_any_pdf_stops_with_the_cause_and_gives_nothing_up(tmp_path, monkeypatch, trouble):
    """PDFs on an S3 server that is stopped, or that refuses this worker's credentials (403 at the proxy):
    the worker pauses, then exits after queue.give_up_after_s with one line naming the cause; nothing is
    given up or marked done. With the server back (the right credentials), a second run converts all."""
    from support.s3server import S3Server

    server = S3Server().start()
    for key, value in server.environment().items():
        monkeypatch.setenv(key, value)
    # Two attempts per request, not botocore's five (~10 s against a stopped server): a quicker test.
    env = {**os.environ, "AWS_MAX_ATTEMPTS": "2"}
    pdfs = upload_pdfs(server.endpoint, "corpus", 3, tmp_path)
    ws = Workspace(str(tmp_path / "ws"))
    wq.add(ws, pdfs, pages_per_group=1, sample=0)
    queue = ["queue.retry_wait_s=0.5", "queue.retry_wait_max_s=2", f"queue.give_up_after_s={GIVE_UP_S}"]
    if trouble == "server stopped":
        port = server._server.server_port
        server.stop()
        endpoint = server.endpoint
    else:
        proxy = FaultProxy(server.endpoint, rate=1.0, faults=("access_denied",)).start()
        endpoint = proxy.endpoint
    began = time.monotonic()
    proc = subprocess.run(worker(ws.root, tmp_path / "run", f"pdf_access.endpoint={endpoint}", *queue, threads=2),
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - began
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    cause = "Could not connect to the endpoint URL" if trouble == "server stopped" else "Forbidden"
    assert line.startswith("error: nothing could be done for ") and f"queue.give_up_after_s={GIVE_UP_S}" in line
    assert cause in line and line.endswith("(the items this worker held go back to the queue)"), line
    assert took < GIVE_UP_S + 60, f"{took:.0f} s"  # start-up and the last attempt on top of the configured time
    stats = workspace_stats(ws)
    assert (stats["done"], stats["given_up"]) == (0, 0)
    claims = [json.loads(data) for data in ws.store.read_many([wq.names.claim_name(i.id) for i in wq.items(ws)]).values()]
    assert claims and all(c["failures"] == 0 and c["transient_failures"] >= 1 for c in claims)
    assert all(c["expires"] <= time.time() for c in claims)  # none left held: the next worker need not wait a lease
    if trouble == "server stopped":
        server = S3Server(port=port).start()  # back (moto keeps nothing across a restart: the PDFs again)
        upload_pdfs(server.endpoint, "corpus", 3, tmp_path)
    else:
        proxy.stop()
        endpoint = server.endpoint
    proc = subprocess.run(worker(ws.root, tmp_path / "run2", f"pdf_access.endpoint={endpoint}", *queue, threads=2),
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    check_every_pdf_once(ws, pdfs)
    server.stop()


def test_workspace_and_pdfs_in_two_accounts_each_reached_by_its_profile(tmp_path, monkeypatch):
    """The workspace on one S3 server, the PDFs on another (two processes: moto keeps one set of buckets
    per process), each named by a profile of ~/.aws/config with its own endpoint and keys; no endpoint or
    keys in the environment."""
    from support.s3server import S3Server

    pdf_server = S3Server().start()
    for key, value in pdf_server.environment().items():
        monkeypatch.setenv(key, value)
    pdfs = upload_pdfs(pdf_server.endpoint, "corpus", 2, tmp_path)
    ws_server = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "support", "s3server.py"), "--port", "0",
                                  "--bucket", "work"],
                                 stdout=subprocess.PIPE, text=True)
    try:
        ws_endpoint = dict(kv.split("=", 1) for kv in ws_server.stdout.readline().split())["AWS_ENDPOINT_URL"]
        (tmp_path / "config").write_text(
            f"[profile ws]\nendpoint_url = {ws_endpoint}\nregion = us-east-1\n\n"
            f"[profile pdfs]\nendpoint_url = {pdf_server.endpoint}\nregion = us-east-1\n")
        (tmp_path / "credentials").write_text("[ws]\naws_access_key_id = ws-key\naws_secret_access_key = ws-secret\n\n"
                                              "[pdfs]\naws_access_key_id = pdf-key\naws_secret_access_key = pdf-secret\n")
        for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
            monkeypatch.delenv(key, raising=False)
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
        access = ["workspace_access.profile=ws", "pdf_access.profile=pdfs"]
        proc = subprocess.run(worker("s3://work/ws", tmp_path / "run", "pdfs=[s3://corpus/pdfs/*.pdf]", *access),
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        check_every_pdf_once(Workspace("s3://work/ws", Access(profile="ws")), pdfs)
        from olmocr.utils.io import filesystem

        assert not filesystem("s3://work", Access(profile="pdfs")).exists("work")  # nothing on the PDFs' server
        stats = subprocess.run([sys.executable, "-m", "olmocr.pipeline.stats", "workspace=s3://work/ws",
                                "workspace_access.profile=ws"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert "1 total: 1 done" in stats.stdout, stats.stderr  # both PDFs in one item (pages_per_group)
        # The PDFs' profile does not reach the workspace: the worker says so before it claims anything.
        proc = subprocess.run(worker("s3://work/ws", tmp_path / "run2", "workspace_access.profile=pdfs"),
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2
        assert re.fullmatch(r"error: workspace s3://work/ws: bucket 'work' does not exist at http://127.0.0.1:\d+ \(create "
                        r"it, or name one that exists\)", proc.stderr.strip().splitlines()[-1]), proc.stderr
    finally:
        ws_server.kill()
        pdf_server.stop()


def test_a_worker_checks_its_workspace_and_tools_before_it_starts_a_server_or_claims(tmp_path):
    """Each one line, at once: a workspace with no work, a machine without poppler."""
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "olmocr.pipeline", f"workspace={empty}", "progress=false",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (f"error: workspace: {empty} has no work index (add PDFs: python -m "
                                                    f"olmocr.pipeline workspace={empty} pdfs=[…])")
    assert "starting" not in proc.stderr  # no server was started
    ws = Workspace(str(tmp_path / "ws"))
    wq.add(ws, [write_pdf(str(tmp_path / "a.pdf"), ["A page"])], pages_per_group=1)
    bare = tmp_path / "bin"  # a PATH without poppler's tools
    bare.mkdir()
    proc = subprocess.run([sys.executable, "-m", "olmocr.pipeline", f"workspace={ws.root}", "progress=false",
                           f"hydra.run.dir={tmp_path / 'run2'}"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PATH": str(bare)})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == ("error: pdftoppm not found: install poppler-utils (Debian/Ubuntu: "
                                                    "sudo apt-get install -y poppler-utils)")
    assert "starting" not in proc.stderr and not ws.store.list("claims")
    # Every queue setting is checked before the model is even built.
    from olmocr.config import compose
    from olmocr.pipeline.__main__ import run

    for override, error in [("queue.lease_s=0", "queue.lease_s: must be positive, got 0"),
                            ("queue.retry_wait_max_s=1", "queue.retry_wait_max_s: must be at least retry_wait_s")]:
        with pytest.raises(ValueError, match=f"^{error}"):
            run(compose("pipeline", [f"workspace={ws.root}", "server=vllm", f"model.cache_dir={tmp_path}/models",
                                     override]), str(tmp_path / "run3"))
    assert not ws.store.list("claims") and not (tmp_path / "models").exists()


def test_a_missing_bucket_is_one_line_in_seconds_when_adding_working_and_looking(tmp_path, s3_server):
    """A wrong bucket name is no outage: adding PDFs (a conditional write S3 answers NoSuchBucket, which must
    not pass for a conflict to retry), a worker and stats each say so in one line at once."""
    from olmocr.config import compose
    from olmocr.pipeline.__main__ import run
    from olmocr.pipeline.stats import run as stats

    pdf = write_pdf(str(tmp_path / "a.pdf"), ["A page"])
    said = (r"^workspace s3://no-such-bucket/ws: bucket 'no-such-bucket' does not exist at http://127.0.0.1:\d+ "
            r"\(create it, or name one that exists\)$")
    for overrides in ([f"pdfs=[{pdf}]", "workers=0"], ["workers=1", "server=external", "server.url=http://127.0.0.1:9/v1",
                                                       "server.model_name=m"]):
        began = time.monotonic()
        with pytest.raises(ValueError, match=said):
            run(compose("pipeline", ["workspace=s3://no-such-bucket/ws", "progress=false", *overrides]),
                str(tmp_path / "run"))
        assert time.monotonic() - began < 10
    with pytest.raises(ValueError, match=said):
        stats(compose("pipeline_stats", ["workspace=s3://no-such-bucket/ws", f"paths.cache={tmp_path}/cache"]))


@pytest.mark.integration
def test_a_hung_s3_endpoint_ends_a_worker_within_its_give_up_time_and_stats_in_bounded_time(tmp_path, monkeypatch):
    """An endpoint that takes connections and never answers: every S3 request gives up within its budget
    (S3_CALL_S), so a worker stops within queue.give_up_after_s (was: 829 s at 60) and stats within a
    request's budget or two (was: 423 s), each in one line."""
    import socket

    from olmocr.config import compose
    from olmocr.pipeline.__main__ import run
    from olmocr.pipeline.stats import run as stats
    from olmocr.utils.io import S3_CALL_S

    listener = socket.create_server(("127.0.0.1", 0))
    held = []

    def take():  # every connection taken and held, never answered
        with contextlib.suppress(OSError):  # the listener closed at the end
            while True:
                held.append(listener.accept()[0])

    threading.Thread(target=take, daemon=True).start()
    for key, value in {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{listener.getsockname()[1]}",
                       "AWS_ACCESS_KEY_ID": "key", "AWS_SECRET_ACCESS_KEY": "secret"}.items():
        monkeypatch.setenv(key, value)
    give_up = 30
    began = time.monotonic()
    with pytest.raises(Unreachable, match=r"^nothing could be done for \d+ s.*queue.give_up_after_s=30\); the last, on "
                                         r"the workspace: ReadTimeoutError: .*go back to the queue\)$"):
        run(compose("pipeline", ["workspace=s3://work/ws", "workers=1", f"queue.give_up_after_s={give_up}",
                                 "server=external", "server.url=http://127.0.0.1:9/v1", "server.model_name=m",
                                 "progress=false"]), str(tmp_path / "run"))
    assert time.monotonic() - began < give_up + 5
    began = time.monotonic()
    with pytest.raises(Unreachable, match=r"^workspace s3://work/ws: the storage or a service did not answer"):
        stats(compose("pipeline_stats", ["workspace=s3://work/ws", f"paths.cache={tmp_path}/cache"]))
    assert time.monotonic() - began < 2 * S3_CALL_S
    assert held  # the requests did reach it
    listener.close()


def test_given_up_items_are_listed_with_their_error_and_put_back_by_requeue(tmp_path):
    from olmocr.pipeline.stats import describe
    from olmocr.pipeline.worker import run_workers
    from work_helpers import Failing, Slow

    from olmocr.pipeline.queue import WorkQueue

    ws = Workspace(str(tmp_path / "ws"))
    pdfs = [write_pdf(str(tmp_path / f"{n}.pdf"), [n]) for n in ("a", "b")]
    wq.add(ws, pdfs, pages_per_group=1)
    report = run_workers(ws, Failing(), max_failures=2, retry_wait_s=0.05, retry_wait_max_s=0.1, progress=False)
    assert (report.done, report.failed) == (0, 4)
    failed = wq.items(ws)
    # A third item cancelled (as the service cancels a job): given up for good, never put back
    wq.add(ws, [write_pdf(str(tmp_path / "c.pdf"), ["c"])], pages_per_group=1)
    queue = WorkQueue(ws, "canceller", lease_s=10)
    claim = queue.claim_next()
    queue.release(claim, error="cancelled after 0 page(s)", cancelled=True)
    stats = workspace_stats(ws)
    assert (stats["given_up"], stats["cancelled"]) == (2, 1)
    assert stats["pages_remaining_estimated"] == 0  # nothing to convert until something is put back
    text = describe(stats)
    assert "2 given up, 1 cancelled, 0 waiting" in text and "done, given up or cancelled" in text
    assert claim.item.id not in text  # not listed among those to put back
    for item in failed:
        assert f"given up   {item.id} (1 PDFs, 2 failures): RuntimeError: cannot convert {item.pdfs[0]}" in text
    assert f"put them back with python -m olmocr.pipeline.requeue workspace={ws.root}" in text
    first = failed[0].id
    proc = subprocess.run([sys.executable, "-m", "olmocr.pipeline.requeue", f"workspace={ws.root}", f"items=[{first}]"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"1 given-up item(s) back in the queue of {ws.root}: {first}"
    stats = workspace_stats(ws)
    assert (stats["given_up"], stats["pages_remaining_estimated"]) == (1, 1)
    proc = subprocess.run([sys.executable, "-m", "olmocr.pipeline.requeue", f"workspace={ws.root}",
                           f"items=[{claim.item.id}]"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr == (
        f"error: items: {claim.item.id} cancelled in {ws.root}: a cancelled item is not put back (nothing was)\n")
    assert workspace_stats(ws)["given_up"] == 1
    proc = subprocess.run([sys.executable, "-m", "olmocr.pipeline.requeue", f"workspace={ws.root}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip().startswith("1 given-up item(s) back")
    body = json.loads(ws.store.read(wq.names.claim_name(first)).data)
    assert body["failures"] == 0 and body["previous_error"].startswith("RuntimeError: cannot convert")
    assert run_workers(ws, Slow(0), progress=False).done == 2
    stats = workspace_stats(ws)
    assert (stats["done"], stats["given_up"], stats["cancelled"]) == (2, 0, 1)
    assert not ws.store.exists(ws.result_name(claim.item.id))


def test_a_claim_damaged_from_outside_is_replaced_by_the_next_worker(tmp_path):
    """A claim cut short (a sync tool, a full disk) or edited into something else: stats counts it as expired,
    requeue leaves it, and a worker claims the item in its place; every PDF converted once."""
    from olmocr.pipeline.queue import anything_left, requeue
    from olmocr.pipeline.worker import run_workers
    from work_helpers import Slow

    ws = Workspace(str(tmp_path / "ws"))
    pdfs = [write_pdf(str(tmp_path / f"{n}.pdf"), [n]) for n in ("a", "b", "c", "d")]
    wq.add(ws, pdfs, pages_per_group=1)
    for item, body in zip(wq.items(ws), (b'{"worker": "w", "expi', b"[1, 2]", b'{"worker": "w", "expires": "soon"}')):
        ws.store.write(wq.names.claim_name(item.id), body)
    assert workspace_stats(ws)["expired"] == 3 and anything_left(ws)
    assert requeue(ws) == []
    assert run_workers(ws, Slow(0), progress=False).done == 4
    check_every_pdf_once(ws, pdfs)


def test_a_pdf_is_bad_only_for_what_it_is_not_for_where_it_lives(tmp_path, s3_server):
    """Deleted since it was queued (its folder or bucket still there): a bad document, counted, the item
    done. Its folder gone (an unmounted disk) or its storage refusing: the item goes back to the queue."""
    from olmocr.pipeline.failures import Unavailable, transient
    from olmocr.pipeline.inventory import Inventory

    folder = tmp_path / "mnt"
    folder.mkdir()
    kept, deleted = (write_pdf(str(folder / f"{n}.pdf"), [n]) for n in ("kept", "deleted"))
    [remote] = upload_pdfs(s3_server, "corpus", 1, tmp_path)
    ws = Workspace(str(tmp_path / "ws"))
    wq.add(ws, [kept, deleted, remote], pages_per_group=10, sample=0)
    [item] = wq.items(ws)
    os.remove(deleted)
    s3(s3_server).rm("corpus/pdfs/doc_0000.pdf")
    rows = [json.loads(line) for line in Inventory()(item).result.decode().splitlines()]
    errors = {row["source"]: row.get("error") for row in rows}
    assert errors[kept] is None
    assert errors[deleted] == f"missing_document: {deleted} is gone (deleted since it was queued)"
    assert errors[remote] == f"missing_document: {remote} is gone (deleted since it was queued)"
    os.rename(folder, tmp_path / "unmounted")
    with pytest.raises(Unavailable, match=r"mnt is not there \(an unmounted folder, a missing bucket\?\)") as caught:
        Inventory()(item)
    assert transient(caught.value)
    with FaultProxy(s3_server, rate=1.0, faults=("access_denied",)) as proxy:  # the wrong credentials
        with pytest.raises(Unavailable, match=r"s3://corpus/pdfs/doc_0000.pdf: PermissionError: Forbidden") as caught:
            Inventory(Access(endpoint=proxy.endpoint))(Item("x", (remote,), 1))
    assert transient(caught.value)


@pytest.mark.integration
def test_a_full_disk_under_the_workspace_is_waited_out_without_litter_and_left_within_seconds(small_disk, tmp_path,
                                                                                               caplog):
    """The disk fills as an item finishes converting: its outputs wait, claim held, for the disk to have room
    (a full disk still answers reads, so the pause looks with a write); no retry leaves a temporary file
    behind; the work goes on within seconds of the space coming back, the conversion not redone."""
    import threading

    from olmocr.pipeline.worker import PROBE_S, run_workers
    from work_helpers import Slow

    class FillsTheDisk(Slow):
        calls = 0

        def __call__(self, item):
            FillsTheDisk.calls += 1
            output = super().__call__(item)
            small_disk.leave(0)
            return output

    ws = Workspace(str(small_disk.path / "ws"))
    pdfs = [write_pdf(str(tmp_path / f"{n}.pdf"), [n]) for n in ("a", "b")]
    wq.add(ws, pdfs, pages_per_group=10)
    reports = []
    caplog.set_level("WARNING", logger="olmocr.pipeline")
    worker = threading.Thread(target=lambda: reports.append(
        run_workers(ws, FillsTheDisk(0), retry_wait_s=30, progress=False)))
    worker.start()
    deadline = time.monotonic() + 60
    while "pausing up to 30 s" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.1)
    failures = caplog.text.count("writing the outputs of item")
    assert failures == 3, caplog.text
    assert "failed (NoSpace: no space left on device writing " in caplog.text
    time.sleep(3 * PROBE_S)
    assert caplog.text.count("writing the outputs of item") == failures  # paused: no write tried but the look
    litter = [name for _, _, files in os.walk(ws.root) for name in files if name.endswith(".tmp")]
    assert not litter
    small_disk.free()
    freed = time.monotonic()
    worker.join(timeout=30)
    assert time.monotonic() - freed < PROBE_S + 3
    [report] = reports
    assert report.done == 1 and FillsTheDisk.calls == 1
    check_every_pdf_once(ws, pdfs)
    # A disk that stays full past queue.give_up_after_s: the worker stops, and its claim, which it cannot give back
    # (that is a write too), is said to return when it expires rather than to be back in the queue.
    from olmocr.pipeline.failures import StopWork

    wq.add(ws, [write_pdf(str(tmp_path / "c.pdf"), ["c"])], pages_per_group=10)
    with pytest.raises(StopWork, match="^nothing could be done for") as stopped:
        run_workers(ws, FillsTheDisk(0), give_up_after_s=2, retry_wait_s=0.5, progress=False)
    assert stopped.value.unreleased == 1
