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


class ToDivergence:
    """trl's preference collator, each pair's answers scored up to and including the first token where they
    differ. A pair's two answers share the page and prompt, so in trl's batch (the chosen rows, then the rejected
    rows, each flushed left by a prompt of the same length) a pair's tokens stand at the same positions. What
    comes after the first difference follows a different text in each answer: scored, it makes DPO push down
    tokens (the rejected answer's end among them) for following a mistake, not for being one."""

    def __init__(self, collate):
        self.collate = collate

    def __call__(self, examples):
        import torch

        batch = self.collate(examples)
        ids, mask = batch["input_ids"], batch["completion_mask"]
        (chosen, rejected), (chosen_mask, rejected_mask) = ids.chunk(2), mask.chunk(2)
        differ = (chosen != rejected) & (chosen_mask.bool() | rejected_mask.bool())
        first = torch.where(differ.any(dim=1), differ.int().argmax(dim=1), ids.size(1))
        keep = torch.arange(ids.size(1)).unsqueeze(0) <= first.unsqueeze(1)
        batch["completion_mask"] = mask * keep.repeat(2, 1).to(mask.dtype)
        return batch


class DPOTrainer(LoaderWorkersLeaveJobSignals, RunCheckpoints, trl.DPOTrainer):
    """trl's DPO trainer, resuming with the weights our loader brought back."""

    def __init__(self, *args, scope: str = "whole", **kwargs):
        super().__init__(*args, **kwargs)
        if scope == "to_divergence":
            self.data_collator = ToDivergence(self.data_collator)


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
                          optimizers=(optimizer, scheduler), callbacks=callbacks,
                          scope=self.resolved["algo"]["scope"])
