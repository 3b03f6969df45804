"""python -m olmocr.compare — does a candidate (an FP8 version, a vLLM deployment) decode like its
reference?

The candidate greedy-decodes rendered pages (vLLM when installed and a GPU is present, else
transformers); the reference re-scores prompt + generated tokens in transformers. Per page and overall:
token match rate, first mismatch index, probability gap at the first mismatch. Pages with a gap over
``threshold`` are flagged; more than ``max_flagged`` of them exits with code 1. compare.json and
compare.md go to the run dir.
"""

from __future__ import annotations

import json
import logging
import os

from omegaconf import DictConfig, OmegaConf

import olmocr.checkpoints.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage
from olmocr.data.presented import presents_as_trained

log = logging.getLogger("olmocr.compare")


@stage("compare", succeeded=lambda summary: summary["passed"], present=presents_as_trained({"steps": "reference"}))
def run(cfg: DictConfig, output_dir: str) -> dict:
    from olmocr.checkpoints.agreement import compare, markdown
    from olmocr.checkpoints.pages import choose_pages
    from olmocr.utils.runinfo import write_run_info

    summary = compare(cfg.reference, cfg.candidate, choose_pages(cfg.pages.root, cfg.pages.count, cfg.pages.seed),
                      OmegaConf.to_container(cfg.steps, resolve=True), engine=cfg.engine,
                      max_new_tokens=cfg.max_new_tokens, threshold=cfg.threshold, max_flagged=cfg.max_flagged,
                      device=cfg.device, dtype=cfg.dtype, gpu_memory_utilization=cfg.vllm.gpu_memory_utilization,
                      max_model_len=cfg.vllm.max_model_len, report_path=os.path.join(output_dir, "rejected.jsonl"),
                      storage_wait_s=cfg.storage_wait_s)
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, "compare.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    with open(os.path.join(output_dir, "compare.md"), "w") as fh:
        fh.write(markdown(summary, cfg.reference, cfg.candidate))
    log.info("%s: match rate %.4f over %d tokens of %d pages, %d pages with a mismatch, largest gap %.3g; "
             "%d flagged (at most %d) -> %s; %s", summary["engine"], summary["match_rate"], summary["tokens"],
             summary["pages"], summary["pages_with_mismatch"], summary["max_gap"], summary["flagged"],
             summary["max_flagged"], "passed" if summary["passed"] else "FAILED",
             os.path.join(output_dir, "compare.md"))
    write_run_info(output_dir, summary={k: summary[k] for k in ("match_rate", "flagged", "passed", "engine")})
    return summary


if __name__ == "__main__":
    run.main()
