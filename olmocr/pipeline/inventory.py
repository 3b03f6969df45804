"""``work=inventory``: list what a PDF corpus holds before paying for OCR — per PDF its page count,
first-page size, bytes and SHA-256 (duplicates across a crawl share it), or why it cannot be read."""

from __future__ import annotations

import hashlib
import json

from olmocr.pipeline.worker import Output
from olmocr.pipeline.workspace import Item


class Inventory:
    def __call__(self, item: Item) -> Output:
        from olmocr.formats.pdf import PdfError, pdf_info
        from olmocr.utils.io import read_bytes

        lines, counts = [], {"documents": 0, "pages": 0, "bad_documents": 0}
        for path in item.pdfs:
            row: dict = {"source": path, "item": item.id}
            try:
                data = read_bytes(path)
                row.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
                info = pdf_info(path, data)
                row.update(pages=info.num_pages, width=round(info.width, 2), height=round(info.height, 2))
                counts["pages"] += info.num_pages
                counts["documents"] += 1
            except (PdfError, OSError) as exc:
                row["error"] = str(exc)
                counts["bad_documents"] += 1
            lines.append(json.dumps(row))
        return Output("".join(line + "\n" for line in lines).encode("utf-8"), counts)
