"""Converted documents as Dolma JSONL lines, with the field names existing Dolma and olmOCR tooling reads,
and where their markdown copies go."""

from __future__ import annotations

import datetime
import hashlib
import posixpath
import re

from olmocr import __version__
from olmocr.pipeline.convert import PageResult

SOURCE = "olmocr"


def dolma_document(source: str, pages: list[PageResult], model: str, created: datetime.datetime | None = None,
                   now: datetime.datetime | None = None) -> dict | None:
    """One document: its pages' texts joined by newlines, each page's ``[start, end, page]`` span over
    that text, its front-matter fields and whether it fell back to the text layer; None when the model
    read every page as blank.

    Offsets are olmOCR's own, so spans computed by its tools and these agree: a page the model read as
    blank adds nothing (an empty span); a page that fell back to its text layer adds its text and its
    newline even when the layer is empty.

    Pages read by a model that writes blocks add ``page_blocks``: per page, its span and its blocks (page size,
    and each block's order, label, box in 0-1000 and in page units, text), or None for a page without them (one
    that fell back to its text layer)."""
    text, spans = "", []
    for index, page in enumerate(pages):
        start = len(text)
        if page.text or page.fallback:
            text += page.text + ("\n" if index < len(pages) - 1 else "")
        spans.append([start, len(text), page.page])
    if not text and not any(page.fallback for page in pages):
        return None
    now = now or datetime.datetime.now(datetime.UTC)
    document = {
        # The source is part of the id: two PDFs with the same text (a crawl's duplicates) stay two
        # documents whose ids differ.
        "id": hashlib.sha1(f"{source}\n{text}".encode()).hexdigest(),
        "text": text,
        "source": SOURCE,
        "added": now.strftime("%Y-%m-%d"),
        "created": (created or now).strftime("%Y-%m-%d"),
        "metadata": {
            "Source-File": source,
            "olmocr-version": __version__,
            "model": model,
            "pdf-total-pages": len(pages),
            "total-input-tokens": sum(p.input_tokens for p in pages),
            "total-output-tokens": sum(p.output_tokens for p in pages),
            "total-fallback-pages": sum(p.fallback for p in pages),
        },
        "attributes": {
            "pdf_page_numbers": spans,
            "primary_language": [p.meta.primary_language for p in pages],
            "is_rotation_valid": [p.meta.is_rotation_valid for p in pages],
            "rotation_correction": [p.meta.rotation_correction for p in pages],
            "is_table": [p.meta.is_table for p in pages],
            "is_diagram": [p.meta.is_diagram for p in pages],
            "is_fallback": [p.fallback for p in pages],  # this page is its PDF's text layer, not the model's
        },
    }
    if any(p.blocks is not None for p in pages):
        document["attributes"]["page_blocks"] = [[*span[:2], p.structure() if p.blocks is not None else None]
                                                 for span, p in zip(spans, pages)]
    return document


def blocks_document(source: str, pages: list[PageResult], model: str) -> dict | None:
    """A document's blocks as one JSON object a user loads without parsing markdown (the pipeline writes it
    beside the document's markdown copy): each page's number, size and blocks; None when no page has blocks."""
    if all(p.blocks is None for p in pages):
        return None
    return {"source": source, "model": model,
            "pages": [{"page": p.page, **(p.structure() if p.blocks is not None else {"page_size": None,
                                                                                      "blocks": None})}
                      for p in pages]}


def mirror_path(source: str, suffix: str) -> str:
    """Where a source document's copy goes inside a folder that mirrors the document tree:
    ``s3://bucket/a/b.pdf`` → ``bucket/a/b<suffix>``, ``/data/a/b.pdf`` → ``data/a/b<suffix>``,
    ``/data/a/b.png`` → ``data/a/b.png<suffix>``; never above the folder."""
    path = re.sub(r"^[a-z][a-z0-9+.-]*://", "", source)
    # An archive member's copy goes under a folder named as its archive: a.tar.gz::b/c.pdf → a.tar.gz/b/c.md
    parts = [part for part in path.replace("::", "/").split("/") if part not in ("", ".", "..")]
    stem = posixpath.join(*parts) if parts else "document"
    return (stem[:-4] if stem.lower().endswith(".pdf") else stem) + suffix
