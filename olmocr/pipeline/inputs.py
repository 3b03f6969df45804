"""What ``pdfs=[…]`` names: documents (PDFs and images), tar archives of them, folders, globs (local or
``s3://``) and text files listing them; reading a queued document's bytes; page counts sampled from them
to size work items."""

from __future__ import annotations

import glob
import os
import random
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from olmocr.errors import UserError
from olmocr.formats.document import IMAGE, PDF, DocumentError, has_document_suffix, kind_of
from olmocr.pipeline.archives import SEPARATOR, is_archive, list_members, read_members, split_member
from olmocr.utils.io import Access, filesystem, irregular, is_remote, patiently, read_bytes, read_text

GLOB_CHARS = set("*?[")


def _is_input(path: str) -> bool:
    """A document or an archive of documents, by its name (listing a folder of millions reads no bytes)."""
    return has_document_suffix(path) or is_archive(path)


def _expand_remote(entry: str, access: Access | None, wait_s: float) -> list[str]:
    fs = filesystem(entry, access, wait_s)
    protocol = entry.split("://", 1)[0]
    if GLOB_CHARS & set(entry):
        found = fs.glob(entry)
    elif _is_input(entry):
        found = [entry] if fs.exists(entry) else []
    else:  # a prefix: every document and archive under it
        found = fs.find(entry)
    return sorted(f"{protocol}://{p.split('://', 1)[-1]}" for p in found if _is_input(p))


def _expand_local(entry: str) -> list[str]:
    entry = os.path.expanduser(entry)
    if GLOB_CHARS & set(entry):
        found = [p for p in glob.glob(entry, recursive=True) if _is_input(p) and os.path.isfile(p)]
    elif os.path.isdir(entry):
        found = [os.path.join(folder, name) for folder, _, names in os.walk(entry) for name in names
                 if _is_input(name)]
    elif os.path.isfile(entry):
        found = [entry]
    else:
        found = []
    return sorted(os.path.abspath(p) for p in found)


def _listed(entry: str, access: Access | None, wait_s: float) -> list[str]:
    """Entries of a text file: one path, folder or glob per line; blank lines and ``#`` comments skipped.
    Relative local paths are relative to the list's folder."""
    base = os.path.dirname(os.path.abspath(entry)) if not is_remote(entry) else None
    out = []
    for line in read_text(entry, access, wait_s).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if base is not None and "://" not in line and not os.path.isabs(os.path.expanduser(line)):
            line = os.path.join(base, line)
        out.append(line)
    return out


def _sniffed_document(entry: str) -> bool:
    """A local file named outright whose name does not say what it is: a document if its bytes are one."""
    try:
        with open(os.path.expanduser(entry), "rb") as fh:
            return kind_of(fh.read(1024)) is not None
    except OSError:
        return False


def expand(entries: list[str], access: Access | None = None, threads: int = 8, wait_s: float = 0.0) -> list[str]:
    """Every document the entries name, once each, as absolute local paths or full ``s3://`` URLs (reached
    with ``access``; storage that does not answer waited out for up to ``wait_s`` at each call, and past that,
    or credentials refused, :class:`olmocr.faults.Unreachable` naming the entry); an archive's documents as
    ``<archive>::<member>``.

    A PDF, image or archive path is itself; a folder or prefix means every one under it; a glob is matched
    (``**`` crosses folders); any other existing file is a document when its bytes say so, else a list of
    further entries. An entry that names nothing is an error naming it. An archive that is damaged or
    holds no document is queued whole besides what could be listed, so its worker reports it as bad."""
    seen: dict[str, None] = {}
    for entry in entries:
        entry = str(entry)
        listed = not _is_input(entry) and not GLOB_CHARS & set(entry) and (
            entry.endswith(".txt") or ("://" not in entry and os.path.isfile(entry) and not _sniffed_document(entry)))
        for sub in (_listed(entry, access, wait_s) if listed else [entry]):
            if "://" not in sub and os.path.isfile(os.path.expanduser(sub)) and not _is_input(sub):
                found = [os.path.abspath(os.path.expanduser(sub))]  # sniffed above, or named in a list
            else:
                found = _expand_remote(sub, access, wait_s) if "://" in sub else _expand_local(sub)
            if not found:
                where = f" (listed in {entry})" if listed else ""
                raise UserError(f"pdfs: {sub!r}{where} names no document (expected a PDF, an image, a tar archive "
                                "of them, a folder, a glob or a text file listing them)")
            seen.update(dict.fromkeys(found))
    archives = [path for path in seen if is_archive(path)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        listings = dict(zip(archives, pool.map(lambda archive: _members_of(archive, access, wait_s), archives)))
    documents: list[str] = []
    for path in seen:
        if path not in listings:
            documents.append(path)
            continue
        members, damage = listings[path]
        documents += members
        if damage or not members:
            documents.append(path)
    return documents


def _members_of(archive: str, access: Access | None, wait_s: float) -> tuple[list[str], str | None]:
    """An archive's listing (:func:`list_members`); a remote one's storage that does not answer waited out."""
    if "://" not in archive:
        return list_members(archive, access)
    return patiently(lambda: list_members(archive, access), archive, wait_s)


def _container(path: str) -> str:
    """The folder or bucket a document lives in."""
    if "://" not in path:
        return os.path.dirname(os.path.abspath(path))
    protocol, rest = path.split("://", 1)
    return f"{protocol}://{rest.split('/', 1)[0]}"


def read_document(path: str, access: Access | None = None) -> bytes:
    """A queued document's bytes. A document that is gone (its folder or bucket is there, it is not: deleted
    since it was queued) is bad: DocumentError ``missing_document``. Anything else that stops the read is
    outside the document and may pass (the storage, the credentials, the network, a folder that is not
    there, as a mount that failed): :class:`Unavailable`, and the item is tried again later."""
    return _reading(path, access, lambda: read_bytes(path, access))


def _regular_file(path: str) -> None:
    """A local document path must hold a regular file (or a link to one): a directory, FIFO, device or
    socket there is a bad document at once (a FIFO's read would block for ever)."""
    kind = irregular(path)  # FileNotFoundError: sorted by the caller
    if kind is not None:
        raise DocumentError("not_a_file", f"{path} is {kind}, not a file")


def _reading(path: str, access: Access | None, read):
    """``read()``, its failures sorted into the document's (DocumentError) and the storage's (Unavailable)."""
    from olmocr.pipeline.failures import Unavailable
    from olmocr.faults import store_errors

    try:
        if "://" not in path:
            _regular_file(path)
        return read()
    except FileNotFoundError:
        container = _container(path)
        try:
            there = os.path.isdir(container) if "://" not in path else filesystem(path, access).exists(container)
        except store_errors() as exc:
            raise Unavailable(f"{path}: {type(exc).__name__}: {exc}") from None
        if there:
            raise DocumentError("missing_document", f"{path} is gone (deleted since it was queued)") from None
        raise Unavailable(f"{path}: {container} is not there (an unmounted folder, a missing bucket?)") from None
    except store_errors() as exc:
        raise Unavailable(f"{path}: {type(exc).__name__}: {exc}") from None


def read_documents(paths: list[str], access: Access | None = None, threads: int = 8, then=None) -> dict:
    """Every queued document's bytes, or the DocumentError that makes it bad; an archive is read once for
    all its members. Raises :class:`Unavailable` when the storage stops a read. ``then(path, found)``, when
    given, runs on the reading thread and its result is kept instead of the bytes (a caller that only
    needs a page count holds no more than a few documents at a time)."""
    then = then or (lambda path, found: found)
    by_archive: dict[str, set[str]] = defaultdict(set)
    for path in paths:
        if (parts := split_member(path)) is not None:
            by_archive[parts[0]].add(parts[1])

    def read_one(path: str) -> dict[str, bytes | DocumentError]:
        try:
            if path in by_archive:
                found = _reading(path, access, lambda: read_members(path, by_archive[path], access))
                return {f"{path}{SEPARATOR}{name}": then(f"{path}{SEPARATOR}{name}", data)
                        for name, data in found.items()}
            if is_archive(path):  # queued whole: it could not be listed
                _, damage = _reading(path, access, lambda: list_members(path, access))
                raise DocumentError("unreadable_archive", f"{path}: {damage}") if damage else \
                    DocumentError("empty_archive", f"{path} holds no PDF or image")
            return {path: then(path, read_document(path, access))}
        except DocumentError as exc:
            return {path: then(path, exc)}

    jobs = list(by_archive) + [path for path in paths if split_member(path) is None]
    out: dict[str, bytes | DocumentError] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(jobs)))) as pool:
        for found in pool.map(read_one, jobs):
            out.update(found)
    return {path: out[path] for path in paths}


@dataclass(frozen=True)
class Pages:
    """What a document's pages are, from one parse of its bytes."""

    kind: str  # "pdf" or "image"
    sizes: list[tuple[float, float]]  # every page's displayed (width, height): PDF points, image pixels
    created: object = None  # a PDF's creation date (datetime), when its metadata holds a valid one


def document_pages(path: str, data: bytes) -> Pages:
    """The document's kind (by its bytes) and its pages; DocumentError when it is neither a readable PDF
    nor a readable image."""
    from olmocr.formats.image import image_pages
    from olmocr.formats.pdf import pdf_layout

    kind = kind_of(data)
    if kind == PDF:
        layout = pdf_layout(path, data)
        return Pages(PDF, layout.page_sizes, layout.created)
    if kind == IMAGE:
        return Pages(IMAGE, [(float(w), float(h)) for w, h in image_pages(path, data)])
    if not data:
        raise DocumentError("empty_document", f"{path} is zero bytes")
    raise DocumentError("not_a_document", f"{path} is neither a PDF nor an image (it starts {data[:8]!r})")


def sample_page_counts(paths: list[str], sample: int, seed: int = 0, threads: int = 8,
                       access: Access | None = None) -> dict[str, int | None]:
    """Page counts of up to ``sample`` documents chosen at random (all of them when there are no more);
    None for one that cannot be read (it is still queued; its worker reports it)."""
    from olmocr.pipeline.failures import Unavailable

    def count(path: str, found) -> int | None:
        try:
            return len(document_pages(path, found).sizes) if isinstance(found, bytes) else None
        except DocumentError:
            return None

    chosen = paths if len(paths) <= sample else random.Random(seed).sample(paths, sample)
    try:
        return read_documents(chosen, access, threads, then=count)
    except Unavailable:
        return dict.fromkeys(chosen)  # sizing is an estimate: the documents are queued all the same


def group(paths: list[str], counts: dict[str, int | None], pages_per_group: int) -> list[tuple[list[str], int]]:
    """Consecutive groups of about ``pages_per_group`` pages: a PDF counts its sampled page count, or
    the sample's mean when it was not sampled (or could not be read). Returns (paths, estimated pages)."""
    known = [n for n in counts.values() if n]
    mean = sum(known) / len(known) if known else 1.0
    groups, current, pages = [], [], 0.0
    for path in paths:
        estimate = counts.get(path) or mean
        if current and pages + estimate > pages_per_group:
            groups.append((current, round(pages)))
            current, pages = [], 0.0
        current.append(path)
        pages += estimate
    if current:
        groups.append((current, round(pages)))
    return groups
