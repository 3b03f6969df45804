"""``work=ocr``: convert every page of an item's PDFs through the model server into Dolma documents.

Documents of an item and pages of a document are converted concurrently (at most ``concurrency`` pages
in flight); page order is kept. A PDF that is bad (corrupt, encrypted, no pages, deleted since it was
queued) is counted and reported, never fatal; one that cannot be read for a reason outside it (storage,
credentials, network) sends the whole item back to the queue, to be tried again later. A document whose share of text-layer pages exceeds ``max_page_error_rate`` is
dropped and counted. The server is started when the work starts and stopped when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import tempfile
from collections import Counter
from dataclasses import dataclass, field

from olmocr.config import runtime
from olmocr.pipeline.convert import PageConverter, PageResult, all_of
from olmocr.pipeline.dolma import dolma_document, mirror_path
from olmocr.pipeline.inputs import read_document
from olmocr.pipeline.worker import Output
from olmocr.pipeline.workspace import Item, Workspace
from olmocr.utils.io import Access

log = logging.getLogger("olmocr.pipeline")
MARKDOWN = "markdown"
PAGES = "pages"


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


@contextlib.contextmanager
def local_copy(source: str, data: bytes):
    """A local file with the PDF's bytes (the source itself when it is local)."""
    from olmocr.utils.io import is_remote

    if not is_remote(source):
        yield source
        return
    with tempfile.NamedTemporaryFile(suffix=".pdf") as tmp:
        tmp.write(data)
        tmp.flush()
        yield tmp.name


@dataclass
class ConvertedPdf:
    error: str | None = None  # why the PDF cannot be read
    pages: list[PageResult] = field(default_factory=list)  # in page order
    created: datetime.datetime | None = None


@runtime("converter", "workspace", "progress", "pdf_access")
class OcrWork:
    def __init__(self, converter: PageConverter, max_page_error_rate: float = 0.004, markdown: bool = True,
                 page_results: bool = False, workspace: Workspace | None = None, progress: bool = True,
                 pdf_access: Access | None = None):
        if not 0 <= max_page_error_rate <= 1:
            raise ValueError(f"work.max_page_error_rate: must be in [0, 1], got {max_page_error_rate}")
        self.converter = converter
        self.max_page_error_rate = max_page_error_rate
        self.markdown = markdown
        self.page_results = page_results
        self.workspace = workspace
        self.progress = progress
        self.pdf_access = pdf_access
        self._bar: PageBar | None = None

    def __enter__(self) -> OcrWork:
        from olmocr.formats.pdf import poppler

        if self.workspace is None:
            raise ValueError("work=ocr needs a workspace")
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
        counts = Counter(documents=0, pages=0, bad_documents=0, dropped_documents=0, fallback_pages=0,
                         input_tokens=0, output_tokens=0)
        lines, page_lines, markdown = [], [], []
        for source, converted in zip(item.pdfs, await all_of(self.convert_pdf(source) for source in item.pdfs)):
            if converted.error:
                counts["bad_documents"] += 1
                log.warning("skipped %s: %s", source, converted.error)
                continue
            pages = converted.pages
            counts["pages"] += len(pages)
            fallback = sum(p.fallback for p in pages)
            counts["fallback_pages"] += fallback
            counts["input_tokens"] += sum(p.input_tokens for p in pages)
            counts["output_tokens"] += sum(p.output_tokens for p in pages)
            page_lines += [json.dumps({"source": source, **p.record()}, ensure_ascii=False) for p in pages]
            if fallback / len(pages) > self.max_page_error_rate:
                counts["dropped_documents"] += 1
                log.warning("dropped %s: %d of its %d pages fell back to the text layer (more than "
                            "max_page_error_rate %g)", source, fallback, len(pages), self.max_page_error_rate)
                continue
            document = dolma_document(source, pages, self.converter.server.model, converted.created)
            if document is None:
                counts["empty_documents"] += 1
                continue
            counts["documents"] += 1
            lines.append(json.dumps(document, ensure_ascii=False))
            markdown.append((mirror_path(source, ".md"), document["text"]))
        await asyncio.to_thread(self._write_side_outputs, item, markdown, page_lines)
        return Output("".join(line + "\n" for line in lines).encode("utf-8"), dict(counts))

    def _write_side_outputs(self, item: Item, markdown: list[tuple[str, str]], page_lines: list[str]) -> None:
        store = self.workspace.store
        if self.markdown:
            for path, text in markdown:
                store.write(f"{MARKDOWN}/{path}", text.encode("utf-8"))
        if self.page_results:
            store.write(f"{PAGES}/output_{item.id}.jsonl", "".join(line + "\n" for line in page_lines).encode("utf-8"))

    async def convert_pdf(self, source: str) -> ConvertedPdf:
        from olmocr.formats.pdf import PdfError, pdf_layout

        try:
            data = await asyncio.to_thread(read_document, source, self.pdf_access)
            layout = await asyncio.to_thread(pdf_layout, source, data)
        except PdfError as exc:
            return ConvertedPdf(error=str(exc))
        with local_copy(source, data) as path:
            pages = await all_of(self._page({"pdf_path": path, "page": n, "pdf_bytes": data,
                                             "num_pages": len(layout.page_sizes), "page_size": size}, path, data)
                                 for n, size in enumerate(layout.page_sizes, start=1))
        return ConvertedPdf(pages=pages, created=layout.created)

    async def _page(self, sample: dict, path: str, data: bytes) -> PageResult:
        result = await self.converter.convert(sample, path, data)
        self._bar.page(result)
        return result
