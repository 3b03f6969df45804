"""python -m olmocr.synth — write synthetic pages, their .md truth and olmOCR-bench tests."""

from __future__ import annotations

import glob
import json
import logging
import os
import time

from omegaconf import DictConfig, OmegaConf

import olmocr.synth.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage

log = logging.getLogger("olmocr.synth")


def check_output(out_dir: str, tests_file: str) -> dict:
    """Round-trip what was written: every .md parses, every test line parses, every PDF renders."""
    from olmocr.bench.records import load_tests
    from olmocr.formats.frontmatter import parse_document
    from olmocr.formats.render import render_page

    pdfs = sorted(glob.glob(os.path.join(out_dir, "pdfs", "*.pdf")))
    for pdf in pdfs:
        with open(pdf[:-4] + ".md", encoding="utf-8") as fh:
            parse_document(fh.read())
        render_page(pdf, 1, 64)
    loaded = load_tests(os.path.join(out_dir, tests_file))
    if loaded.errors or loaded.warnings:
        raise RuntimeError("generated tests do not parse:\n" + "\n".join((loaded.errors + loaded.warnings)[:5]))
    return {"pdfs": len(pdfs), "tests": len(loaded.tests)}


@stage("synth")
def run(cfg: DictConfig, output_dir: str) -> dict:
    from olmocr.synth.generator import generate
    from olmocr.utils.runinfo import write_run_info

    out_dir = cfg.out_dir or os.path.join(output_dir, "pages")
    start = time.perf_counter()
    counts = generate(out_dir, cfg.num_pages, seed=cfg.seed, first_index=cfg.first_index,
                      layout_weights=OmegaConf.to_container(cfg.layout_weights) or None,
                      language_weights=OmegaConf.to_container(cfg.language_weights) or None)
    seconds = time.perf_counter() - start
    summary = {"out_dir": out_dir, "counts": counts, "seconds": round(seconds, 3),
               "pages_per_second": round(cfg.num_pages / max(seconds, 1e-9), 1)}
    if cfg.render_check:
        summary["check"] = check_output(out_dir, "synth.jsonl")
    write_run_info(output_dir, summary=summary)
    log.info("wrote %d pages to %s in %.2fs (%s pages/s)", cfg.num_pages, out_dir, seconds,
             summary["pages_per_second"])
    log.info("counts: %s", json.dumps(counts, sort_keys=True))
    return summary


if __name__ == "__main__":
    run.main()
