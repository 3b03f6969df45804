"""Jobs of the service, kept in the workspace beside the batch pipeline's own records:

    <workspace>/uploads/<job>.pdf      the submitted document (the client's file name is never a path)
    <workspace>/jobs/<job>.json        the job: its work item, file name, pages, when submitted

A job is one work item of the workspace's queue: any worker converts it (this service's, another replica's, or
``python -m olmocr.pipeline workspace=…`` started anywhere), exactly once. Its status is read from the queue's
markers (done, claims) and its result from the item's results file."""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass

from olmocr.errors import UserError
from olmocr.pipeline.workspace import CLAIMS, Workspace, item_id

UPLOADS, JOBS = "uploads", "jobs"


class Refused(UserError):
    """A submission the service does not take: ``status`` is the HTTP answer, the message says why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Job:
    id: str
    item: str  # the work item that converts it
    pdf: str  # where the document is, as the workers read it
    filename: str  # what the client called it (shown, never used as a path)
    pages: int
    submitted: float


def safe_name(name: str | None) -> str:
    """The client's file name for display: its last part, printable characters only, at most 200 of them."""
    base = os.path.basename((name or "").replace("\\", "/"))
    return "".join(c for c in base if c.isprintable())[:200] or "document.pdf"


def page_count(data: bytes, max_pages: int) -> int:
    """The document's pages, read from its page tree alone (nothing rendered); Refused when it is not a PDF
    that can be read or has more than ``max_pages``."""
    from olmocr.formats.pdf import PdfError, pdf_info

    try:
        pages = pdf_info("the upload", data).num_pages
    except PdfError as exc:
        raise Refused(422, f"the upload is not a PDF that can be read: {exc}") from None
    if pages > max_pages:
        raise Refused(413, f"the document has {pages} pages; this service takes at most {max_pages} (max_pages)")
    return pages


class Jobs:
    def __init__(self, workspace: Workspace):
        self.ws = workspace

    def submit(self, data: bytes, filename: str | None, max_pages: int) -> Job:
        """Store the document, queue it as its own work item and record the job."""
        pages = page_count(data, max_pages)
        job_id = uuid.uuid4().hex
        name = f"{UPLOADS}/{job_id}.pdf"
        self.ws.store.write(name, data)
        pdf = self.ws.store.url(name)
        job = Job(job_id, item_id([pdf]), pdf, safe_name(filename), pages, time.time())
        self.ws.add([pdf], pages_per_group=max(pages, 1), sample=1)
        self.ws.store.write(f"{JOBS}/{job_id}.json", json.dumps(asdict(job)).encode())
        return job

    def get(self, job_id: str) -> Job | None:
        if not job_id.isalnum() or len(job_id) != 32:  # ours are uuid4 hex: anything else names no job
            return None
        found = self.ws.store.read(f"{JOBS}/{job_id}.json")
        return None if found is None else Job(**json.loads(found.data))

    def status(self, job: Job) -> dict:
        """``queued``, ``running``, ``done`` (with the item's counts) or ``failed`` (given up, with its error),
        from the queue's own markers."""
        done = self.ws.store.read(self.ws.done_name(job.item))
        if done is not None:
            return {"id": job.id, "status": "done", "pages": job.pages, "counts": json.loads(done.data).get("counts", {})}
        claim = self.ws.store.read(f"{CLAIMS}/{job.item}.json")
        if claim is None:
            return {"id": job.id, "status": "queued", "pages": job.pages}
        body = json.loads(claim.data)
        if body.get("given_up"):
            return {"id": job.id, "status": "failed", "pages": job.pages, "error": body.get("error")}
        return {"id": job.id, "status": "running", "pages": job.pages}

    def result(self, job: Job) -> dict | None:
        """The job's Dolma document and its markdown, with each page's span and whether the model or the
        text layer gave it; None until it is done."""
        found = self.ws.store.read(self.ws.result_name(job.item))
        if found is None:
            return None
        docs = [json.loads(line) for line in found.data.decode("utf-8").splitlines() if line.strip()]
        if not docs:  # every page read as blank: no document (the item holds this one PDF alone)
            return {"id": job.id, "document": None, "markdown": "", "pages": []}
        doc = docs[0]
        attributes = doc.get("attributes", {})
        spans = attributes.get("pdf_page_numbers", [])
        fallback = attributes.get("is_fallback", [False] * len(spans))
        pages = [{"page": page, "text": doc["text"][start:end].rstrip("\n"), "fallback": bool(fell)}
                 for (start, end, page), fell in zip(spans, fallback)]
        return {"id": job.id, "filename": job.filename, "document": doc, "markdown": doc["text"], "pages": pages}
