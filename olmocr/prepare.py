"""python -m olmocr.prepare — a released model folder from training checkpoints.

One LoRA adapter: merged into its base. One full checkpoint: made self-contained. Several: souped
(floating-point tensors averaged in fp32, optionally weighted). A source is a run dir (its newest
checkpoint, or step=N), a checkpoint (step_N/, checkpoint-N/) or a Hugging Face folder; sources and
output may be local or s3://. The output holds weights, configs and processor files, no training state,
and provenance.json: every source with a content hash of its weights, git commit and package versions.
"""

from __future__ import annotations

import json
import os

from omegaconf import DictConfig, OmegaConf

import olmocr.checkpoints.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage


@stage("prepare")
def run(cfg: DictConfig, output_dir: str) -> dict:
    from olmocr.checkpoints.release import prepare
    from olmocr.utils.runinfo import write_run_info

    weights = OmegaConf.to_container(cfg.weights) if cfg.weights is not None else None
    record = prepare(list(cfg.sources), cfg.output, weights=weights, step=cfg.step, base=cfg.base,
                     processor=cfg.processor, overwrite=cfg.overwrite, storage_wait_s=cfg.storage_wait_s)
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, "provenance.json"), "w") as fh:
        json.dump(record, fh, indent=2)
    write_run_info(output_dir, summary={"operation": record["operation"], "output": record["output"],
                                        "weights_sha256": record["weights_sha256"]})
    return record


if __name__ == "__main__":
    run.main()
