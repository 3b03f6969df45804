"""Supervised fine-tuning: our training loop (olmocr.train.trainer) on page/target pairs."""

from __future__ import annotations

import logging
import os

from omegaconf import OmegaConf

from olmocr.errors import UserError
from olmocr.train.recipe import Recipe

log = logging.getLogger("olmocr.train")


def estimate_tokens_per_sample(dataset, samples: int = 8) -> float:
    """Mean label tokens over the first samples, for durations given in tokens."""
    counts = [int((s["labels"] != -100).sum()) for s in (dataset[i] for i in range(min(samples, len(dataset))))
              if s is not None]
    if not counts:
        raise UserError("trainer.max_duration in tokens: none of the first samples loaded, cannot estimate tokens")
    return sum(counts) / len(counts)


def centre_on(model, train_data, pages: int) -> None:
    """The projector centred on the first ``pages`` training samples, the same on every rank (a resumed run has it
    in its weights)."""
    from olmocr.models.projector import centre_projector

    samples = (train_data[i] for i in range(min(pages, len(train_data))))
    stats = centre_projector(model, ((s["pixel_values"], s["image_grid_thw"]) for s in samples if s is not None))
    log.info("projector centred on %d training pages (%d image tokens): the feature they all shared was %.0f%% "
             "of a token's%s", stats.images, stats.tokens, 100 * stats.shared,
             ", what is left now has norm 1" if stats.scaled else "; every token was alike (blank images?), "
             "left unscaled")


class SFT(Recipe):
    whole_epochs = False  # a step's micro-batches may come from two epochs

    def latest_checkpoint(self) -> str | None:
        from olmocr.train.checkpoint import CheckpointManager

        return CheckpointManager(self.checkpoints_dir).latest()

    def checkpoint_step(self, checkpoint: str) -> int:
        from olmocr.train.checkpoint import STEP_DIR

        return int(STEP_DIR.match(os.path.basename(checkpoint)).group(1))

    def load_model(self, resume_from: str | None, train_data):
        from olmocr.models.loader import load_trainable

        finetune = self.resolved["finetune"]
        model = load_trainable(self.source, self.dist.device, finetune["freeze_vision"], finetune["freeze_language"],
                               finetune["lora"], os.path.join(resume_from, "model") if resume_from else None)
        if self.cfg.algo.centre_projector is not None and resume_from is None:
            centre_on(model, train_data, self.cfg.algo.centre_projector)
        if self.settings.activation_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if finetune["lora"] is not None:
                model.enable_input_require_grads()
        return model

    def datasets(self, processor) -> tuple:
        from olmocr.data.dataset import build_datasets, sources

        data = OmegaConf.to_container(self.cfg.data, resolve=True)
        train, evals, self.report = build_datasets(
            *sources(data), data["steps"], cache_dir=os.path.join(self.cfg.paths.cache, "index"),
            report_path=os.path.join(self.output_dir, "rejected.jsonl"), seed=self.cfg.seed, processor=processor,
            storage_wait_s=data["storage_wait_s"], render_cache=data["render_cache"])
        return train, evals

    def tokens_per_sample(self) -> float:
        if not hasattr(self, "_tokens_per_sample"):  # max_duration and hard_stop may both ask
            self._tokens_per_sample = estimate_tokens_per_sample(self.train_data)
        return self._tokens_per_sample

    def fit(self, callbacks: list) -> dict:
        from olmocr.models.loader import compile_blocks
        from olmocr.train.collate import Collator
        from olmocr.config import build
        from olmocr.train.checkpoint import CheckpointManager
        from olmocr.train.trainer import Trainer

        t = self.settings
        strategy = build(self.cfg.strategy, info=self.dist, precision=t.precision, micro_batch_size=t.batch_size,
                         grad_accum=t.grad_accum, clip_grad_norm=t.clip_grad_norm)
        if t.compile:
            log.info("compiling %d blocks", compile_blocks(self.model, t.compile_backend))
        # FSDP replaces parameters with sharded ones, so the optimizer is built on the wrapped model.
        model = strategy.wrap(self.model)
        optimizer, scheduler = self.optimizer_and_scheduler(model)
        model = strategy.prepare(model, optimizer)
        checkpoints = CheckpointManager(self.checkpoints_dir, self.checkpointing, self.best, self.resolved)
        trainer = Trainer(model, self.processor, optimizer, scheduler, self.train_data, self.eval_data,
                          Collator(self.processor.tokenizer.pad_token_id), checkpoints, callbacks, t,
                          stop_step=self.length.stop, seed=self.cfg.seed, dist=self.dist, resume_from=self.resume_from,
                          strategy=strategy, bench_eval=self.bench_eval)
        state = trainer.fit()
        rejected = dict(self.report.file_counts())
        if rejected:
            log.warning("rejected samples by reason: %s (see %s)", rejected, self.report.path)
        return {"state": vars(state), "checkpoint": checkpoints.latest(), "rejected": rejected}
