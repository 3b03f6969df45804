"""What a submitted document is, read from its bytes before anything is stored or rendered: a PDF (its pages from
its page tree), an image (its frames) or a tar archive of them (bounded as it streams), the pages a ``page_range``
names, and the name shown for it; a submission the service does not take is :class:`Refused`, with its HTTP
answer."""

from __future__ import annotations

import os

from olmocr.errors import UserError

GZIP = b"\x1f\x8b"


class Refused(UserError):
    """A submission the service does not take: ``status`` is the HTTP answer, the message says why."""

    def __init__(self, status: int, message: str, **headers: str):
        super().__init__(message)
        self.status, self.headers = status, headers


def safe_name(name: str | None) -> str:
    """The client's file name for display: its last part, printable characters only, at most 200 of them."""
    base = os.path.basename((name or "").replace("\\", "/"))
    return "".join(c for c in base if c.isprintable())[:200] or "document.pdf"


def page_range(spec: str | None, pages: int) -> list[int] | None:
    """The page numbers a ``page_range`` such as ``"1-3,7,10-"`` names in a document of ``pages`` pages, in
    order and each once; None for no range (every page)."""
    if spec is None or not spec.strip():
        return None
    chosen: dict[int, None] = {}
    for part in spec.replace(" ", "").split(","):
        first, dash, last = part.partition("-")
        try:
            start = int(first)
            stop = (int(last) if last else pages) if dash else start
        except ValueError:
            raise Refused(422, f"page_range {spec!r}: {part!r} is not a page or a range of pages (as 1-3,7,10-)") from None
        if not 1 <= start <= stop <= pages:
            raise Refused(422, f"page_range {spec!r}: {part!r} is outside the document's pages 1-{pages}")
        chosen.update(dict.fromkeys(range(start, stop + 1)))
    return list(chosen)


def document_pages(data: bytes, max_pages: int, spec: str | None,
                   limit: str = "this service takes at most {n} (max_pages)") -> tuple[str, int, list[int] | None]:
    """The document's suffix (pdf, or the image's format), its page count and the pages a page_range chose, read
    as the pipeline reads a document (a PDF's page tree, an image's frames), nothing rendered; Refused when it is
    neither a PDF nor an image that can be read, or more than ``max_pages`` would be converted."""
    from olmocr.formats.document import IMAGE, PDF, DocumentError
    from olmocr.formats.image import image_format
    from olmocr.pipeline.inputs import document_pages as read_pages  # the pipeline's own reading of a document

    try:
        found = read_pages("the upload", data)
    except DocumentError as exc:
        raise Refused(422, f"the upload cannot be converted: {exc}") from None
    kind, pages = found.kind, len(found.sizes)
    suffix = "pdf" if kind == PDF else image_format(data)
    chosen = page_range(spec, pages)
    if chosen is not None and kind == IMAGE and chosen != list(range(1, pages + 1)):
        raise Refused(422, f"page_range {spec!r}: pages are chosen from PDFs; this image has {pages} frame(s)")
    converted = pages if chosen is None else len(chosen)
    if converted > max_pages:
        raise Refused(413, f"the document has {converted} pages to convert; {limit.format(n=max_pages)}")
    return suffix, pages, chosen


def is_archive(data: bytes) -> bool:
    """A tar archive, plain or gzipped, by its bytes."""
    import io
    import tarfile

    if data[:2] == GZIP:
        return True
    return len(data) > 262 and data[257:262] == b"ustar" and tarfile.is_tarfile(io.BytesIO(data))


def archive_documents(data: bytes, max_members: int, max_unpacked: int, max_pages: int) -> tuple[list[str], int, list[str]]:
    """The documents of a tar archive (its members that are PDFs or images, by their bytes), their pages in
    all, and the members that are not documents. Read as a stream and refused (413) once it has more than
    ``max_members`` files, more than ``max_unpacked`` bytes unpacked or more than ``max_pages`` pages; 422 when
    it is damaged or holds no document."""
    import io
    import tarfile

    from olmocr.formats.document import kind_of
    from olmocr.pipeline.archives import CORRUPT

    documents, skipped, pages, members, unpacked = [], [], 0, 0, 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|*") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                members += 1
                unpacked += member.size  # as declared, before a byte of it is unpacked
                if members > max_members:
                    raise Refused(413, f"the archive has more than {max_members} files (max_archive_members)")
                if unpacked > max_unpacked:
                    raise Refused(413, f"the archive unpacks to more than {max_unpacked} bytes (max_unpacked_mb)")
                content = tar.extractfile(member).read()
                if kind_of(content) is None:
                    skipped.append(member.name)
                    continue
                try:
                    pages += document_pages(content, max_pages, None)[1]
                except Refused as exc:
                    raise Refused(exc.status, f"archive member {member.name}: {exc}") from None
                if pages > max_pages:
                    raise Refused(413, f"the archive's documents have more than {max_pages} pages (max_pages)")
                documents.append(member.name)
    except CORRUPT as exc:
        raise Refused(422, f"the archive cannot be read: {type(exc).__name__}: {exc}") from None
    if not documents:
        raise Refused(422, f"the archive holds no PDF or image ({len(skipped)} other file(s))")
    return documents, pages, skipped
