"""Documents inside tar archives (``.tar``, ``.tar.gz``, ``.tgz``; local or ``s3://``). A member is the
document ``<archive>::<member path>``, as olmOCR's own tools name it, so its viewers open it. Archives
are read as a stream, member after member: never unpacked to disk, never held whole in memory, and a
worker reads an archive once for all the members of an item."""

from __future__ import annotations

import gzip
import lzma
import tarfile
import zlib
from contextlib import contextmanager

from olmocr.formats.document import DocumentError, has_document_suffix, kind_of
from olmocr.utils.io import Access, filesystem, is_remote

SEPARATOR = "::"
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
# What a damaged archive raises part-way (gzip's own error is an OSError, so it is named before the
# storage errors that are OSErrors too).
CORRUPT = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError)
_HEAD = 1024  # bytes enough to tell a PDF or an image from anything else


def is_archive(path: str) -> bool:
    return SEPARATOR not in path and path.lower().endswith(ARCHIVE_SUFFIXES)


def split_member(path: str) -> tuple[str, str] | None:
    """(archive, member) of ``<archive>::<member>``; None for a document of its own."""
    archive, sep, member = path.partition(SEPARATOR)
    return (archive, member) if sep and archive.lower().endswith(ARCHIVE_SUFFIXES) else None


def streamed(tar: tarfile.TarFile):
    """The members of a tar opened as a stream (``r|*``), in order, none kept once passed: iterating a TarFile
    keeps every header it has read (about 200 bytes an entry, so 1.3 GB for a 940 KB archive of 200,000 empty
    folders)."""
    while (member := tar.next()) is not None:
        tar.members.clear()
        yield member


@contextmanager
def _members(archive: str, access: Access | None):
    """The archive's regular files as (name, file object), in archive order; a member's bytes must be
    read before the next is asked for."""
    fh = filesystem(archive, access).open(archive, "rb") if is_remote(archive) else open(archive, "rb")
    with fh, tarfile.open(fileobj=fh, mode="r|*") as tar:
        yield ((member.name, tar.extractfile(member)) for member in streamed(tar) if member.isfile())


def list_members(archive: str, access: Access | None = None) -> tuple[list[str], str | None]:
    """The archive's documents as ``<archive>::<member>`` (a member is one by its name's suffix or its
    first bytes; a name the archive holds twice, once), and why the listing stopped early when the archive is damaged (None when it is not).
    Storage errors and a missing archive pass through."""
    found: list[str] = []
    seen: set[str] = set()
    try:
        with _members(archive, access) as members:
            for name, fh in members:
                if name in seen:  # a name again: one document, read as the first (read_members), listed once
                    continue
                seen.add(name)
                if has_document_suffix(name) or kind_of(fh.read(_HEAD)) is not None:
                    found.append(f"{archive}{SEPARATOR}{name}")
    except CORRUPT as exc:
        return found, f"{type(exc).__name__}: {exc}"
    return found, None


def read_members(archive: str, names: set[str], access: Access | None = None) -> dict[str, bytes | DocumentError]:
    """The bytes of the named members, each read once in one pass over the archive (which stops when all
    are found); a member the archive lacks, or that a damage before it hides, is a DocumentError. Storage
    errors and a missing archive pass through."""
    out: dict[str, bytes | DocumentError] = {}
    damage = None
    try:
        with _members(archive, access) as members:
            for name, fh in members:
                if name in names and name not in out:
                    out[name] = fh.read()
                    if len(out) == len(names):
                        break
    except CORRUPT as exc:
        damage = f"{type(exc).__name__}: {exc}"
    for name in names - out.keys():
        out[name] = (DocumentError("unreadable_archive", f"{archive}{SEPARATOR}{name}: the archive is damaged "
                                                         f"before it ({damage})") if damage else
                     DocumentError("missing_member", f"{archive} has no member {name}"))
    return out
