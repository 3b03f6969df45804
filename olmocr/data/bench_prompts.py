"""GRPO prompts from bench folders: one row per PDF page that has unit tests.

A bench folder holds test files (``*.jsonl``) and ``pdfs/`` with the PDFs they name; a ``.md`` beside a
PDF (the synthetic generator writes one) becomes the page's reference for reference-based rewards.
Pages are checked when the dataset is built (missing or broken PDFs are skipped and reported); they
are rendered and prompted by the configured steps when a row is read, exactly as inference renders
and prompts them, so a large bench costs no memory up front.
"""

from __future__ import annotations

import glob
import json
import logging
import os
from collections import OrderedDict

from olmocr.bench.records import load_tests
from olmocr.data.cache import localize
from olmocr.data.chain import MadeWhenRead, Pipeline, RejectReport, build_pipeline
from olmocr.data.steps import BuildMessages, CheckPdf, Reject
from olmocr.errors import UserError
from olmocr.formats.structure import SUFFIX

log = logging.getLogger(__name__)


def bench_pages(root: str, types: list[str] | None = None, files: list[str] | None = None,
                reference: bool = True) -> tuple[list[dict], list[str]]:
    """Pages of a bench folder with their tests (filtered by type and test file), and the problems found
    in its test files (``file:line: why``: malformed lines, skipped, and unknown fields, ignored)."""
    if not os.path.isdir(root):
        raise UserError(f"bench folder {root} does not exist")
    paths = sorted(glob.glob(os.path.join(root, "*.jsonl")))
    if files:
        unknown = sorted(set(files) - {os.path.splitext(os.path.basename(p))[0] for p in paths})
        if unknown:
            raise UserError(f"{root}: no test file(s) {', '.join(unknown)} (files: filter by *.jsonl stem)")
        paths = [p for p in paths if os.path.splitext(os.path.basename(p))[0] in files]
    if not paths:
        raise UserError(f"{root}: no test files (*.jsonl)")
    pages: dict[tuple[str, int], list] = {}
    problems = []
    for path in paths:
        loaded = load_tests(path)
        problems += loaded.errors + loaded.warnings
        for test in loaded.tests:
            if (types and test.type not in types) or test.checked == "rejected":
                continue
            pages.setdefault((test.pdf, test.page), []).append(test.to_dict())
    rows = []
    for (pdf, page), tests in pages.items():
        pdf_path = os.path.join(root, "pdfs", pdf)
        md_path = pdf_path[:-4] + ".md" if pdf_path.lower().endswith(".pdf") else None
        rows.append({"pdf_path": pdf_path, "page": page, "page_id": f"{pdf}#{page}",
                     "md_path": md_path if reference and md_path and os.path.exists(md_path) else None,
                     "tests": json.dumps(tests, ensure_ascii=False)})
    return rows, problems


class PromptRenderer:
    """trl's row of a bench page (``prompt``, ``image`` and the reward columns), the steps run on the page when
    the row is read (:class:`MadeWhenRead`). The last pages are kept, since trl reads each prompt once per
    generation."""

    def __init__(self, pipeline: Pipeline, cache_size: int = 8):
        self.pipeline = pipeline
        self.cache: OrderedDict[str, dict] = OrderedDict()
        self.cache_size = cache_size

    def row(self, page: dict) -> dict:
        if page["page_id"] not in self.cache:
            sample = self.pipeline({"pdf_path": page["pdf_path"], "page": page["page"]})
            reference = blocks = None
            if page["md_path"]:
                with open(page["md_path"], encoding="utf-8") as fh:
                    reference = fh.read()
                # the page's truth blocks (where it has them): the structure rewards' column
                if os.path.isfile(path := page["md_path"][:-3] + SUFFIX):
                    with open(path, encoding="utf-8") as fh:
                        blocks = fh.read()
            self.cache[page["page_id"]] = {"prompt": sample["messages"], "image": sample["image"],
                                           "reference": reference, "blocks": blocks}
            if len(self.cache) > self.cache_size:
                self.cache.popitem(last=False)
        return {**self.cache[page["page_id"]], "tests": page["tests"], "page_id": page["page_id"]}


def build_prompt_dataset(benches: dict, steps: dict, report_path: str | None = None, local_cache: str | None = None,
                         storage_wait_s: float = 0.0, **runtime):
    """A Hugging Face dataset of bench pages that renders each page when read.

    ``benches`` maps a name to ``{root, types, files, reference}``; a remote root is read from its copy in
    ``local_cache`` (:func:`olmocr.data.cache.localize`, waiting out storage for up to ``storage_wait_s``). Pages whose PDF fails the structural
    check (missing, empty, encrypted, no such page) are skipped and written to ``report_path``.
    """
    from datasets import Dataset

    if not benches:
        raise UserError("data.train: no benches configured (a bench is {root: <folder with *.jsonl and pdfs/>})")
    pipeline = build_pipeline(steps, **runtime)
    if not any(isinstance(step, BuildMessages) for step in pipeline.steps.values()):
        raise UserError("data.steps: GRPO prompts need a 'messages' step (olmocr.data.steps.BuildMessages)")
    check = next((s for s in pipeline.steps.values() if isinstance(s, CheckPdf)), CheckPdf(max_pages=None))
    report = RejectReport(report_path)
    rows = []
    for name, bench in benches.items():
        pages, problems = bench_pages(localize(bench["root"], local_cache, storage_wait_s), bench.get("types"),
                                      bench.get("files"), bench.get("reference", True))
        for line in problems:
            log.warning("bench %s: %s", name, line)
        kept = 0
        for page in pages:
            page = {**page, "source": name}
            try:
                check({"pdf_path": page["pdf_path"], "page": page["page"]})
            except Reject as exc:
                report.add(page, exc)
                continue
            rows.append(page)
            kept += 1
        log.info("bench %s: %d pages with tests (%d skipped)", name, kept, len(pages) - kept)
    if report.counts:
        log.warning("skipped bench pages by reason: %s (see %s)", dict(report.counts), report_path)
    if not rows:
        raise UserError("no usable bench pages: every configured page was filtered out or rejected")
    # The rows' own columns stay in the dataset (trl reads its column names); the transform makes each row anew
    # from its index.
    made = MadeWhenRead(rows, PromptRenderer(pipeline).row, report)
    return Dataset.from_list([{**row, "index": i} for i, row in enumerate(rows)]).with_transform(made)
