"""Pages a checkpoint stage feeds a model (calibration, comparison), rendered and prompted by the same
data steps inference uses, so a model is calibrated and checked on exactly what it will be served."""

from __future__ import annotations

import glob
import logging
import os
import random

from olmocr.data.chain import RejectReport, build_pipeline
from olmocr.data.steps import BuildMessages, Reject
from olmocr.errors import UserError

log = logging.getLogger(__name__)


def choose_pages(root: str, count: int, seed: int = 0) -> list[dict]:
    """``count`` pages of ``root``, chosen with ``seed``: a bench folder's pages with tests (``*.jsonl``
    beside ``pdfs/``), or one page of each of ``count`` PDFs in a folder (nested folders included)."""
    from olmocr.data.bench_prompts import bench_pages
    from olmocr.formats.pdf import PdfError, pdf_info

    if not os.path.isdir(root):
        raise UserError(f"pages: {root} is not a folder (a bench folder, or a folder of PDFs)")
    rng = random.Random(seed)
    if glob.glob(os.path.join(root, "*.jsonl")):
        rows, _ = bench_pages(root)
        rows.sort(key=lambda r: r["page_id"])
        rng.shuffle(rows)
        return [{"pdf_path": r["pdf_path"], "page": r["page"], "page_id": r["page_id"]} for r in rows[:count]]
    pdfs = sorted(glob.glob(os.path.join(root, "**", "*.pdf"), recursive=True))
    if not pdfs:
        raise UserError(f"pages: {root} has no PDFs and no bench test files")
    rng.shuffle(pdfs)
    pages = []
    for path in pdfs:
        if len(pages) == count:
            break
        try:
            num_pages = pdf_info(path).num_pages
        except (PdfError, OSError) as exc:
            log.warning("pages: skipped %s (%s)", path, exc)
            continue
        page = rng.randint(1, num_pages)
        pages.append({"pdf_path": path, "page": page, "page_id": f"{os.path.relpath(path, root)}#{page}"})
    return pages


def render_pages(pages: list[dict], steps: dict, report_path: str | None = None) -> list[dict]:
    """Each page through the steps: ``{page_id, messages, image}``. Pages that fail a step are skipped,
    counted and written to ``report_path``."""
    from tqdm import tqdm

    pipeline = build_pipeline(steps)
    if not any(isinstance(step, BuildMessages) for step in pipeline.steps.values()):
        raise UserError("steps: the pages need a 'messages' step (olmocr.data.steps.BuildMessages)")
    report = RejectReport(report_path)
    rendered = []
    for page in tqdm(pages, desc="render", unit="page"):
        try:
            sample = pipeline({"pdf_path": page["pdf_path"], "page": page["page"]})
        except Reject as exc:
            report.add(page, exc)
            continue
        rendered.append({"page_id": page["page_id"], "messages": sample["messages"], "image": sample["image"]})
    if report.counts:
        log.warning("skipped pages by reason: %s%s", dict(report.counts), f" (see {report_path})" if report_path else "")
    if not rendered:
        raise UserError("pages: no page could be rendered")
    return rendered


def model_inputs(processor, page: dict):
    """The processor's tensors for a rendered page: its chat turn with the generation prompt, its image."""
    text = processor.apply_chat_template(page["messages"], tokenize=False, add_generation_prompt=True)
    return processor(text=[text], images=[page["image"]], return_tensors="pt")
