"""What a document is: a PDF or an image (PNG, JPEG, TIFF, WebP, …), told apart by its first bytes, not
its name; and the error that says a document itself is bad."""

from __future__ import annotations

from olmocr.errors import UserError

PDF, IMAGE = "pdf", "image"
# File signatures: a PDF may have a little junk before its header (readers accept it within 1 KiB).
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+",
                b"GIF87a", b"GIF89a", b"BM")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp", ".gif", ".bmp")
DOCUMENT_SUFFIXES = (".pdf", *IMAGE_SUFFIXES)


class DocumentError(UserError):
    """A document that cannot be used: its bytes are not a readable PDF or image. ``reason`` is a short
    name for counting (``unreadable_pdf``, ``unreadable_image``, ``not_a_document``, …)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def kind_of(data: bytes) -> str | None:
    """``"pdf"``, ``"image"`` or None, from the bytes alone."""
    if b"%PDF-" in data[:1024]:
        return PDF
    if data.startswith(_IMAGE_MAGIC) or (data[:4] == b"RIFF" and data[8:12] == b"WEBP"):
        return IMAGE
    return None


def has_document_suffix(path: str) -> bool:
    return path.lower().endswith(DOCUMENT_SUFFIXES)
