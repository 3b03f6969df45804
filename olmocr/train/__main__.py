"""python -m olmocr.train — fine-tune a document-OCR model: SFT (algo=sft) or GRPO (algo=grpo)."""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from olmocr.config import register_configs, run_stage, submit_on_cluster, validate

register_configs()


def run(cfg: DictConfig, output_dir: str) -> dict:
    validate(cfg)
    if cfg.dry_run:
        print(OmegaConf.to_yaml(cfg))
        return {"dry_run": True}
    if cfg.algo.name == "grpo":
        from olmocr.train import grpo

        return grpo.run(cfg, output_dir)
    from olmocr.train import sft

    return sft.run(cfg, output_dir)


@hydra.main(config_path="../../conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_stage(run, cfg, HydraConfig.get().runtime.output_dir)


if __name__ == "__main__":
    sys.argv = submit_on_cluster(sys.argv)
    main()
