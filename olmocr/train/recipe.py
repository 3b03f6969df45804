"""The one scaffold of a training run. SFT, GRPO and DPO are :class:`Recipe` subclasses: the run's steps
and their order are here (:meth:`Recipe.run`); a recipe fills in what is its own (checks, datasets, how it
counts samples, how it fits).

The order is part of reproducibility: the global RNGs are seeded before the model is loaded (a LoRA
adapter's initial weights come from them), and a resumed run's model comes back through the loader before
anything else touches it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from olmocr.config import build
from olmocr.errors import UserError

log = logging.getLogger("olmocr.train")


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def duration_steps(duration, *, per_step: int, samples: int, whole_epochs: bool = False,
                   tokens_per_sample: float | None = None) -> int:
    """Optimizer steps for a duration (``unit``: steps, epochs or tokens; ``value``) when each step takes
    ``per_step`` of an epoch's ``samples``. ``whole_epochs``: every epoch ends with a step of its own, short
    if need be (the Hugging Face Trainer's loop); otherwise a step may span two epochs (ours)."""
    unit, value = duration.unit, duration.value
    if unit == "steps":
        return int(value)
    if unit == "epochs":
        if whole_epochs:
            return max(1, math.ceil(value * math.ceil(samples / per_step)))
        return max(1, math.ceil(value * samples / per_step))
    if unit == "tokens":
        if tokens_per_sample is None:
            raise UserError("trainer.max_duration.unit: this algorithm counts steps or epochs, not tokens")
        return max(1, math.ceil(value / (tokens_per_sample * per_step)))
    raise AssertionError(f"unit {unit!r} passed validation")


def check_trainer(t) -> None:
    """What the ``trainer`` schema's declared bounds cannot say, before anything is loaded or submitted."""
    if t.max_duration.value is None:
        raise UserError(f"trainer.max_duration.value: required, the run's length in {t.max_duration.unit}")


def check_finetune(freeze_vision: bool, freeze_language: bool, lora) -> None:
    if freeze_vision and freeze_language:
        raise UserError("finetune.freeze_vision and finetune.freeze_language are both true: nothing would train")
    if lora is not None and freeze_language:
        raise UserError("finetune.lora trains the language model: it cannot go with finetune.freeze_language")


@dataclass(frozen=True)
class RunLength:
    total: int  # steps of the whole run: the learning-rate schedule spans them
    stop: int  # where this invocation stops (trainer.hard_stop), without changing the schedule


def check_compile_backend(compile: bool, backend: str) -> None:
    if not compile:
        return
    import torch._dynamo

    if backend not in torch._dynamo.list_backends(exclude_tags=()):  # debugging ones (aot_eager) included
        raise UserError(f"trainer.compile_backend: {backend!r} is not a torch.compile backend here; expected one of "
                        f"{', '.join(torch._dynamo.list_backends())} or a debugging one (aot_eager, eager)")


def build_callbacks(configured: DictConfig, run_config: dict, output_dir: str) -> list:
    """The configured callbacks, then the one every run has: metrics.jsonl."""
    from olmocr.train.callbacks import MetricsFile

    built = [build(c, run_config=run_config, output_dir=output_dir) for c in configured.values() if c is not None]
    return [*built, MetricsFile(output_dir)]


class Recipe:
    """A training run as named steps; :meth:`run` calls them in order. A hook is given what it needs and returns
    what it makes; what the scaffold has loaded by the time :meth:`fit` runs (``source``, ``resume_from``,
    ``processor``, ``train_data``, ``eval_data``, ``model``, ``length``, ``best``, ``bench_eval``) is on the
    recipe for it."""

    whole_epochs = True  # see duration_steps

    def __init__(self, cfg: DictConfig, output_dir: str):
        self.cfg, self.output_dir = cfg, output_dir
        self.resolved = OmegaConf.to_container(cfg, resolve=True)
        self.settings = OmegaConf.to_object(cfg.trainer)  # olmocr.train.schema.TrainerConfig
        self.checkpointing = OmegaConf.to_object(cfg.checkpoint)  # olmocr.train.checkpoint.Checkpointing
        self.checkpoints_dir = os.path.join(output_dir, "checkpoints")
        self.bench_eval = None

    def run(self) -> dict:
        from olmocr.train.distributed import init_distributed
        from olmocr.runlock import run_dir_held

        self.dist = init_distributed(self.settings.device)
        self.check()
        # Rank 0 writes the run dir (checkpoints, metrics): one invocation at a time resumes into it.
        with (run_dir_held(self.output_dir) if self.dist.rank == 0
              else contextlib.nullcontext()):
            return self.run_held()

    def run_held(self) -> dict:
        from olmocr.models.loader import trainable_summary
        from olmocr.train.checkpoint import BestCheckpoint
        from olmocr.train.distributed import shutdown
        from olmocr.utils.runinfo import write_run_info

        if self.cfg.eval.bench is not None and self.settings.eval_interval:
            self.bench_eval = build(self.cfg.eval.bench, output_dir=self.output_dir).load()
        self.checkpointing.check(self.settings.eval_interval, self.bench_eval)
        check_compile_backend(self.settings.compile, self.settings.compile_backend)
        # Built before the model loads: a logging service out of reach or a refused key stops the run here.
        callbacks = build_callbacks(self.cfg.callbacks, self.resolved, self.output_dir)
        for callback in callbacks:
            callback.on_run_start(self.dist.rank)
        self.best = BestCheckpoint(self.checkpointing.keep_best)
        seed_everything(self.cfg.seed + self.dist.rank)
        self.source = build(self.cfg.model)
        self.before_loading()
        if self.dist.rank == 0:
            write_run_info(self.output_dir)
        self.resume_from = self.checkpointing.resume_point(self.latest_checkpoint(), self.checkpoints_dir)
        self.best.restore(self.resume_from)
        if self.resume_from and self.dist.rank == 0:
            self.say_what_changed()
        finished = self.finished_at()
        if finished is not None:
            log.info("%s already reached step %d, where this run stops: nothing to train", self.resume_from, finished)
            shutdown()
            return {"state": {"step": finished}, "checkpoint": self.resume_from, "total_steps": finished}
        self.processor = self.source.load_processor()
        # The data before the weights: a missing folder, refused credentials or unusable pages stop the run
        # before minutes of loading a large model.
        self.train_data, self.eval_data = self.datasets(self.processor)
        self.model = self.load_model(self.resume_from, self.train_data)
        trainable, total = trainable_summary(self.model)
        self.length = self.run_length()
        log.info("model %s: %.2fM of %.2fM parameters train; %d %s, %d steps of %d", self.source.path,
                 trainable / 1e6, total / 1e6, len(self.train_data), self.unit, self.length.total, self.per_step)
        result = self.fit(callbacks)
        if self.dist.rank == 0:
            result["best"] = self.best.record
            self.write_summary(result)
        shutdown()
        return {**result, "total_steps": self.length.total}

    def say_what_changed(self) -> None:
        """One line on resuming: from where, and the values this invocation changed (a longer run, another
        learning rate: applied from here on), so a run resumed over days says what each part ran with."""
        from olmocr.train.checkpoint import RUN_CONFIG, config_changes

        changes = config_changes(self.resume_from, self.resolved)
        if not changes:
            log.info("resuming from %s%s", self.resume_from, "" if changes is not None else
                     f" (it has no {RUN_CONFIG}: what it was trained with is unknown)")
            return
        shown = "; ".join(changes[:8]) + (f"; and {len(changes) - 8} more (see {RUN_CONFIG} there)"
                                          if len(changes) > 8 else "")
        log.warning("resuming from %s with %d value(s) changed since it was written: %s", self.resume_from,
                    len(changes), shown)

    # -- what every recipe fills in ------------------------------------------------------------------------------
    unit = "samples"  # what one entry of the training data is, in log lines

    def check(self) -> None:
        """Everything that can be wrong with the config, before a model is loaded or a server touched."""

    def before_loading(self) -> None:
        """Anything to wait for before the model loads (a generation server)."""

    def latest_checkpoint(self) -> str | None:
        """The newest complete checkpoint under ``checkpoints_dir``, or None."""
        raise NotImplementedError

    def checkpoint_step(self, checkpoint: str) -> int:
        raise NotImplementedError

    def load_model(self, resume_from: str | None, train_data):
        """The model to train: the source's, or ``resume_from``'s weights when the run resumes."""
        raise NotImplementedError

    def datasets(self, processor) -> tuple:
        """The training data and the eval data (or None) of the run, prepared for ``processor``."""
        raise NotImplementedError

    @property
    def per_step(self) -> int:
        """Training samples one optimizer step takes, over every process."""
        return self.settings.batch_size * self.settings.grad_accum * self.dist.world_size

    def epoch_samples(self) -> int:
        return len(self.train_data)

    def tokens_per_sample(self) -> float | None:
        """For durations in tokens; None: this recipe counts steps or epochs."""
        return None

    def run_length(self) -> RunLength:
        def steps(duration) -> int:
            return duration_steps(duration, per_step=self.per_step, samples=self.epoch_samples(),
                                  whole_epochs=self.whole_epochs,
                                  tokens_per_sample=self.tokens_per_sample() if duration.unit == "tokens" else None)

        total = steps(self.settings.max_duration)
        hard_stop = self.settings.hard_stop
        return RunLength(total, total if hard_stop.value is None else min(total, steps(hard_stop)))

    def finished_at(self) -> int | None:
        """The step of the newest checkpoint when it already ends the run, and the run's length is known without
        its data (durations in steps): a re-run of a finished run loads nothing."""
        t = self.settings
        durations = [d for d in (t.max_duration, t.hard_stop) if d.value is not None]
        if self.resume_from is None or any(d.unit != "steps" for d in durations):
            return None
        step = self.checkpoint_step(self.resume_from)
        return step if step >= min(int(d.value) for d in durations) else None

    def write_summary(self, result: dict) -> None:
        """run_info.json with the best checkpoint's step and score; the bench eval's HTML report of that step
        (of the best bench eval when keep_best follows another metric)."""
        from olmocr.utils.runinfo import write_run_info

        report = None
        if self.bench_eval is not None:
            metric = self.best.metric or ""
            report = self.bench_eval.write_report(self.best.step if metric.startswith("eval/bench/") else None)
        if self.best.record:
            log.info("best checkpoint: step %d, %s %.4f", self.best.step, self.best.metric, self.best.record["value"])
        write_run_info(self.output_dir, summary={"step": result["state"]["step"], "best": self.best.record,
                                                 "bench_report": report})

    def optimizer_and_scheduler(self, model):
        optimizer = build(self.cfg.optimizer, model=model)
        # The schedule counts optimizer steps over the whole run, also when this invocation stops earlier.
        return optimizer, build(self.cfg.scheduler, optimizer=optimizer, total_steps=self.length.total)

    def fit(self, callbacks: list) -> dict:
        raise NotImplementedError
