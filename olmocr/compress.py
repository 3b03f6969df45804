"""python -m olmocr.compress — one-shot quantisation of a released model (FP8_DYNAMIC by default).

Linear layers of the language model only; lm_head and the vision tower stay as they are, under both
names transformers gives them. Schemes with static activation scales (scheme=FP8) calibrate on pages
rendered and prompted by the same steps inference uses. The source is anything prepare takes; source
and output may be local or s3://. Reports the size of the weights before and after.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig, OmegaConf

import olmocr.checkpoints.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage
from olmocr.data.presented import presents_as_trained


@stage("compress", present=presents_as_trained({"steps": "source"}))  # calibration pages as the model reads
def run(cfg: DictConfig, output_dir: str) -> dict:
    from olmocr.checkpoints.quantize import compress
    from olmocr.utils.runinfo import write_run_info

    record = compress(cfg.source, cfg.output, scheme=cfg.scheme, ignore=list(cfg.ignore), step=cfg.step,
                      calibration=OmegaConf.to_container(cfg.calibration, resolve=True),
                      steps=OmegaConf.to_container(cfg.steps, resolve=True), overwrite=cfg.overwrite,
                      report_path=os.path.join(output_dir, "rejected.jsonl"), storage_wait_s=cfg.storage_wait_s)
    write_run_info(output_dir, summary={k: record[k] for k in ("output", "scheme", "weights_bytes", "weights_sha256")})
    return record


if __name__ == "__main__":
    run.main()
