"""Finding md+pdf training pairs under one or more roots (local folders or s3:// prefixes).

A start lists each root (sizes and modification times come with the listing) and reads only the
.md files that are new or changed since the last start: the parsed front matter of the others comes
from a manifest cached per root. PDFs are not opened here: that costs milliseconds per file and is
done when the sample is loaded (the CheckPdf step), so a first start on a large folder stays fast.
Problems found here — an .md without its .pdf, an empty .pdf, broken front matter — are returned,
not raised, so one bad file never stops a run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

from olmocr.errors import UserError
from olmocr.faults import Unreachable, store_errors
from olmocr.formats.frontmatter import FrontMatterError, PageMeta, parse_document
from olmocr.utils.io import filesystem, is_remote, patiently, read_bytes

MANIFEST_VERSION = 1
GONE = -1  # the size listed for a path that names no regular file (a broken link, a FIFO)


@dataclass
class PairRecord:
    stem: str
    md_path: str | None
    pdf_path: str | None
    meta: PageMeta | None = None
    problem: str | None = None
    detail: str = ""


@dataclass
class DatasetIndex:
    root: str
    pairs: list[PairRecord]
    problems: list[PairRecord]
    reused: int = 0
    parsed: int = 0
    seconds: float = 0.0
    stats: Counter = field(default_factory=Counter)
    unpaired: list[str] = field(default_factory=list)  # PDFs without an .md beside them: nothing to learn from


def _list_local(root: str) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=True):
                    stack.append(entry.path)
                elif entry.name.lower().endswith((".md", ".pdf")):
                    try:
                        st = entry.stat()
                    except FileNotFoundError:  # a link to nothing, or deleted since the listing
                        st = None
                    # Not a regular file (a FIFO's read would block the start for ever): named, never read.
                    found[entry.path] = (st.st_size, st.st_mtime_ns) if st and stat.S_ISREG(st.st_mode) else (GONE, 0)
    return found


def _list_remote(root: str, wait_s: float) -> dict[str, tuple[int, int]]:
    fs = filesystem(root)
    protocol = root.split("://", 1)[0]
    try:
        listing = patiently(lambda: fs.find(root, detail=True), root, wait_s)
    except Unreachable:
        raise
    except Exception as exc:  # botocore/aiohttp/gcsfs each raise their own types for the same failure
        raise UserError(f"{root}: cannot list ({type(exc).__name__}: {exc})") from None
    found = {}
    for path, info in listing.items():
        if path.lower().endswith((".md", ".pdf")):
            stamp = info.get("ETag") or info.get("LastModified") or info.get("mtime") or ""
            found[f"{protocol}://{path}"] = (int(info.get("size") or 0), int(hashlib.md5(str(stamp).encode()).hexdigest()[:12], 16))
    return found


def _read_many(paths: list[str]) -> dict[str, bytes | Exception]:
    if not paths:
        return {}
    if not is_remote(paths[0]):
        out: dict[str, bytes | Exception] = {}
        for path in paths:
            try:
                with open(path, "rb") as fh:
                    out[path] = fh.read()
            except OSError as exc:
                out[path] = exc
        return out
    fs = filesystem(paths[0])
    protocol = paths[0].split("://", 1)[0]
    # fsspec fetches a list of paths concurrently; keys come back without the protocol.
    fetched = fs.cat(paths, on_error="return")
    return {f"{protocol}://{k}" if "://" not in k else k: v for k, v in fetched.items()}


def _manifest_path(cache_dir: str, root: str) -> str:
    digest = hashlib.sha256(root.rstrip("/").encode()).hexdigest()[:16]
    return os.path.join(os.path.expanduser(cache_dir), f"manifest-{digest}.json")


def _load_manifest(path: str) -> dict:
    try:
        with open(path) as fh:
            data = json.load(fh)
        return data["entries"] if data.get("version") == MANIFEST_VERSION else {}
    except (OSError, ValueError, KeyError):
        return {}


def _save_manifest(path: str, root: str, entries: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump({"version": MANIFEST_VERSION, "root": root, "entries": entries}, fh, separators=(",", ":"))
    os.replace(tmp, path)


def index_root(root: str, cache_dir: str | None = None, storage_wait_s: float = 0.0) -> DatasetIndex:
    """Index one root. ``cache_dir`` holds the manifest; None disables caching. A remote root's storage that
    does not answer is waited out for up to ``storage_wait_s``, then (or when it refuses the credentials)
    :class:`olmocr.faults.Unreachable`: a page is never taken for unreadable, nor remembered so in the
    manifest, because its storage failed while it was read."""
    start = time.perf_counter()
    root = root.rstrip("/") if is_remote(root) else os.path.abspath(os.path.expanduser(root))
    if is_remote(root):
        listing = _list_remote(root, storage_wait_s)
    else:
        if not os.path.isdir(root):
            raise UserError(f"data root {root!r} is not a directory (the published datasets are laid out by "
                         "python -m olmocr.datasets dataset=…)")
        listing = _list_local(root)

    by_stem: dict[str, dict[str, str]] = {}
    for path in listing:
        stem, ext = os.path.splitext(path)
        by_stem.setdefault(stem, {})[ext.lower()] = path

    manifest_file = _manifest_path(cache_dir, root) if cache_dir else None
    cached = _load_manifest(manifest_file) if manifest_file else {}
    entries: dict[str, list] = {}
    pairs, problems, to_parse, unpaired = [], [], [], []
    stats: Counter = Counter()
    reused = 0
    for stem in sorted(by_stem):
        files = by_stem[stem]
        md, pdf = files.get(".md"), files.get(".pdf")
        if md is None:
            stats["pdf_without_md"] += 1
            unpaired.append(pdf)
            continue
        rel = os.path.relpath(stem, root) if not is_remote(root) else stem[len(root) + 1:]
        key = [listing[md][0], listing[md][1], listing[pdf][0] if pdf else None, listing[pdf][1] if pdf else None]
        record = PairRecord(stem=rel, md_path=md, pdf_path=pdf)
        hit = cached.get(rel)
        if hit is not None and hit[:4] == key:
            reused += 1
            meta, problem, detail = hit[4], hit[5], hit[6]
            record.meta = PageMeta(**meta) if meta else None
            record.problem, record.detail = problem, detail
            entries[rel] = hit
            (problems if record.problem else pairs).append(record)
        else:
            to_parse.append((rel, key, record))

    contents = _read_many([record.md_path for _, key, record in to_parse if key[0] != GONE])
    for path, data in contents.items():
        if isinstance(data, store_errors()) and not isinstance(data, FileNotFoundError) and is_remote(path):
            contents[path] = patiently(functools.partial(read_bytes, path), path, storage_wait_s)
    for rel, key, record in to_parse:
        data = contents.get(record.md_path)
        if key[0] == GONE:
            record.problem, record.detail = "unreadable_md", f"{record.md_path} is not a regular file (a link to nothing?)"
        elif isinstance(data, Exception) or data is None:
            record.problem, record.detail = "unreadable_md", f"{record.md_path}: {data}"
        else:
            try:
                record.meta, _ = parse_document(data.decode("utf-8"))
            except FrontMatterError as exc:
                record.problem, record.detail = "front_matter", f"{record.md_path}: {exc}"
            except UnicodeDecodeError as exc:
                record.problem, record.detail = "unreadable_md", f"{record.md_path}: {exc}"
        if record.problem is None and record.pdf_path is None:
            record.problem, record.detail = "missing_pdf", f"{record.md_path} has no .pdf beside it"
        elif record.problem is None and key[2] == GONE:
            record.problem, record.detail = "missing_pdf", f"{record.pdf_path} is not a regular file (a link to nothing?)"
        elif record.problem is None and key[2] == 0:
            record.problem, record.detail = "empty_pdf", f"{record.pdf_path} is zero bytes"
        if record.problem != "unreadable_md":  # a read that failed (an NFS hiccup) is tried again next start
            entries[rel] = key + [record.meta.to_dict() if record.meta else None, record.problem, record.detail]
        (problems if record.problem else pairs).append(record)

    if manifest_file and (to_parse or len(entries) != len(cached)):
        _save_manifest(manifest_file, root, entries)
    pairs.sort(key=lambda r: r.stem)
    problems.sort(key=lambda r: r.stem)
    for record in problems:
        stats[record.problem] += 1
    return DatasetIndex(root=root, pairs=pairs, problems=problems, reused=reused, parsed=len(to_parse),
                        seconds=time.perf_counter() - start, stats=stats, unpaired=unpaired)

