"""Muon for 2-D hidden weights with Adam for everything else, on one device.

Muon: momentum (Nesterov) on the gradient, orthogonalised by five quintic Newton–Schulz iterations in
bf16, scaled by sqrt(max(1, rows/cols)), with decoupled weight decay. Embeddings, the output head and
1-D parameters (norms, biases) are not matrices in that sense and use Adam, each with its own learning
rate multiplier.
"""

from __future__ import annotations

import math

import torch
from torch import nn

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


@torch.no_grad()
def orthogonalize(update: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """Approximate U·Vᵀ of ``update``'s SVD (the nearest semi-orthogonal matrix) with Newton–Schulz."""
    assert update.ndim == 2
    a, b, c = NS_COEFFICIENTS
    x = update.bfloat16()
    transposed = x.size(0) > x.size(1)
    if transposed:
        x = x.T
    x = x / (x.norm() + eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return (x.T if transposed else x).to(update.dtype)


class SingleDeviceMuonWithAuxAdam(torch.optim.Optimizer):
    """Param groups carry ``use_muon``; Muon groups take ``lr, momentum, weight_decay``, Adam groups
    ``lr, betas, eps, weight_decay``."""

    def __init__(self, param_groups: list[dict]):
        for group in param_groups:
            if "use_muon" not in group:
                raise ValueError("every param group needs use_muon=True or False")
            if group["use_muon"]:
                group.setdefault("momentum", 0.95)
                group.setdefault("nesterov", True)
                group.setdefault("ns_steps", 5)
            else:
                group.setdefault("betas", (0.9, 0.95))
                group.setdefault("eps", 1e-10)
            group.setdefault("weight_decay", 0.0)
        super().__init__(param_groups, {})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            (self._muon_step if group["use_muon"] else self._adam_step)(group)
        return loss

    def _muon_step(self, group: dict) -> None:
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if not state:
                state["momentum_buffer"] = torch.zeros_like(p)
            buf = state["momentum_buffer"]
            buf.lerp_(p.grad, 1 - group["momentum"])
            update = p.grad.lerp(buf, group["momentum"]) if group["nesterov"] else buf.clone()
            update = orthogonalize(update, group["ns_steps"])
            update *= math.sqrt(max(1.0, p.size(0) / p.size(1)))
            p.mul_(1 - group["lr"] * group["weight_decay"])
            p.add_(update, alpha=-group["lr"])

    def _adam_step(self, group: dict) -> None:
        beta1, beta2 = group["betas"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
            state["step"] += 1
            state["exp_avg"].lerp_(p.grad, 1 - beta1)
            state["exp_avg_sq"].lerp_(p.grad.square(), 1 - beta2)
            bias1 = 1 - beta1 ** state["step"]
            bias2 = 1 - beta2 ** state["step"]
            update = (state["exp_avg"] / bias1) / ((state["exp_avg_sq"] / bias2).sqrt() + group["eps"])
            p.mul_(1 - group["lr"] * group["weight_decay"])
            p.add_(update, alpha=-group["lr"])


def muon_param_groups(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """Split trainable parameters: ``muon`` (2-D hidden weights), ``embeddings``, ``head``, ``scalars``
    (1-D) and ``other`` (conv kernels and other non-matrix weights, which Adam handles)."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head = {id(output.weight)} if output is not None else set()
    groups: dict[str, list[nn.Parameter]] = {"muon": [], "embeddings": [], "head": [], "scalars": [], "other": []}
    seen: set[int] = set()
    for _, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        if id(p) in head:
            groups["head"].append(p)
        elif id(p) in embeddings:
            groups["embeddings"].append(p)
        elif p.ndim < 2:
            groups["scalars"].append(p)
        elif p.ndim == 2:
            groups["muon"].append(p)
        else:
            groups["other"].append(p)
    return groups
