"""Checkpoints: a Hugging Face model (or adapter) directory plus the trainer state, and resume.

Layout of one checkpoint, written to a temporary name and renamed when complete:

    checkpoints/step_000040/
        model/                    save_pretrained output (full weights, or the LoRA adapter) + processor, and
                                  olmocr_pages.json: how its pages were rendered and prompted (olmocr.data.presented)
        trainer_state.pt          optimizer, scheduler, step, data position, RNG states
        best.json                 (checkpoint.keep_best) the best eval so far: metric, step, value
        run_config.yaml           the resolved config it was trained with (a resumed run says what changed)
        deepspeed/                (strategy=deepspeed) the partitioned optimizer state, DeepSpeed format
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import shutil

from dataclasses import dataclass
from typing import Annotated

import yaml

from olmocr.config import Range
from olmocr.data.presented import write_record
from olmocr.errors import UserError
from olmocr.faults import NoSpace, no_space
from olmocr.models.source import save_model
from olmocr.utils.sync import BEST, MARKERS

RUN_CONFIG = "run_config.yaml"
STEP_DIR = re.compile(r"^step_(\d+)$")
CHECKPOINT_DIR = re.compile(r"^(?:step_|checkpoint-)(\d+)$")  # ours, and the Hugging Face Trainer's


def complete_checkpoints(root: str) -> dict[int, str]:
    """Checkpoints under ``root`` whose trainer finished writing them (its marker is there), by step."""
    found = {}
    if os.path.isdir(root):
        for name in os.listdir(root):
            match = CHECKPOINT_DIR.match(name)
            path = os.path.join(root, name)
            if match and any(os.path.exists(os.path.join(path, marker)) for marker in MARKERS):
                found[int(match.group(1))] = path
    return found


def prune(checkpoints: dict[int, str], keep_last: int | None, keep: int | None = None) -> None:
    """Remove all but the newest ``keep_last`` checkpoints and the one of step ``keep`` (the best)."""
    if keep_last is None:
        return
    for step in sorted(checkpoints)[:-keep_last]:
        if step != keep:
            shutil.rmtree(checkpoints[step], ignore_errors=True)


class BestCheckpoint:
    """The run's best eval by ``metric`` (``checkpoint.keep_best``: higher is better, lower for a loss). A new
    best is saved at once and never pruned; every checkpoint carries the best known when it was written
    (``best.json``), so the newest one names the run's best, also after a resume."""

    def __init__(self, metric: str | None):
        self.metric = metric
        self.record: dict | None = None

    @property
    def step(self) -> int | None:
        return self.record["step"] if self.record else None

    def offer(self, step: int, metrics: dict) -> bool:
        """Whether the eval of ``step`` is a new best (metrics without the metric: no)."""
        if self.metric is None or self.metric not in metrics:
            return False
        value = float(metrics[self.metric])
        lower = self.metric.endswith("loss")
        if self.record is not None and not (value < self.record["value"] if lower else value > self.record["value"]):
            return False
        self.record = {"metric": self.metric, "step": step, "value": value}
        return True

    def write(self, folder: str) -> None:
        if self.record is not None:
            with open(os.path.join(folder, BEST), "w") as fh:
                json.dump(self.record, fh)

    def restore(self, checkpoint: str | None) -> None:
        """The record of the checkpoint a run resumes from (one for another metric is not this run's best)."""
        path = os.path.join(checkpoint, BEST) if checkpoint else ""
        if self.metric and os.path.exists(path):
            with open(path) as fh:
                record = json.load(fh)
            self.record = record if record.get("metric") == self.metric else None


def write_run_config(folder: str, config: dict | None) -> None:
    if config is not None:
        with open(os.path.join(folder, RUN_CONFIG), "w") as fh:
            yaml.safe_dump(config, fh, sort_keys=False)


def config_changes(checkpoint: str, config: dict) -> list[str] | None:
    """``key: old → new`` for every value of ``config`` that differs from what ``checkpoint`` was trained with
    (keys added or gone included); None where the checkpoint has no record of it."""
    path = os.path.join(checkpoint, RUN_CONFIG)
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        before = yaml.safe_load(fh) or {}

    def leaves(node, prefix=""):
        if isinstance(node, dict) and node:
            for key, value in node.items():
                yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
        else:
            yield prefix, node

    old, new = dict(leaves(before)), dict(leaves(config))
    absent = object()
    shown = lambda value: "(absent)" if value is absent else json.dumps(value)  # noqa: E731
    return [f"{key}: {shown(old.get(key, absent))} → {shown(new.get(key, absent))}"
            for key in sorted(old.keys() | new.keys()) if old.get(key, absent) != new.get(key, absent)]


def model_dir(checkpoint: str) -> str:
    """The Hugging Face model directory of a checkpoint: ``step_N/model`` for SFT checkpoints, the
    checkpoint itself for GRPO's (``checkpoint-N``, Hugging Face Trainer layout)."""
    inner = os.path.join(checkpoint, "model")
    if os.path.isfile(os.path.join(inner, "config.json")) or os.path.isfile(os.path.join(inner, "adapter_config.json")):
        return inner
    if os.path.isfile(os.path.join(checkpoint, "config.json")) or \
            os.path.isfile(os.path.join(checkpoint, "adapter_config.json")):
        return checkpoint
    raise UserError(f"{checkpoint} holds no model (no config.json or adapter_config.json, here or in model/)")


def rng_state() -> dict:
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def unsaved(exc: Exception, folder: str, step: int, root: str) -> NoSpace | None:
    """After writing checkpoint ``folder`` failed: its partial files removed (never resumed from, and a full
    disk gets their space back), and for a full disk or a spent quota the error to raise instead, saying
    which checkpoint is the newest kept and what one takes."""
    full = no_space(exc, folder)
    shutil.rmtree(folder, ignore_errors=True)
    if full is None:
        return None
    kept = complete_checkpoints(root)
    newest = kept[max(kept)] if kept else None
    full.filename = full.filename or folder
    full.outcome = (f"checkpoint of step {step} not saved, its partial files removed; " + (
        f"the newest kept is {newest} ({_size(newest) / 1e6:.1f} MB), which a run started again resumes from"
        if newest else "no checkpoint kept yet"))
    return full


def _size(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder) for f in files)


def _save_state(state: dict, path: str) -> None:
    """``torch.save``, with the OS error of a failed write kept: torch reports a file it could not finish as
    a position mismatch, which would hide a full disk."""
    import torch

    with open(path, "wb") as fh:
        writer = _Writes(fh)
        try:
            torch.save(state, writer)
        except RuntimeError as exc:
            if writer.error is not None:
                raise writer.error from exc
            raise


class _Writes(io.RawIOBase):
    def __init__(self, fh):
        self.fh, self.error = fh, None

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        try:
            return self.fh.write(data)
        except OSError as exc:
            self.error = exc
            raise


@dataclass(kw_only=True)
class Checkpointing:
    """``checkpoint``: when a run saves, what it keeps and whether it resumes, for every algorithm."""

    interval: Annotated[int | None, Range(at_least=0, null="none")] = 500  # steps; the last step saves too
    keep_last: Annotated[int | None, Range(at_least=1, null="every checkpoint")] = 3
    # An eval metric (eval/bench/overall, eval/<name>/loss, …): its best checkpoint is saved when reached and
    # kept besides the newest keep_last ones; null: none kept for its score.
    keep_best: str | None = None
    resume: bool = True  # continue from the newest complete checkpoint; false refuses a run dir that has one

    def due(self, step: int) -> bool:
        return bool(self.interval) and step % self.interval == 0

    def resume_point(self, latest: str | None, root: str) -> str | None:
        """The one resume rule: continue from ``latest``, the newest complete checkpoint under ``root``; with
        ``resume=false``, refuse to start over a run that has checkpoints."""
        if latest and not self.resume:
            raise UserError(f"checkpoint.resume=false but {root} holds checkpoints that a new run would overwrite: "
                            "choose another run_name (or hydra.run.dir), or resume")
        return latest

    def check(self, eval_interval: int | None, bench_eval) -> None:
        """``keep_best`` names a metric this run's evals log."""
        metric = self.keep_best
        if metric is None:
            return
        if not eval_interval:
            raise UserError(f"checkpoint.keep_best={metric} needs evals: set trainer.eval_interval (or "
                            "checkpoint.keep_best=null)")
        if not metric.startswith("eval/"):
            raise UserError(f"checkpoint.keep_best: expected an eval metric (eval/bench/overall, eval/<name>/loss, …), "
                            f"got {metric!r}")
        if metric.startswith("eval/bench/"):
            if bench_eval is None:
                raise UserError(f"checkpoint.keep_best={metric}: this run has no bench eval (eval.bench is null; "
                                "eval=sample_bench or eval=olmocr_bench adds one, checkpoint.keep_best=null keeps none)")
            if metric not in bench_eval.metric_names():
                raise UserError(f"checkpoint.keep_best: the bench eval logs no {metric}; it logs "
                                f"{', '.join(bench_eval.metric_names())}")


class CheckpointManager:
    """Our loop's checkpoints under ``root``, saved and pruned by ``policy``."""

    def __init__(self, root: str, policy: Checkpointing | None = None, best: BestCheckpoint | None = None,
                 config: dict | None = None):
        self.root = root
        self.policy = policy or Checkpointing()
        self.best = best or BestCheckpoint(None)
        self.config = config  # the run's resolved config, written into each checkpoint

    def steps(self) -> list[int]:
        return sorted(complete_checkpoints(self.root))

    def path(self, step: int) -> str:
        return os.path.join(self.root, f"step_{step:06d}")

    def latest(self) -> str | None:
        steps = self.steps()
        return self.path(steps[-1]) if steps else None

    def staging(self, step: int) -> str:
        return self.path(step) + ".partial"

    def begin(self, step: int) -> str:
        """An empty staging dir for ``step`` (a checkpoint is only visible once complete)."""
        staging = self.staging(step)
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        return staging

    def commit(self, step: int, model, processor, state: dict, model_state: dict | None = None) -> str:
        staging, final = self.staging(step), self.path(step)
        try:
            save_model(model, processor, os.path.join(staging, "model"), model_state)
            write_record(os.path.join(staging, "model"), ((self.config or {}).get("data") or {}).get("steps"))
            self.best.write(staging)
            write_run_config(staging, self.config)
            _save_state({**state, "rng": rng_state()}, os.path.join(staging, "trainer_state.pt"))
        except Exception as exc:
            full = unsaved(exc, staging, step, self.root)
            if full is None:
                raise
            raise full from exc
        shutil.rmtree(final, ignore_errors=True)
        os.rename(staging, final)
        prune({s: self.path(s) for s in self.steps()}, self.policy.keep_last, self.best.step)
        return final

    @staticmethod
    def load_state(path: str) -> dict:
        import torch

        return torch.load(os.path.join(path, "trainer_state.pt"), map_location="cpu", weights_only=False)
