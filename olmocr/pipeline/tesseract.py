"""python -m olmocr.pipeline.tesseract — a bench's pages read by Debian's tesseract, beside a model's.

Every page an olmOCR-bench folder tests is rendered by the pipeline's render step (``render``: the same
``olmocr.data.steps.RenderPage`` a model's conversion runs, at the same longest side, so both read the same
pixels) and read by the ``tesseract`` command (Debian's tesseract-ocr, one core a page). Its lines are joined
into paragraphs as markdown has them (a block's lines one paragraph, blocks apart by a blank line) and written as
``<candidates>/<pdf path without .pdf>_pg<page>_repeat1.md``, the layout ``python -m olmocr.bench`` scores, with
``answers.jsonl`` saying which pages tesseract answered: a page it could not read (a render that failed, a
timeout, an error) is written empty, said in one line and counted, and never passes a test. Files already
written are kept: a stopped run resumes. A model's candidates and these go in one report with
``python -m olmocr.bench candidates=[<model's>,<these>]``.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from omegaconf import DictConfig

import olmocr.pipeline.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage
from olmocr.config import build
from olmocr.errors import UserError

log = logging.getLogger("olmocr.pipeline.tesseract")
INSTALL = "install Debian's tesseract-ocr ('sudo apt-get install -y tesseract-ocr', or bash scripts/setup.sh as root)"


def version() -> str:
    """tesseract's version line; a one-line error naming the package when the command is missing."""
    if shutil.which("tesseract") is None:
        raise UserError(f"tesseract: the command is not installed: {INSTALL}")
    out = subprocess.run(["tesseract", "--version"], capture_output=True, text=True, timeout=30)
    return (out.stdout or out.stderr).splitlines()[0].strip()


def paragraphs(text: str) -> str:
    """tesseract's text as markdown paragraphs: the lines of a block joined by spaces, blocks apart by a blank
    line (it ends each line where the page does, and a form feed after the page)."""
    blocks, block = [], []
    for line in text.replace("\f", "\n").splitlines():
        if line.strip():
            block.append(line.strip())
        elif block:
            blocks.append(" ".join(block))
            block = []
    if block:
        blocks.append(" ".join(block))
    return "\n\n".join(blocks)


class Tesseract:
    """Reads one rendered page: PNG bytes in on stdin, text out on stdout."""

    def __init__(self, lang: str, psm: int, timeout_s: float):
        self.lang = lang
        self.command = ["tesseract", "stdin", "stdout", "-l", lang, "--psm", str(psm)]
        self.timeout_s = timeout_s
        # One core a page: pages run side by side, and tesseract's own OpenMP threads would fight them.
        self.env = {**os.environ, "OMP_THREAD_LIMIT": "1"}

    def read(self, image) -> str:
        png = io.BytesIO()
        image.save(png, format="PNG")
        out = subprocess.run(self.command, input=png.getvalue(), capture_output=True, timeout=self.timeout_s,
                             env=self.env)
        if out.returncode != 0:
            said = out.stderr.decode("utf-8", "replace").strip().splitlines()
            raise RuntimeError(said[-1] if said else f"exit status {out.returncode}")
        return paragraphs(out.stdout.decode("utf-8", "replace"))

    def check(self) -> None:
        """The language's data is there: the same one-line error before any page, not one a page."""
        out = subprocess.run(["tesseract", "--list-langs"], capture_output=True, text=True, timeout=30)
        langs = set(out.stdout.split()[1:] if out.returncode == 0 else ())
        missing = [part for part in self.lang.split("+") if part not in langs]
        if missing:
            raise UserError(f"lang: tesseract has no language data for {', '.join(missing)} (it has "
                            f"{', '.join(sorted(langs)) or 'none'}): install Debian's "
                            f"tesseract-ocr-{missing[0]}")


@stage("pipeline_tesseract")
def run(cfg: DictConfig, output_dir: str) -> dict:
    from tqdm import tqdm

    from olmocr.bench.score import record_answers
    from olmocr.data.steps import Reject
    from olmocr.pipeline.bench import pages_to_write, write_text
    from olmocr.utils.runinfo import write_run_info

    engine_version = version()
    engine = Tesseract(cfg.lang, cfg.psm, cfg.page_timeout_s)
    engine.check()
    render = build(cfg.render)
    candidates = cfg.candidates or os.path.join(output_dir, "candidates")
    rows, todo, kept = pages_to_write(cfg.bench_dir, candidates, 1)  # tesseract reads a page alike each time
    log.info("%s: %d tested pages, %d to read, %d already in %s", engine_version, len(rows), len(todo), kept,
             candidates)

    def one(item) -> tuple[str, str, str | None, float]:
        row, _, path = item
        start = time.perf_counter()
        try:
            image = render({"pdf_path": row["pdf_path"], "page": row["page"]})["image"]
            return path, engine.read(image), None, time.perf_counter() - start
        except Reject as exc:
            return path, "", f"not rendered: {exc}", 0.0
        except subprocess.TimeoutExpired:
            return path, "", f"tesseract took over {cfg.page_timeout_s:g} s", cfg.page_timeout_s
        except (RuntimeError, OSError) as exc:
            return path, "", f"tesseract failed: {exc}", 0.0

    totals = {"written": 0, "failed": 0, "empty": 0}
    seconds: list[float] = []
    start = time.perf_counter()
    with ThreadPoolExecutor(cfg.workers or os.cpu_count() or 1) as pool, \
            tqdm(total=len(todo), unit="page", desc="tesseract pages", disable=not cfg.progress) as bar:
        for path, text, failure, took in pool.map(one, todo):
            if failure:
                log.warning("%s: %s (written empty)", os.path.relpath(path, candidates), failure)
                totals["failed"] += 1
            else:
                seconds.append(took)
            totals["empty"] += not failure and not text.strip()
            write_text(path, text)
            record_answers(candidates, [(path, failure is None and bool(text.strip()))])
            totals["written"] += 1
            bar.update(1)
    wall = time.perf_counter() - start
    seconds.sort()
    summary = {"candidates": candidates, "engine": engine_version, "pages": len(rows), "kept": kept, **totals,
               "pages_per_second": round(len(todo) / wall, 2) if todo else None,
               "median_page_s": round(seconds[len(seconds) // 2], 3) if seconds else None}
    log.info("wrote %d candidate files (%d not read, %d empty) to %s in %.1f s; score them with python -m "
             "olmocr.bench bench_dir=%s candidates=%s", totals["written"], totals["failed"], totals["empty"],
             candidates, wall, cfg.bench_dir, candidates)
    write_run_info(output_dir, summary=summary)
    return summary


if __name__ == "__main__":
    run.main()
