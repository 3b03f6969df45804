"""Our training callbacks inside a Hugging Face Trainer (trl's GRPO)."""

from __future__ import annotations

import os
import types

import torch
from transformers import TrainerCallback

from olmocr.train.callbacks import Callback
from olmocr.train.trainer import Divergence, StopSignals, global_max, nonfinite_weights


class HFTrainerBridge(TrainerCallback):
    """Runs our callbacks inside a Hugging Face Trainer (trl's GRPO): each training log is a step's
    metrics (``train/<name>``), each eval log an eval's (``eval/<name>``). Runs the bench eval every
    ``eval_interval`` steps, before the Trainer's own eval and save of the step; an eval that is the best
    by ``checkpoint.keep_best`` saves the step. Also makes the last step save a checkpoint, as our own loop does,
    and, as it does, does not apply a step whose gradients are not finite, stops a diverged run
    (:class:`olmocr.train.trainer.Divergence`) and stops after a step, with its checkpoint, on SIGTERM or SIGINT
    (``signals``, :class:`olmocr.train.trainer.StopSignals`; ``stopped_at`` is then that step)."""

    def __init__(self, callbacks: list[Callback], device: torch.device, bench_eval=None, best=None,
                 eval_interval: int | None = None):
        self.callbacks = callbacks
        self.divergence = Divergence()
        self.bench_eval, self.best, self.eval_interval = bench_eval, best, eval_interval
        self.trainer = None  # the Hugging Face trainer, once built (GRPO's vLLM engine lives there)
        self.started = False  # on_fit_start called: the callbacks have something to end
        self.signals = StopSignals()  # entered around the Trainer's train()
        self.stopped_at: tuple[int, int] | None = None  # (signal, step) a stop was asked for
        # What our callbacks read from a trainer.
        self.view = types.SimpleNamespace(state=types.SimpleNamespace(step=0), stop_step=0, rank=0, device=device)

    def _call(self, hook: str, *args) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(self.view, *args)

    def on_train_begin(self, args, state, control, **kwargs):
        self.view.state.step, self.view.stop_step, self.view.rank = state.global_step, state.max_steps, args.process_index
        self._call("on_fit_start")
        self.started = True

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.global_step >= state.max_steps and args.save_strategy != "no":
            control.should_save = True
        if self.bench_eval is not None and self.eval_interval and state.global_step % self.eval_interval == 0:
            self.view.state.step = state.global_step
            decoder = self.bench_eval.decoder(model, processing_class, self.view.device,
                                              autocast_dtype=torch.bfloat16 if args.bf16 else None, trainer=self.trainer)
            training = model.training
            model.eval()
            metrics = self.bench_eval.evaluate(decoder, state.global_step, args.process_index, args.world_size)
            model.train(training)
            self._eval_end(state.global_step, metrics, control)
        # Every rank asks, every step; the Trainer saves the step (unless on_log finds it unapplied) and ends.
        signum = global_max(self.signals.signum or 0, self.view.device)
        if signum:
            control.should_save = control.should_training_stop = True
            self.stopped_at = (signum, state.global_step)

    def _eval_end(self, step: int, metrics: dict, control) -> None:
        self._call("on_eval_end", metrics)
        if self.best is not None and self.best.offer(step, metrics):
            control.should_save = True

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        finite = torch.stack([n.isfinite() for n in torch._foreach_norm(grads)]).all().float() if grads else \
            torch.ones((), device=self.view.device)
        if torch.distributed.is_initialized():  # every rank skips, or none
            torch.distributed.all_reduce(finite, op=torch.distributed.ReduceOp.MIN)
        if not finite.item():
            model.zero_grad(set_to_none=True)  # the optimizer passes over parameters without a gradient

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):
        from olmocr.train.checkpoint import complete_checkpoints

        self.view.state.step = state.global_step
        numbers = {k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))}
        if "loss" in numbers:
            self.divergence.record(
                state.global_step, numbers["loss"], numbers.get("grad_norm", 0.0),
                lambda: nonfinite_weights(model, self.view.device),
                sorted(complete_checkpoints(args.output_dir)))
            if self.divergence.in_a_row:
                control.should_save = False
        if any(key.startswith("eval_") for key in numbers):
            # logged inside the Trainer's eval, which its save of the step follows
            self._eval_end(state.global_step, {f"eval/{k[5:]}": v for k, v in numbers.items() if k.startswith("eval_")},
                           control)
        elif "loss" in numbers:
            self._call("on_step_end", {_metric_name(k): v for k, v in numbers.items()})

    def on_save(self, args, state, control, **kwargs):
        self._call("on_save", os.path.join(args.output_dir, f"checkpoint-{state.global_step}"))

    def on_train_end(self, args, state, control, **kwargs):
        self._call("on_fit_end")

    def on_exception(self, exc: BaseException) -> None:
        """The Trainer's train() raised (it has no hook of its own for that)."""
        if self.started:
            self._call("on_exception", exc)


def _metric_name(key: str) -> str:
    return {"loss": "train/loss", "grad_norm": "train/grad_norm", "learning_rate": "train/lr"}.get(key, f"train/{key}")
