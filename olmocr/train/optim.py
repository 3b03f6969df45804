"""Optimizer builders: each takes the model (injected at run time) and plain hyperparameters."""

from __future__ import annotations

import torch
from torch import nn


def no_decay(name: str, param: nn.Parameter) -> bool:
    """Biases, norms and embeddings are not decayed."""
    return param.ndim < 2 or "embed" in name or "norm" in name


def adamw(model: nn.Module, lr: float = 2e-5, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
          weight_decay: float = 0.01, fused: bool | None = None) -> torch.optim.AdamW:
    decay, plain = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (plain if no_decay(name, p) else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay, "name": "decay"},
              {"params": plain, "weight_decay": 0.0, "name": "no_decay"}]
    if fused is None:
        fused = next(model.parameters()).is_cuda
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=lr, betas=tuple(betas), eps=eps, fused=fused)
