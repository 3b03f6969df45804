"""Optimizer builders: each takes the model (injected at run time) and plain hyperparameters. torch is
imported when a builder runs, so reading their signatures (config schemas) stays cheap."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from olmocr.config import NonNegative, Positive, Range, runtime
from olmocr.errors import UserError

if TYPE_CHECKING:
    import torch
    from torch import nn

    from olmocr.train.muon import SingleDeviceMuonWithAuxAdam


Betas = Annotated[tuple[float, float], Range(at_least=0, below=1)]
# Learning rates are NonNegative: a rate of 0 is a baseline that does not learn (the learning benchmarks').


def no_decay(name: str, param: nn.Parameter) -> bool:
    """Biases, norms and embeddings are not decayed."""
    return param.ndim < 2 or "embed" in name or "norm" in name


@runtime("model")
def adamw(model: nn.Module, lr: NonNegative = 2e-5, betas: Betas = (0.9, 0.999), eps: NonNegative = 1e-8,
          weight_decay: NonNegative = 0.01, fused: bool | None = None) -> torch.optim.AdamW:
    import torch

    decay, plain = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (plain if no_decay(name, p) else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay, "name": "decay"},
              {"params": plain, "weight_decay": 0.0, "name": "no_decay"}]
    if fused is None:
        fused = next(model.parameters()).is_cuda
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=lr, betas=tuple(betas), eps=eps, fused=fused)


@runtime("model")
def muon(model: nn.Module, lr: NonNegative = 0.02, momentum: Annotated[float, Range(at_least=0, below=1)] = 0.95,
         nesterov: bool = True, ns_steps: Annotated[int, Range(at_least=1)] = 5, weight_decay: NonNegative = 0.0,
         adam_lr: NonNegative = 3e-4, adam_betas: Betas = (0.9, 0.95), adam_eps: NonNegative = 1e-10,
         head_lr_scale: Positive = 11.0, embed_lr_scale: Positive = 30.0,
         scalar_lr_scale: Positive = 2.0) -> SingleDeviceMuonWithAuxAdam:
    """Muon on the hidden matrices, Adam on head, embeddings and the rest (the ``optimizer=muon`` config)."""
    from olmocr.train.muon import SingleDeviceMuonWithAuxAdam, muon_param_groups

    model = model.module if hasattr(model, "module") else model  # DDP wrapper
    check_muon(split_by="fsdp" if any(hasattr(p, "full_tensor") for p in model.parameters()) else None,
               lora=any("lora_" in name for name, p in model.named_parameters() if p.requires_grad))
    groups = muon_param_groups(model)
    adam = {"use_muon": False, "betas": tuple(adam_betas), "eps": adam_eps, "weight_decay": weight_decay}
    spec = [
        {"params": groups["muon"], "use_muon": True, "lr": lr, "momentum": momentum, "nesterov": nesterov,
         "ns_steps": ns_steps, "weight_decay": weight_decay, "name": "muon"},
        {**adam, "params": groups["head"], "lr": adam_lr * head_lr_scale, "name": "head"},
        {**adam, "params": groups["embeddings"], "lr": adam_lr * embed_lr_scale, "name": "embeddings"},
        {**adam, "params": groups["scalars"], "lr": adam_lr * scalar_lr_scale, "name": "scalars"},
        {**adam, "params": groups["other"], "lr": adam_lr, "name": "other"},
    ]
    return SingleDeviceMuonWithAuxAdam([g for g in spec if g["params"]])


def check_muon(split_by: str | None, lora: bool) -> None:
    """What Muon cannot train: known from the config (the train stage checks it before anything loads) and
    from the model it is given. ``split_by``: the strategy that hands the optimizer parts of matrices, if any."""
    if split_by is not None:
        raise UserError(f"optimizer=muon orthogonalises whole matrices and strategy={split_by} splits them: "
                        "use strategy=ddp with Muon")
    if lora:
        raise UserError("optimizer=muon does not support LoRA: orthogonalising rank-r adapter factors is not "
                        "Muon's update; use optimizer=adamw with LoRA, or full fine-tuning with Muon")
