"""python -m olmocr.pipeline.export workspace=… out_dir=… — a converted workspace as training pages.

Every page that the model read (not a text-layer fallback) and found upright, as it was or after the
pipeline turned it, becomes a single-page PDF cut from its source (its ``/Rotate`` kept) with the ``.md``
beside it: the reading's front matter, with ``rotation_correction`` the clockwise turn that makes the
original page upright, and the text; a model that writes blocks adds the page's blocks record
(``.blocks.json``: :mod:`olmocr.formats.structure`), so the folder trains a blocks prompt too. That is the folder ``data=folder`` trains on, so a teacher model
behind the pipeline (``server=vllm`` or ``server=external``) labels a PDF folder for SFT. It reads the
workspace's page results (``work.page_results=true``). Pages already exported are kept, so running it
again as more items finish adds only the new pages. Remote storage (the workspace, the PDFs, ``out_dir``) that
does not answer is waited out for up to ``storage_wait_s`` at each call; past that the stage stops, naming the
place, and a re-run adds what is missing.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict

from omegaconf import DictConfig

import olmocr.pipeline.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage
from olmocr.errors import UserError
from olmocr.formats.frontmatter import FrontMatterError, PageMeta, write_document
from olmocr.formats.structure import SUFFIX as BLOCKS_SUFFIX
from olmocr.pipeline.dolma import mirror_path
from olmocr.pipeline.ocr import PAGES
from olmocr.utils.io import is_remote, patiently

log = logging.getLogger("olmocr.pipeline.export")
SKIPPED = ("fallback", "still_turned", "unreadable_sources", "unreadable_lines")


def training_page(record: dict) -> tuple[PageMeta, str] | str:
    """The label of one page result, or why the page gives none."""
    if record["fallback"]:
        return "fallback"  # the text layer is no label
    if not record["is_rotation_valid"]:
        return "still_turned"  # the model's last reading found the page turned: its text may be garbled
    turned = record["turned"]
    meta = PageMeta(primary_language=record["primary_language"], is_rotation_valid=turned == 0,
                    rotation_correction=turned, is_table=record["is_table"], is_diagram=record["is_diagram"])
    return meta, record["text"]


class Patient:
    """A store (:mod:`olmocr.pipeline.store`) whose reads, listings and whole writes wait out remote storage that
    does not answer for up to ``wait_s`` each (:func:`olmocr.utils.io.patiently`); a local one's are made once,
    so a full disk is said at once."""

    def __init__(self, store, wait_s: float):
        self.store, self.wait_s = store, wait_s if is_remote(store.root) else 0.0

    def _call(self, name: str, call):
        return patiently(call, self.store.url(name), self.wait_s) if self.wait_s else call()

    def list(self, folder: str) -> list[str]:
        return self._call(folder, lambda: self.store.list(folder))

    def read(self, name: str) -> bytes | None:
        found = self._call(name, lambda: self.store.read(name))
        return None if found is None else found.data

    def write(self, name: str, data: bytes) -> None:
        self._call(name, lambda: self.store.write(name, data))


def read_page_results(store: Patient, name: str, counts: Counter) -> dict[str, list[dict]]:
    """The page results of one item (``name``, in ``pages/``) by source document: every page of a document is
    in its item's file, so the workspace is exported a file at a time, its memory that of one item. Lines that
    do not parse are counted and skipped."""
    by_source: dict[str, list[dict]] = defaultdict(list)
    data = store.read(f"{PAGES}/{name}") or b""
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            by_source[record["source"]].append(record)
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            counts["unreadable_lines"] += 1
            log.warning("%s:%d: not a page result (%s)", name, number, exc)
    return by_source


class Exported:
    """Which training pages ``out`` holds, listed a folder at a time as pages are asked about: a re-run (after
    a kill or an outage) looked each page up, one request a page on S3, hours for a million pages."""

    def __init__(self, out: Patient):
        self.out = out
        self.folders: dict[str, set[str]] = {}

    def __contains__(self, name: str) -> bool:
        folder, _, leaf = name.rpartition("/")
        if folder not in self.folders:
            self.folders[folder] = set(self.out.list(folder))
        return leaf in self.folders[folder]


def export_source(source: str, records: list[dict], out: Patient, exported: Exported, counts: Counter,
                  pdf_access=None, wait_s: float = 0.0) -> None:
    """Write the training pages of one source document (read once, and only when a page is new); an image's
    page becomes a one-page PDF of its pixels. A remote source whose storage does not answer is waited out for
    up to ``wait_s``, a local one is not: either way it stops the stage (:class:`Unavailable` or
    :class:`olmocr.faults.Unreachable`) rather than pass for a bad document."""
    from olmocr.formats.document import IMAGE, DocumentError, kind_of
    from olmocr.formats.image import image_page_pdf
    from olmocr.formats.pdf import single_page
    from olmocr.pipeline.failures import Unavailable
    from olmocr.pipeline.inputs import read_documents

    data = None
    for record in sorted(records, key=lambda r: r["page"]):
        stem = mirror_path(source, f"_pg{record['page']}")
        try:
            label = training_page(record)
        except (KeyError, TypeError, FrontMatterError) as exc:
            counts["unreadable_lines"] += 1
            log.warning("%s page %s: not a page result (%s)", source, record.get("page"), exc)
            continue
        if isinstance(label, str):
            counts[label] += 1
            continue
        if f"{stem}.md" in exported:
            counts["kept"] += 1
            continue
        if data is None:
            def read():
                return read_documents([source], pdf_access)[source]
            data = patiently(read, source, wait_s, also=(Unavailable,)) if wait_s and is_remote(source) else read()
        try:
            if isinstance(data, DocumentError):
                raise data
            cut = image_page_pdf if kind_of(data) == IMAGE else single_page
            page_pdf = cut(source, record["page"], data)
        except DocumentError as exc:
            counts["unreadable_sources"] += 1
            log.warning("skipped %s page %d: %s", source, record["page"], exc)
            continue
        # The .md last: the index pairs a page by its .md, so no .md ever lacks its PDF (or its blocks, where the
        # model wrote blocks: boxes of the upright page, as the front matter's rotation_correction makes it).
        out.write(f"{stem}.pdf", page_pdf)
        if record.get("blocks") is not None:
            blocks = {"page_size": record.get("page_size"), "blocks": record["blocks"]}
            out.write(f"{stem}{BLOCKS_SUFFIX}", (json.dumps(blocks, ensure_ascii=False) + "\n").encode("utf-8"))
        out.write(f"{stem}.md", write_document(*label).encode("utf-8"))
        counts["exported"] += 1


@stage("pipeline_export")
def run(cfg: DictConfig, output_dir: str) -> dict:
    from tqdm import tqdm

    from olmocr.pipeline.failures import Unavailable
    from olmocr.pipeline.store import open_store
    from olmocr.faults import no_space, outside, store_errors
    from olmocr.utils.io import Access
    from olmocr.utils.runinfo import write_run_info

    if "://" in cfg.out_dir and not cfg.out_dir.startswith("s3://"):
        raise UserError(f"out_dir: {cfg.out_dir!r} is neither a local folder nor s3://bucket/prefix")
    counts = Counter(dict.fromkeys(("exported", "kept", *SKIPPED), 0))
    workspace_access, pdf_access = Access(**cfg.workspace_access), Access(**cfg.pdf_access)
    try:
        out = Patient(open_store(cfg.out_dir, workspace_access), cfg.storage_wait_s)
        workspace = Patient(open_store(cfg.workspace, workspace_access), cfg.storage_wait_s)
        names = sorted(n for n in workspace.list(PAGES) if n.endswith(".jsonl"))
        exported, pages = Exported(out), 0
        with tqdm(total=len(names), unit="item", desc="export", disable=not cfg.progress, dynamic_ncols=True) as bar:
            for name in names:
                by_source = read_page_results(workspace, name, counts)
                for source in sorted(by_source):
                    export_source(source, by_source[source], out, exported, counts, pdf_access, cfg.storage_wait_s)
                    pages += len(by_source[source])
                bar.update(1)
                bar.set_postfix(pages=pages, exported=counts["exported"], refresh=False)
        if not pages:
            raise UserError(f"workspace: {cfg.workspace} has no page results ({PAGES}/); convert with "
                            "python -m olmocr.pipeline … work.page_results=true")
    except Unavailable as exc:  # a local source that cannot be read now
        raise UserError(f"export: {exc} (the pages exported so far are kept: run again to add the rest)") from None
    except store_errors() as exc:
        if outside(exc) is not None or no_space(exc) is not None:
            raise  # the command line names the fault, with the free space or the config's remote places
        raise UserError(f"export: {exc}") from None
    summary = {"workspace": cfg.workspace, "out_dir": cfg.out_dir, "pages": pages, **counts}
    skipped = ", ".join(f"{counts[k]} {k}" for k in SKIPPED if counts[k])
    log.info("%d of %d pages exported to %s (%d already there; skipped: %s); train on them with python -m "
             "olmocr.train data=folder 'data.roots=[%s]'", counts["exported"], pages, cfg.out_dir, counts["kept"],
             skipped or "none", cfg.out_dir)
    write_run_info(output_dir, summary=summary)
    return summary


if __name__ == "__main__":
    run.main()
