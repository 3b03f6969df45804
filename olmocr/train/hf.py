"""What the trl-based algorithms (GRPO, DPO) share: the Hugging Face Trainer arguments our ``trainer`` keys
map to, where a run resumes from, and running the trainer with our callbacks."""

from __future__ import annotations

import logging
import os

log = logging.getLogger("olmocr.train")


class KeepLoadedWeights:
    """For a Trainer subclass whose model came through our loader, checkpoint weights included (the
    Trainer's own reload misses checkpoints saved with transformers' key conversion, Qwen2.5-VL, and
    would silently keep the initial weights); optimizer, scheduler, RNG and data position are still
    restored by the Trainer."""

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        pass


def load_policy(source, finetune: dict, resume_from: str | None):
    """The model to train (full, frozen parts or LoRA), with a resumed run's weights (see
    KeepLoadedWeights), and its parameter counts (trainable, total)."""
    from olmocr.models.tuning import load_trainable, trainable_summary

    model = load_trainable(source, "cpu", finetune["freeze_vision"], finetune["freeze_language"], finetune["lora"],
                           resume_from)
    # trl loads its reference model (GRPO's KL, DPO's) from this path: the starting model, also when resuming.
    model.config._name_or_path = source.path
    return model, trainable_summary(model)


def training_arguments(t: dict, *, output_dir: str, max_steps: int, seed: int, use_cpu: bool,
                       evaluate: bool) -> dict:
    """transformers ``TrainingArguments`` fields from the ``trainer`` keys (``t``, resolved)."""
    deepspeed = None
    if t["strategy"] == "deepspeed":
        deepspeed = {"zero_optimization": {"stage": t["zero_stage"]}, "bf16": {"enabled": t["precision"] == "bf16"},
                     "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                     "gradient_clipping": "auto"}
    return dict(
        output_dir=output_dir, max_steps=max_steps, seed=seed, use_cpu=use_cpu, bf16=t["precision"] == "bf16",
        per_device_train_batch_size=t["batch_size"], gradient_accumulation_steps=t["grad_accum"],
        max_grad_norm=t["clip_grad_norm"] or 0.0, gradient_checkpointing=t["activation_checkpointing"],
        dataloader_num_workers=t["num_workers"], deepspeed=deepspeed, torch_compile=t["compile"],
        ddp_find_unused_parameters=t["ddp_find_unused_parameters"],
        save_strategy="steps" if t["save_interval"] else "no", save_steps=t["save_interval"] or 500,
        save_total_limit=t["keep_last"],
        eval_strategy="steps" if evaluate and t["eval_interval"] else "no", eval_steps=t["eval_interval"],
        logging_steps=1, report_to=[], disable_tqdm=True, remove_unused_columns=False,
    )


def resume_point(output_dir: str, resume: bool) -> tuple[str, str | None]:
    """The checkpoints folder of a run dir and its newest checkpoint (None for a new run)."""
    from transformers.trainer_utils import get_last_checkpoint

    checkpoints = os.path.join(output_dir, "checkpoints")
    resume_from = get_last_checkpoint(checkpoints) if os.path.isdir(checkpoints) else None
    if resume_from and not resume:
        raise ValueError(f"trainer.resume=false but {checkpoints} holds checkpoints that a new run would "
                         "overwrite: choose another run_name (or hydra.run.dir), or resume")
    return checkpoints, resume_from


def fit(trainer, resume_from: str | None) -> dict:
    """Train (resuming from ``resume_from``) with our console in place of the Trainer's printer."""
    from transformers import PrinterCallback
    from transformers.trainer_utils import get_last_checkpoint

    trainer.remove_callback(PrinterCallback)  # our console callback reports steps
    if resume_from:
        log.info("resuming from %s", resume_from)
    trainer.train(resume_from_checkpoint=resume_from)
    # Rank 0 writes checkpoints; other machines of a multi-node job have none (nor the folder).
    out = trainer.args.output_dir
    final = get_last_checkpoint(out) if os.path.isdir(out) else None
    return {"state": {"step": trainer.state.global_step}, "checkpoint": final, "log": trainer.state.log_history}
