"""``work=ocr``: convert every page of an item's documents (PDFs, images, archive members) through the
model server into Dolma documents.

Documents of an item and pages of a document are converted concurrently (at most ``concurrency`` pages
in flight); page order is kept. A document that is bad (corrupt, encrypted, no pages, not a PDF or an
image, deleted since it was queued) is counted and reported, never fatal; one that cannot be read for a
reason outside it (storage, credentials, network) sends the whole item back to the queue, to be tried
again later. A ``filter`` drops documents before any page is rendered; they are counted by reason and
listed in ``filtered/<item>.jsonl``. The server is started when the work starts and stopped when it ends.

A page falls back to its text layer for the model's failure only: the model answered every attempt the
temperature schedule gave it, and no answer was usable (cut off at ``max_tokens``, no front matter that
parses), or the page could not be rendered. A document whose share of such pages exceeds
``max_page_error_rate`` is dropped, counted, and listed in ``bad/<item>.jsonl`` with what its pages' attempts
came to. A page the server failed instead (any attempt answered with an HTTP error, a model name it does
not serve, no answer within ``timeout_s``, before the page fell back) says nothing of the model: the item
goes back to the queue uncounted, its other pages cancelled, and the worker pauses and gives up as for
storage faults, naming the server, the page, the HTTP status and what the server said.

Every ``watch_s`` while an item converts, from its start, its worker writes the pages done so far
(``progress/<item>.json``) and looks for the item's cancel: a cancelled item stops there, whatever it waits on
(its pages in flight cancelled), and is given up with nothing written.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated

from olmocr.config import Range, runtime
from olmocr.errors import UserError
from olmocr.formats.document import IMAGE, DocumentError
from olmocr.pipeline.convert import PageConverter, PageResult, all_of, error_gist
from olmocr.formats.structure import SUFFIX as BLOCKS_SUFFIX
from olmocr.pipeline.dolma import blocks_document, dolma_document, mirror_path
from olmocr.pipeline.failures import Cancelled, ServerFailed
from olmocr.pipeline.filter import DocumentFilter
from olmocr.pipeline.inputs import document_pages, read_documents
from olmocr.pipeline.worker import Output
from olmocr.pipeline.queue import Item, cancel_asked, note_progress
from olmocr.pipeline.workspace import Workspace
from olmocr.utils.io import Access, local_path

log = logging.getLogger("olmocr.pipeline")
MARKDOWN = "markdown"
PAGES = "pages"
FILTERED = "filtered"
BAD = "bad"  # bad/<item>.jsonl: the item's bad and dropped documents, each with its reason


class PageBar:
    """Pages converted, with pages/s and the pages that fell back to the text layer."""

    def __init__(self, enabled: bool):
        from tqdm import tqdm

        self.bar = tqdm(unit="page", desc="pages", disable=not enabled, dynamic_ncols=True, position=1, leave=False)
        self.fallback = 0
        self.failed_attempts = 0

    def page(self, result: PageResult) -> None:
        self.fallback += result.fallback
        self.failed_attempts += sum(a.get("outcome") != "ok" for a in result.attempts)
        self.bar.set_postfix(fallback=self.fallback, failed_attempts=self.failed_attempts, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


@dataclass
class Converted:
    error: DocumentError | None = None  # why the document cannot be read
    filtered: tuple[str, str] | None = None  # (reason, detail) the filter gave for not converting it
    pages: list[PageResult] = field(default_factory=list)  # in page order
    created: datetime.datetime | None = None


def jsonl(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


def _listed(source: str, status: str, reason: str, detail: str, **more) -> str:
    """One line of filtered/ or bad/: a document not converted, and why."""
    return json.dumps({"source": source, "status": status, "reason": reason, "detail": detail, **more},
                      ensure_ascii=False)


def failed_attempts(pages: list[PageResult]) -> dict[str, int]:
    """What the failed attempts of ``pages`` came to, most frequent first (an outcome's text up to a colon,
    so 'not rendered: …' of every page adds up)."""
    outcomes = Counter(a["outcome"].split(":")[0] for p in pages for a in p.attempts if a.get("outcome") != "ok")
    return dict(outcomes.most_common())


class ItemWatch:
    """An item as it converts, looked at every ``every_s`` from its start: the pages done so far written when they
    changed (:func:`~olmocr.pipeline.queue.note_progress`), and its cancel looked for. :meth:`watch` raises
    :class:`Cancelled` once the item is cancelled, whatever the conversion waits on then (a page, a server that
    refuses or is busy, a read). The workspace failing a look is no reason to stop converting: it is tried again at
    the next."""

    def __init__(self, workspace: Workspace, item: Item, every_s: float):
        self.workspace, self.item, self.every_s = workspace, item, every_s
        self.pages_done, self._written = 0, 0

    def page_done(self) -> None:
        self.pages_done += 1

    async def watch(self) -> None:
        while True:
            if await asyncio.to_thread(self.look):
                raise Cancelled(f"cancelled after {self.pages_done} page(s)")
            await asyncio.sleep(self.every_s)

    def look(self) -> bool:
        """Write the pages done when they changed; whether the item is cancelled."""
        from olmocr.faults import store_errors

        try:
            if self.pages_done != self._written:
                done = self.pages_done
                note_progress(self.workspace, self.item.id, done)
                self._written = done
            return cancel_asked(self.workspace, self.item.id)
        except store_errors() as exc:
            log.warning("item %s: the workspace did not answer its watch (%s: %s)", self.item.id,
                        type(exc).__name__, exc)
            return False


async def watched(work, watch: ItemWatch):
    """``work``'s result, or :class:`Cancelled` as soon as ``watch`` finds the item cancelled (the work is
    cancelled then, its pages in flight with it), or when a last look once the work is done finds it so: a cancel
    written while the item converted is honoured, however short the item."""
    working, watching = asyncio.ensure_future(work), asyncio.ensure_future(watch.watch())
    try:
        await asyncio.wait({working, watching}, return_when=asyncio.FIRST_COMPLETED)
        if watching.done():
            watching.result()  # raises Cancelled
        output = working.result()
        if await asyncio.to_thread(watch.look):
            raise Cancelled(f"cancelled after {watch.pages_done} page(s)")
        return output
    finally:
        for task in (working, watching):
            task.cancel()
        await asyncio.gather(working, watching, return_exceptions=True)


@runtime("converter", "workspace", "progress", "pdf_access", "filter")
class OcrWork:
    def __init__(self, converter: PageConverter,
                 max_page_error_rate: Annotated[float, Range(at_least=0, at_most=1)] = 0.004, markdown: bool = True,
                 page_results: bool = False, workspace: Workspace | None = None, progress: bool = True,
                 pdf_access: Access | None = None, filter: DocumentFilter | None = None,  # noqa: A002 - the group's name
                 watch_s: Annotated[float, Range(above=0)] = 10.0):
        self.converter = converter
        self.watch_s = watch_s
        self.max_page_error_rate = max_page_error_rate
        self.markdown = markdown
        self.page_results = page_results
        self.workspace = workspace
        self.progress = progress
        self.pdf_access = pdf_access
        self.filter = filter
        self._bar: PageBar | None = None

    def __enter__(self) -> OcrWork:
        from olmocr.formats.pdf import poppler

        if self.workspace is None:
            raise UserError("work=ocr needs a workspace")
        for tool in ("pdftoppm", "pdftotext"):  # renders and the text layer: this machine must have both
            poppler(tool)
        self.converter.__enter__()
        self._bar = PageBar(self.progress)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.converter.__exit__(*exc)
        finally:
            self._bar.close()

    def __call__(self, item: Item) -> Output:
        return self.converter.run(self.convert_item(item))

    async def convert_item(self, item: Item) -> Output:
        watch = ItemWatch(self.workspace, item, self.watch_s)
        return await watched(self._convert_item(item, watch), watch)

    async def _convert_item(self, item: Item, watch: ItemWatch) -> Output:
        counts = Counter(documents=0, pages=0, bad_documents=0, dropped_documents=0, fallback_pages=0,
                         input_tokens=0, output_tokens=0)
        lines, page_lines, markdown, filtered, bad = [], [], [], [], []
        found = await asyncio.to_thread(read_documents, list(item.pdfs), self.pdf_access)  # Unavailable: retried later
        converted = await all_of(self.convert_document(source, found[source], watch) for source in item.pdfs)
        for source, done in zip(item.pdfs, converted):
            if done.error:
                counts["bad_documents"] += 1
                counts[f"bad_{done.error.reason}"] += 1
                log.warning("skipped %s: %s", source, done.error)
                bad.append(_listed(source, "bad", done.error.reason, str(done.error).removeprefix(f"{done.error.reason}: ")))
                continue
            if done.filtered:
                reason, detail = done.filtered
                counts["filtered_documents"] += 1
                counts[f"filtered_{reason}"] += 1
                filtered.append(_listed(source, "filtered", reason, detail))
                continue
            pages = done.pages
            counts["pages"] += len(pages)
            fallback = sum(p.fallback for p in pages)
            counts["fallback_pages"] += fallback
            if refused := sum(p.refused for p in pages):  # pages the server refused, while it answered others
                counts["refused_pages"] += refused
            counts["input_tokens"] += sum(p.input_tokens for p in pages)
            counts["output_tokens"] += sum(p.output_tokens for p in pages)
            page_lines += [json.dumps({"source": source, **p.record()}, ensure_ascii=False) for p in pages]
            if fallback / len(pages) > self.max_page_error_rate:
                counts["dropped_documents"] += 1
                why = (f"{fallback} of its {len(pages)} pages fell back to the text layer (more than "
                       f"max_page_error_rate {self.max_page_error_rate:g})")
                log.warning("dropped %s: %s", source, why)
                bad.append(_listed(source, "dropped", "fallback_pages", why,
                                   failed_attempts=failed_attempts([p for p in pages if p.fallback])))
                continue
            document = dolma_document(source, pages, self.converter.server.model, done.created)
            if document is None:
                counts["empty_documents"] += 1
                continue
            counts["documents"] += 1
            lines.append(json.dumps(document, ensure_ascii=False))
            markdown.append((mirror_path(source, ".md"), document["text"]))
            if (blocks := blocks_document(source, pages, self.converter.server.model)) is not None:
                markdown.append((mirror_path(source, BLOCKS_SUFFIX), json.dumps(blocks, ensure_ascii=False) + "\n"))
        return Output(jsonl(lines), dict(counts), self._side_files(item, markdown, page_lines, filtered, bad))

    def _side_files(self, item: Item, markdown: list[tuple[str, str]], page_lines: list[str], filtered: list[str],
                    bad: list[str]) -> dict[str, bytes]:
        files = {f"{MARKDOWN}/{path}": text.encode("utf-8") for path, text in markdown} if self.markdown else {}
        if self.page_results:
            files[f"{PAGES}/output_{item.id}.jsonl"] = jsonl(page_lines)
        for folder, listed in ((FILTERED, filtered), (BAD, bad)):
            if listed:
                files[f"{folder}/{item.id}.jsonl"] = jsonl(listed)
        return files

    async def convert_document(self, source: str, data: bytes | DocumentError, watch: ItemWatch) -> Converted:
        if isinstance(data, DocumentError):
            return Converted(error=data)
        try:
            layout = await asyncio.to_thread(document_pages, source, data)
        except DocumentError as exc:
            return Converted(error=exc)
        if layout.kind == IMAGE:
            return Converted(pages=await all_of(
                self._page(source, {"pdf_path": source, "page": n, "image_bytes": data, "num_pages": len(layout.sizes),
                            "page_size": size}, None, None, watch) for n, size in enumerate(layout.sizes, start=1)))
        if self.filter is not None and (why := await asyncio.to_thread(self.filter, source, data)):
            return Converted(filtered=why)
        with local_path(source, data) as path:
            pages = await all_of(self._page(source, {"pdf_path": path, "page": n, "pdf_bytes": data,
                                             "num_pages": len(layout.sizes), "page_size": size}, path, data, watch)
                                 for n, size in enumerate(layout.sizes, start=1))
        return Converted(pages=pages, created=layout.created)

    async def _page(self, source: str, sample: dict, path: str | None, data: bytes | None,
                    watch: ItemWatch) -> PageResult:
        result = await self.converter.convert(sample, path, data)
        if await self.converter.refuses_page(result, document=source):
            # The server answers another page now: it refuses this one for what the page is (a shape its processor
            # refuses, a request too large). The page falls back, marked, and counts against its document as any
            # failed page does.
            result.refused = True
            result.attempts.append({"outcome": "refused by the server, which answers other pages"})
        elif result.server_fault is not None:
            # The server, not the model, failed this page: its fallback would drop or degrade a document
            # for a fault outside it. The item goes back uncounted (the rest of it is cancelled: it is
            # converted whole when it comes back), and the worker pauses and gives up as for storage.
            server = self.converter.server
            raise ServerFailed(f"{server.name} at {server.url} failed page {result.page} of {source} (model "
                              f"{server.model}, {len(result.attempts)} attempt(s)): {error_gist(result.server_fault)}")
        self._bar.page(result)
        watch.page_done()
        return result
