"""Side work of the training loop. A callback implements any of the hooks of :class:`Callback`."""

from __future__ import annotations

import gc
import json
import logging
import os
import uuid
from typing import Annotated

from olmocr.config import OneOf, runtime
from olmocr.errors import UserError

log = logging.getLogger("olmocr.train")


class Callback:
    def on_run_start(self, rank: int) -> None:
        """Before the model loads (called by the recipe, for every algorithm): check what the callback needs
        from outside (a service, a key), so that a run it would fail stops before any heavy work."""

    def on_fit_start(self, trainer) -> None: ...
    def on_step_end(self, trainer, metrics: dict) -> None: ...
    def on_eval_end(self, trainer, metrics: dict) -> None: ...
    def on_save(self, trainer, path: str) -> None: ...
    def on_fit_end(self, trainer) -> None: ...

    def on_exception(self, trainer, exc: BaseException) -> None:
        """The fit stops on an error (divergence, a fault, an interrupt): end what :meth:`on_fit_start` began,
        so that the error, printed next, is the last thing the run shows."""


class GPUMemory(Callback):
    def on_step_end(self, trainer, metrics):
        if trainer.device.type == "cuda":
            import torch

            metrics["gpu/max_allocated_gib"] = torch.cuda.max_memory_allocated(trainer.device) / 2**30
            metrics["gpu/max_reserved_gib"] = torch.cuda.max_memory_reserved(trainer.device) / 2**30
            torch.cuda.reset_peak_memory_stats(trainer.device)


class GarbageCollection(Callback):
    """Python's GC pauses hit steps at random; collect at a fixed interval instead."""

    def __init__(self, interval: int = 100):
        self.interval = interval

    def on_fit_start(self, trainer):
        gc.disable()

    def on_step_end(self, trainer, metrics):
        if trainer.state.step % self.interval == 0:
            gc.collect(1)

    def on_fit_end(self, trainer):
        gc.enable()

    def on_exception(self, trainer, exc):
        gc.enable()


@runtime("output_dir")
class Profiler(Callback):
    """torch.profiler over a few steps; a Chrome trace lands in ``<run dir>/profile``."""

    def __init__(self, output_dir: str, wait: int = 1, warmup: int = 1, active: int = 3):
        self.output_dir = os.path.join(output_dir, "profile")
        self.schedule = dict(wait=wait, warmup=warmup, active=active, repeat=1)

    def on_fit_start(self, trainer):
        import torch  # here, not at module level: config validation reads these classes' signatures

        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(
            activities=activities, schedule=torch.profiler.schedule(**self.schedule),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(self.output_dir), record_shapes=True)
        self.profiler.start()

    def on_step_end(self, trainer, metrics):
        self.profiler.step()

    def on_fit_end(self, trainer):
        self.profiler.stop()

    def on_exception(self, trainer, exc):
        self.profiler.stop()


class MetricsFile(Callback):
    """Every step's and eval's metrics as JSON lines in ``<run dir>/metrics.jsonl`` (rank 0)."""

    def __init__(self, output_dir: str):
        self.path = os.path.join(output_dir, "metrics.jsonl")

    def _write(self, trainer, kind: str, metrics: dict):
        if trainer.rank == 0:
            with open(self.path, "a") as fh:
                fh.write(json.dumps({"kind": kind, "step": trainer.state.step, **metrics}) + "\n")

    def on_fit_start(self, trainer):
        """A run resumed from a checkpoint redoes the steps after it: their rows from before the interruption
        go, so that the file holds each step once (as the run that counts did it)."""
        from olmocr.utils.jsonl import mend, read_rows

        if trainer.rank != 0 or not os.path.exists(self.path):
            return
        mend(self.path)  # a line torn by the kill that interrupted the run
        rows = read_rows(self.path)
        kept = [row for row in rows if row["step"] <= trainer.state.step]
        if len(kept) < len(rows):
            with open(self.path + ".tmp", "w") as fh:
                fh.writelines(json.dumps(row) + "\n" for row in kept)
            os.replace(self.path + ".tmp", self.path)

    def on_step_end(self, trainer, metrics):
        self._write(trainer, "train", metrics)

    def on_eval_end(self, trainer, metrics):
        self._write(trainer, "eval", metrics)


@runtime("output_dir")
class Plots(Callback):
    """The run's curves as PNG in ``<run dir>/plots`` when training ends (rank 0)."""

    def __init__(self, output_dir: str):
        self.output_dir = output_dir

    def on_fit_end(self, trainer):
        if trainer.rank == 0:
            from olmocr.report.plots import plot_run

            try:
                written = plot_run(self.output_dir)
            except (OSError, ValueError) as exc:  # a finished run stays finished; the plots can be redrawn
                log.warning("plots not drawn (%s); python -m olmocr.report.plots run_dir=%s", exc, self.output_dir)
                return
            log.info("plots: %s", ", ".join(os.path.basename(p) for p in written))


class Console(Callback):
    """A progress bar over optimizer steps and a log line every ``interval`` steps (rank 0)."""

    def __init__(self, interval: int = 10):
        self.interval = interval

    def on_fit_start(self, trainer):
        from tqdm import tqdm

        self.bar = tqdm(total=trainer.stop_step, initial=trainer.state.step, unit="step", desc="train",
                        disable=trainer.rank != 0)

    # What a log line shows, where the loop reports it (SFT: loss and throughput; GRPO: also rewards).
    SHOWN = (("train/loss", "loss {:.4f}"), ("train/reward", "reward {:.3f}"), ("train/grad_norm", "grad_norm {:.3f}"),
             ("train/lr", "lr {:.3e}"), ("perf/samples_per_s", "| {:.1f} samples/s"),
             ("perf/tokens_per_s", "{:.0f} tokens/s"), ("perf/data_wait_percent", "data wait {:.0f}%"))

    def on_step_end(self, trainer, metrics):
        self.bar.update(trainer.state.step - self.bar.n)
        self.bar.set_postfix({k.split("/")[-1]: f"{metrics[k]:.4g}" for k in ("train/loss", "train/reward", "train/lr")
                              if k in metrics})
        if trainer.rank == 0 and (trainer.state.step % self.interval == 0 or trainer.state.step == 1):
            shown = " ".join(fmt.format(metrics[key]) for key, fmt in self.SHOWN if key in metrics)
            log.info("step %d/%d %s", trainer.state.step, trainer.stop_step, shown)

    def on_eval_end(self, trainer, metrics):
        shown = [f"{k} {v:.4f}" for k, v in metrics.items() if k.endswith("/loss") or k == "eval/bench/overall"]
        if trainer.rank == 0 and shown:
            log.info("eval at step %d: %s", trainer.state.step, ", ".join(shown))

    def on_save(self, trainer, path):
        log.info("saved %s", path)

    def on_fit_end(self, trainer):
        self.bar.close()

    def on_exception(self, trainer, exc):
        self.bar.close()  # else drawn again when the process exits, after the error line


@runtime("run_config", "output_dir")
class Wandb(Callback):
    """Weights & Biases logging. The API key is read by wandb from WANDB_API_KEY, never from config;
    ``mode: offline`` writes runs locally for a later ``wandb sync``. A run that continues (after a
    preemption, a hard stop, a requeue) logs into the same W&B run: its id is kept in the run dir. Online,
    the server and the key are checked before the model loads (:meth:`on_run_start`)."""

    LOGIN_TIMEOUT_S = 30
    REACH_TIMEOUT_S = 10

    def __init__(self, project: str, run_config: dict, output_dir: str, entity: str | None = None,
                 name: str | None = None, mode: Annotated[str, OneOf("online", "offline", "disabled")] = "online",
                 tags: list[str] | None = None):
        self.id_path = os.path.join(output_dir, "wandb_run_id")
        self.kwargs = dict(project=project, entity=entity, name=name, mode=mode, tags=tags, config=run_config,
                           dir=output_dir)

    def on_run_start(self, rank: int) -> None:
        """An unreachable server or a refused key, now in one line, not after wandb.init's 90 s and a trace
        when the first step is due."""
        if rank != 0 or self.kwargs["mode"] != "online":
            return
        import wandb
        from wandb.sdk.wandb_setup import singleton

        # Reachability first, here: wandb's own check waits on its service process, which retries a refused
        # or silent server until its own deadline and then says only that the service "did not respond".
        self._reach(singleton().settings.base_url)
        try:
            wandb.login(verify=True, timeout=self.LOGIN_TIMEOUT_S)
        except wandb.errors.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UserError(f"callbacks.wandb: {reason} (WANDB_MODE=offline logs the run here for a later "
                            "`wandb sync`; logger=console logs to the console only)") from None

    def _reach(self, url: str) -> None:
        """Any HTTP answer means the server is there (its key is wandb's to check); no connection, no name or
        no answer in time is one line. TLS is left to wandb, which may trust certificates this process does not."""
        import ssl
        import urllib.error
        import urllib.request

        try:
            urllib.request.urlopen(url, timeout=self.REACH_TIMEOUT_S).close()
        except (urllib.error.HTTPError, ssl.SSLError):
            return
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ssl.SSLError):
                return
            reason = exc.reason if isinstance(exc.reason, str) else (exc.reason.strerror or str(exc.reason))
        except TimeoutError:
            reason = f"no answer within {self.REACH_TIMEOUT_S} s"
        except OSError as exc:
            reason = exc.strerror or str(exc)
        else:
            return
        raise UserError(f"callbacks.wandb: cannot reach {url}: {reason} (WANDB_BASE_URL or `wandb login --host` "
                        "names the server; WANDB_MODE=offline logs the run here for a later `wandb sync`; "
                        "logger=console logs to the console only)")

    def run_id(self) -> str:
        """The W&B run of this run dir: made on the first start, read on every later one."""
        if not os.path.exists(self.id_path):
            os.makedirs(os.path.dirname(self.id_path) or ".", exist_ok=True)
            with open(self.id_path + ".tmp", "w") as fh:
                fh.write(uuid.uuid4().hex[:12])
            os.replace(self.id_path + ".tmp", self.id_path)
        with open(self.id_path) as fh:
            return fh.read().strip()

    def on_fit_start(self, trainer):
        if trainer.rank == 0:
            import wandb

            self.run = wandb.init(id=self.run_id(), resume="allow", **self.kwargs)

    def on_step_end(self, trainer, metrics):
        if trainer.rank == 0:
            self.run.log(metrics, step=trainer.state.step)

    def on_eval_end(self, trainer, metrics):
        if trainer.rank == 0:
            self.run.log(metrics, step=trainer.state.step)

    def on_fit_end(self, trainer):
        if trainer.rank == 0:
            self.run.finish()
