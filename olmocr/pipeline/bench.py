"""python -m olmocr.pipeline.bench — the pipeline in bench mode.

Every page an olmOCR-bench folder tests is converted ``repeats`` times by the batch pipeline's page
conversion (``convert=``, ``server=``, ``model=``: the same rendering, prompt, retries, rotation and
fallback) and written as ``<candidates>/<pdf path without .pdf>_pg<page>_repeat<r>.md``, the layout
``python -m olmocr.bench bench_dir=… candidates=…`` scores. Files already written are kept, so a stopped
run resumes where it was. ``pages.jsonl`` in the run dir records every page's attempts; ``answers.jsonl`` in
the candidates folder, which outputs are the text layer's (a fallback) rather than the model's, for the bench
to say how many pages the model answered. A model that writes blocks has each output's blocks beside it
(``…_repeat<r>.blocks.json``), which the bench's layout checks score.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os

from omegaconf import DictConfig

import olmocr.pipeline.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage
from olmocr.formats.structure import SUFFIX as BLOCKS_SUFFIX
from olmocr.config import build
from olmocr.data.presented import presents_as_trained
from olmocr.errors import UserError

log = logging.getLogger("olmocr.pipeline.bench")


def candidate_path(candidates: str, pdf: str, page: int, repeat: int) -> str:
    from olmocr.bench.score import candidate_stem

    return f"{candidate_stem(candidates, pdf, page)}_repeat{repeat}.md"


def write_text(path: str, text: str) -> None:
    """Whole or not at all: a run killed mid-write leaves no half file for the resume to keep."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(partial, path)


def pages_to_write(bench_dir: str, candidates: str, repeats: int) -> tuple[list[dict], list[tuple[dict, int, str]], int]:
    """A bench's tested pages (each row with its ``pdf``, the path under ``pdfs/``), the (row, repeat, candidate
    path) still to write, and how many candidate files are there already (kept: a run resumes)."""
    from olmocr.data.bench_prompts import bench_pages

    rows, problems = bench_pages(bench_dir, reference=False)
    for problem in problems:
        log.warning("%s", problem)
    if not rows:
        raise UserError(f"bench_dir: {bench_dir} has no tested pages")
    pdfs_root = os.path.join(bench_dir, "pdfs")
    todo, kept = [], 0
    for row in sorted(rows, key=lambda r: r["page_id"]):
        row["pdf"] = os.path.relpath(row["pdf_path"], pdfs_root)
        for repeat in range(1, repeats + 1):
            path = candidate_path(candidates, row["pdf"], row["page"], repeat)
            if os.path.exists(path):
                kept += 1
            else:
                todo.append((row, repeat, path))
    return rows, todo, kept


async def convert_pages(converter, todo: list[tuple[dict, int, str]], records_path: str, progress: bool,
                        candidates: str) -> dict:
    """Convert and write every page of ``todo``; a page the server did not answer is written only once it is
    known to be the page's fault (:class:`ServerWatch`), so a server that stops answering writes nothing that a
    re-run would keep."""
    from tqdm import tqdm

    from olmocr.bench.score import record_answers
    from olmocr.pipeline.convert import ServerWatch, all_of

    from olmocr.utils.jsonl import mend

    mend(records_path)  # a run resumed in its run dir: a line its kill cut short must not run into the next
    totals = {"written": 0, "fallback_pages": 0, "input_tokens": 0, "output_tokens": 0}
    bar = tqdm(total=len(todo), unit="page", desc="bench pages", disable=not progress, dynamic_ncols=True)
    watch = ServerWatch(converter.server)

    async def write(row: dict, repeat: int, path: str, result) -> None:
        if result.blocks is not None:  # before the .md, which marks the candidate written (a resume keeps it)
            await asyncio.to_thread(write_text, path[:-3] + BLOCKS_SUFFIX,
                                    json.dumps(result.structure(), ensure_ascii=False) + "\n")
        await asyncio.to_thread(write_text, path, result.text)
        record_answers(candidates, [(path, not result.fallback)])
        record = {"pdf": row["pdf"], "repeat": repeat, "candidate": path, **result.record()}
        with open(records_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        totals["written"] += 1
        totals["fallback_pages"] += result.fallback
        totals["input_tokens"] += result.input_tokens
        totals["output_tokens"] += result.output_tokens
        bar.set_postfix(fallback=totals["fallback_pages"], refresh=False)
        bar.update(1)

    async def one(row: dict, repeat: int, path: str) -> None:
        result = await converter.convert({"pdf_path": row["pdf_path"], "page": row["page"]}, row["pdf_path"])
        page = (row, repeat, path, result)
        for ready in watch.settled(page, result.unanswered) if result.asked else [page]:
            await write(*ready)

    try:
        await all_of(one(row, repeat, path) for row, repeat, path in todo)
        for ready in watch.finish():
            await write(*ready)
    finally:
        bar.close()
    return totals


@stage("pipeline_bench", present=presents_as_trained({"convert.steps": "model.name_or_path"}))
def run(cfg: DictConfig, output_dir: str) -> dict:
    from olmocr.faults import Unreachable
    from olmocr.pipeline.failures import StopWork, Unavailable
    from olmocr.utils.runinfo import write_run_info

    candidates = cfg.candidates or os.path.join(output_dir, "candidates")
    rows, todo, kept = pages_to_write(cfg.bench_dir, candidates, cfg.repeats)
    log.info("%d tested pages x %d repeats: %d to convert, %d already in %s", len(rows), cfg.repeats, len(todo),
             kept, candidates)
    # Built (and so checked) before the server starts.
    converter = build(cfg.convert, server=build(cfg.server, model=build(cfg.model)), log_dir=output_dir)
    totals = {"written": 0}
    if todo:
        try:
            with converter:
                totals = converter.run(convert_pages(converter, todo, os.path.join(output_dir, "pages.jsonl"),
                                                     cfg.progress, candidates))
        except (StopWork, Unavailable) as exc:  # the server gone, refusing the key, or busy past convert.busy_s
            raise Unreachable(f"{exc} (pages written so far are kept; run again to resume)") from exc
    summary = {"candidates": candidates, "pages": len(rows), "repeats": cfg.repeats, "kept": kept, **totals,
               "server_restarts": converter.server.restarts}
    log.info("wrote %d candidate files (%d from the text layer) to %s; score them with python -m olmocr.bench "
             "bench_dir=%s candidates=%s", totals["written"], totals.get("fallback_pages", 0), candidates,
             cfg.bench_dir, candidates)
    write_run_info(output_dir, summary=summary)
    return summary


if __name__ == "__main__":
    run.main()
