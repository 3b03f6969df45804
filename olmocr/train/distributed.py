"""Process groups and data-parallel strategies.

torchrun sets RANK/WORLD_SIZE/LOCAL_RANK. A strategy wraps the model and answers the questions the
training loop has for it: skip gradient sync on this micro-batch, give me the full model/optimizer state
(rank 0 writes it), load this optimizer state. ``ddp`` replicates the model; ``fsdp`` (FSDP2
``fully_shard``) shards parameters, gradients and optimizer state per transformer block.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
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


class Replicated:
    """One process, or DDP across several."""

    shards_weights = False  # whether ranks must run forward passes together (generation included)

    def __init__(self, info: DistInfo, find_unused_parameters: bool = False):
        self.info = info
        self.find_unused_parameters = find_unused_parameters

    def wrap(self, model):
        if self.info.world_size == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.info.local_rank] if self.info.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=self.find_unused_parameters)

    def no_sync(self, model, last_micro_batch: bool):
        if last_micro_batch or self.info.world_size == 1:
            return contextlib.nullcontext()
        return model.no_sync()

    def prepare(self, model, optimizer):
        return model

    def backward(self, model, loss, last_micro_batch: bool) -> None:
        loss.backward()

    def optimizer_step(self, model, optimizer, clip_grad_norm: float | None) -> float:
        params = [p for p in model.parameters() if p.requires_grad]
        # With FSDP the norm is a DTensor over all shards; full_tensor() makes it one number.
        norm = torch.nn.utils.clip_grad_norm_(params, clip_grad_norm or float("inf"))
        norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        if math.isfinite(norm):  # else the update would write NaN into every weight (the trainer says why)
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return norm

    def model_state(self, model) -> dict | None:
        return None  # save_pretrained reads the unwrapped model directly

    def save_sharded(self, model, path: str) -> None:
        pass  # everything is in the trainer state

    def optimizer_state(self, model, optimizer) -> dict | None:
        return optimizer.state_dict()

    def load_optimizer_state(self, model, optimizer, state: dict | None, path: str) -> None:
        optimizer.load_state_dict(state)


class Sharded(Replicated):
    """FSDP2: every block the model lists in ``_no_split_modules`` is its own shard unit, then the root."""

    shards_weights = True

    def __init__(self, info: DistInfo, reshard_after_forward: bool = True, precision: str = "fp32"):
        self.info = info
        self.reshard_after_forward = reshard_after_forward
        self.precision = precision

    def wrap(self, model):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if self.precision == "bf16" else MixedPrecisionPolicy()
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        units = set(getattr(base, "_no_split_modules", None) or [])
        if not units:
            raise UserError(f"trainer.strategy=fsdp: {type(base).__name__} lists no _no_split_modules to shard")
        if not dist.is_initialized():
            # One process started on its own: FSDP shards over a process group, here of that one process (as
            # DeepSpeed sets up for itself), which shutdown() ends with the run.
            dist.init_process_group("nccl" if self.info.device.type == "cuda" else "gloo", store=dist.HashStore(),
                                    rank=0, world_size=1)
        for module in list(model.modules()):
            if type(module).__name__ in units:
                fully_shard(module, reshard_after_forward=self.reshard_after_forward, mp_policy=policy)
        fully_shard(model, reshard_after_forward=self.reshard_after_forward, mp_policy=policy)
        return model

    def no_sync(self, model, last_micro_batch: bool):
        model.set_requires_gradient_sync(last_micro_batch)
        return contextlib.nullcontext()

    @staticmethod
    def _options():
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=True, cpu_offload=True)

    def model_state(self, model) -> dict:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(model, options=self._options())

    def optimizer_state(self, model, optimizer) -> dict:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(model, optimizer, options=self._options())

    def load_optimizer_state(self, model, optimizer, state: dict | None, path: str) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))


class DeepSpeed(Replicated):
    """DeepSpeed ZeRO (stage 1 or 2): optimizer state (and at stage 2 gradients) partitioned across ranks.

    DeepSpeed runs the accumulation (one engine.step() per micro-batch, the optimizer step at the
    boundary) and clipping; our schedule drives the lr of the client optimizer's param groups. The
    partitioned optimizer state is saved with DeepSpeed's own checkpoint format inside the checkpoint.
    """

    TAG = "optimizer"

    def __init__(self, info: DistInfo, stage: int, micro_batch_size: int, grad_accum: int,
                 clip_grad_norm: float | None, precision: str):
        self.info = info
        self.config = {
            "train_micro_batch_size_per_gpu": micro_batch_size, "gradient_accumulation_steps": grad_accum,
            "zero_optimization": {"stage": stage}, "gradient_clipping": clip_grad_norm or 0.0,
            "bf16": {"enabled": precision == "bf16"}, "zero_allow_untested_optimizer": True,
            "steps_per_print": 10**9, "wall_clock_breakdown": False,
        }

    def wrap(self, model):
        return model  # the engine needs the optimizer: see prepare()

    def prepare(self, model, optimizer):
        import deepspeed

        from olmocr.train.muon import SingleDeviceMuonWithAuxAdam

        if isinstance(optimizer, SingleDeviceMuonWithAuxAdam):
            raise UserError("optimizer=muon orthogonalises whole matrices; ZeRO flattens them: use strategy=ddp")
        if not dist.is_initialized():  # one process without torchrun: DeepSpeed still wants a process group
            import socket

            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            dist.init_process_group("nccl" if self.info.device.type == "cuda" else "gloo",
                                    init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
            for key, value in (("LOCAL_RANK", "0"), ("RANK", "0"), ("WORLD_SIZE", "1")):
                os.environ.setdefault(key, value)
        engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=self.config,
                                          dist_init_required=None)
        return engine

    def no_sync(self, model, last_micro_batch: bool):
        return contextlib.nullcontext()  # the engine reduces gradients at the accumulation boundary

    def backward(self, model, loss, last_micro_batch: bool) -> None:
        # Our loss is already normalised over the whole accumulation window.
        model.backward(loss, scale_wrt_gas=False)
        if not last_micro_batch:
            model.step()  # counts the micro-step; the optimizer steps at the boundary

    def optimizer_step(self, model, optimizer, clip_grad_norm: float | None) -> float:
        model.step()
        norm = model.get_global_grad_norm()
        # ZeRO 1/2 measure it unless their config turns that off, which the config built here never does; a
        # missing norm must not read as a non-finite one (the trainer stops a run on those).
        assert norm is not None, "DeepSpeed measured no gradient norm"
        return float(norm)

    def save_sharded(self, model, path: str) -> None:
        model.save_checkpoint(os.path.join(path, "deepspeed"), tag=self.TAG, save_latest=False)

    def optimizer_state(self, model, optimizer) -> dict | None:
        return None  # saved by save_sharded

    def load_optimizer_state(self, model, optimizer, state: dict | None, path: str) -> None:
        model.load_checkpoint(os.path.join(path, "deepspeed"), tag=self.TAG, load_optimizer_states=True,
                              load_lr_scheduler_states=False)


def build_strategy(name: str, info: DistInfo, precision: str = "fp32", find_unused_parameters: bool = False,
                   reshard_after_forward: bool = True, zero_stage: int = 2, micro_batch_size: int = 1,
                   grad_accum: int = 1, clip_grad_norm: float | None = 1.0):
    if name == "ddp":
        return Replicated(info, find_unused_parameters)
    if name == "fsdp":
        return Sharded(info, reshard_after_forward, precision)
    if name == "deepspeed":
        return DeepSpeed(info, zero_stage, micro_batch_size, grad_accum, clip_grad_norm, precision)
    raise AssertionError(f"strategy {name!r} passed check_trainer")
