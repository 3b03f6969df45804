"""Process-group setup from the launcher's environment (torchrun sets RANK/WORLD_SIZE/LOCAL_RANK)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device


def init_distributed(device: str = "auto", backend: str = "auto") -> DistInfo:
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cuda", "cpu"):
        raise ValueError(f"trainer.device must be auto, cuda or cpu, got {device!r}")
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("trainer.device=cuda but no CUDA device is visible")
        torch.cuda.set_device(local_rank)
    if world_size > 1 and not dist.is_initialized():
        if backend == "auto":
            backend = "nccl" if device == "cuda" else "gloo"
        dist.init_process_group(backend=backend)
    return DistInfo(rank, world_size, local_rank, torch.device(device, local_rank) if device == "cuda" else torch.device("cpu"))


def wrap_ddp(model, info: DistInfo, find_unused_parameters: bool = False):
    if info.world_size == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [info.local_rank] if info.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=find_unused_parameters)


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
