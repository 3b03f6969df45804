"""Jobs of the service, kept in the workspace beside the batch pipeline's own records:

    <workspace>/uploads/<job>.<pdf|image>  the submitted document, cut to its page_range (the client's file name
                                       is never a path)
    <workspace>/jobs/<job>.json        the job: its work item, file name, pages, when submitted
    <workspace>/expired/<job>.json     the job once its document and result are no longer kept (moved out of
                                       ``jobs/``, so what a sweep lists is the jobs still kept)

A job is one work item of the workspace's queue, in an index part of its own: any worker converts it (this
service's, another replica's, or ``python -m olmocr.pipeline workspace=…`` started anywhere), exactly once. Its
status is the queue's (olmocr.pipeline.queue: item_state, Waiting, cancel, retire_item) and its result the item's
results file."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from dataclasses import asdict, dataclass

from olmocr.pipeline.archives import SEPARATOR
from olmocr.pipeline.ocr import BAD, FILTERED, MARKDOWN
from olmocr.pipeline import queue
from olmocr.pipeline.queue import item_id
from olmocr.pipeline.workspace import Workspace
from olmocr.serve.documents import (GZIP, Refused, archive_documents, archive_member, document_pages, is_archive,
                                    safe_name, unstorable)

UPLOADS, JOBS, EXPIRED = "uploads", "jobs", "expired"
FINISHED = ("done", "failed", "cancelled")
ONE_PAGE = "POST /v1/convert converts one: choose it with page_range, or submit a job (POST /v1/jobs)"
log = logging.getLogger("olmocr.serve")


@dataclass
class Job:
    id: str
    item: str  # the work item that converts it
    pdf: str  # where the document is, as the workers read it
    filename: str  # what the client called it (shown, never used as a path)
    pages: int  # pages converted
    submitted: float
    # The submitted document's page number of each page converted, when a page_range chose them
    page_numbers: list[int] | None = None
    expired: float | None = None  # when its document and result were removed (keep_results_h after it finished)
    # An archive's: the documents queued (member names, in archive order) and the members that are not documents
    members: list[str] | None = None
    skipped: list | None = None  # {"name", "reason"} each (older records: the names of members not documents)
    part: int = 0  # the queue's index part that holds its item (older records: 0, a workspace's whole index)


class Admitted:
    """A submission let in under ``max_waiting``: it counts as a waiting job from :meth:`Jobs.admit` until its item is
    queued (then the item itself counts) or it is refused."""

    counted = True


class Jobs:
    """``max_bytes`` and ``max_pages``: the most a document may have (uploaded or fetched) and the most pages a
    job converts."""

    def __init__(self, workspace: Workspace, *, max_bytes: int, max_pages: int, max_waiting: int, keep_s: float,
                 max_archive_members: int, max_unpacked: int, queued=None):
        self.ws = workspace
        self.queued = queued  # called once a job is queued (this replica's idle workers look at once)
        self.keep_s = keep_s
        self.max_archive_members, self.max_unpacked = max_archive_members, max_unpacked
        self.max_bytes, self.max_pages, self.max_waiting = max_bytes, max_pages, max_waiting
        self._waiting: tuple[float, list[str]] = (0.0, [])
        self._looking = queue.Waiting(workspace)  # kept: each look reads only what changed since the last
        self._parts = queue.Index(workspace.store, names_only=True)  # where the next job's part goes
        self._adding = threading.Lock()
        self._admitted: set[Admitted] = set()
        self._waiting_lock = threading.Lock()
        # What this replica's sweeps have read: each job still kept (a record changes only when it expires) and,
        # once seen finished, when it finished; so a sweep reads only jobs new since the last and asks the queue
        # only about those not finished yet.
        self._kept: dict[str, tuple[Job, float | None]] = {}

    def waiting(self) -> list[str]:
        """The workspace's items no worker has taken yet, in the order they were queued (by any replica or batch
        run): one listing of the claims, at most once a second."""
        with self._waiting_lock:
            return self._looked()

    def _looked(self) -> list[str]:
        at, items = self._waiting
        if time.monotonic() - at >= 1.0:
            items = self._looking.items()
            self._waiting = (time.monotonic(), items)
        return items

    def admit(self) -> Admitted:
        """Let one submission in, or Refused (429) while ``max_waiting`` jobs wait for a worker: the items waiting
        in the workspace (looked at at most once a second) and this replica's submissions let in and not yet
        queued, so concurrent submissions never let in more than ``max_waiting``. :meth:`leave` when done with."""
        with self._waiting_lock:
            waiting = len(self._looked()) + sum(a.counted for a in self._admitted)
            if waiting >= self.max_waiting:
                raise Refused(429, f"{waiting} jobs are waiting for a worker, as many as this service queues "
                                   f"(max_waiting); try again later", retry_after=10)
            admitted = Admitted()
            self._admitted.add(admitted)
            return admitted

    def leave(self, admitted: Admitted) -> None:
        with self._waiting_lock:
            self._admitted.discard(admitted)

    def submit(self, admitted: Admitted, data: bytes, filename: str | None = None, page_range: str | None = None,
               one_page: bool = False) -> Job:
        """Store the document, cut to ``page_range``, queue it as its own work item and record the job; refused
        before anything is stored when it is not a document this service converts. ``one_page``: a synchronous
        call's, refused when it would convert more."""
        from olmocr.formats.pdf import pdf_pages

        job_id = uuid.uuid4().hex
        if is_archive(data):
            return self._archive(admitted, job_id, data, filename, page_range or one_page)
        suffix, pages, chosen = document_pages(data, 1, page_range, ONE_PAGE) if one_page else document_pages(
            data, self.max_pages, page_range)
        if chosen is not None and chosen != list(range(1, pages + 1)):
            data = pdf_pages("the upload", data, chosen)
        else:
            chosen = None
        name = f"{UPLOADS}/{job_id}.{suffix}"
        self.ws.store.write(name, data)
        pdf = self.ws.store.url(name)
        converted = pages if chosen is None else len(chosen)
        job = Job(job_id, item_id([pdf]), pdf, safe_name(filename), converted, time.time(), chosen)
        self._queue(admitted, job, [pdf])
        log.info("job %s queued: %s, %d page(s)%s, item %s", job.id, job.filename, job.pages,
                 f" of {pages} (page_range {page_range})" if chosen else "", job.item)
        return job

    def _archive(self, admitted: Admitted, job_id: str, data: bytes, filename: str | None, chosen: bool) -> Job:
        from olmocr.pipeline.dolma import mirror_path

        if chosen:
            raise Refused(422, "an archive is converted whole, as a job: page_range and POST /v1/convert take one "
                               "document")
        members, pages, skipped = archive_documents(data, self.max_archive_members, self.max_unpacked,
                                                    self.max_pages, self.max_bytes)
        name = f"{UPLOADS}/{job_id}.{'tar.gz' if data[:2] == GZIP else 'tar'}"
        archive = self.ws.store.url(name)
        documents = [f"{archive}{SEPARATOR}{member}" for member in members]
        # What the workers will write for each member (its markdown, by the pipeline's own naming), checked before
        # anything is stored: a name the workspace cannot hold is refused now, not found by a worker.
        why = unstorable({m: f"{MARKDOWN}/{mirror_path(d, '.md')}" for m, d in zip(members, documents)})
        if why is not None:
            raise Refused(422, why)
        self.ws.store.write(name, data)
        job = Job(job_id, item_id(documents), archive, safe_name(filename), pages, time.time(), members=members,
                  skipped=skipped)
        self._queue(admitted, job, documents)
        log.info("job %s queued: %s, an archive of %d document(s) (%d page(s); %d other member(s) not converted), "
                 "item %s", job.id, job.filename, len(members), pages, len(skipped), job.item)
        return job

    def _queue(self, admitted: Admitted, job: Job, documents: list[str]) -> None:
        """The job's documents queued as one work item, then its record written."""
        with self._adding:  # one item, whatever its pages, in a part of its own: listed, nothing read
            job.part = queue.add(self.ws, documents, pages_per_group=2**62, sample=0, unique=True,
                                 index=self._parts).items[0].part
        with self._waiting_lock:
            # The item counts now, in place of its admission: added to the last look's list (a look lists the whole
            # queue's waiting items: once a second, not once a submission).
            self._waiting[1].append(job.item)
            admitted.counted = False
        self.ws.store.write(f"{JOBS}/{job.id}.json", json.dumps(asdict(job)).encode())
        if self.queued is not None:
            self.queued()

    def find(self, job_id: str) -> Job:
        """The job, or Refused (404)."""
        job = self.get(job_id)
        if job is None:
            raise Refused(404, f"no job {job_id!r}")
        return job

    def finished(self, job_id: str) -> tuple[Job, dict]:
        """The job and its result, or Refused: 404, 409 (not done yet, with Retry-After; failed or cancelled, with
        the reason and no Retry-After: there will be none), 410 (expired)."""
        job = self.find(job_id)
        found = self.result(job)
        if found is None:
            state = self.status(self.find(job_id))  # read again: it may have expired since
            if state["status"] in ("failed", "cancelled"):
                why = f": {state['error']}" if state.get("error") else ""
                raise Refused(409, f"job {job_id} {state['status']}{why}; it has no result", status=state["status"],
                              reason=state.get("error"))
            raise Refused(409, f"job {job_id} is {state['status']}: no result yet", retry_after=2,
                          status=state["status"])
        return job, found

    def get(self, job_id: str) -> Job | None:
        if not job_id.isalnum() or len(job_id) != 32:  # ours are uuid4 hex: anything else names no job
            return None
        found = self.ws.store.read(f"{JOBS}/{job_id}.json") or self.ws.store.read(f"{EXPIRED}/{job_id}.json")
        return None if found is None else Job(**json.loads(found.data))

    def _kept_record(self, job_id: str) -> Job | None:
        """The record in ``jobs/`` of a job a sweep has not read before; None when it is gone or not a record."""
        try:
            return self.get(job_id)
        except (ValueError, TypeError):
            log.warning("%s/%s.json is not a job record: left as it is", JOBS, job_id)
            return None

    def status(self, job: Job) -> dict:
        """``queued``, ``running`` (with the pages done so far), ``done`` (with the item's counts), ``failed``
        (given up, with its error) or ``cancelled``, from the queue's own markers; Refused (410) once expired."""
        if job.expired:
            raise Refused(410, f"job {job.id} finished more than {self.keep_s / 3600:.4g} h ago: its document and "
                               "result are no longer kept (keep_results_h)")
        state = {"id": job.id, "filename": job.filename, "pages": job.pages, "submitted": job.submitted}
        found = queue.item_state(self.ws, job.item, job.part)
        if found.state == "retired":
            raise Refused(410, f"job {job.id} finished more than {self.keep_s / 3600:.4g} h ago: its document and "
                               "result are no longer kept (keep_results_h)")
        if found.state == "done":
            return {**state, "status": "done", "pages_done": job.pages, "counts": found.counts}
        if found.state == "queued":
            waiting = self.waiting()
            ahead = waiting.index(job.item) if job.item in waiting else 0
            return {**state, "status": "queued", "pages_done": 0, "ahead": ahead,
                    **({"error": found.error} if found.error else {})}
        return {**state, "status": found.state, "pages_done": found.pages_done,
                **({"error": found.error} if found.error else {})}

    def cancel(self, job: Job) -> dict:
        """Cancel the job's work, whatever it is doing: queued (or waiting to be tried again), it is given up
        before any worker takes it; running, its worker stops within ``work.watch_s`` (``cancelling`` until
        then). A finished job stays as it is."""
        state = self.status(job)
        if state["status"] in FINISHED:
            return state
        queue.cancel(self.ws, job.item, job.part)
        return self.status(job)

    def sweep(self) -> int:
        """Jobs finished more than ``keep_s`` ago lose their document, result and side files, and the queue retires
        their item; the record moves to ``expired/``. Returns how many expired now. A sweep lists the jobs still
        kept and reads those it has not read before; the queue is asked only about jobs not known finished: its
        cost follows the jobs kept, not every job ever submitted. Any replica may sweep: removing twice is removing
        once."""
        expired, now = 0, time.time()
        listed = {name.removesuffix(".json") for name in self.ws.store.list(JOBS)}
        for gone in set(self._kept) - listed:  # expired by another replica
            self._kept.pop(gone)
        for job_id in sorted(listed - set(self._kept)):
            job = self._kept_record(job_id)
            if job is not None and job.expired:  # expired in a workspace made before expired/: moved, nothing else
                self._move_expired(job)
            elif job is not None:
                self._kept[job_id] = (job, None)
        for job, _ in list(self._kept.values()):
            if now - job.submitted >= self.keep_s and self._due(job, now):
                self._expire(job)
                expired += 1
        if expired:
            log.info("%d finished job(s) older than %.4g h expired: documents and results removed", expired,
                     self.keep_s / 3600)
        return expired

    def _due(self, job: Job, now: float) -> bool:
        """Whether ``job`` finished more than ``keep_s`` ago: kept from when it finished (a done item's worker says
        when; a failed or cancelled one, from its submission), so a job that waited long is not swept as it
        finishes."""
        finished = self._kept[job.id][1]
        if finished is None:
            found = queue.item_state(self.ws, job.item, job.part)
            if found.state not in (*FINISHED, "retired"):
                return False
            finished = 0.0 if found.state == "retired" else (found.finished or job.submitted)
            self._kept[job.id] = (job, finished)
        return now - finished >= self.keep_s

    def _expire(self, job: Job) -> None:
        from olmocr.pipeline.dolma import mirror_path

        self._move_expired(job)  # said first: a reader never finds a done job without its result
        markdown = [f"{MARKDOWN}/{mirror_path(source, '.md')}" for source in self.sources(job)]
        for obj in (f"{UPLOADS}/{os.path.basename(job.pdf)}", self.ws.result_name(job.item), *markdown,
                    f"{BAD}/{job.item}.jsonl", f"{FILTERED}/{job.item}.jsonl"):
            self.ws.store.delete(obj)
        queue.retire_item(self.ws, job.part)  # what the queue kept of it: claim, done marker, marks

    def _move_expired(self, job: Job) -> None:
        job.expired = job.expired or time.time()
        self.ws.store.write(f"{EXPIRED}/{job.id}.json", json.dumps(asdict(job)).encode())
        self.ws.store.delete(f"{JOBS}/{job.id}.json")
        self._kept.pop(job.id, None)

    def page_image(self, job: Job, page: int, document: int = 0, longest_side: int = 1000) -> bytes:
        """The JPEG of the job's ``page`` (its number in the submitted document; in an archive, in its
        ``document``-th document), rendered from the stored upload; Refused (404) for a page the job did not
        convert."""
        from olmocr.formats.document import IMAGE, DocumentError, kind_of
        from olmocr.formats.html import jpeg
        from olmocr.formats.image import render_image
        from olmocr.formats.render import RenderError, render_page

        members = job.members or [None]
        if not 0 <= document < len(members):
            raise Refused(404, f"job {job.id} has {len(members)} document(s); no document {document}")
        self.status(job)  # 410 once expired
        found = self.ws.store.read(f"{UPLOADS}/{os.path.basename(job.pdf)}")
        if found is None:
            raise Refused(410, f"job {job.id}'s document is no longer kept")
        data, source = found.data, self.sources(job)[document]
        if members[document] is not None:
            data = archive_member(data, members[document])
        pages = job.pages if members[document] is None else document_pages(data, self.max_pages, None)[1]
        if job.page_numbers:
            at = job.page_numbers.index(page) + 1 if page in job.page_numbers else None
        else:
            at = page if 1 <= page <= pages else None
        if at is None:
            shown = ", ".join(map(str, job.page_numbers)) if job.page_numbers else f"1-{pages}"
            raise Refused(404, f"job {job.id} has no page {page} (its pages: {shown})")
        try:
            if kind_of(data) == IMAGE:
                image = render_image(source, data, at, longest_side)
            else:
                image = render_page(source, at, longest_side, data=data)
        except (RenderError, DocumentError) as exc:
            raise Refused(422, f"page {page} of job {job.id} cannot be drawn: {exc}") from None
        return jpeg(image, longest_side)

    def result(self, job: Job) -> dict | None:
        """The job's result once it is done: every document's Dolma record, markdown and pages (each page's
        number in the submitted document, its text and whether the model or the text layer gave it), the whole
        job's markdown, and what was not converted and why (an archive's members that are not documents, a
        document that could not be read or fell back too often). None until it is done."""
        found = self.ws.store.read(self.ws.result_name(job.item))
        if found is None:
            return None
        by_source = {}
        for line in found.data.decode("utf-8").splitlines():
            if line.strip():
                doc = json.loads(line)
                by_source[doc["metadata"]["Source-File"]] = doc
        names, sources = job.members or [job.filename], self.sources(job)
        documents = [self._document(name, by_source[source], job.page_numbers)
                     for name, source in zip(names, sources) if source in by_source]
        not_converted = [{"name": entry, "reason": "not a PDF or an image"} if isinstance(entry, str) else entry
                         for entry in job.skipped or []]
        for folder in (BAD, FILTERED):
            listed = self.ws.store.read(f"{folder}/{job.item}.jsonl")
            for line in (listed.data.decode("utf-8").splitlines() if listed is not None else []):
                entry = json.loads(line)
                source = entry.get("source", "")
                not_converted.append({"name": names[sources.index(source)] if source in sources else source,
                                      "reason": entry.get("reason"), "detail": entry.get("detail")})
        return {"id": job.id, "filename": job.filename, "markdown": "\n\n".join(d["markdown"] for d in documents),
                "documents": documents, "not_converted": not_converted}

    @staticmethod
    def sources(job: Job) -> list[str]:
        """The job's documents as the workers name them (an archive's members ``<archive>::<member>``)."""
        return [f"{job.pdf}{SEPARATOR}{m}" for m in job.members] if job.members else [job.pdf]

    @staticmethod
    def _document(name: str, doc: dict, page_numbers: list[int] | None) -> dict:
        attributes = doc.get("attributes", {})
        spans = attributes.get("pdf_page_numbers", [])
        fallback = attributes.get("is_fallback", [False] * len(spans))
        numbers = page_numbers or []
        blocks = attributes.get("page_blocks")  # where the model writes blocks: per page, its span and blocks
        pages = [{"page": numbers[page - 1] if page <= len(numbers) else page,
                  "text": doc["text"][start:end].rstrip("\n"), "fallback": bool(fell),
                  **({"page_size": blocks[n][2]["page_size"], "blocks": blocks[n][2]["blocks"]}
                     if blocks and blocks[n][2] is not None else {})}
                 for n, ((start, end, page), fell) in enumerate(zip(spans, fallback))]
        return {"name": name, "document": doc, "markdown": doc["text"], "pages": pages}
