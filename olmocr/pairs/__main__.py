"""python -m olmocr.pairs — preference pairs for DPO from a model's own samples.

For every page of ``bench_dir`` that has unit tests, ``samples`` completions are drawn from the model at
``temperature`` through the pipeline's model server (``server=``: transformers serve on CPU, vLLM on a
GPU, or an external endpoint; rendered and prompted by ``convert.steps``, exactly as inference), scored
by the ``rewards`` group (bench unit tests, front matter, stopping by itself; the same functions and
weights as GRPO), and the best and the worst become a pair when their rewards differ by at least
``margin``. ``pairs.jsonl`` in the run dir gets one line per page: the page, both texts and rewards, and
every sample's rewards, or why the page gave no pair. Re-running the same ``run_name`` skips pages
already mined.
"""

from __future__ import annotations

import logging
import os

from omegaconf import DictConfig, OmegaConf

import olmocr.pairs.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage
from olmocr.config import build
from olmocr.data.presented import presents_as_trained
from olmocr.errors import UserError

log = logging.getLogger("olmocr.pairs")


async def mine_all(converter, pages: list[dict], pairs, samples: int, temperature: float, rewards: tuple,
                   margin: float, seed: int | None, progress: bool) -> None:
    from tqdm import tqdm

    from olmocr.pairs.mine import mine_page
    from olmocr.pipeline.convert import ServerWatch, all_of

    bar = tqdm(total=len(pages), unit="page", desc="pairs", disable=not progress, dynamic_ncols=True)
    # A page none of whose samples the server answered is recorded only once that is known to be the page's
    # fault: a server that stops answering must not leave pages that a re-run skips.
    watch = ServerWatch(converter.server)

    def add(row: dict) -> None:
        pairs.add(row)
        bar.set_postfix(pairs=pairs.counts["pairs"], no_pair=pairs.counts["no_pair"], refresh=False)
        bar.update(1)

    async def one(page: dict) -> None:
        reference = None
        if page.get("md_path"):
            with open(page["md_path"], encoding="utf-8") as fh:
                reference = fh.read()
        row = await mine_page(converter, page, samples, temperature, rewards, margin, reference, seed)
        asked = row.get("samples")  # none: the page could not be rendered
        unanswered = asked[0]["error"] if asked and all(s["error"] for s in asked) else None
        for ready in watch.settled(row, unanswered) if asked else [row]:
            add(ready)

    try:
        await all_of(one(page) for page in pages)
        for ready in watch.finish():
            add(ready)
    finally:
        bar.close()


def check(cfg: DictConfig) -> None:
    if cfg.samples < 2:
        raise UserError(f"samples: a pair needs at least 2 samples per page, got {cfg.samples}")
    if not cfg.rewards:
        raise UserError("rewards: give the rewards that rank the samples, e.g. rewards=olmocr2")


@stage("pairs", check=check, present=presents_as_trained({"convert.steps": "model.name_or_path"}))
def run(cfg: DictConfig, output_dir: str) -> dict:
    from olmocr.data.bench_prompts import bench_pages
    from olmocr.rewards import build_rewards
    from olmocr.runlock import run_dir_held

    rewards = build_rewards(OmegaConf.to_container(cfg.rewards, resolve=True))
    pages, problems = bench_pages(cfg.bench_dir)
    for problem in problems:
        log.warning("%s", problem)
    with run_dir_held(output_dir):
        return mine(cfg, output_dir, rewards, pages)


def mine(cfg: DictConfig, output_dir: str, rewards, pages: list[dict]) -> dict:
    from olmocr.pairs.mine import PairFile
    from olmocr.faults import Unreachable
    from olmocr.pipeline.failures import StopWork, Unavailable
    from olmocr.utils.runinfo import write_run_info

    pairs = PairFile(os.path.join(output_dir, "pairs.jsonl"))
    todo = sorted((p for p in pages if p["page_id"] not in pairs.done), key=lambda p: p["page_id"])
    log.info("%d pages with tests: %d to mine, %d already in %s", len(pages), len(todo), len(pages) - len(todo),
             pairs.path)
    converter = build(cfg.convert, server=build(cfg.server, model=build(cfg.model)), log_dir=output_dir)
    if todo:
        try:
            with converter:
                converter.run(mine_all(converter, todo, pairs, cfg.samples, cfg.temperature, rewards, cfg.margin,
                                       cfg.seed, cfg.progress))
        except (StopWork, Unavailable) as exc:  # the server gone, refusing the key, or busy past convert.busy_s
            raise Unreachable(f"{exc} (pages mined so far are kept; run again to resume)") from exc
    summary = {"pairs_file": pairs.path, "pages": len(pages), "pairs": pairs.counts["pairs"],
               "pages_without_pair": pairs.counts["no_pair"], "mined_now": len(todo)}
    log.info("%d pairs from %d pages (%d pages gave no usable pair): %s", summary["pairs"], len(pages),
             summary["pages_without_pair"], pairs.path)
    write_run_info(output_dir, summary=summary)
    return summary


if __name__ == "__main__":
    run.main()
