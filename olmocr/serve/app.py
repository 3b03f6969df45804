"""The service's HTTP API (FastAPI): jobs in, status and results out. Every error is one JSON object naming
what was wrong (``{"error": …}``)."""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from typing import Annotated

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from olmocr.serve.documents import Refused
from olmocr.serve.jobs import FINISHED, Jobs
from olmocr.serve.metrics import Metrics
from olmocr.serve.page import pages_html, root_page
from olmocr.serve.ready import Readiness

# Answered without the token: liveness, the page and the API's description (none holds any data)
OPEN = ("/health", "/", "/favicon.ico", "/docs", "/openapi.json")
FORM_FIELD_BYTES = 64 * 1024  # a form's fields other than the file (page_range), and a JSON body
MAX_WAIT_S = 60.0  # the longest a status call waits (wait=), under the timeouts of the usual proxies


def error(status: int, message: str, **headers) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


class TooLarge(Exception):
    """A body over the limit, found as it streams in."""


class Gate:
    """Before any endpoint: the token (401; every path but the ``OPEN`` ones), then the body's size (413): by its
    declared length before a byte of it is read, or, sent without one, as soon as what has arrived is over
    ``limit``. Plain ASGI: the request's body reaches the endpoint through here alone."""

    def __init__(self, app, token: str | None, limit: int, metrics: Metrics):
        self.app, self.token, self.limit, self.metrics = app, token, limit, metrics

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
            answer = error(413, f"the upload is {int(declared)} bytes; this service takes at most {self.limit}")
            return await answer(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
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
              sync_timeout_s: float) -> FastAPI:
    """``token``: required as ``Authorization: Bearer <token>`` on every endpoint but the ``OPEN`` ones."""
    app = FastAPI(title="olmocr", summary="Documents in, Dolma documents and markdown out, through the batch "
                                          "pipeline's workspace and queue.")

    @app.exception_handler(TooLarge)
    async def too_large(request: Request, exc: TooLarge):
        return error(413, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        problems = "; ".join(f"{'.'.join(str(part) for part in e['loc'][1:])}: {e['msg']}" for e in exc.errors())
        return error(422, problems)

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused):
        return error(exc.status, str(exc), **exc.headers)

    app.add_middleware(Gate, token=token, limit=max_upload_bytes, metrics=metrics)

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
    def health() -> dict:
        return {"status": "alive"}

    @app.post("/v1/jobs", status_code=202)
    async def submit(request: Request, filename: str | None = None, page_range: str | None = None):
        """A document as the body (``Content-Type: application/pdf`` or an image type), as a form's ``file``
        part, or named by a JSON ``{"url": …}``; ``page_range`` ("1-3,7") chooses pages. Answers 202 with the
        job's id."""
        asked = await submission(request, filename, page_range)
        how = asked.pop("how")
        # Off the event loop: fetching a URL, reading the page tree and writing to the workspace (S3) block.
        job = await run_in_threadpool(jobs.submit, **asked)
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
        asked = await submission(request, filename, page_range)
        how = asked.pop("how")
        job = await run_in_threadpool(jobs.submit, **asked, one_page=True)
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
    def page_image(job_id: str, page: int, document: Annotated[int, Query(ge=0)] = 0):
        """A page of the job's document (an archive's ``document``-th) as JPEG, by its number in that document."""
        return Response(jobs.page_image(jobs.find(job_id), page, document), media_type="image/jpeg")

    return app
