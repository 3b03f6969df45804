"""python -m olmocr.serve — conversion over HTTP.

A document submitted (``POST /v1/jobs``: the body, a form's ``file`` or a JSON ``{"url": …}``; a ``page_range``)
is stored in the workspace and queued as its own
work item; the service's worker threads convert it with the batch pipeline's own code (``work``, ``convert``,
``server``, ``model``: the same groups, presenting pages as the served model was trained), and so does any batch
worker (``python -m olmocr.pipeline workspace=…``) or other replica started on the same workspace.
``GET /v1/jobs/{id}`` says where it is; ``GET /v1/jobs/{id}/result`` gives the Dolma document, its markdown and
each page's text and whether the model or the text layer gave it. Without a token (``token_env``) the service
listens on loopback only.
"""

from __future__ import annotations

import ctypes
import ipaddress
import logging
import os
import threading

from omegaconf import DictConfig

import olmocr.serve.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage
from olmocr.config import build
from olmocr.data.presented import presents_as_trained
from olmocr.errors import UserError

log = logging.getLogger("olmocr.serve")


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


def fewer_malloc_arenas(arenas: int = 1) -> None:
    """At most ``arenas`` glibc malloc arenas for the threads started from now on. glibc gives threads that
    allocate at once arenas of their own (up to 8 a core) and keeps what is freed in each for later: a service
    whose requests and conversions run on dozens of pool threads grew by ~24 MB every 1,000 jobs without holding
    anything (benchmarks/serve_load.py: 131 to 155 MB; two arenas: 124 to 138 MB; one: 103 to 107 MB, what the
    growing work index itself holds). The threads share the GIL, so one arena costs them little. Not glibc (musl,
    macOS): nothing to set."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.mallopt(M_ARENA_MAX, arenas)


def check(cfg: DictConfig) -> None:
    if cfg.token_env is None and not loopback(cfg.host):
        raise UserError(f"host={cfg.host}: without a token the service listens on loopback only; set token_env to "
                        "the environment variable that holds one (never the token itself), or host=127.0.0.1")


@stage("serve", check=check, present=presents_as_trained({"convert.steps": "model.name_or_path"}))
def run(cfg: DictConfig, output_dir: str) -> dict:
    import uvicorn

    from olmocr.pipeline.server import free_port
    from olmocr.pipeline.worker import run_workers
    from olmocr.private.uvicorn import timed_protocol
    from olmocr.pipeline.workspace import Workspace
    from olmocr.serve.app import build_app
    from olmocr.serve.metrics import Metrics
    from olmocr.serve.ready import Readiness
    from olmocr.serve.jobs import Jobs
    from olmocr.utils.io import Access

    fewer_malloc_arenas()
    # Read where the service runs (a submitted job's machine has it, the one that submits need not).
    token = os.environ.get(cfg.token_env) if cfg.token_env else None
    if cfg.token_env and not token:
        raise UserError(f"token_env={cfg.token_env}: that environment variable is not set (or empty)")
    workspace = Workspace(cfg.workspace, Access(**cfg.workspace_access))
    limit = int(cfg.max_upload_mb * 2**20)
    nudge = threading.Event()  # a job queued here: this replica's idle workers look at once
    jobs = Jobs(workspace, max_bytes=limit, max_pages=cfg.max_pages, max_waiting=cfg.max_waiting,
                keep_s=cfg.keep_results_h * 3600, max_archive_members=cfg.max_archive_members,
                max_unpacked=int(cfg.max_unpacked_mb * 2**20), queued=nudge.set)
    readiness = Readiness(workspace, cfg.workers)
    metrics = Metrics(waiting=lambda: len(jobs.waiting()))
    app = build_app(jobs, readiness, metrics, token=token, max_upload_bytes=limit, sync_timeout_s=cfg.sync_timeout_s,
                    body_timeout_s=cfg.body_timeout_s, concurrent_checks=cfg.concurrent_checks,
                    fetcher=build(cfg.fetch), access=Access(**cfg.workspace_access))
    stop, errors = threading.Event(), []
    q = cfg.queue

    def work() -> None:
        try:
            converter = build(cfg.convert, server=build(cfg.server, model=build(cfg.model)), log_dir=output_dir)
            processor = build(cfg.work, converter=converter, workspace=workspace, progress=False,
                              pdf_access=Access(**cfg.workspace_access),
                              filter=None if cfg.filter is None else build(cfg.filter))
            with processor:
                readiness.converter = converter
                run_workers(workspace, metrics.counting(processor), workers=cfg.workers, lease_s=q.lease_s,
                            max_failures=q.max_failures, retry_wait_s=q.retry_wait_s, retry_wait_max_s=q.retry_wait_max_s,
                            pause_after=q.pause_after, give_up_after_s=q.give_up_after_s, poll_s=q.poll_s,
                            progress=False, until=stop, nudged=nudge)
        except BaseException as exc:  # noqa: BLE001 - said, and the service stops: it cannot convert
            readiness.converter, readiness.stopped = None, f"{type(exc).__name__}: {exc}"
            errors.append(exc)
            log.exception("the service's workers stopped")
            server.should_exit = True

    def sweep() -> None:
        # Expired jobs looked for a few times within their keeping time, at least every 10 minutes.
        every = min(max(cfg.keep_results_h * 3600 / 4, 0.5), 600.0)
        while not stop.wait(every):
            try:
                jobs.sweep()
            except Exception:  # noqa: BLE001 - the workspace failing a sweep: said, tried again at the next
                log.exception("sweeping expired jobs failed")

    threading.Thread(target=sweep, name="serve-sweep", daemon=True).start()
    port = cfg.port or free_port(cfg.host)  # 0: a free one, chosen here so the log can say which
    server = uvicorn.Server(uvicorn.Config(app, host=cfg.host, port=port, log_level="warning",
                                           http=timed_protocol(cfg.header_timeout_s)))
    workers = threading.Thread(target=work, name="serve-workers", daemon=True) if cfg.workers else None
    if workers is not None:
        workers.start()
    log.info("serving on http://%s:%s (workspace %s, %d worker(s))", cfg.host, port, cfg.workspace, cfg.workers)
    try:
        server.run()
    finally:
        stop.set()
        if workers is not None:
            workers.join()
    if errors:
        raise errors[0]
    return {"workspace": cfg.workspace}


if __name__ == "__main__":
    run.main()
