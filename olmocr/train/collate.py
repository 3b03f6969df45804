"""Batching samples of different lengths: right padding, labels padded with -100, images concatenated."""

from __future__ import annotations

import torch

from olmocr.data.steps import IGNORE_INDEX

# Per-token keys and the value their padding takes.
PAD_VALUES = {"attention_mask": 0, "labels": IGNORE_INDEX, "mm_token_type_ids": 0, "token_type_ids": 0}
# Per-image keys, concatenated along the first dimension (the processor's own layout for several images).
IMAGE_KEYS = ("pixel_values", "image_grid_thw")


class Collator:
    """Collates pipeline samples into model inputs. Rejected samples (``None``) are dropped; the batch
    records how many samples it drew (``drawn``) so the data position stays exact for resume."""

    def __init__(self, pad_token_id: int, pad_to_multiple_of: int | None = None):
        self.pad_token_id = pad_token_id
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, samples: list) -> dict:
        drawn = len(samples)
        samples = [s for s in samples if s is not None]
        if not samples:
            return {"drawn": drawn, "size": 0}
        length = max(len(s["input_ids"]) for s in samples)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        batch: dict = {"drawn": drawn, "size": len(samples)}
        keys = ["input_ids"] + [k for k in PAD_VALUES if k in samples[0]]
        for key in keys:
            pad = self.pad_token_id if key == "input_ids" else PAD_VALUES[key]
            out = torch.full((len(samples), length), pad, dtype=samples[0][key].dtype)
            for i, s in enumerate(samples):
                out[i, : len(s[key])] = s[key]
            batch[key] = out
        for key in IMAGE_KEYS:
            if key in samples[0]:
                batch[key] = torch.cat([s[key] for s in samples])
        return batch


def model_inputs(batch: dict) -> dict:
    """The tensors a model's forward takes (labels excluded: the loss is computed by the trainer)."""
    return {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "mm_token_type_ids",
                                                     "token_type_ids", *IMAGE_KEYS)}
