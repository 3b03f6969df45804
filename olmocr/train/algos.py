"""What each training algorithm needs of the config, checked by the ``train`` stage before any work: a run,
a dry run and a launcher (before it submits) all call :func:`check`. Importing this module loads neither
torch nor trl; trl is imported only to check keys given in ``algo.trl_args``."""

from __future__ import annotations

import dataclasses
import importlib.util

from omegaconf import DictConfig


def trl_fields(config_class: str) -> set[str]:
    import trl

    return {f.name for f in dataclasses.fields(getattr(trl, config_class))}


def _check_trl_args(trl_args, config_class: str) -> None:
    unknown = sorted(set(trl_args) - trl_fields(config_class)) if trl_args else []
    if unknown:
        raise ValueError(f"algo.trl_args: {', '.join(unknown)} not trl {config_class} field(s)")


def _check_trl_run(name: str, trainer) -> None:
    """What trl's trainers of both algorithms refuse."""
    if trainer.max_duration.unit not in ("steps", "epochs"):
        raise ValueError(f"trainer.max_duration.unit: {name} counts steps or epochs, got {trainer.max_duration.unit!r}")
    if trainer.strategy == "fsdp":
        raise ValueError(f"trainer.strategy=fsdp is not available for {name}: use ddp or deepspeed (ZeRO-1/2)")


def check_grpo(cfg: DictConfig, world_size: int | None = None) -> None:
    """``world_size``: the processes that will train, where known (a launcher checks before the job has any);
    the completions of a step must split into whole groups over them."""
    algo, t = cfg.algo, cfg.trainer
    if not cfg.rewards:
        raise ValueError("algo=grpo needs rewards: add rewards=olmocr2 (or another file in conf/rewards/)")
    if algo.generation != "transformers" and importlib.util.find_spec("vllm") is None:
        raise ValueError(f"algo.generation={algo.generation} needs vLLM: run bash scripts/setup.sh (it installs "
                         "vLLM, or its CPU build on a machine without CUDA)")
    _check_trl_args(algo.trl_args, "GRPOConfig")
    _check_trl_run("GRPO", t)
    if world_size is not None:
        check_world(cfg, world_size)


def check_world(cfg: DictConfig, world_size: int) -> None:
    """What ``cfg.algo`` needs of the number of processes that train (SFT and DPO: nothing)."""
    if cfg.algo.name != "grpo":
        return
    algo, t = cfg.algo, cfg.trainer
    completions = t.batch_size * t.grad_accum * world_size
    if completions % algo.num_generations:
        raise ValueError(
            f"algo.num_generations={algo.num_generations} must divide the completions per step, trainer.batch_size"
            f" × trainer.grad_accum × processes = {t.batch_size} × {t.grad_accum} × {world_size} = {completions}"
            " (batch_size counts completions)")


def check_dpo(cfg: DictConfig, world_size: int | None = None) -> None:
    if "train" not in cfg.data or isinstance(cfg.data.train, DictConfig):
        raise ValueError("algo=dpo trains on preference pairs: add data=pairs (data.train=[<pairs.jsonl>, …])")
    _check_trl_args(cfg.algo.trl_args, "DPOConfig")
    _check_trl_run("DPO", cfg.trainer)


CHECKS = {"grpo": check_grpo, "dpo": check_dpo}


def check(cfg: DictConfig, world_size: int | None = None) -> None:
    """The checks of ``cfg.algo.name`` (SFT has none beyond the trainer's)."""
    if cfg.algo.name in CHECKS:
        CHECKS[cfg.algo.name](cfg, world_size)
