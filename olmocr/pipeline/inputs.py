"""What ``pdfs=[…]`` names: PDF paths, folders, globs (local or ``s3://``) and text files listing them;
page counts sampled from them to size work items."""

from __future__ import annotations

import glob
import os
import random
from concurrent.futures import ThreadPoolExecutor

from olmocr.utils.io import Access

GLOB_CHARS = set("*?[")


def _is_pdf(path: str) -> bool:
    return path.lower().endswith(".pdf")


def _expand_remote(entry: str, access: Access | None) -> list[str]:
    from olmocr.utils.io import filesystem

    fs = filesystem(entry, access)
    protocol = entry.split("://", 1)[0]
    if GLOB_CHARS & set(entry):
        found = fs.glob(entry)
    elif _is_pdf(entry):
        found = [entry] if fs.exists(entry) else []
    else:  # a prefix: every PDF under it
        found = [p for p in fs.find(entry) if _is_pdf(p)]
    return sorted(f"{protocol}://{fs._strip_protocol(p)}" for p in found if _is_pdf(p))


def _expand_local(entry: str) -> list[str]:
    entry = os.path.expanduser(entry)
    if GLOB_CHARS & set(entry):
        found = [p for p in glob.glob(entry, recursive=True) if _is_pdf(p) and os.path.isfile(p)]
    elif os.path.isdir(entry):
        found = [os.path.join(folder, name) for folder, _, names in os.walk(entry) for name in names
                 if _is_pdf(name)]
    elif os.path.isfile(entry):
        found = [entry]
    else:
        found = []
    return sorted(os.path.abspath(p) for p in found)


def _listed(entry: str, access: Access | None) -> list[str]:
    """Entries of a text file: one path, folder or glob per line; blank lines and ``#`` comments skipped.
    Relative local paths are relative to the list's folder."""
    from olmocr.utils.io import is_remote, read_text

    base = os.path.dirname(os.path.abspath(entry)) if not is_remote(entry) else None
    out = []
    for line in read_text(entry, access).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if base is not None and "://" not in line and not os.path.isabs(os.path.expanduser(line)):
            line = os.path.join(base, line)
        out.append(line)
    return out


def expand(entries: list[str], access: Access | None = None) -> list[str]:
    """Every PDF the entries name, once each, as absolute local paths or full ``s3://`` URLs (reached with
    ``access``).

    A ``.pdf`` path is itself; a folder or prefix means every PDF under it; a glob is matched (``**``
    crosses folders); any other existing file is a list of further entries. An entry that names no PDF
    is an error naming it."""
    seen: dict[str, None] = {}
    for entry in entries:
        entry = str(entry)
        listed = not _is_pdf(entry) and not GLOB_CHARS & set(entry) and (
            entry.endswith(".txt") or ("://" not in entry and os.path.isfile(entry)))
        for sub in (_listed(entry, access) if listed else [entry]):
            found = _expand_remote(sub, access) if "://" in sub else _expand_local(sub)
            if not found:
                where = f" (listed in {entry})" if listed else ""
                raise ValueError(f"pdfs: {sub!r}{where} names no PDF (expected a .pdf path, a folder, a glob "
                                 "or a text file listing them)")
            seen.update(dict.fromkeys(found))
    return list(seen)


def _container(path: str) -> str:
    """The folder or bucket a document lives in."""
    if "://" not in path:
        return os.path.dirname(os.path.abspath(path))
    protocol, rest = path.split("://", 1)
    return f"{protocol}://{rest.split('/', 1)[0]}"


def read_document(path: str, access: Access | None = None) -> bytes:
    """A queued document's bytes. A document that is gone (its folder or bucket is there, it is not: deleted
    since it was queued) is bad: PdfError ``missing_pdf``. Anything else that stops the read is outside the
    document and may pass (the storage, the credentials, the network, a folder that is not there, as a
    mount that failed): :class:`Unavailable`, and the item is tried again later."""
    from olmocr.formats.pdf import PdfError
    from olmocr.pipeline.failures import Unavailable
    from olmocr.pipeline.store import store_errors
    from olmocr.utils.io import filesystem, read_bytes

    try:
        return read_bytes(path, access)
    except FileNotFoundError:
        container = _container(path)
        try:
            there = os.path.isdir(container) if "://" not in path else filesystem(path, access).exists(container)
        except store_errors() as exc:
            raise Unavailable(f"{path}: {type(exc).__name__}: {exc}") from None
        if there:
            raise PdfError("missing_pdf", f"{path} is gone (deleted since it was queued)") from None
        raise Unavailable(f"{path}: {container} is not there (an unmounted folder, a missing bucket?)") from None
    except store_errors() as exc:
        raise Unavailable(f"{path}: {type(exc).__name__}: {exc}") from None


def count_pages(path: str, access: Access | None = None) -> int | None:
    """A PDF's page count, or None when it cannot be read (it is still queued; its worker reports it)."""
    from olmocr.formats.pdf import PdfError, pdf_info
    from olmocr.utils.io import read_bytes

    try:
        return pdf_info(path, read_bytes(path, access)).num_pages
    except (PdfError, OSError):
        return None


def sample_page_counts(paths: list[str], sample: int, seed: int = 0, threads: int = 8,
                       access: Access | None = None) -> dict[str, int | None]:
    """Page counts of up to ``sample`` PDFs chosen at random (all of them when there are no more)."""
    chosen = paths if len(paths) <= sample else random.Random(seed).sample(paths, sample)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return dict(zip(chosen, pool.map(lambda path: count_pages(path, access), chosen)))


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
