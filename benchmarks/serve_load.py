"""The service under load, against the batch pipeline on the same PDFs and the same model server, in one run.

    python benchmarks/serve_load.py [--clients 8] [--docs 24] [--jobs 1000] [--latency-jobs 40] [--workers 2]

One ``transformers serve`` of the tiny model (the embedded default) is started here and shared: the batch
pipeline and the service both reach it as ``server=external``, with the same convert settings and worker
threads. The documents are the bundled sample PDFs and generated ones of 1 to 8 pages (text on each page).

- **Throughput**: the batch pipeline converts all ``--docs`` documents into a fresh workspace; then
  ``--clients`` concurrent clients submit the same documents to the service (a fresh workspace), each
  long-polling its jobs. Pages/s of each is counted from the workspace's own records (each item's done marker
  says when it was claimed and finished): pages over the span from the first claim to the last finish, so
  neither start-up counts. The service's figure is also given as a share of the batch pipeline's.
- **Latency of a one-page job**: ``--latency-jobs`` one-page PDFs submitted one after another to the idle
  service; from the submission to the status that says done (long-polled), median and p95; and the same
  through ``POST /v1/convert``.
- **A long run**: ``--jobs`` one-page jobs by the clients, the service's resident memory (its own process,
  not the model server's) sampled after every tenth of them, the time of a submission (one new index part
  of its own) over the first and the last hundred.
- **Submissions as the queue grows** (``--submissions``, 10,000): one-page jobs submitted one after another to a
  service that converts nothing (workers=0), so every job stays queued: the submission time over the first and the
  last hundred, and the newest job's status (its queue position among all waiting) every hundred.
- **Lost or twice**: every job submitted must end done, its item with one done marker and one result, and
  the service's log must say each item was converted once.
- **A hostile mix** (``--hostile-share``): the same documents submitted by the same clients to two fresh
  services, one clean and one where an attacker adds poison submissions (a share of all, spread over as long as
  the clean run took; tests/support/hostile.py): pages the
  model server refuses (its processor's aspect-ratio bound; both services render such pages for it,
  ``+convert.steps.render.max_aspect=100000``, and make one greedy attempt a page, so that rounds differ by the
  poison, not by sampled answers' lengths), archives of links and devices, page trees that lie about their
  count, and uploads refused at submission (pages of no size, page trees too deep, a name twice, 200,000
  folders, a 1 GiB member, JSON nested 60,000 deep). The normal jobs' pages/s (their own done markers) and
  submitted-to-done latency in each, their ratio, and how each poison submission ended (an error's status, or
  a finished job with its counts).
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
TOKEN = "serve-load-token"


def pdf(pages: int, label: str) -> bytes:
    from reportlab.lib.pagesizes import LETTER
    from reportlab.pdfgen.canvas import Canvas

    out = io.BytesIO()
    canvas = Canvas(out, pagesize=LETTER)
    for n in range(1, pages + 1):
        canvas.setFont("Helvetica", 14)
        for line in range(12):
            canvas.drawString(72, 700 - 22 * line, f"{label}, page {n}, line {line + 1}: the quick brown fox.")
        canvas.showPage()
    canvas.save()
    return out.getvalue()


def documents(count: int) -> list[tuple[str, bytes]]:
    bundled = sorted(glob.glob(os.path.join(ROOT, "data", "sample", "eval", "pdfs", "*.pdf")))
    docs = [(os.path.basename(path), open(path, "rb").read()) for path in bundled[: count // 2]]
    docs += [(f"generated_{n}.pdf", pdf(1 + n % 8, f"document {n}")) for n in range(count - len(docs))]
    return docs


def model_server(log_dir: str):
    from olmocr.config import build, compose

    cfg = compose("pipeline", [])
    server = build(cfg.server, model=build(cfg.model))
    server.start(os.path.join(log_dir, "server.log"))
    return server


def pages_per_second(workspace: str) -> tuple[float, int, int]:
    """Pages over the span from the first claim to the last finish, from the done markers; and the items."""
    done = [json.load(open(path)) for path in glob.glob(os.path.join(workspace, "done", "*.json"))]
    pages = sum(record["counts"].get("pages", 0) for record in done)
    span = max(r["finished"] for r in done) - min(r["claimed"] for r in done)
    return pages / span, pages, len(done)


def call(url: str, method: str = "GET", body: bytes | None = None, content_type: str = "application/pdf"):
    request = urllib.request.Request(url, data=body, method=method, headers={"Authorization": f"Bearer {TOKEN}"})
    if body is not None:
        request.add_header("Content-Type", content_type)
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.loads(answer.read())


def until_done(base: str, job: str) -> dict:
    while (state := call(f"{base}/v1/jobs/{job}?wait=30"))["status"] not in ("done", "failed", "cancelled"):
        pass
    return state


def service(workspace: str, log: str, server, workers: int, *extra: str) -> tuple[subprocess.Popen, str]:
    from olmocr.pipeline.server import free_port

    port = free_port("127.0.0.1")
    env = dict(os.environ, OLMOCR_LOAD_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "olmocr.serve", f"workspace={workspace}", f"port={port}",
                             "token_env=OLMOCR_LOAD_TOKEN", f"workers={workers}", "max_waiting=100000",
                             *external(server), f"hydra.run.dir={workspace}_run", *extra], cwd=ROOT, env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if call(f"{base}/ready")["status"] == "ready":
                return proc, base
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the service stopped: {open(log).read()[-3000:]}") from None
        time.sleep(0.2)
    raise SystemExit("the service was not ready in 120 s")


def external(server) -> list[str]:
    return ["server=external", f"server.url={server.url}", f"server.model_name={server.model}"]


def submit_all(base: str, docs: list[tuple[str, bytes]], clients: int, on_submit=None) -> list[dict]:
    """Each client submits its share and long-polls its jobs; the final states, in any order."""
    states, lock = [], threading.Lock()

    def client(share):
        jobs = []
        for name, data in share:
            began = time.perf_counter()
            jobs.append(call(f"{base}/v1/jobs?filename={name}", "POST", data)["id"])
            if on_submit is not None:
                on_submit(time.perf_counter() - began)
        for job in jobs:
            state = until_done(base, job)
            with lock:
                states.append(state)

    threads = [threading.Thread(target=client, args=(docs[n::clients],)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return states


def submissions(tmp: str, server, count: int) -> dict:
    """``count`` one-page jobs submitted one after another to an accept-only service (workers=0: nothing converts,
    so the queue only grows), timing each submission and a status call (its queue position) as the queue grows."""
    workspace, log = os.path.join(tmp, "accepting"), os.path.join(tmp, "accepting.log")
    proc, base = service(workspace, log, server, 0)
    one, submit_s, status_s, ahead = pdf(1, "one page"), [], [], None
    try:
        for n in range(count):
            began = time.perf_counter()
            job = call(f"{base}/v1/jobs?filename=one_{n}.pdf", "POST", one)["id"]
            submit_s.append(time.perf_counter() - began)
            if n % 100 == 99:  # the last job's status: where it stands among the waiting
                began = time.perf_counter()
                ahead = call(f"{base}/v1/jobs/{job}")["ahead"]
                status_s.append(time.perf_counter() - began)
        rss = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)
    if ahead != count - 1:
        raise SystemExit(f"the last of {count} waiting jobs had {ahead} ahead of it, not {count - 1}")
    return {"first": statistics.median(submit_s[:100]), "last": statistics.median(submit_s[-100:]),
            "status_first": statistics.median(status_s[:10]), "status_last": statistics.median(status_s[-10:]),
            "count": count, "rss": rss}


def print_submissions(row: dict) -> None:
    print(f"{row['count']} one-page jobs submitted one after another to an accept-only service: a submission "
          f"{row['first'] * 1000:.1f} ms over the first 100, {row['last'] * 1000:.1f} ms over the last 100 "
          f"({row['last'] / row['first']:.2f}x); the newest job's status (its queue position) "
          f"{row['status_first'] * 1000:.1f} ms over the first 1,000, {row['status_last'] * 1000:.1f} ms over the "
          f"last ({row['status_last'] / row['status_first']:.2f}x); service RSS {row['rss']:.0f} MB at the end")


def poison() -> list[tuple[str, bytes, str]]:
    """The hostile submissions of the mix: (name, body, content type)."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from support import hostile  # the test tools, tests/support/

    one = pdf(1, "inside an archive")
    return [("refused_page.pdf", hostile.sliver_pdf(14000, 10), "application/pdf"),
            ("links.tar.gz", hostile.links_and_devices_tar(one), "application/gzip"),
            ("lying_count.pdf", hostile.lying_count_pdf(), "application/pdf"),
            ("zero.pdf", hostile.zero_pdf(), "application/pdf"),
            ("deep_tree.pdf", hostile.deep_tree_pdf(), "application/pdf"),
            ("twice.tar.gz", hostile.tar_of([("a.pdf", one), ("a.pdf", one)]), "application/gzip"),
            ("folders.tar.gz", hostile.folder_bomb_tgz(), "application/gzip"),
            ("big_member.tar.gz", hostile.zeros_member_tgz(), "application/gzip"),
            ("deep.json", hostile.deep_json(), "application/json")]


def mixed_run(base: str, normal: list[tuple[str, bytes]], hostile: list[tuple[str, bytes, str]], clients: int,
              spread_s: float):
    """``clients`` submit their share of the normal documents one after another, each long-polled to its end, as
    in the clean run; meanwhile one more client, the attacker, submits the hostile ones spread evenly over
    ``spread_s`` (each waited for to its end). Each normal job's submitted-to-done time, the normal job ids, how long
    the normal clients took, and how each hostile submission ended: (name, HTTP status of the submission, the error
    or the finished job's state with what was not converted)."""
    import urllib.error

    latency, normal_jobs, ended, lock = [], [], [], threading.Lock()
    began = time.perf_counter()

    def client(share):
        for name, data in share:
            submitted = time.perf_counter()
            job = call(f"{base}/v1/jobs?filename={name}", "POST", data)["id"]
            until_done(base, job)
            with lock:
                latency.append(time.perf_counter() - submitted)
                normal_jobs.append(job)

    def attacker():
        for k, (name, data, kind) in enumerate(hostile):
            time.sleep(max(began + (k + 0.5) * spread_s / len(hostile) - time.perf_counter(), 0))
            try:
                job = call(f"{base}/v1/jobs?filename={name}", "POST", data, kind)["id"]
            except urllib.error.HTTPError as exc:
                with lock:
                    ended.append((name, exc.code, json.loads(exc.read())["error"]))
                continue
            state = until_done(base, job)
            found = call(f"{base}/v1/jobs/{job}/result") if state["status"] == "done" else {}
            with lock:
                ended.append((name, 202, {**state, "not_converted": found.get("not_converted", [])}))

    threads = [threading.Thread(target=client, args=(normal[n::clients],)) for n in range(clients)]
    threads += [threading.Thread(target=attacker)] if hostile else []
    for thread in threads:
        thread.start()
    for thread in threads[:clients]:
        thread.join()
    took = time.perf_counter() - began
    for thread in threads[clients:]:
        thread.join()
    return latency, normal_jobs, took, ended


def normal_rate(workspace: str, jobs: list[str]) -> float:
    """Pages/s of these jobs' items, over the span from the first claim to the last finish."""
    items = {json.load(open(os.path.join(workspace, "jobs", f"{job}.json")))["item"] for job in jobs}
    done = [json.load(open(os.path.join(workspace, "done", f"{item}.json"))) for item in items]
    span = max(r["finished"] for r in done) - min(r["claimed"] for r in done)
    return sum(r["counts"].get("pages", 0) for r in done) / span


def worker_share(workspace: str, jobs: list[str]) -> float:
    """The share of the workers' time (claimed to finished, over every item done) spent on items other than these
    jobs'."""
    mine = {json.load(open(os.path.join(workspace, "jobs", f"{job}.json")))["item"] for job in jobs}
    done = [json.load(open(path)) for path in glob.glob(os.path.join(workspace, "done", "*.json"))]
    spent = {r["id"]: r["finished"] - r["claimed"] for r in done}
    return sum(t for item, t in spent.items() if item not in mine) / sum(spent.values())


def rss_mb(pid: int) -> float:
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


def lost_or_twice(workspace: str, states: list[dict], log: str) -> tuple[int, int]:
    from collections import Counter

    lost = sum(state["status"] != "done" for state in states)
    converted = Counter(line.split("item ")[1].split()[0] for line in open(log) if " converted in " in line)
    jobs = [json.load(open(path)) for path in glob.glob(os.path.join(workspace, "jobs", "*.json"))]
    lost += sum(not os.path.exists(os.path.join(workspace, "done", f"{job['item']}.json")) for job in jobs)
    return lost, sum(n - 1 for n in converted.values() if n > 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--docs", type=int, default=24)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--latency-jobs", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--hostile-share", type=float, default=0.25,
                        help="the hostile mix: poison submissions as a share of all (0: no mix)")
    parser.add_argument("--mix-rounds", type=int, default=5, help="the hostile mix: rounds of each, alternately")
    parser.add_argument("--skip-load", action="store_true", help="only the hostile mix")
    parser.add_argument("--submissions", type=int, default=10_000,
                        help="one-page jobs submitted to an accept-only service, to time a submission as the queue grows")
    parser.add_argument("--submissions-only", action="store_true", help="only the submissions")
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="serve_load_")
    server = model_server(tmp)
    try:
        if args.submissions:
            growing = submissions(tmp, server, args.submissions)
            print_submissions(growing)
            if args.submissions_only:
                return
        docs = documents(args.docs)
        folder = os.path.join(tmp, "pdfs")
        os.makedirs(folder)
        for name, data in docs:
            open(os.path.join(folder, name), "wb").write(data)

        batch = os.path.join(tmp, "batch")
        began = time.perf_counter()
        subprocess.run([sys.executable, "-m", "olmocr.pipeline", f"workspace={batch}", f"pdfs=[{folder}/*.pdf]",
                        f"workers={args.workers}", "progress=false", *external(server), f"hydra.run.dir={batch}_run"],
                       cwd=ROOT, check=True, capture_output=True)
        batch_wall = time.perf_counter() - began
        batch_rate, batch_pages, batch_items = pages_per_second(batch)

        if args.hostile_share > 0:
            mix = hostile_mix(tmp, server, docs, args)
        if args.skip_load:
            print_mix(*mix)
            return
        workspace, log = os.path.join(tmp, "served"), os.path.join(tmp, "service.log")
        proc, base = service(workspace, log, server, args.workers)
        try:
            states = submit_all(base, docs, args.clients)
            served_rate, served_pages, served_items = pages_per_second(workspace)

            one = pdf(1, "one page")
            job_s, convert_s = [], []
            for _ in range(args.latency_jobs):
                began = time.perf_counter()
                until_done(base, call(f"{base}/v1/jobs", "POST", one)["id"])
                job_s.append(time.perf_counter() - began)
                began = time.perf_counter()
                call(f"{base}/v1/convert", "POST", one)
                convert_s.append(time.perf_counter() - began)

            submit_s, memory = [], [(0, rss_mb(proc.pid))]
            step = max(args.jobs // 10, 1)
            for start in range(0, args.jobs, step):
                batch_docs = [(f"one_{n}.pdf", one) for n in range(start, min(start + step, args.jobs))]
                states += submit_all(base, batch_docs, args.clients, on_submit=submit_s.append)
                memory.append((start + len(batch_docs), rss_mb(proc.pid)))
            lost, twice = lost_or_twice(workspace, states, log)
        finally:
            proc.terminate()
            proc.wait(60)
    finally:
        server.stop()

    def quantile(values, q):
        return sorted(values)[min(int(q * len(values)), len(values) - 1)]

    print(f"documents: {len(docs)} ({batch_pages} pages), {args.clients} clients, {args.workers} worker threads, "
          f"the tiny model behind one transformers serve")
    print(f"batch pipeline: {batch_rate:.2f} pages/s ({batch_items} items; {batch_wall:.1f} s with start-up)")
    print(f"service:        {served_rate:.2f} pages/s ({served_items} jobs, {served_pages} pages) = "
          f"{served_rate / batch_rate:.2f}x the batch pipeline")
    print(f"one-page job, submitted to done (long-polled), {len(job_s)} jobs: median {statistics.median(job_s):.2f} s, "
          f"p95 {quantile(job_s, 0.95):.2f} s")
    print(f"one page through POST /v1/convert: median {statistics.median(convert_s):.2f} s, "
          f"p95 {quantile(convert_s, 0.95):.2f} s")
    print("service RSS (MB) after jobs: " + ", ".join(f"{n}: {mb:.0f}" for n, mb in memory))
    first, last = submit_s[:100], submit_s[-100:]
    print(f"a submission (one index part): median {statistics.median(first) * 1000:.0f} ms over the first "
          f"{len(first)}, {statistics.median(last) * 1000:.0f} ms over the last {len(last)} "
          f"(of {len(submit_s)}; the workspace then held {args.docs + args.latency_jobs * 2 + args.jobs} jobs)")
    print(f"jobs lost: {lost}; items converted twice: {twice}")
    if args.hostile_share > 0:
        print_mix(*mix)


def hostile_mix(tmp: str, server, docs, args):
    """The same normal documents through a clean service and through one that also takes the poison
    submissions (as many as make ``--hostile-share`` of all, the poison list repeated as needed), alternately,
    ``--mix-rounds`` times each (the tiny model's answers vary in length from run to run)."""
    kinds = poison()
    count = max(round(len(docs) * args.hostile_share / (1 - args.hostile_share)), 1)
    hostile = [kinds[k % len(kinds)] for k in range(count)]
    runs = {"clean": [], "hostile": []}
    for round_ in range(args.mix_rounds):
        spread_s = None
        for name, mixed in (("clean", []), ("hostile", hostile)):
            workspace = os.path.join(tmp, f"mix_{name}_{round_}")
            # One greedy attempt a page: the tiny model never answers in the page format, so every attempt of the
            # schedule would run, each sampled to a length of its own, and the rounds would differ by that alone.
            proc, base = service(workspace, f"{workspace}.log", server, args.workers, "convert.temperatures=[0.0]",
                                 "+convert.steps.render.max_aspect=100000")
            try:
                latency, jobs, took, ended = mixed_run(base, docs, mixed, args.clients, spread_s or 1.0)
                spread_s = spread_s or took  # the poison spread over as long as the clean run took
                runs[name].append((normal_rate(workspace, jobs), statistics.median(latency), ended, rss_mb(proc.pid),
                                   worker_share(workspace, jobs)))
            finally:
                proc.terminate()
                proc.wait(60)
    return runs, len(docs), count


def print_mix(runs, normal, count) -> None:
    clean, hostile = runs["clean"], runs["hostile"]
    rate = [h[0] / c[0] for c, h in zip(clean, hostile)]
    latency = [h[1] / c[1] for c, h in zip(clean, hostile)]
    print(f"hostile mix: {normal} normal documents, {count} poison submissions among them "
          f"({count / (normal + count):.0%} of all), {len(clean)} rounds, clean and with poison alternately")
    print("  normal jobs' pages/s, clean / with poison: " + ", ".join(f"{c[0]:.2f} / {h[0]:.2f}" for c, h in
                                                                      zip(clean, hostile))
          + f"; ratio median {statistics.median(rate):.2f}x")
    print("  normal jobs' submitted-to-done median (s), clean / with poison: " + ", ".join(
        f"{c[1]:.2f} / {h[1]:.2f}" for c, h in zip(clean, hostile))
        + f"; ratio median {statistics.median(latency):.2f}x")
    print("  the workers' time spent on the poison: " + ", ".join(f"{h[4]:.1%}" for h in hostile)
          + f"; the clean rounds' pages/s vary {min(c[0] for c in clean):.2f} to {max(c[0] for c in clean):.2f} "
          "among themselves")
    print(f"  service RSS at the end: clean {max(c[3] for c in clean):.0f} MB, with poison "
          f"{max(h[3] for h in hostile):.0f} MB (the most of the rounds)")
    print("  how each poison submission ended (the last round):")
    for name, status, how in sorted(hostile[-1][2], key=lambda e: e[0]):
        if status == 202:
            counts = how.get("counts", {})
            skipped = "; ".join(f"{n['name']} ({n['reason']})" for n in how["not_converted"]) or "none"
            said = f"{how['status']}" + (f": {how['error']}" if how.get("error") else "") + (
                f" (pages {counts.get('pages', 0)}, fallback {counts.get('fallback_pages', 0)}, refused by the "
                f"model server {counts.get('refused_pages', 0)}; not converted: {skipped})"
                if how["status"] == "done" else "")
        else:
            said = f"HTTP {status}: {how[:120]}"
        print(f"    {name}: {said}")


if __name__ == "__main__":
    main()
