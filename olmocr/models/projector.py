"""Centring a vision-language model's projector (the vision tower's merger) on the pages it will train on.

A projector at random weights hands the language model image tokens that are nearly all alike: on a reading
page at the reader's random weights, the component every token shares is over nine tenths of each token's
feature, and the characters differ only in what is left. Attention then finds no token to prefer and the
language model learns the page's text without looking at it. Folding the mean feature over some training
pages into the projector's last bias, and scaling its output so that what is left has a norm of one, keeps
exactly the same information and lets the tokens differ by what their pixels hold (a data-dependent
initialisation, as ActNorm's or LSUV's). It is meant for a projector that was never trained: a pretrained
model's language model expects its projector's features as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from olmocr.errors import UserError


@dataclass
class ProjectorStats:
    images: int
    tokens: int
    shared: float  # the norm of the mean feature over a token's mean norm, before
    spread: float  # a token's mean distance from the mean feature, before (what scaling divides by)
    scaled: bool  # false when every token was alike (blank images): centred only


def projector_output(model: nn.Module) -> nn.Linear:
    """The last linear layer of ``model``'s projector (``visual.merger`` in the Qwen-VL families)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # LoRA-wrapped
    merger = getattr(getattr(getattr(base, "model", base), "visual", None), "merger", None)
    linears = [m for m in merger.modules() if isinstance(m, nn.Linear)] if merger is not None else []
    if not linears:
        raise UserError(f"algo.centre_projector: {type(base).__name__} has no visual.merger with a linear "
                        "layer to centre (expected a Qwen2-VL family model)")
    return linears[-1]


def image_features(model: nn.Module, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> torch.Tensor:
    """The projector's output for the images of one sample: one row per image token."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    out = base.get_image_features(pixel_values=pixel_values, image_grid_thw=grid_thw)
    pooled = getattr(out, "pooler_output", out)
    return torch.cat(list(pooled)) if isinstance(pooled, (list, tuple)) else pooled


@torch.no_grad()
def centre_projector(model: nn.Module, images: Iterable[tuple[torch.Tensor, torch.Tensor]],
                     norm: float = 1.0) -> ProjectorStats:
    """Folds the mean of the projector's output over ``images`` ((pixel_values, image_grid_thw) per sample)
    into its last layer, and scales that layer so that a token's distance from the mean is ``norm`` on
    average. Images whose tokens are all alike (blanked ones) are centred only."""
    layer = projector_output(model)
    if layer.bias is None:
        raise UserError("algo.centre_projector: the projector's last layer has no bias to centre")
    device = layer.weight.device
    feats = [image_features(model, pixel_values.to(device), grid_thw.to(device)).float()
             for pixel_values, grid_thw in images]
    if not feats:
        raise UserError("algo.centre_projector: no training sample loaded to centre the projector on")
    every = torch.cat(feats)
    mean = every.mean(0)
    spread = float((every - mean).norm(dim=-1).mean())
    typical = float(every.norm(dim=-1).mean())
    scaled = spread > 1e-6 * max(typical, 1e-12)
    scale = norm / spread if scaled else 1.0
    layer.bias.sub_(mean.to(layer.bias.dtype)).mul_(scale)
    layer.weight.mul_(scale)
    return ProjectorStats(len(feats), len(every), float(mean.norm()) / max(typical, 1e-12), spread, scaled)
