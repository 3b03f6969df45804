"""Process groups: a run's place in a job (torchrun's RANK/WORLD_SIZE/LOCAL_RANK, or the SLURM job's tasks) and
the end of the groups a run set up. The data-parallel strategies are in :mod:`olmocr.train.strategy`."""

from __future__ import annotations

import atexit
import logging
import os
import zlib
from dataclasses import dataclass

import torch
import torch.distributed as dist

from olmocr.errors import UserError

log = logging.getLogger(__name__)

# What a launcher tells a process about its place in a job. DeepSpeed sets them even in a single process,
# where a later run in the same process (a sweep, a notebook) would take them for a distributed launch.
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_launched_with: dict[str, str | None] = {}


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device


# Rendezvous ports for SLURM jobs: below Linux's ephemeral range (32768-60999 by default), where any client
# connection on the first node may hold a port for a while and a job's store then cannot listen on it.
JOB_PORTS = range(20000, 32768)


def job_port(job_id: str) -> int:
    """The first node's rendezvous port, the same in every task of a job and told by nothing but the job's own
    id (SLURM_JOB_ID: each task of an array has its own), so jobs sharing a node get different ones."""
    return JOB_PORTS[(int(job_id) if job_id.isdigit() else zlib.crc32(job_id.encode())) % len(JOB_PORTS)]


def _from_submitit() -> None:
    """Inside a SLURM (or submitit-local) job with several tasks, one process per task: export the
    torch.distributed variables (rank, world size, master address on the first node, its port from the job id
    unless MASTER_PORT is set) from the job."""
    if "WORLD_SIZE" in os.environ or "SUBMITIT_EXECUTOR" not in os.environ:
        return
    import submitit

    job = submitit.JobEnvironment()
    if job.num_tasks > 1:
        os.environ.setdefault("MASTER_PORT", str(job_port(job.raw_job_id)))
        # overwrite: the port just set (or the user's) is the one it read; nothing else is set yet.
        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)


def init_distributed(device: str = "auto", backend: str = "auto") -> DistInfo:
    """torch.distributed from torchrun's variables, or from the SLURM/submitit job the process is a
    task of; a single process otherwise."""
    _from_submitit()
    _launched_with.update({k: os.environ.get(k) for k in LAUNCH_VARIABLES})
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise UserError("trainer.device=cuda but no CUDA device is visible")
        # srun --gpus-per-task=1 shows each task only its own GPU, torchrun shows all of them.
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    if world_size > 1 and not dist.is_initialized():
        if backend == "auto":
            backend = "nccl" if device == "cuda" else "gloo"
        log.info("rank %d of %d: %s process group, rendezvous at %s:%s", rank, world_size, backend,
                 os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"))
        dist.init_process_group(backend=backend)
        # The group serves every run of the process (a sweep's jobs run one after another in the same
        # processes, and a group cannot be set up twice on torchrun's store): it goes when the process does.
        atexit.register(dist.destroy_process_group)
    return DistInfo(rank, world_size, local_rank,
                    torch.device(device, torch.cuda.current_device()) if device == "cuda" else torch.device("cpu"))


def shutdown() -> None:
    """The run is over: put the launch variables back as the run found them, and end a process group that a
    library or a strategy set up in a process launched on its own (DeepSpeed, FSDP); a launched job's group stays."""
    if dist.is_initialized() and int(_launched_with.get("WORLD_SIZE") or 1) == 1:
        dist.destroy_process_group()
    for key, value in _launched_with.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    _launched_with.clear()
