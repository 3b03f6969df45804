"""``work=inventory``: list what a PDF corpus holds before paying for OCR — per PDF its page count,
first-page size, bytes and SHA-256 (duplicates across a crawl share it), or why it cannot be read."""

from __future__ import annotations

import hashlib
import json

from olmocr.config import runtime
from olmocr.pipeline.inputs import read_document
from olmocr.pipeline.worker import Output
from olmocr.pipeline.workspace import Item
from olmocr.utils.io import Access


@runtime("pdf_access")
class Inventory:
    def __init__(self, pdf_access: Access | None = None):
        self.pdf_access = pdf_access

    def __call__(self, item: Item) -> Output:
        from olmocr.formats.pdf import PdfError, pdf_info

        lines, counts = [], {"documents": 0, "pages": 0, "bad_documents": 0}
        for path in item.pdfs:
            row: dict = {"source": path, "item": item.id}
            try:
                data = read_document(path, self.pdf_access)  # Unavailable: the whole item waits for another try
                row.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
                info = pdf_info(path, data)
                row.update(pages=info.num_pages, width=round(info.width, 2), height=round(info.height, 2))
                counts["pages"] += info.num_pages
                counts["documents"] += 1
            except PdfError as exc:
                row["error"] = str(exc)
                counts["bad_documents"] += 1
            lines.append(json.dumps(row))
        return Output("".join(line + "\n" for line in lines).encode("utf-8"), counts)
