"""Supervised fine-tuning: our training loop (olmocr.train.trainer) on page/target pairs."""

from __future__ import annotations

import logging
import os
import random

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from olmocr.config import build

log = logging.getLogger("olmocr.train")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def estimate_tokens_per_sample(dataset, samples: int = 8) -> float:
    """Mean label tokens over the first samples, for durations given in tokens."""
    counts = [int((s["labels"] != -100).sum()) for s in (dataset[i] for i in range(min(samples, len(dataset))))
              if s is not None]
    if not counts:
        raise ValueError("trainer.max_duration in tokens: none of the first samples loaded, cannot estimate tokens")
    return sum(counts) / len(counts)


def run(cfg: DictConfig, output_dir: str) -> dict:

    from olmocr.data.dataset import build_datasets, sources
    from olmocr.models.tuning import load_trainable, trainable_summary
    from olmocr.train.callbacks import MetricsFile, Plots
    from olmocr.train.checkpoint import CheckpointManager
    from olmocr.train.collate import Collator
    from olmocr.train.distributed import build_strategy, init_distributed, shutdown
    from olmocr.train.trainer import Trainer, steps_for
    from olmocr.utils.runinfo import write_run_info

    t = cfg.trainer
    dist_info = init_distributed(t.device)
    seed_everything(cfg.seed + dist_info.rank)
    if dist_info.rank == 0:
        write_run_info(output_dir)

    source = build(cfg.model)
    processor = source.load_processor()
    checkpoints = CheckpointManager(os.path.join(output_dir, "checkpoints"), t.keep_last)
    resume_from = checkpoints.latest()
    if resume_from and not t.resume:
        raise ValueError(f"trainer.resume=false but {checkpoints.root} holds checkpoints that a new run would "
                         "overwrite: choose another run_name (or hydra.run.dir), or resume")
    finetune = OmegaConf.to_container(cfg.finetune, resolve=True)
    model = load_trainable(source, dist_info.device, finetune["freeze_vision"], finetune["freeze_language"],
                           finetune["lora"], os.path.join(resume_from, "model") if resume_from else None)
    trainable, total = trainable_summary(model)
    log.info("model %s: %.2fM of %.2fM parameters train", source.path, trainable / 1e6, total / 1e6)
    if t.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if finetune["lora"] is not None:
            model.enable_input_require_grads()

    data = OmegaConf.to_container(cfg.data, resolve=True)
    train, evals, report = build_datasets(
        *sources(data), data["steps"], cache_dir=os.path.join(cfg.paths.cache, "index"),
        report_path=os.path.join(output_dir, "rejected.jsonl"), seed=cfg.seed, processor=processor)

    samples_per_step = t.batch_size * t.grad_accum * dist_info.world_size
    tokens_per_sample = None

    def duration_steps(duration) -> int:
        nonlocal tokens_per_sample
        if duration.unit == "tokens" and tokens_per_sample is None:
            tokens_per_sample = estimate_tokens_per_sample(train)
        return steps_for(duration.unit, duration.value, samples_per_step, len(train), tokens_per_sample or 0.0)

    if t.max_duration.value is None:
        raise ValueError("trainer.max_duration.value must be set")
    total_steps = duration_steps(t.max_duration)
    stop_step = min(total_steps, duration_steps(t.hard_stop)) if t.hard_stop.value is not None else total_steps

    strategy = build_strategy(t.strategy, dist_info, t.precision, t.ddp_find_unused_parameters,
                              t.fsdp_reshard_after_forward, t.zero_stage, t.batch_size, t.grad_accum,
                              t.clip_grad_norm)
    if t.compile:
        model = torch.compile(model)
    # FSDP replaces parameters with sharded ones, so the optimizer is built on the wrapped model.
    model = strategy.wrap(model)
    optimizer = build(cfg.optimizer, model=model)
    scheduler = build(cfg.scheduler, optimizer=optimizer, total_steps=total_steps)
    model = strategy.prepare(model, optimizer)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    callbacks = [build(c, run_config=resolved, output_dir=output_dir) for c in cfg.callbacks.values() if c is not None]
    callbacks += [MetricsFile(output_dir), Plots(output_dir)]
    trainer = Trainer(
        model, processor, optimizer, scheduler, train, evals, Collator(processor.tokenizer.pad_token_id),
        checkpoints, callbacks, stop_step=stop_step, batch_size=t.batch_size,
        grad_accum=t.grad_accum, precision=t.precision, clip_grad_norm=t.clip_grad_norm,
        eval_interval=t.eval_interval, save_interval=t.save_interval, num_workers=t.num_workers, seed=cfg.seed,
        device=dist_info.device, eval_max_batches=t.eval_max_batches, rank=dist_info.rank,
        world_size=dist_info.world_size, resume_from=resume_from, strategy=strategy,
    )
    state = trainer.fit()
    rejected = dict(report.file_counts())
    if rejected:
        log.warning("rejected samples by reason: %s (see %s)", rejected, report.path)
    shutdown()
    return {"state": vars(state), "checkpoint": checkpoints.latest(), "rejected": rejected,
            "total_steps": total_steps}


