"""python -m olmocr.train — fine-tune a document-OCR model: SFT (algo=sft), GRPO (algo=grpo) or DPO
(algo=dpo)."""

from __future__ import annotations


import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import olmocr.train.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.config import run_stage, start, validate



def run(cfg: DictConfig, output_dir: str) -> dict:
    validate(cfg)
    if cfg.algo.name == "grpo":
        from olmocr.train import grpo

        return grpo.run(cfg, output_dir)
    if cfg.algo.name == "dpo":
        from olmocr.train import dpo

        return dpo.run(cfg, output_dir)
    from olmocr.train import sft

    return sft.run(cfg, output_dir)


@hydra.main(config_path="../../conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_stage(run, cfg, HydraConfig.get().runtime.output_dir)


if __name__ == "__main__":
    start(main, "olmocr.train", "train", __doc__)
