"""The service's HTTP API (FastAPI): jobs in, status and results out. Every answer that refuses or fails a request,
on any route, is one JSON object naming what was wrong (``{"error": …}``, and a ``Retry-After`` header where asking
again later may succeed); none drops the connection. This module alone maps errors to HTTP."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from typing import Annotated

from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from olmocr.faults import gist, store_errors
from olmocr.serve.documents import Refused
from olmocr.serve.jobs import FINISHED, Jobs
from olmocr.serve.metrics import Metrics
from olmocr.serve.page import pages_html, root_page
from olmocr.serve.ready import Readiness

log = logging.getLogger("olmocr.serve")
# Answered without the token: liveness, the page and the API's description (none holds any data)
OPEN = ("/health", "/", "/favicon.ico", "/docs", "/openapi.json")
FORM_FIELD_BYTES = 64 * 1024  # a form's fields other than the file (page_range), and a JSON body
MAX_WAIT_S = 60.0  # the longest a status call waits (wait=), under the timeouts of the usual proxies
BUSY_WAIT_S = 10.0  # how long a submission waits for one of the checks that run at once before it is told to retry


def error(status: int, message: str, /, retry_after: int | None = None, close: bool = False, **fields) -> JSONResponse:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    if close:  # the rest of the request is not read: the connection cannot carry another
        headers["Connection"] = "close"
    return JSONResponse({"error": message, **{k: v for k, v in fields.items() if v is not None}}, status_code=status,
                        headers=headers or None)


class TooLarge(Exception):
    """A body over the limit, found as it streams in."""


class TooSlow(Exception):
    """A body that stopped arriving: nothing came for the body timeout."""


class Gate:
    """Before any endpoint: the token (401; every path but the ``OPEN`` ones), then the body's size (413): by its
    declared length before a byte of it is read, or, sent without one, as soon as what has arrived is over
    ``limit``; and its pace: a body from which nothing arrives for ``body_timeout_s`` (one shorter than its declared
    length, a client that stalled) is answered 408. Plain ASGI: the request's body reaches the endpoint through
    here alone."""

    def __init__(self, app, token: str | None, limit: int, metrics: Metrics, body_timeout_s: float):
        self.app, self.token, self.limit, self.metrics = app, token, limit, metrics
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        began = time.monotonic()

        async def answered(message):
            if message["type"] == "http.response.start":
                self.metrics.answers.labels(str(message["status"])).inc()
                route = scope.get("route")  # the endpoint's path template, not the job's id
                self.metrics.request_seconds.labels(getattr(route, "path", "unrouted")).observe(time.monotonic() - began)
            await send(message)

        await self._gated(scope, receive, answered)

    async def _gated(self, scope, receive, send):
        headers = dict(scope["headers"])
        if self.token is not None and scope["path"] not in OPEN:
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, f"Bearer {self.token}".encode()):
                answer = error(401, "a token is required: Authorization: Bearer <token>")
                return await answer(scope, receive, send)
        declared = headers.get(b"content-length", b"").decode("latin-1")
        if declared.isdigit() and int(declared) > self.limit:
            answer = error(413, f"the upload is {int(declared)} bytes; this service takes at most {self.limit}",
                           close=True)
            return await answer(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            try:
                message = await asyncio.wait_for(receive(), self.body_timeout_s)
            except TimeoutError:
                raise TooSlow(f"nothing of the request's body arrived for {self.body_timeout_s:g} s "
                              f"(body_timeout_s; {seen} bytes had)") from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise TooLarge(f"the upload is over {self.limit} bytes, the most this service takes")
            return message

        await self.app(scope, counted, send)


async def submission(request: Request, filename: str | None, page_range: str | None) -> dict:
    """What a ``POST /v1/jobs`` asks for, by its content type:

    - ``multipart/form-data``: the document as the ``file`` part (its name shown, never a path), ``page_range``
      an optional field;
    - ``application/json``: ``{"url": "https://…" or "s3://…", "page_range": …}``, the document fetched by the
      service;
    - anything else: the body is the document (``?filename=``, ``?page_range=``).
    """
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "multipart/form-data":
        form = await request.form(max_files=1, max_fields=4, max_part_size=FORM_FIELD_BYTES)
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise Refused(400, "multipart upload: the document goes in a file part named 'file'")
        fields = {key: value for key, value in form.items() if key != "file"}
        unknown = sorted(set(fields) - {"page_range"})
        if unknown:
            raise Refused(400, f"multipart upload: unknown field(s) {', '.join(unknown)} (the form takes 'file' "
                               "and 'page_range')")
        return {"data": await upload.read(), "filename": upload.filename, "page_range": fields.get("page_range"),
                "how": "form"}
    if kind == "application/json":
        body = await request.body()
        if len(body) > FORM_FIELD_BYTES:
            raise Refused(413, f"a JSON submission is at most {FORM_FIELD_BYTES} bytes (it names a document by "
                               "its url; upload the document itself as the body or a form)")
        try:
            asked = json.loads(body)
        except ValueError as exc:
            raise Refused(400, f"the JSON body does not parse: {exc}") from None
        except RecursionError:
            raise Refused(400, "the JSON body does not parse: it is nested too deeply") from None
        if not isinstance(asked, dict) or not isinstance(asked.get("url"), str):
            raise Refused(400, 'a JSON submission is {"url": "https://…" or "s3://…", "page_range": "1-3"}')
        unknown = sorted(set(asked) - {"url", "page_range"})
        if unknown:
            raise Refused(400, f"JSON submission: unknown key(s) {', '.join(unknown)} (it takes url and page_range)")
        if asked.get("page_range") is not None and not isinstance(asked["page_range"], str):
            raise Refused(400, 'page_range: a string of pages and ranges, as "1-3,7"')
        return {"url": asked["url"], "page_range": asked.get("page_range"), "how": "url"}
    body = await request.body()
    if not body:
        raise Refused(400, "the request body is empty: send the document as the body, a form's 'file' part or "
                           'a JSON {"url": …}')
    return {"data": body, "filename": filename, "page_range": page_range, "how": "body"}


def build_app(jobs: Jobs, readiness: Readiness, metrics: Metrics, *, token: str | None, max_upload_bytes: int,
              sync_timeout_s: float, body_timeout_s: float, concurrent_checks: int, fetcher=None,
              access=None) -> FastAPI:
    """``token``: required as ``Authorization: Bearer <token>`` on every endpoint but the ``OPEN`` ones.
    ``concurrent_checks``: submissions read and checked (and page images drawn) at once, each holding a document
    in memory; ``fetcher`` fetches what a job names by URL (none: uploads only), with ``access`` for s3://."""
    app = FastAPI(title="olmocr", summary="Documents in, Dolma documents and markdown out, through the batch "
                                          "pipeline's workspace and queue.")
    busy = asyncio.Semaphore(concurrent_checks)

    @app.exception_handler(TooLarge)
    async def too_large(request: Request, exc: TooLarge):
        return error(413, str(exc), close=True)

    @app.exception_handler(TooSlow)
    async def too_slow(request: Request, exc: TooSlow):
        return error(408, str(exc), close=True)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        problems = "; ".join(f"{'.'.join(str(part) for part in e['loc'][1:])}: {e['msg']}" for e in exc.errors())
        return error(422, problems)

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused):
        return error(exc.status, str(exc), exc.retry_after, **exc.fields)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        # Starlette's own refusals: no such route, a method the route does not take, a form it cannot parse
        where = f"{request.method} {request.url.path}"
        if exc.status_code == 404:
            message = f"no such endpoint: {where}"
        elif exc.status_code == 405:
            message = f"{where}: the endpoint takes {(exc.headers or {}).get('Allow', 'other methods')}"
        else:
            message = f"{where}: {exc.detail}"
        answer = error(exc.status_code, message)
        answer.headers.update({k: v for k, v in (exc.headers or {}).items() if k.lower() == "allow"})
        return answer

    async def outage(request: Request, exc: Exception):
        # The workspace (a disk, S3) does not answer now: asking again later may succeed.
        log.warning("%s %s: the workspace did not answer (%s)", request.method, request.url.path, gist(exc))
        return error(503, f"the workspace does not answer now ({gist(exc)}); try again shortly", retry_after=10)

    for kind in store_errors():
        app.add_exception_handler(kind, outage)

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception):
        # Answered as JSON; the server logs the traceback (Starlette raises it on once this answer is sent).
        return error(500, f"the service failed this request ({gist(exc)}); it is logged")

    app.add_middleware(Gate, token=token, limit=max_upload_bytes, metrics=metrics, body_timeout_s=body_timeout_s)

    async def checked(call, *args, **kwargs):
        """``call`` on a thread once one of the ``concurrent_checks`` is free (Refused, 503, when none is within
        BUSY_WAIT_S): reading a page tree, an archive or drawing a page holds a document and a core, so their number
        bounds the service's memory whatever is uploaded."""
        try:
            await asyncio.wait_for(busy.acquire(), BUSY_WAIT_S)
        except TimeoutError:
            raise Refused(503, f"{concurrent_checks} submissions are being checked, as many as this service checks "
                               "at once (concurrent_checks); try again shortly", retry_after=5) from None
        try:
            return await run_in_threadpool(call, *args, **kwargs)
        finally:
            busy.release()

    async def accept(request: Request, filename: str | None, page_range: str | None, one_page: bool = False):
        """The job a submission makes (admitted under max_waiting first, the document fetched when named by URL),
        and how the document came."""
        admitted = await run_in_threadpool(jobs.admit)
        try:
            asked = await submission(request, filename, page_range)
            how = asked.pop("how")
            if "url" in asked:
                if fetcher is None:
                    raise Refused(422, "url: this service takes documents only as uploads")
                data, name = await fetcher.fetch_apart(asked.pop("url"), max_upload_bytes, access)
                asked.update(data=data, filename=name)
            # Off the event loop: reading the page tree and writing to the workspace (S3) block.
            return await checked(jobs.submit, admitted, **asked, one_page=one_page), how
        finally:
            jobs.leave(admitted)

    async def finished_or(job, seconds: float) -> dict:
        """The job's status once it is done, failed or cancelled, or when ``seconds`` are over: looked at soon
        after the call (a page takes about a second), less often as the wait goes on."""
        deadline, pause = time.monotonic() + seconds, 0.1
        while True:
            state = await run_in_threadpool(jobs.status, job)
            if state["status"] in FINISHED or time.monotonic() >= deadline:
                return state
            await asyncio.sleep(min(pause, max(deadline - time.monotonic(), 0)))
            pause = min(pause * 1.5, 1.0)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def root():
        return root_page()

    @app.get("/favicon.ico", include_in_schema=False)
    def icon():
        return Response(status_code=204)  # none: said so, rather than a browser's failed request

    @app.get("/health")
    async def health() -> dict:
        # On the event loop, apart from the threads that convert, fetch and check: answered whatever they do.
        return {"status": "alive"}

    @app.post("/v1/jobs", status_code=202)
    async def submit(request: Request, filename: str | None = None, page_range: str | None = None):
        """A document as the body (``Content-Type: application/pdf`` or an image type), as a form's ``file``
        part, or named by a JSON ``{"url": …}``; ``page_range`` ("1-3,7") chooses pages. Answers 202 with the
        job's id."""
        job, how = await accept(request, filename, page_range)
        metrics.submitted.labels(how).inc()
        return JSONResponse({"id": job.id, "status": "queued", "pages": job.pages, "filename": job.filename},
                            status_code=202, headers={"Location": f"/v1/jobs/{job.id}"})

    @app.get("/metrics")
    def prometheus():
        """The replica's figures, in Prometheus's text format."""
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/ready")
    async def ready():
        """Whether the service converts now: the model server answered a real page (asked at most every 10 s)."""
        ok, why = await run_in_threadpool(readiness.check)
        return JSONResponse({"status": "ready" if ok else "not ready", "why": why}, status_code=200 if ok else 503)

    @app.post("/v1/convert")
    async def convert(request: Request, filename: str | None = None, page_range: str | None = None):
        """One page (an image, a one-page PDF, or a PDF and the ``page_range`` of one of its pages), given as for
        ``POST /v1/jobs``, converted while the request waits: the result, or 504 after ``sync_timeout_s``, the
        work cancelled. Anything longer is a job."""
        job, how = await accept(request, filename, page_range, one_page=True)
        metrics.submitted.labels(f"{how}_sync").inc()
        state = await finished_or(job, sync_timeout_s)
        if state["status"] not in FINISHED:
            await run_in_threadpool(jobs.cancel, job)
            return error(504, f"the page was not converted in {sync_timeout_s:g} s (sync_timeout_s); its work is "
                              "cancelled: submit it as a job (POST /v1/jobs) to wait longer")
        if state["status"] != "done":
            return error(502, f"the page was not converted: {state['status']}"
                              f"{': ' + state['error'] if state.get('error') else ''}")
        return await run_in_threadpool(jobs.result, job)

    @app.get("/v1/jobs/{job_id}")
    async def status(job_id: str, wait: Annotated[float, Query(ge=0, le=MAX_WAIT_S)] = 0):
        """The job's status; with ``wait`` (seconds, at most 60), answered once the job is done, failed or
        cancelled, or when the wait is over."""
        return await finished_or(await run_in_threadpool(jobs.find, job_id), wait)

    @app.delete("/v1/jobs/{job_id}")
    def cancel(job_id: str):
        """Cancels the job's work: a queued job never starts, a running one stops between pages. Answers the
        job's status (``cancelled``, or ``cancelling`` until its worker stops; a finished job as it was)."""
        return jobs.cancel(jobs.find(job_id))

    @app.get("/v1/jobs/{job_id}/result")
    def result(job_id: str):
        return jobs.finished(job_id)[1]

    @app.get("/v1/jobs/{job_id}/view", response_class=HTMLResponse)
    def view(job_id: str):
        """The job's pages as HTML, each page's image (``/pages/<n>.jpg``) beside its text: the root page's."""
        job, found = jobs.finished(job_id)
        return pages_html(job.id, found)

    @app.get("/v1/jobs/{job_id}/pages/{page}.jpg")
    async def page_image(job_id: str, page: Annotated[int, Path(ge=1, le=2**31)],
                         document: Annotated[int, Query(ge=0, le=2**31)] = 0):
        """A page of the job's document (an archive's ``document``-th) as JPEG, by its number in that document."""
        job = await run_in_threadpool(jobs.find, job_id)
        return Response(await checked(jobs.page_image, job, page, document), media_type="image/jpeg")

    return app
