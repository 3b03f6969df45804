"""olmOCR-mix releases: parquet rows (one page each) + PDF tarballs → ``<out>/<subset>/<split>/<id>.pdf|.md``.

A row carries the page's fields either as columns (``primary_language`` … ``natural_text``) or as one JSON
``response``, plus ``extras`` (JSON) and ``url``; its PDF is the tarball member ``<id>.pdf``. Values are
coerced as the release's own converter does (missing → the field's default, 0/1 and "true"/"no" → booleans,
a language given as a boolean → null); a value that cannot mean a page field (a rotation of 45, a response
that is not JSON) rejects the row instead of being silently replaced. The URL and extras go to
``<out>/urls/<subset>_<split>.jsonl``, so nothing in a row is lost.

Units of work: each tarball (streamed member by member, never unpacked to disk; only the PDFs of selected
rows are written), then each subset/split (its rows become .md files beside their PDFs, then the pairs are
checked as ``python -m olmocr.data`` indexes and opens them; a pair failing that is removed and listed).
"""

from __future__ import annotations

import json
import logging
import math
import os
import tarfile
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tqdm import tqdm

from olmocr.datasets.files import Source, State, covers, remove, safe_relative, write_atomic
from olmocr.errors import UserError
from olmocr.formats.frontmatter import PageMeta, write_document

log = logging.getLogger("olmocr.datasets")

FIELDS = ("primary_language", "is_rotation_valid", "rotation_correction", "is_table", "is_diagram", "natural_text")
_TRUE, _FALSE = {"true", "1", "yes", "y"}, {"false", "0", "no", "n"}


class BadResponse(ValueError):
    """A row whose page fields cannot be read; the message names the field."""


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _bool(name: str, value, default: bool) -> bool:
    if _missing(value):
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise BadResponse(f"{name}: expected a boolean, got {value!r}")


def _rotation(value) -> int:
    if _missing(value):
        return 0
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BadResponse(f"rotation_correction: expected 0, 90, 180 or 270, got {value!r}") from None
    if number not in (0, 90, 180, 270):
        raise BadResponse(f"rotation_correction: expected 0, 90, 180 or 270, got {value!r}")
    return int(number)


def _language(value) -> str | None:
    if _missing(value) or isinstance(value, bool):  # a YAML round trip turned "no" into false: unknowable
        return None
    if not isinstance(value, str):
        raise BadResponse(f"primary_language: expected a language code or null, got {value!r}")
    return value.strip() or None


def _json_object(name: str, value) -> dict:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise BadResponse(f"{name}: not JSON ({exc.msg} at character {exc.pos})") from None
        if isinstance(parsed, dict):
            return parsed
    raise BadResponse(f"{name}: expected a JSON object, got {type(value).__name__}")


def page_of(row: dict) -> tuple[PageMeta, str, dict]:
    """The page a row describes: (front matter fields, text, the row's extras beyond the page fields)."""
    if not _missing(row.get("response")):
        fields = _json_object("response", row["response"])
    elif any(name in row for name in FIELDS):
        fields = {name: row[name] for name in FIELDS if name in row}
    else:
        raise BadResponse(f"neither a response nor the columns {', '.join(FIELDS)}")
    raw_extras = row.get("extras")
    blank = _missing(raw_extras) or (isinstance(raw_extras, str) and not raw_extras.strip())
    extras = {} if blank else _json_object("extras", raw_extras)
    fields.update({k: v for k, v in extras.items() if k in FIELDS})
    text = fields.get("natural_text")
    if not _missing(text) and not isinstance(text, str):
        raise BadResponse(f"natural_text: expected text, got {type(text).__name__}")
    meta = PageMeta(primary_language=_language(fields.get("primary_language")),
                    is_rotation_valid=_bool("is_rotation_valid", fields.get("is_rotation_valid"), True),
                    rotation_correction=_rotation(fields.get("rotation_correction")),
                    is_table=_bool("is_table", fields.get("is_table"), False),
                    is_diagram=_bool("is_diagram", fields.get("is_diagram"), False))
    return meta, "" if _missing(text) else text, {k: v for k, v in extras.items() if k not in FIELDS}


def id_column(schema_names: list[str], pandas_meta: dict | None, where: str) -> str:
    """The column holding the page id: ``id``, or the index pandas stored with the table."""
    if "id" in schema_names:
        return "id"
    index = [c for c in (pandas_meta or {}).get("index_columns", []) if isinstance(c, str)]
    if len(index) == 1 and index[0] in schema_names:
        return index[0]
    raise UserError(f"{where}: no page id column (expected 'id' or a stored index); columns: {', '.join(schema_names)}")


@dataclass
class Part:
    subset: str
    split: str
    parquet: str  # path in the snapshot
    dir: str  # output folder of its pairs
    ids: list[str] = field(default_factory=list)  # every row's id, in order
    wanted: set[str] = field(default_factory=set)  # the rows this run converts (the first `limit`)
    tarballs: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.subset}/{self.split}"


class MixRelease:
    """One olmOCR-mix release on the Hub and its file names.

    ``parts``: subset → split → its parquet file in the snapshot. ``tarballs``: where the PDFs are, with
    ``{subset}`` and ``{split}`` filled in per part (a pattern without them names tarballs shared by
    every part, as in the 0225 release)."""

    def __init__(self, repo_id: str, revision: str, parts: dict[str, dict[str, str]], tarballs: str):
        self.repo_id, self.revision, self.parts, self.tarballs = repo_id, revision, parts, tarballs
        self.shared = "{subset}" not in tarballs and "{split}" not in tarballs

    def select(self, subsets: list[str] | None, splits: list[str] | None, out: str) -> list[Part]:
        known_splits = sorted({s for splits_of in self.parts.values() for s in splits_of})
        for name in subsets or []:
            if name not in self.parts:
                raise UserError(f"subsets: {self.repo_id} has no subset {name!r} (it has {', '.join(self.parts)})")
        for name in splits or []:
            if name not in known_splits:
                raise UserError(f"splits: {self.repo_id} has no split {name!r} (it has {', '.join(known_splits)})")
        return [Part(subset, split, parquet, os.path.join(out, subset, split))
                for subset, splits_of in self.parts.items() if not subsets or subset in subsets
                for split, parquet in splits_of.items() if not splits or split in splits]

    def tarball_pattern(self, part: Part) -> str:
        return self.tarballs.format(subset=part.subset, split=part.split)

    def prepare(self, source: Source, out: str, subsets: list[str] | None, splits: list[str] | None,
                limit: int | None, workers: int) -> dict:
        state = State(out)
        parts = self.select(subsets, splits, out)
        if not parts:
            raise UserError(f"subsets={subsets} splits={splits}: no such part of {self.repo_id}")
        results = {p.key: state.done(f"part/{p.key}") for p in parts}
        pending = [p for p in parts if not (results[p.key] and covers(results[p.key]["limit"], limit))]
        for part in parts:
            if part not in pending:
                log.info("%s: done before (%d pages), left as it is", part.key, results[part.key]["pages"])
        if pending:
            snapshot = source.fetch(sorted({p.parquet for p in pending}))
            for part in pending:
                self._read_ids(snapshot, part, limit)
            tarball_patterns = self._tarball_patterns(pending, limit)
            snapshot = source.fetch(tarball_patterns)
            self._unpack(snapshot, state, pending, tarball_patterns, limit, workers, every=len(pending) == sum(
                len(s) for s in self.parts.values()))
            for part in pending:
                results[part.key] = self._convert(snapshot, state, part, limit, workers, out)
        return {key: results[key] for key in sorted(results)}

    def _read_ids(self, snapshot, part: Part, limit: int | None) -> None:
        import pyarrow.parquet as pq

        if not snapshot.exists(part.parquet):
            raise UserError(f"{snapshot.root}: no {part.parquet} (rows of {part.key}); is it a snapshot of {self.repo_id}?")
        with snapshot.open(part.parquet) as fh:
            pf = pq.ParquetFile(fh)
            column = id_column(pf.schema_arrow.names, pf.schema_arrow.pandas_metadata, part.parquet)
            part.ids = [str(v) for v in pf.read(columns=[column]).column(column).to_pylist()]
            names = pf.schema_arrow.names
            # The release names each row's tarball: a small slice then needs only the tarballs holding it.
            if limit is not None and "pdf_relpath" in names:
                relpaths = pf.read(columns=["pdf_relpath"]).column("pdf_relpath").to_pylist()[:limit]
                part.tarballs = sorted({r.split(":", 1)[0] for r in relpaths if isinstance(r, str) and ":" in r})
        part.wanted = set(part.ids[:limit] if limit is not None else part.ids)

    def _tarball_patterns(self, parts: list[Part], limit: int | None) -> list[str]:
        if limit is not None and all(p.tarballs for p in parts):
            return sorted({t for p in parts for t in p.tarballs})
        return sorted({self.tarball_pattern(p) for p in parts})

    def _unpack(self, snapshot, state: State, parts: list[Part], patterns: list[str], limit: int | None,
                workers: int, every: bool) -> None:
        """Write the selected rows' PDFs out of the tarballs, several tarballs at a time."""
        owners: dict[str, list[Part]] = {}
        for part in parts:
            mine = part.tarballs if (limit is not None and part.tarballs) else snapshot.glob(self.tarball_pattern(part))
            for tarball in mine:
                owners.setdefault(tarball, []).append(part)
        if not owners:
            log.warning("%s: no tarballs match %s: every row will lack its PDF", snapshot.root, ", ".join(patterns))
        todo = []
        for tarball, owned in sorted(owners.items()):
            done = state.done(f"tarball/{tarball}")
            if done and covers(done["limit"], limit) and {p.key for p in owned} <= set(done["parts"]):
                continue
            todo.append((tarball, owned))
        found: dict[str, set[str]] = {p.key: set() for p in parts}
        lock = threading.Lock()
        bar = tqdm(total=len(todo), desc="tarballs", unit="tarball", disable=not todo)
        written = [0, 0]  # PDFs, bytes

        def unpack(tarball: str, owned: list[Part]) -> None:
            by_id = {}
            for part in owned:
                for pid in part.wanted:
                    by_id[pid] = part
            known = set().union(*(p.ids for p in owned))
            # Members no row names are rejections only where this tarball belongs to the parts read.
            judge = not self.shared or every
            rejected, complete = [], True
            try:
                with snapshot.open(tarball) as fh, tarfile.open(fileobj=fh, mode="r|*") as tar:
                    for member in tar:
                        if not member.isfile():
                            continue
                        name = safe_relative(member.name)
                        pid = name[:-4] if name and name.lower().endswith(".pdf") else None
                        if pid is None or pid not in by_id:
                            if judge and (pid is None or pid not in known):
                                rejected.append({"reason": "pdf_without_row", "id": pid or member.name,
                                                 "detail": f"{tarball}: member {member.name} is in no row"})
                            continue
                        data = tar.extractfile(member).read()
                        part = by_id[pid]
                        write_atomic(os.path.join(part.dir, pid + ".pdf"), data)
                        with lock:
                            found[part.key].add(pid)
                            written[0] += 1
                            written[1] += len(data)
                            if limit is not None and all(found[p.key] >= p.wanted for p in owned):
                                complete = False  # stopped early: not a finished tarball
                                break
            except (tarfile.TarError, EOFError, zlib.error) as exc:
                rejected.append({"reason": "damaged_tarball", "id": tarball,
                                 "detail": f"{tarball}: {type(exc).__name__}: {exc} (members after it are lost)"})
            if len(owned) == 1:
                for r in rejected:
                    r.update(subset=owned[0].subset, split=owned[0].split)
            if complete:
                state.finish(f"tarball/{tarball}", {"limit": limit, "parts": sorted(p.key for p in owned)},
                             rejected)
            with lock:
                bar.update(1)
                bar.set_postfix(pdfs=written[0], MB=round(written[1] / 1e6, 1))

        with ThreadPoolExecutor(max(1, workers)) as pool:
            for future in [pool.submit(unpack, t, owned) for t, owned in todo]:
                future.result()
        bar.close()

    def _convert(self, snapshot, state: State, part: Part, limit: int | None, workers: int, out: str) -> dict:
        """Rows → .md beside their PDFs, the side file of URLs, then the pairs checked."""
        import pyarrow.parquet as pq

        rejected, urls, seen = [], [], set()
        with snapshot.open(part.parquet) as fh, tqdm(total=len(part.wanted), desc=part.key, unit="row") as bar:
            pf = pq.ParquetFile(fh)
            column = id_column(pf.schema_arrow.names, pf.schema_arrow.pandas_metadata, part.parquet)
            for batch in pf.iter_batches(batch_size=1024):
                for row in batch.to_pylist():
                    pid = str(row[column])
                    if pid not in part.wanted:
                        continue
                    bar.update(1)
                    reason = self._convert_row(row, pid, part, seen, urls)
                    if reason is not None:
                        rejected.append({"reason": reason[0], "id": pid, "detail": reason[1]})
        lines = "".join(json.dumps(u, ensure_ascii=False, sort_keys=True) + "\n" for u in urls)
        write_atomic(os.path.join(out, "urls", f"{part.subset}_{part.split}.jsonl"), lines.encode())
        checked = check_pairs(part.dir, workers)
        rejected += checked["rejected"]
        for r in rejected:
            r.update(subset=part.subset, split=part.split)
        return state.finish_part(f"part/{part.key}", part.key, limit, checked["pages"], checked["bytes"], rejected)

    @staticmethod
    def _convert_row(row: dict, pid: str, part: Part, seen: set, urls: list) -> tuple[str, str] | None:
        if safe_relative(pid) is None:
            return "bad_id", f"id {pid!r} is not a relative path"
        if pid in seen:
            return "duplicate_id", f"{part.parquet}: id {pid} appears again; the first row is kept"
        seen.add(pid)
        pdf = os.path.join(part.dir, pid + ".pdf")
        if not os.path.isfile(pdf):
            return "row_without_pdf", f"no {pid}.pdf in the tarballs of {part.key}"
        try:
            meta, text, extras = page_of(row)
        except BadResponse as exc:
            remove(pdf, part.dir)  # only pairs stay in the tree
            return "bad_response", f"{part.parquet}: row {pid}: {exc}"
        write_atomic(pdf[:-4] + ".md", write_document(meta, text).encode("utf-8"))
        url = None if _missing(row.get("url")) else row.get("url")
        if url or extras:
            urls.append({"id": pid, "url": url, **({"extras": extras} if extras else {})})
        return None


def check_pairs(root: str, workers: int) -> dict:
    """What ``python -m olmocr.data`` would find in a folder of pairs: the index's problems (front matter,
    a missing or empty PDF) and PDFs that do not open as one page. Failing pairs are removed and listed."""
    from olmocr.data.index import index_root
    from olmocr.data.steps import CheckPdf, Reject

    if not os.path.isdir(root):
        return {"pages": 0, "bytes": 0, "rejected": []}
    index = index_root(root)
    rejected = [{"reason": r.problem, "id": r.stem, "detail": r.detail} for r in index.problems]
    check = CheckPdf()

    def opens(record) -> dict | None:
        try:
            check({"pdf_path": record.pdf_path, "md_path": record.md_path, "page": 1})
        except Reject as exc:
            return {"reason": exc.reason, "id": record.stem, "detail": exc.detail}
        return None

    with ThreadPoolExecutor(max(1, workers)) as pool:
        failed = [r for r in pool.map(opens, index.pairs) if r is not None]
    rejected += failed
    for bad in rejected:
        for suffix in (".md", ".pdf"):
            remove(os.path.join(root, bad["id"] + suffix), root)
    bad_ids = {b["id"] for b in failed}
    good = [r for r in index.pairs if r.stem not in bad_ids]
    size = sum(os.path.getsize(r.md_path) + os.path.getsize(r.pdf_path) for r in good)
    return {"pages": len(good), "bytes": size, "rejected": rejected}
