"""Our training callbacks inside a Hugging Face Trainer (trl's GRPO)."""

from __future__ import annotations

import os
import types

import torch
from transformers import TrainerCallback

from olmocr.train.callbacks import Callback


class HFTrainerBridge(TrainerCallback):
    """Runs our callbacks inside a Hugging Face Trainer (trl's GRPO): each training log is a step's
    metrics (``train/<name>``), each eval log an eval's (``eval/<name>``). Also makes the last step save
    a checkpoint, as our own loop does."""

    def __init__(self, callbacks: list[Callback], device: torch.device):
        self.callbacks = callbacks
        # What our callbacks read from a trainer.
        self.view = types.SimpleNamespace(state=types.SimpleNamespace(step=0), stop_step=0, rank=0, device=device)

    def _call(self, hook: str, *args) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(self.view, *args)

    def on_train_begin(self, args, state, control, **kwargs):
        self.view.state.step, self.view.stop_step, self.view.rank = state.global_step, state.max_steps, args.process_index
        self._call("on_fit_start")

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= state.max_steps and args.save_strategy != "no":
            control.should_save = True

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.view.state.step = state.global_step
        numbers = {k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))}
        if any(key.startswith("eval_") for key in numbers):
            self._call("on_eval_end", {f"eval/{k[5:]}": v for k, v in numbers.items() if k.startswith("eval_")})
        elif "loss" in numbers:
            self._call("on_step_end", {_metric_name(k): v for k, v in numbers.items()})

    def on_save(self, args, state, control, **kwargs):
        self._call("on_save", os.path.join(args.output_dir, f"checkpoint-{state.global_step}"))

    def on_train_end(self, args, state, control, **kwargs):
        self._call("on_fit_end")


def _metric_name(key: str) -> str:
    return {"loss": "train/loss", "grad_norm": "train/grad_norm", "learning_rate": "train/lr"}.get(key, f"train/{key}")
