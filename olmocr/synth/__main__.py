"""python -m olmocr.synth — write synthetic pages, their .md truth and olmOCR-bench tests."""

from __future__ import annotations

import json
import logging
import os
import time

from omegaconf import DictConfig, OmegaConf

import olmocr.synth.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage

log = logging.getLogger("olmocr.synth")


RENDER_SAMPLE = 256  # pages rendered by the check, spread over the run: rendering costs 5x writing


def check_output(out_dir: str, names: list[str], tests_file: str) -> dict:
    """Round-trip what was written: every .md of this run parses, every test line parses, and pages spread
    over the run render (all of them in runs of up to RENDER_SAMPLE pages)."""
    from olmocr.bench.records import read_tests
    from olmocr.formats.frontmatter import parse_document
    from olmocr.formats.render import render_page

    for name in names:
        with open(os.path.join(out_dir, "pdfs", name + ".md"), encoding="utf-8") as fh:
            parse_document(fh.read())
    sample = [names[i * len(names) // RENDER_SAMPLE] for i in range(min(len(names), RENDER_SAMPLE))]
    for name in sample:
        render_page(os.path.join(out_dir, "pdfs", name + ".pdf"), 1, 64)
    problems, tests = [], 0
    for test, problem in read_tests(os.path.join(out_dir, tests_file)):  # a million pages' tests need not fit in memory
        tests += test is not None
        if problem:
            problems.append(problem)
    if problems:
        raise RuntimeError("generated tests do not parse:\n" + "\n".join(problems[:5]))
    return {"pages": len(names), "rendered": len(sample), "tests": tests}


@stage("synth")
def run(cfg: DictConfig, output_dir: str) -> dict:
    from olmocr.synth.generator import category_files, generate, page_name
    from olmocr.utils.runinfo import write_run_info

    out_dir = cfg.out_dir or os.path.join(output_dir, "pages")
    start = time.perf_counter()
    counts = generate(out_dir, cfg.num_pages, seed=cfg.seed, first_index=cfg.first_index,
                      layout_weights=OmegaConf.to_container(cfg.layout_weights) or None,
                      language_weights=OmegaConf.to_container(cfg.language_weights) or None,
                      category=cfg.category, reading=cfg.reading, reading_words=cfg.reading_words,
                      reading_type=cfg.reading_type, reading_faces=list(cfg.reading_faces))
    seconds = time.perf_counter() - start
    kept = counts.pop("kept", 0)
    summary = {"out_dir": out_dir, "counts": counts, "kept": kept, "seconds": round(seconds, 3),
               "pages_per_second": round((cfg.num_pages - kept) / max(seconds, 1e-9), 1)}
    if cfg.render_check:
        names = [page_name(cfg.seed, index, cfg.category) for index in range(cfg.first_index,
                                                                              cfg.first_index + cfg.num_pages)]
        summary["check"] = check = check_output(out_dir, names, category_files(cfg.category)[0])
        log.info("checked: %d .md files parse, %d pages spread over the run render, %d tests parse",
                 check["pages"], check["rendered"], check["tests"])
    write_run_info(output_dir, summary=summary)
    log.info("wrote %d pages to %s in %.2fs (%s pages/s)%s", cfg.num_pages - kept, out_dir, seconds,
             summary["pages_per_second"], f"; {kept} kept, written by an earlier run" if kept else "")
    log.info("counts: %s", json.dumps(counts, sort_keys=True))
    return summary


if __name__ == "__main__":
    run.main()
