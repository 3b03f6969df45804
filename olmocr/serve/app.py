"""The service's HTTP API (FastAPI): jobs in, status and results out. Every error is one JSON object naming
what was wrong (``{"error": …}``)."""

from __future__ import annotations

import hmac

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from olmocr.serve.jobs import Jobs, Refused


def error(status: int, message: str, **headers) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def build_app(jobs: Jobs, *, token: str | None, max_upload_bytes: int, max_pages: int) -> FastAPI:
    """``token``: required as ``Authorization: Bearer <token>`` on every endpoint but ``/health``."""
    app = FastAPI(title="olmocr", summary="Documents in, Dolma documents and markdown out, through the batch "
                                          "pipeline's workspace and queue.")

    @app.middleware("http")
    async def authorise(request: Request, call_next):
        if token is not None and request.url.path != "/health":
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return error(401, "a token is required: Authorization: Bearer <token>")
        return await call_next(request)

    @app.get("/health")
    def health() -> dict:
        return {"status": "alive"}

    @app.post("/v1/jobs", status_code=202)
    async def submit(request: Request, filename: str | None = None):
        """The request body is the PDF (``Content-Type: application/pdf``); ``filename`` is shown, never used
        as a path. Answers 202 with the job's id."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_upload_bytes:
            return error(413, f"the upload is {int(declared)} bytes; this service takes at most {max_upload_bytes}")
        body = bytearray()
        async for chunk in request.stream():  # counted as it arrives: a body without a length is cut off too
            body += chunk
            if len(body) > max_upload_bytes:
                return error(413, f"the upload is over {max_upload_bytes} bytes, the most this service takes")
        if not body:
            return error(400, "the request body is empty: send the PDF as the body (Content-Type: application/pdf)")
        try:
            # Off the event loop: reading the page tree and writing to the workspace (S3) block.
            job = await run_in_threadpool(jobs.submit, bytes(body), filename, max_pages)
        except Refused as exc:
            return error(exc.status, str(exc))
        return JSONResponse({"id": job.id, "status": "queued", "pages": job.pages, "filename": job.filename},
                            status_code=202, headers={"Location": f"/v1/jobs/{job.id}"})

    @app.get("/v1/jobs/{job_id}")
    def status(job_id: str):
        job = jobs.get(job_id)
        return error(404, f"no job {job_id!r}") if job is None else jobs.status(job)

    @app.get("/v1/jobs/{job_id}/result")
    def result(job_id: str):
        job = jobs.get(job_id)
        if job is None:
            return error(404, f"no job {job_id!r}")
        found = jobs.result(job)
        if found is None:
            state = jobs.status(job)
            return error(409, f"job {job_id} is {state['status']}: no result yet", **{"Retry-After": "2"})
        return found

    return app
