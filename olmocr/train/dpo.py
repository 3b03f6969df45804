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

from olmocr.train.algos import check_dpo, dpo_arguments
from olmocr.train.hf import HFRecipe, LoaderWorkersLeaveJobSignals, RunCheckpoints

log = logging.getLogger("olmocr.train")


class DPOTrainer(LoaderWorkersLeaveJobSignals, RunCheckpoints, trl.DPOTrainer):
    """trl's DPO trainer, resuming with the weights our loader brought back."""


class DPO(HFRecipe):
    unit = "pairs"

    def check(self) -> None:
        check_dpo(self.cfg, self.dist.world_size)

    def datasets(self, processor) -> tuple:
        from olmocr.data.preference import build_preference_dataset

        data, report = self.resolved["data"], os.path.join(self.output_dir, "rejected.jsonl")
        special = processor.tokenizer.all_special_tokens
        train = build_preference_dataset(data["train"], data["steps"], special, report)
        return train, build_preference_dataset(data["eval"], data["steps"], special, report) if data["eval"] else None

    def trainer(self, callbacks: list):
        optimizer, scheduler = self.optimizer_and_scheduler(self.model)
        return DPOTrainer(model=self.model, args=dpo_arguments(self.arguments(), self.resolved["algo"]),
                          train_dataset=self.train_data, eval_dataset=self.eval_data, processing_class=self.processor,
                          optimizers=(optimizer, scheduler), callbacks=callbacks)
