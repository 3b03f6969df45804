"""Data-parallel strategies, the ``strategy`` group (conf/strategy/): each a class built from its own keys.

A strategy wraps the model and answers the questions the training loop has for it: skip gradient sync on this
micro-batch, give me the full model/optimizer state (rank 0 writes it), load this optimizer state. ``ddp``
(:class:`Replicated`) replicates the model; ``fsdp`` (:class:`Sharded`, FSDP2 ``fully_shard``) shards parameters,
gradients and optimizer state per transformer block; ``deepspeed`` (:class:`DeepSpeed`) partitions the optimizer
state (ZeRO 1/2). The trl-based recipes hand theirs to the Hugging Face Trainer (:meth:`trainer_arguments`).

What a strategy can and cannot do is stated on its class, so the train stage checks a config against it before
anything loads. Importing this module loads no torch (the config schemas read these signatures).
"""

from __future__ import annotations

import contextlib
import math
import os
from typing import TYPE_CHECKING, Annotated

from olmocr.config import OneOf, runtime
from olmocr.errors import UserError

if TYPE_CHECKING:
    from olmocr.train.distributed import DistInfo


@runtime("info")
class Replicated:
    """One process, or DDP replicas across several."""

    name = "ddp"
    shards_weights = False  # whether ranks must run forward passes together (generation included)
    whole_matrices = True  # whether the optimizer is given whole weight matrices (Muon needs them)
    # What a replica keeps that another cannot read (a multi-replica launcher asks for shared storage); None: none
    replica_state: str | None = None

    def __init__(self, info: DistInfo, *, find_unused_parameters: bool = False):
        self.info = info
        self.find_unused_parameters = find_unused_parameters

    def trainer_arguments(self) -> dict:
        """The Hugging Face ``TrainingArguments`` fields that run this strategy (GRPO and DPO)."""
        return {"ddp_find_unused_parameters": self.find_unused_parameters}

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
        import torch

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


def _group_of_one(device_type: str, **how) -> None:
    """A process started on its own: FSDP and DeepSpeed work over a process group, here of that one process,
    which :func:`olmocr.train.distributed.shutdown` ends with the run."""
    import torch.distributed as dist

    dist.init_process_group("nccl" if device_type == "cuda" else "gloo", rank=0, world_size=1, **how)


@runtime("info", "precision")
class Sharded(Replicated):
    """FSDP2: every block the model lists in ``_no_split_modules`` is its own shard unit, then the root."""

    name = "fsdp"
    shards_weights = True
    whole_matrices = False
    trainer_arguments = None  # trl's trainers are not run sharded here

    def __init__(self, info: DistInfo, precision: str = "fp32", *, reshard_after_forward: bool = True):
        self.info = info
        self.reshard_after_forward = reshard_after_forward
        self.precision = precision

    def wrap(self, model):
        import torch
        import torch.distributed as dist
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if self.precision == "bf16" else MixedPrecisionPolicy()
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        units = set(getattr(base, "_no_split_modules", None) or [])
        if not units:
            raise UserError(f"strategy=fsdp: {type(base).__name__} lists no _no_split_modules to shard")
        if not dist.is_initialized():
            _group_of_one(self.info.device.type, store=dist.HashStore())
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


@runtime("info", "precision", "micro_batch_size", "grad_accum", "clip_grad_norm")
class DeepSpeed(Replicated):
    """DeepSpeed ZeRO (``stage`` 1 or 2): optimizer state (and at stage 2 gradients) partitioned across ranks.

    DeepSpeed runs the accumulation (one engine.step() per micro-batch, the optimizer step at the
    boundary) and clipping; our schedule drives the lr of the client optimizer's param groups. The
    partitioned optimizer state is saved with DeepSpeed's own checkpoint format inside the checkpoint.
    """

    name = "deepspeed"
    whole_matrices = False  # ZeRO flattens the parameters it partitions
    replica_state = "DeepSpeed checkpoints hold every rank's optimizer shard, written on each replica's own disk"
    TAG = "optimizer"

    def __init__(self, info: DistInfo, precision: str = "fp32", micro_batch_size: int = 1, grad_accum: int = 1,
                 clip_grad_norm: float | None = 1.0, *, stage: Annotated[int, OneOf(1, 2)] = 2):
        self.info, self.stage, self.precision = info, stage, precision
        self.config = {
            "train_micro_batch_size_per_gpu": micro_batch_size, "gradient_accumulation_steps": grad_accum,
            "zero_optimization": {"stage": stage}, "gradient_clipping": clip_grad_norm or 0.0,
            "bf16": {"enabled": precision == "bf16"}, "zero_allow_untested_optimizer": True,
            "steps_per_print": 10**9, "wall_clock_breakdown": False,
        }

    def trainer_arguments(self) -> dict:
        # The Trainer fills in what it runs with (its batch, accumulation and clipping)
        return {"deepspeed": {"zero_optimization": {"stage": self.stage}, "bf16": {"enabled": self.precision == "bf16"},
                              "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                              "gradient_clipping": "auto"}}

    def wrap(self, model):
        return model  # the engine needs the optimizer: see prepare()

    def prepare(self, model, optimizer):
        import deepspeed
        import torch.distributed as dist

        if not dist.is_initialized():  # one process without torchrun: DeepSpeed still wants a process group
            import socket

            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            _group_of_one(self.info.device.type, init_method=f"tcp://127.0.0.1:{port}")
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


STRATEGIES = (Replicated, Sharded, DeepSpeed)
