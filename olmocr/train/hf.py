"""What the trl-based recipes (GRPO, DPO) share: the Hugging Face Trainer arguments our ``trainer`` keys
map to, the model through our loader, the trainer's checkpoints, and running the trainer with our
callbacks."""

from __future__ import annotations

import functools
import logging
import os

from olmocr.private.transformers import TrainerOverrides
from olmocr.train.data import WorkerContext, deaf_to_job_signals
from olmocr.train.recipe import Recipe

log = logging.getLogger("olmocr.train")


class RunCheckpoints(TrainerOverrides):
    """For a Trainer subclass whose model came through our loader, checkpoint weights included (the
    Trainer's own reload misses checkpoints saved with transformers' key conversion, Qwen2.5-VL, and
    would silently keep the initial weights); optimizer, scheduler, RNG and data position are still
    restored by the Trainer. Checkpoints are kept as our own loop keeps them: each carries ``best.json``
    (written before the Trainer's marker), ``keep_last`` prunes all but the newest and the best, and one whose
    writing failed is removed (:func:`olmocr.train.checkpoint.unsaved`)."""

    # (keep_last, olmocr.train.checkpoint.BestCheckpoint, the run's resolved config), set by the recipe
    keep: tuple = (None, None, None)

    def load_checkpoint_weights(self, resume_from_checkpoint: str, model) -> None:
        pass  # our loader brought them back

    def save_checkpoint(self, save) -> None:
        from olmocr.data.presented import write_record
        from olmocr.train.checkpoint import complete_checkpoints, prune, unsaved, write_run_config

        keep_last, best, config = self.keep
        step = self.state.global_step
        folder = os.path.join(self.args.output_dir, f"checkpoint-{step}")
        try:
            if self.args.should_save:  # before the Trainer's own files, the last of which marks it complete
                os.makedirs(folder, exist_ok=True)
                if best is not None:
                    best.write(folder)
                write_run_config(folder, config)
                write_record(folder, ((config or {}).get("data") or {}).get("steps"))  # the model's folder too
            save()
        except Exception as exc:
            full = unsaved(exc, folder, step, self.args.output_dir) if self.args.should_save else None
            if full is None:
                raise
            raise full from exc
        if self.args.should_save:
            prune(complete_checkpoints(self.args.output_dir), keep_last, best.step if best else None)


class LoaderWorkersLeaveJobSignals(TrainerOverrides):
    """For a Trainer subclass: the loader workers the Trainer starts (``dataloader_num_workers``) ignore the
    job's signals as our own loop's do (:func:`olmocr.train.data.deaf_to_job_signals` says what went wrong
    without it)."""

    def adapt_loader(self, loader):
        loader = super().adapt_loader(loader)
        # accelerate's loader iterates the DataLoader it wraps, which starts the workers
        iterated = getattr(loader, "base_dataloader", loader)
        if iterated.num_workers and iterated.multiprocessing_context is None:  # not a start method the user chose
            iterated.multiprocessing_context = WorkerContext()
            iterated.worker_init_fn = functools.partial(_deaf_then, iterated.worker_init_fn)
        return loader


def _deaf_then(first, worker_id: int) -> None:
    deaf_to_job_signals(worker_id)
    if first is not None:
        first(worker_id)


def training_arguments(t: dict, strategy: dict, *, save_interval: int | None, output_dir: str, max_steps: int,
                       seed: int, use_cpu: bool, evaluate: bool) -> dict:
    """transformers ``TrainingArguments`` fields from the ``trainer`` keys (``t``, resolved), the strategy's
    own (:meth:`olmocr.train.strategy.Replicated.trainer_arguments`) and ``checkpoint.interval``."""
    return dict(
        output_dir=output_dir, max_steps=max_steps, seed=seed, use_cpu=use_cpu, bf16=t["precision"] == "bf16",
        per_device_train_batch_size=t["batch_size"], gradient_accumulation_steps=t["grad_accum"],
        max_grad_norm=t["clip_grad_norm"] or 0.0, gradient_checkpointing=t["activation_checkpointing"],
        dataloader_num_workers=t["num_workers"], **strategy,
        save_strategy="steps" if save_interval else "no", save_steps=save_interval or 500,
        eval_strategy="steps" if evaluate and t["eval_interval"] else "no", eval_steps=t["eval_interval"],
        # Every step's own loss, NaN included (the Trainer would log the mean of the finite ones before it).
        logging_steps=1, logging_nan_inf_filter=False, report_to=[], disable_tqdm=True, remove_unused_columns=False,
    )


class HFRecipe(Recipe):
    """A recipe whose loop is a Hugging Face Trainer subclass (trl's); checkpoints are the Trainer's
    ``checkpoints/checkpoint-<step>/``."""

    def latest_checkpoint(self) -> str | None:
        from olmocr.train.checkpoint import complete_checkpoints

        found = complete_checkpoints(self.checkpoints_dir)
        return found[max(found)] if found else None

    def checkpoint_step(self, checkpoint: str) -> int:
        return int(os.path.basename(checkpoint).rsplit("-", 1)[1])  # checkpoint-<step>

    def load_model(self, resume_from: str | None, train_data):
        """The policy (full, frozen parts or LoRA), with a resumed run's weights (see RunCheckpoints)."""
        from olmocr.models.loader import load_trainable

        finetune = self.resolved["finetune"]
        model = load_trainable(self.source, "cpu", finetune["freeze_vision"], finetune["freeze_language"],
                               finetune["lora"], resume_from)
        # trl loads its reference model (GRPO's KL, DPO's) from this path: the starting model, also when resuming.
        model.config._name_or_path = self.source.path
        return model

    def arguments(self) -> dict:
        """TrainingArguments fields of this run (the recipe adds its algorithm's)."""
        from olmocr.config import build

        strategy = build(self.cfg.strategy, info=self.dist, precision=self.settings.precision)
        return training_arguments(self.resolved["trainer"], strategy.trainer_arguments(),
                                  save_interval=self.checkpointing.interval, output_dir=self.checkpoints_dir,
                                  max_steps=self.length.stop, seed=self.cfg.seed,
                                  use_cpu=self.dist.device.type == "cpu", evaluate=self.eval_data is not None)

    def trainer(self, callbacks: list):
        raise NotImplementedError

    def fit(self, callbacks: list) -> dict:
        """Train (resuming from the newest checkpoint) with our console in place of the Trainer's printer."""
        from transformers import PrinterCallback

        from olmocr.models.loader import compile_blocks
        from olmocr.train.trainer import stopped
        from olmocr.train.trl_callbacks import HFTrainerBridge

        if self.settings.compile:  # the blocks, as our own loop does, not the Trainer's whole-model compile
            log.info("compiling %d blocks", compile_blocks(self.model, self.settings.compile_backend))
        bridge = HFTrainerBridge(callbacks, self.dist.device, self.bench_eval, self.best, self.settings.eval_interval)
        trainer = self.trainer([bridge])
        trainer.keep = (self.checkpointing.keep_last, self.best, self.resolved)
        bridge.trainer = trainer  # the bench eval decodes with GRPO's colocated vLLM engine where it runs one
        trainer.remove_callback(PrinterCallback)  # our console callback reports steps
        try:
            with bridge.signals:
                trainer.train(resume_from_checkpoint=self.resume_from)
        except BaseException as exc:
            bridge.on_exception(exc)
            raise
        if bridge.stopped_at:
            signum, step = bridge.stopped_at
            raise stopped(signum, step, None if bridge.divergence.in_a_row else
                          os.path.join(self.checkpoints_dir, f"checkpoint-{step}"))
        # Rank 0 writes checkpoints; other machines of a multi-node job have none (nor the folder).
        final = self.latest_checkpoint()
        return {"state": {"step": trainer.state.global_step}, "checkpoint": final, "log": trainer.state.log_history}
