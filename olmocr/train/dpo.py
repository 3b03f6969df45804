"""DPO: trl's DPOTrainer on preference pairs (data=pairs, mined by ``python -m olmocr.pairs``).

Shared with SFT and GRPO (olmocr.train.recipe): the run's steps and their order, the model loader (full,
frozen parts or LoRA), the data steps that render and prompt a page (the pair's page is shown exactly as
inference shows it), the optimizer and scheduler groups, durations, the resume rule, the callbacks and the
run dir. The reference model is the starting checkpoint (also when a run
resumes). Checkpoints are trl's ``checkpoints/checkpoint-<step>/``; a re-run resumes from the newest.
"""

from __future__ import annotations

import logging
import os

import trl

from olmocr.train.algos import check_dpo
from olmocr.train.hf import HFRecipe, LoaderWorkersLeaveJobSignals, RunCheckpoints

log = logging.getLogger("olmocr.train")


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
        check_dpo(self.cfg)

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
