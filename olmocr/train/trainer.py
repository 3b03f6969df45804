"""The training loop. Each step is a named method; logging, profiling and the like are callbacks."""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from olmocr.data.steps import IGNORE_INDEX
from olmocr.errors import UserError
from olmocr.faults import Stopped
from olmocr.train.checkpoint import CheckpointManager, set_rng_state
from olmocr.train.collate import model_inputs
from olmocr.train.data import epoch_loader
from olmocr.train.distributed import DistInfo
from olmocr.train.strategy import Replicated
from olmocr.train.schema import TrainerConfig

log = logging.getLogger(__name__)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def nonfinite_weights(model, device: torch.device) -> bool:
    """Is any weight no longer finite, on any rank (each looks at its own shards)?"""
    count = torch.tensor(float(sum(int(not torch.isfinite(getattr(p, "_local_tensor", p)).all())
                                   for p in model.parameters())), device=device)
    if dist.is_initialized():
        dist.all_reduce(count)
    return bool(count.item())


class StopSignals:
    """SIGTERM or SIGINT (Ctrl-C) during a run ask it to stop after the step under way (``signum`` is the last one
    sent); a second SIGINT stops at once. Not in a SLURM job, where submitit's handlers keep the job running until
    the scheduler requeues it, nor off the main thread (a notebook's worker thread cannot set handlers)."""

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict = {}

    def __enter__(self) -> StopSignals:
        self.signum = None
        if "SUBMITIT_EXECUTOR" not in os.environ and threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            # None: a handler set outside Python (a native library's), which cannot be put back from here
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        self._previous = {}

    def _on_signal(self, signum, frame) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum
        log.warning("%s: stopping when the step under way ends, with a checkpoint (Ctrl-C again stops at once, "
                    "unsaved)", signal.Signals(signum).name)


def global_max(value: int, device: torch.device) -> int:
    """The largest ``value`` over the ranks (every rank must ask)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return value
    tensor = torch.tensor(value, device=device, dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def stopped(signum: int, step: int, checkpoint: str | None) -> Stopped:
    """What a run stopped by ``signum`` after ``step`` says: the checkpoint of that step, or none when steps went
    unapplied (they are not saved)."""
    name = signal.Signals(signum).name
    if checkpoint is None:
        return Stopped(f"stopped by {name} at step {step}, not saved (steps go unapplied, see above); the same "
                       "command resumes from the newest checkpoint", signum)
    return Stopped(f"stopped by {name} at step {step}, saved as {checkpoint}; the same command resumes from it", signum)


class Divergence:
    """Steps whose loss or gradient norm is not finite; their updates are not applied (the strategy, or for a
    Hugging Face Trainer the bridge, skips them). One bad batch is passed over with a warning. Weights that
    are no longer finite, or ``stop_after`` such steps in a row, stop the run in one line before anything of
    it is saved: a diverged run would otherwise go on for days, write NaN checkpoints and prune the good ones.
    Nothing is saved while :attr:`in_a_row` is not 0."""

    def __init__(self, stop_after: int = 3):
        self.stop_after, self.in_a_row = stop_after, 0

    def record(self, step: int, loss: float, norm: float, broken, checkpoints: list[int]) -> None:
        """``broken()``: are the weights no longer finite (asked only after a step that was not)."""
        if math.isfinite(loss) and math.isfinite(norm):
            self.in_a_row = 0
            return
        self.in_a_row += 1
        weights = broken()
        if not weights and self.in_a_row < self.stop_after:
            log.warning("step %d: loss %g, gradient norm %g: its update was not applied (a batch whose loss or "
                        "gradients are not finite)", step, loss, norm)
            return
        why = "the weights are no longer finite" if weights else f"{self.in_a_row} steps in a row, none applied"
        raise UserError(f"step {step}: loss {loss:g}, gradient norm {norm:g}; {why}: training diverged and stops "
                        "before saving anything of it; " + (
                            f"the newest checkpoint is of step {checkpoints[-1]}: lower optimizer.lr (or "
                            "trainer.clip_grad_norm) and run again to resume from it" if checkpoints else
                            "no checkpoint yet: lower optimizer.lr (or trainer.clip_grad_norm) and run again"))


@dataclass
class TrainState:
    step: int = 0
    epoch: int = 0
    position: int = 0  # samples drawn (all ranks) in the current epoch
    tokens: int = 0  # label tokens trained on (all ranks)
    samples: int = 0  # samples trained on (all ranks)


class Trainer:
    """Our loop over the ``trainer`` settings (batch size, accumulation, precision, clipping, intervals)
    for ``stop_step`` steps, on one process or as one rank of ``dist``."""

    def __init__(self, model, processor, optimizer, scheduler, train_data, eval_data: dict, collator,
                 checkpoints: CheckpointManager, callbacks: list, settings: TrainerConfig, *, stop_step: int,
                 seed: int, dist: DistInfo | None = None, resume_from: str | None = None, strategy=None,
                 bench_eval=None):
        self.model, self.processor = model, processor
        self.optimizer, self.scheduler = optimizer, scheduler
        self.train_data, self.eval_data, self.collator = train_data, eval_data, collator
        self.checkpoints, self.callbacks = checkpoints, callbacks
        self.settings, self.stop_step, self.seed = settings, stop_step, seed
        dist = dist or DistInfo(0, 1, 0, torch.device("cpu"))
        self.rank, self.world_size, self.device = dist.rank, dist.world_size, dist.device
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp32": None}[settings.precision]
        self.resume_from = resume_from
        self.strategy = strategy or Replicated(dist)
        self.bench_eval = bench_eval  # olmocr.train.bench_eval.BenchEval, or None
        self.state = TrainState()
        self.data_wait = 0.0
        self.divergence = Divergence()
        self.signals = StopSignals()  # the stop signals this process was sent during fit
        self._clock = (time.perf_counter(), 0.0)

    # -- the loop ---------------------------------------------------------------------------------------------
    def fit(self) -> TrainState:
        self.restore()
        self._emit("on_fit_start")
        self._clock = (time.perf_counter(), self.data_wait)
        windows = self.windows()
        try:
            with self.signals:
                while self.state.step < self.stop_step:
                    window = next(windows)
                    metrics = self.train_step(window)
                    self._emit("on_step_end", metrics)
                    self.check_finite(metrics)
                    evaluated = self.evaluate() if self._due(self.settings.eval_interval) else {}
                    new_best = self.checkpoints.best.offer(self.state.step, evaluated)  # saved now, whatever the interval says
                    due = new_best or self.checkpoints.policy.due(self.state.step) or self.state.step == self.stop_step
                    # Nothing is saved (and no older checkpoint pruned) while steps go unapplied: it may be divergence.
                    saving = due and not self.divergence.in_a_row
                    if saving:
                        self.save()
                    self.stop_if_signalled(saved=saving)
        except BaseException as exc:
            self._emit("on_exception", exc)
            raise
        finally:
            # The loader's workers end now, not whenever a traceback that holds this frame (a notebook's, say) is let go.
            windows.close()
        self._emit("on_fit_end")
        return self.state

    def stop_if_signalled(self, saved: bool) -> None:
        """After a step: when any rank was sent SIGTERM or SIGINT, every rank stops here, with a checkpoint of
        this step (unless steps go unapplied, which are not saved)."""
        signum = global_max(self.signals.signum or 0, self.device)
        if not signum:
            return
        if self.divergence.in_a_row:
            raise stopped(signum, self.state.step, None)
        if not saved:
            self.save()
        raise stopped(signum, self.state.step, self.checkpoints.path(self.state.step))

    def train_step(self, window: list[dict]) -> dict:
        self.model.train()
        tokens = self._global_sum(sum(self._label_tokens(b) for b in window))
        loss_sum = torch.zeros((), device=self.device)
        for i, batch in enumerate(window):
            last = i == len(window) - 1
            with self.strategy.no_sync(self.model, last):
                batch_loss = self.loss_sum(batch)
                # Every label token of the optimizer step weighs the same, across micro-batches and ranks
                # (data-parallel gradients are averaged over ranks, hence the world_size factor).
                self.strategy.backward(self.model, batch_loss * self.world_size / max(tokens, 1), last)
            loss_sum += batch_loss.detach()
        grad_norm = self.optimizer_step()
        samples = self._global_sum(sum(b["size"] for b in window))
        self.state.step += 1
        self.state.tokens += tokens
        self.state.samples += samples
        now, waited = time.perf_counter(), self.data_wait
        elapsed = max(now - self._clock[0], 1e-9)
        wait_percent = 100 * (waited - self._clock[1]) / elapsed
        self._clock = (now, waited)
        return {"train/loss": self._global_sum(loss_sum).item() / max(tokens, 1), "train/grad_norm": grad_norm,
                "train/lr": self.optimizer.param_groups[0]["lr"], "train/tokens": tokens, "train/samples": samples,
                "perf/samples_per_s": samples / elapsed, "perf/tokens_per_s": tokens / elapsed,
                "perf/data_wait_percent": wait_percent}

    def check_finite(self, metrics: dict) -> None:
        self.divergence.record(self.state.step, metrics["train/loss"], metrics["train/grad_norm"],
                               lambda: nonfinite_weights(self.model, self.device), self.checkpoints.steps())

    def loss_sum(self, batch: dict) -> torch.Tensor:
        """Summed next-token cross-entropy over the batch's label tokens."""
        inputs = {k: v.to(self.device, non_blocking=True) for k, v in model_inputs(batch).items()}
        labels = batch["labels"].to(self.device, non_blocking=True)
        with torch.autocast(self.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None):
            # No KV cache: training reads it never, and a compiled decoder layer would compile once for the
            # first layer's empty cache and again for the rest.
            logits = self.model(**inputs, use_cache=False).logits
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(),
                               ignore_index=IGNORE_INDEX, reduction="sum")

    def optimizer_step(self) -> float:
        grad_norm = self.strategy.optimizer_step(self.model, self.optimizer, self.settings.clip_grad_norm)
        self.scheduler.step()
        return grad_norm

    # Eagerly: with trainer.compile, every no-grad shape of an eval batch (Qwen2.5-VL's vision blocks specialise
    # on the number of images) would compile the blocks again, up to dynamo's recompile limit, for graphs
    # that run once per eval_interval.
    @torch.no_grad()
    @torch.compiler.set_stance("force_eager")
    def evaluate(self) -> dict:
        self.model.eval()
        metrics = {}
        for name, dataset in self.eval_data.items():
            loader = epoch_loader(dataset, self.collator, self.settings.batch_size, self.seed, 0, 0, self.rank,
                                  self.world_size, self.settings.num_workers, shuffle=False)
            loss, tokens = torch.zeros((), device=self.device), 0
            for i, batch in enumerate(loader):
                if self.settings.eval_max_batches is not None and i >= self.settings.eval_max_batches:
                    break
                if batch["size"]:
                    loss += self.loss_sum(batch)
                    tokens += self._label_tokens(batch)
            tokens = self._global_sum(tokens)
            metrics[f"eval/{name}/loss"] = self._global_sum(loss).item() / max(tokens, 1)
            metrics[f"eval/{name}/tokens"] = tokens
        if self.bench_eval is not None:
            decoder = self.bench_eval.decoder(self.model, self.processor, self.device, autocast_dtype=self.autocast_dtype,
                                              synced=self.strategy.shards_weights)
            metrics.update(self.bench_eval.evaluate(decoder, self.state.step, self.rank, self.world_size))
        self._emit("on_eval_end", metrics)
        return metrics

    def save(self) -> str | None:
        """Rank 0 prepares the checkpoint dir; every rank joins the collective parts (gathering sharded
        weights, DeepSpeed's partitioned optimizer state); rank 0 writes the rest and completes it."""
        step = self.state.step
        staging = self.checkpoints.begin(step) if self.rank == 0 else self.checkpoints.staging(step)
        self._barrier()
        self.strategy.save_sharded(self.model, staging)
        model_state = self.strategy.model_state(self.model)
        optimizer_state = self.strategy.optimizer_state(self.model, self.optimizer)
        self._barrier()
        path = None
        if self.rank == 0:
            path = self.checkpoints.commit(step, self.model, self.processor, {
                "state": vars(self.state), "optimizer": optimizer_state, "scheduler": self.scheduler.state_dict(),
            }, model_state)
            self._emit("on_save", path)
        self._barrier()
        return path

    def restore(self) -> None:
        path = self.resume_from
        if path is None:
            return
        saved = self.checkpoints.load_state(path)
        self.state = TrainState(**saved["state"])
        self.strategy.load_optimizer_state(self.model, self.optimizer, saved["optimizer"], path)
        self.scheduler.load_state_dict(saved["scheduler"])
        set_rng_state(saved["rng"])
        log.info("resumed from %s (step %d, epoch %d, %d samples into it)", path, self.state.step,
                 self.state.epoch, self.state.position)

    # -- data -------------------------------------------------------------------------------------------------
    def windows(self):
        """Lists of ``grad_accum`` non-empty micro-batches, epoch after epoch, from the saved position on."""
        window: list[dict] = []
        while True:
            loader = epoch_loader(self.train_data, self.collator, self.settings.batch_size, self.seed, self.state.epoch,
                                  self.state.position, self.rank, self.world_size, self.settings.num_workers)
            batches = iter(loader)
            while True:
                start = time.perf_counter()
                batch = next(batches, None)
                self.data_wait += time.perf_counter() - start
                if batch is None:
                    break
                self.state.position += batch["drawn"] * self.world_size
                if batch["size"]:
                    window.append(batch)
                if len(window) == self.settings.grad_accum:
                    yield window
                    window = []
            self.state.epoch += 1
            self.state.position = 0

    # -- helpers ----------------------------------------------------------------------------------------------
    @staticmethod
    def _label_tokens(batch: dict) -> int:
        return int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())

    def _global_sum(self, value):
        if self.world_size == 1:
            return value
        tensor = torch.as_tensor(value, device=self.device, dtype=torch.float64).clone()
        dist.all_reduce(tensor)
        return int(tensor.item()) if isinstance(value, int) else tensor.to(torch.float32)

    def _barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    def _due(self, interval: int | None) -> bool:
        return bool(interval) and self.state.step % interval == 0

    def _emit(self, hook: str, *args) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(self, *args)
