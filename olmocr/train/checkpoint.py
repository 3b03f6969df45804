"""Checkpoints: a Hugging Face model (or adapter) directory plus the trainer state, and resume.

Layout of one checkpoint, written to a temporary name and renamed when complete:

    checkpoints/step_000040/
        model/                    save_pretrained output (full weights, or the LoRA adapter) + processor
        trainer_state.pt          optimizer, scheduler, step, data position, RNG states
        deepspeed/                (strategy=deepspeed) the partitioned optimizer state, DeepSpeed format
"""

from __future__ import annotations

import os
import random
import re
import shutil

import numpy as np
import torch

from olmocr.models.source import save_model

STEP_DIR = re.compile(r"^step_(\d+)$")


def model_dir(checkpoint: str) -> str:
    """The Hugging Face model directory of a checkpoint: ``step_N/model`` for SFT checkpoints, the
    checkpoint itself for GRPO's (``checkpoint-N``, Hugging Face Trainer layout)."""
    inner = os.path.join(checkpoint, "model")
    if os.path.isfile(os.path.join(inner, "config.json")) or os.path.isfile(os.path.join(inner, "adapter_config.json")):
        return inner
    if os.path.isfile(os.path.join(checkpoint, "config.json")) or \
            os.path.isfile(os.path.join(checkpoint, "adapter_config.json")):
        return checkpoint
    raise ValueError(f"{checkpoint} holds no model (no config.json or adapter_config.json, here or in model/)")


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class CheckpointManager:
    def __init__(self, root: str, keep_last: int | None = 3):
        if keep_last is not None and keep_last < 1:
            raise ValueError(f"trainer.keep_last must be at least 1 (or null to keep all), got {keep_last}")
        self.root = root
        self.keep_last = keep_last

    def steps(self) -> list[int]:
        if not os.path.isdir(self.root):
            return []
        found = []
        for name in os.listdir(self.root):
            match = STEP_DIR.match(name)
            if match and os.path.exists(os.path.join(self.root, name, "trainer_state.pt")):
                found.append(int(match.group(1)))
        return sorted(found)

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
        save_model(model, processor, os.path.join(staging, "model"), model_state)
        torch.save({**state, "rng": rng_state()}, os.path.join(staging, "trainer_state.pt"))
        shutil.rmtree(final, ignore_errors=True)
        os.rename(staging, final)
        if self.keep_last is not None:
            for old in self.steps()[: -self.keep_last]:
                shutil.rmtree(self.path(old), ignore_errors=True)
        return final

    @staticmethod
    def load_state(path: str) -> dict:
        return torch.load(os.path.join(path, "trainer_state.pt"), map_location="cpu", weights_only=False)
