"""DPO: trl's DPOTrainer on preference pairs (data=pairs, mined by ``python -m olmocr.pairs``).

Shared with SFT and GRPO (olmocr.train.recipe): the run's steps and their order, the model loader (full,
frozen parts or LoRA), the data steps that render and prompt a page (the pair's page is shown exactly as
inference shows it), the optimizer and scheduler groups, durations, the resume rule, the callbacks and the
run dir. The reference model is the starting checkpoint (also when a run
resumes). Checkpoints are trl's ``checkpoints/checkpoint-<step>/``; a re-run resumes from the newest.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import trl
from omegaconf import DictConfig

from olmocr.train.hf import HFRecipe, LoaderWorkersLeaveJobSignals, RunCheckpoints

log = logging.getLogger("olmocr.train")


def trl_config_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(trl.DPOConfig)}


def check(cfg: DictConfig) -> None:
    """Everything that can be wrong with a DPO config, before a model is loaded."""
    algo, t = cfg.algo, cfg.trainer
    if "train" not in cfg.data or isinstance(cfg.data.train, DictConfig):
        raise ValueError("algo=dpo trains on preference pairs: add data=pairs (data.train=[<pairs.jsonl>, …])")
    unknown = sorted(set(algo.trl_args) - trl_config_fields())
    if unknown:
        raise ValueError(f"algo.trl_args: {', '.join(unknown)} not trl DPOConfig field(s)")
    if t.max_duration.unit not in ("steps", "epochs"):
        raise ValueError(f"trainer.max_duration.unit: DPO counts steps or epochs, got {t.max_duration.unit!r}")
    if t.strategy == "fsdp":
        raise ValueError("trainer.strategy=fsdp is not available for DPO: use ddp or deepspeed (ZeRO-1/2)")


def dpo_arguments(base: dict, algo: dict):
    """trl's DPOConfig: the Trainer's arguments (:func:`olmocr.train.hf.training_arguments`), then the algo
    keys (``algo.trl_args`` passed through last)."""
    args = dict(**base, per_device_eval_batch_size=base["per_device_train_batch_size"], beta=algo["beta"],
                loss_type=[algo["loss_type"]],
                label_smoothing=algo["label_smoothing"], max_length=algo["max_length"],
                precompute_ref_log_probs=algo["precompute_ref_log_probs"])
    args.update(algo["trl_args"])
    return trl.DPOConfig(**args)


class DPOTrainer(LoaderWorkersLeaveJobSignals, RunCheckpoints, trl.DPOTrainer):
    """trl's DPO trainer, resuming with the weights our loader brought back."""


class DPO(HFRecipe):
    unit = "pairs"

    def check(self) -> None:
        check(self.cfg)

    def datasets(self) -> tuple:
        from olmocr.data.preference import build_preference_dataset

        data, report = self.resolved["data"], os.path.join(self.output_dir, "rejected.jsonl")
        special = self.processor.tokenizer.all_special_tokens
        train = build_preference_dataset(data["train"], data["steps"], special, report)
        return train, build_preference_dataset(data["eval"], data["steps"], special, report) if data["eval"] else None

    def trainer(self, callbacks: list):
        optimizer, scheduler = self.optimizer_and_scheduler(self.model)
        return DPOTrainer(model=self.model, args=dpo_arguments(self.arguments(), self.resolved["algo"]),
                          train_dataset=self.train_data, eval_dataset=self.eval_data, processing_class=self.processor,
                          optimizers=(optimizer, scheduler), callbacks=callbacks)
