"""``work=inventory``: list what a corpus holds before paying for OCR — per document (PDF, image, archive
member) its kind, page count, first-page size (PDF points, image pixels), bytes and SHA-256 (duplicates
across a crawl share it), or why it cannot be read."""

from __future__ import annotations

import hashlib
import json

from olmocr.config import runtime
from olmocr.formats.document import DocumentError
from olmocr.pipeline.inputs import document_pages, read_documents
from olmocr.pipeline.worker import Output
from olmocr.pipeline.queue import Item
from olmocr.utils.io import Access


@runtime("pdf_access")
class Inventory:
    def __init__(self, pdf_access: Access | None = None):
        self.pdf_access = pdf_access

    def __call__(self, item: Item) -> Output:
        lines, counts = [], {"documents": 0, "pages": 0, "bad_documents": 0}
        found = read_documents(list(item.pdfs), self.pdf_access)  # Unavailable: the whole item waits for another try
        for path in item.pdfs:
            row: dict = {"source": path, "item": item.id}
            try:
                data = found[path]
                if isinstance(data, DocumentError):
                    raise data
                row.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
                pages = document_pages(path, data)
                width, height = pages.sizes[0]
                row.update(kind=pages.kind, pages=len(pages.sizes), width=round(width, 2), height=round(height, 2))
                counts["pages"] += len(pages.sizes)
                counts["documents"] += 1
            except DocumentError as exc:
                row["error"] = str(exc)
                counts["bad_documents"] += 1
            lines.append(json.dumps(row))
        return Output("".join(line + "\n" for line in lines).encode("utf-8"), counts)
