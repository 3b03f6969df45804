"""Hooks into transformers' internals (as pinned): the private methods of its ``Trainer`` that the trl-based recipes
(``olmocr.train.hf``) need changed, each handed to a method of the recipe's trainer with a public name."""

from __future__ import annotations

import functools

from olmocr.private import Hook

HOOKS = {
    "TrainerOverrides._load_from_checkpoint": Hook(
        "transformers.Trainer._load_from_checkpoint", ("self", "resume_from_checkpoint", "model"),
        "the Trainer reloads a checkpoint's weights itself on resume, missing those saved with transformers' key "
        "conversion (Qwen2.5-VL), and has no switch to leave them to the model's own loader"),
    "TrainerOverrides._save_checkpoint": Hook(
        "transformers.Trainer._save_checkpoint", ("self", "model", "trial"),
        "a checkpoint's own files (best.json, the run's config, the page record) must be written before the "
        "Trainer's last file marks it complete, and a failed write removed; a callback runs only after it"),
    "TrainerOverrides._get_dataloader": Hook(
        "transformers.Trainer._get_dataloader", (),
        "the loader workers' start method and init function are fixed inside it, with no argument for them"),
}


class TrainerOverrides:
    """Put before a ``transformers.Trainer`` subclass (trl's) in a trainer's bases: its checkpoint reload, checkpoint
    save and data loader creation go through :meth:`load_checkpoint_weights`, :meth:`save_checkpoint` and
    :meth:`adapt_loader`, which the trainer's other bases override."""

    def load_checkpoint_weights(self, resume_from_checkpoint: str, model) -> None:
        super()._load_from_checkpoint(resume_from_checkpoint, model)

    def save_checkpoint(self, save) -> None:
        save()

    def adapt_loader(self, loader):
        return loader

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        self.load_checkpoint_weights(resume_from_checkpoint, model)

    def _save_checkpoint(self, model, trial):
        self.save_checkpoint(functools.partial(super()._save_checkpoint, model, trial))

    def _get_dataloader(self, *args, **kwargs):
        return self.adapt_loader(super()._get_dataloader(*args, **kwargs))
