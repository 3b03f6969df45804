"""What a submitted document is, read from its bytes before anything is stored or rendered: a PDF (its pages from
its page tree), an image (its frames) or a tar archive of them (bounded as it streams), the pages a ``page_range``
names, and the name shown for it; a submission the service does not take is :class:`Refused`, with its HTTP
answer."""

from __future__ import annotations

import os

from olmocr.errors import UserError

GZIP = b"\x1f\x8b"


class Refused(UserError):
    """A request the service does not take: ``status`` is the HTTP answer, the message says why; ``retry_after``
    (seconds) when asking again later may succeed; ``fields`` go into the JSON answer beside ``error``."""

    def __init__(self, status: int, message: str, /, retry_after: int | None = None, **fields):
        super().__init__(message)
        self.status, self.retry_after, self.fields = status, retry_after, fields


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


# What an archive member that is not a regular file is, for the answer that lists it (tarfile's member types)
NOT_A_FILE = {"issym": "a symbolic link", "islnk": "a hard link", "ischr": "a character device",
              "isblk": "a block device", "isfifo": "a FIFO"}
HEAD_BYTES = 1024  # enough of a member to tell a PDF or an image from anything else


def archive_documents(data: bytes, max_members: int, max_unpacked: int, max_pages: int,
                      max_document: int) -> tuple[list[str], int, list[dict]]:
    """The documents of a tar archive (its regular files that are PDFs or images, by their bytes), their pages in
    all, and the members that are not converted, each with why (not a document; a link, a device or a FIFO).
    Read as a stream, one member at a time and no member kept once passed, so what a check holds is the archive
    and one document at most, whatever the archive lists. Refused (413) past ``max_members`` entries of any kind
    (folders and links count), ``max_unpacked`` bytes unpacked (as the headers declare them, before a byte is
    unpacked), a member over ``max_document`` bytes (what one uploaded document may be) or ``max_pages`` pages in
    all; 422 when it is damaged, names one member twice or holds no document."""
    import io
    import tarfile

    from olmocr.formats.document import kind_of
    from olmocr.pipeline.archives import CORRUPT, streamed

    documents, skipped, seen, pages, entries, unpacked = [], [], set(), 0, 0, 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|*") as tar:
            for member in streamed(tar):
                entries += 1
                if entries > max_members:
                    raise Refused(413, f"the archive has more than {max_members} entries (max_archive_members)")
                if member.isdir():
                    continue
                if member.name in seen:
                    raise Refused(422, f"the archive names {member.name!r} twice: each member is one document of "
                                       "the result, under its name")
                seen.add(member.name)
                if not member.isfile():
                    kind = next((what for test, what in NOT_A_FILE.items() if getattr(member, test)()), "not a file")
                    skipped.append({"name": member.name, "reason": f"not a regular file ({kind})"})
                    continue
                unpacked += member.size  # as declared, before a byte of it is unpacked
                if unpacked > max_unpacked:
                    raise Refused(413, f"the archive unpacks to more than {max_unpacked} bytes (max_unpacked_mb)")
                if member.size > max_document:
                    raise Refused(413, f"archive member {member.name} is {member.size} bytes; a document is at most "
                                       f"{max_document} (max_upload_mb)")
                content = tar.extractfile(member)
                head = content.read(HEAD_BYTES)
                if kind_of(head) is None:
                    skipped.append({"name": member.name, "reason": "not a PDF or an image"})
                    continue
                try:
                    pages += document_pages(head + content.read(), max_pages, None)[1]
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


def archive_member(data: bytes, name: str) -> bytes:
    """The bytes of the archive's member ``name`` (a regular file the archive was checked to hold), read as a
    stream."""
    import io
    import tarfile

    from olmocr.pipeline.archives import streamed

    with tarfile.open(fileobj=io.BytesIO(data), mode="r|*") as tar:
        for member in streamed(tar):
            if member.name == name and member.isfile():
                return tar.extractfile(member).read()
    raise Refused(404, f"the archive has no member {name!r}")


# The longest name of one part of a path (NAME_MAX of Linux file systems) and of a whole object name (an S3 key):
# a member whose outputs would need a longer one cannot be stored in the workspace.
NAME_PART_BYTES, NAME_BYTES = 255, 1024


def unstorable(outputs: dict[str, str]) -> str | None:
    """Why the workspace cannot hold the outputs of an archive's members (member name → the object name of its
    output), or None: a name or one of its parts too long for a file system or S3, two members with the same
    output, or one member's output where another's folder must be."""
    folders, owner = {}, {}
    for member, name in outputs.items():
        encoded = name.encode("utf-8", "surrogateescape")
        part = max(name.split("/"), key=lambda p: len(p.encode("utf-8", "surrogateescape")))
        if len(encoded) > NAME_BYTES or len(part.encode("utf-8", "surrogateescape")) > NAME_PART_BYTES:
            return (f"archive member {member[:80]!r}{'…' if len(member) > 80 else ''}: its name is too long to store "
                    f"its output (at most {NAME_PART_BYTES} bytes a part, {NAME_BYTES} in all, with the workspace's "
                    "folders)")
        if name in owner:
            return f"archive members {owner[name]!r} and {member!r} would write the same output ({name})"
        owner[name] = member
        parts = name.split("/")
        for depth in range(1, len(parts)):
            folders.setdefault("/".join(parts[:depth]), member)
    for name, member in owner.items():
        if name in folders:
            return (f"archive members {member!r} and {folders[name]!r} cannot both be stored: the first one's output "
                    f"({name}) is where the second one's folder goes")
    return None
