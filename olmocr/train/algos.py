"""What each training algorithm needs of the config, checked by the ``train`` stage before any work (a run,
a dry run and a launcher before it submits all call :func:`check`; what depends on the job's processes,
:func:`check_world`, where they are known: a launcher, and a run once it has set them up), and what trl's
trainers are given. Importing this module loads neither torch nor trl; trl is imported only where
``algo.trl_args`` has keys, to check them and the config trl builds with them."""

from __future__ import annotations

import enum
import importlib.util
import math
import os
import types
import typing

from omegaconf import DictConfig, OmegaConf

from olmocr.config import locate
from olmocr.errors import UserError


def grpo_fields(base: dict, algo: dict, reward_weights: list[float] | None = None,
                image_token_id: int | None = None) -> dict:
    """trl's GRPOConfig fields: the Trainer's arguments (:func:`olmocr.train.hf.training_arguments`), then the
    algo keys (``algo.trl_args`` passed through last)."""
    backend = algo["generation"]
    batch = base["per_device_train_batch_size"]
    args = dict(
        **base,
        # trl scores eval pages in whole groups too
        per_device_eval_batch_size=algo["num_generations"] * math.ceil(batch / algo["num_generations"]),
        num_generations=algo["num_generations"], temperature=algo["temperature"], top_p=algo["top_p"],
        max_completion_length=algo["max_completion_length"], beta=algo["beta"], loss_type=algo["loss_type"],
        importance_sampling_level=algo["importance_sampling_level"], scale_rewards=algo["scale_rewards"],
        epsilon=algo["epsilon"], num_iterations=algo["num_iterations"], log_completions=algo["log_completions"],
        use_vllm=backend != "transformers", reward_weights=reward_weights,
    )
    if backend != "transformers":
        from olmocr.train.vllm_server import VLLMGeneration

        args.update(VLLMGeneration(**algo["vllm"]).trl_fields("server" if backend == "vllm_server" else "colocate"))
        if image_token_id is not None:
            # A completion may never hold the image placeholder: the trainer's forward would look for an image
            # behind it. trl keeps it out of transformers generation itself; vLLM is told the same.
            args["generation_kwargs"] = {"logit_bias": {image_token_id: -100.0}}
    args.update(algo["trl_args"])
    return args


def grpo_arguments(base: dict, algo: dict, reward_weights: list[float] | None = None,
                   image_token_id: int | None = None):
    """trl's GRPOConfig of :func:`grpo_fields`."""
    import trl

    return trl.GRPOConfig(**grpo_fields(base, algo, reward_weights, image_token_id))


def dpo_fields(base: dict, algo: dict) -> dict:
    """trl's DPOConfig fields: the Trainer's arguments (:func:`olmocr.train.hf.training_arguments`), then the
    algo keys (``algo.trl_args`` passed through last)."""
    args = dict(**base, per_device_eval_batch_size=base["per_device_train_batch_size"], beta=algo["beta"],
                loss_type=[algo["loss_type"], *(["sft"] if algo["sft_weight"] else [])],
                loss_weights=[1.0, algo["sft_weight"]] if algo["sft_weight"] else None,
                label_smoothing=algo["label_smoothing"], max_length=algo["max_length"])
    args.update(algo["trl_args"])
    return args


def dpo_arguments(base: dict, algo: dict):
    """trl's DPOConfig of :func:`dpo_fields`."""
    import trl

    return trl.DPOConfig(**dpo_fields(base, algo))


FIELDS = {"grpo": ("GRPOConfig", grpo_fields), "dpo": ("DPOConfig", dpo_fields)}
# A process of a launched job (torchrun, MPI): building a Trainer's arguments there for a check would set up
# accelerate's view of the job's processes (on the CPU, a process group), which the run sets up itself.
LAUNCHED = ("WORLD_SIZE", "LOCAL_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def _accepts(value, annotation) -> bool:
    """Whether ``value`` (from YAML or the command line) is of a dataclass field's annotated type; a type this
    does not know (an object only code can make) accepts anything, left to trl."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(value, arg) for arg in typing.get_args(annotation))
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return value in {member.value for member in annotation}
    if annotation is list or origin is list:
        inner = typing.get_args(annotation)
        return isinstance(value, list) and (not inner or all(_accepts(v, inner[0]) for v in value))
    if annotation is dict or origin is dict:
        return isinstance(value, dict)
    return True


def _type_name(annotation) -> str:
    return " or ".join(sorted({getattr(a, "__name__", str(a)).replace("NoneType", "null")
                               for a in (typing.get_args(annotation) or (annotation,))}))


# trl fields its trainers refuse for image data (every page is an image), which a run would meet only once
# the model had loaded.
NOT_FOR_PAGES = {"dpo": {"precompute_ref_log_probs": "trl precomputes the reference's log-probabilities for text "
                                                     "only, not for pages (images); leave it out"}}


def _check_trl_args(cfg: DictConfig) -> None:
    """``algo.trl_args``: trl fields, of the types trl declares."""
    if not cfg.algo.trl_args:
        return
    import trl

    config_class = FIELDS[cfg.algo.name][0]
    hints = typing.get_type_hints(getattr(trl, config_class))
    given = OmegaConf.to_container(cfg.algo.trl_args, resolve=True)
    unknown = sorted(set(given) - set(hints))
    if unknown:
        raise UserError(f"algo.trl_args: {', '.join(unknown)} not trl {config_class} field(s)")
    for key in sorted(set(given) & set(NOT_FOR_PAGES.get(cfg.algo.name, {}))):
        if given[key]:
            raise UserError(f"algo.trl_args.{key}: {NOT_FOR_PAGES[cfg.algo.name][key]}")
    for key, value in given.items():
        if not _accepts(value, hints[key]):
            raise UserError(f"algo.trl_args.{key}: trl's {config_class} expects {_type_name(hints[key])}, "
                            f"got {value!r}")


def _check_trl_values(cfg: DictConfig, world_size: int) -> None:
    """trl's rules across the values of ``algo.trl_args`` and the run's own (a generation batch that the job's
    processes and the groups divide, …): trl's config built as the trainer will build it, for ``world_size``
    processes."""
    if not cfg.algo.trl_args:
        return
    if any(os.environ.get(name) for name in LAUNCHED):
        return  # each rank's trainer builds it, on the processes the run has set up
    import trl
    from accelerate.state import AcceleratorState

    from olmocr.train.hf import training_arguments

    config_class, fields = FIELDS[cfg.algo.name]
    # trl reads the job's processes from the devices this process sets up: told the job's number instead.
    checked = type(config_class, (getattr(trl, config_class),), {"world_size": property(lambda self: world_size)})
    # What depends on the machine that runs it (the device, bf16, DeepSpeed) is left out: a launcher checks on a
    # machine without the job's GPUs.
    trainer = {**OmegaConf.to_container(cfg.trainer, resolve=True), "precision": "fp32"}
    base = training_arguments(trainer, {}, save_interval=cfg.checkpoint.interval, output_dir="checkpoints", max_steps=1, seed=cfg.seed, use_cpu=True,
                              evaluate=False)
    try:
        checked(**fields(base, OmegaConf.to_container(cfg.algo, resolve=True)))
    except (ValueError, TypeError) as exc:
        raise UserError(f"algo.trl_args: trl's {config_class} refuses them with this run's values on {world_size} "
                        f"process(es): {exc}") from None
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)  # the process's devices stay for the run to set up


def _check_trl_run(name: str, cfg: DictConfig) -> None:
    """What trl's trainers of both algorithms refuse."""
    unit = cfg.trainer.max_duration.unit
    if unit not in ("steps", "epochs"):
        raise UserError(f"trainer.max_duration.unit: {name} counts steps or epochs, got {unit!r}")
    strategy = locate(cfg.strategy._target_)
    if strategy.trainer_arguments is None:
        raise UserError(f"strategy={strategy.name} is not available for {name}: use ddp or deepspeed (ZeRO-1/2)")


def check_grpo(cfg: DictConfig, world_size: int | None = None) -> None:
    """``world_size``: the processes that will train, where known (a launcher checks before the job has any):
    :func:`check_world` then."""
    algo = cfg.algo
    if not cfg.rewards:
        raise UserError("algo=grpo needs rewards: add rewards=olmocr2 (or another file in conf/rewards/)")
    if algo.generation != "transformers" and importlib.util.find_spec("vllm") is None:
        raise UserError(f"algo.generation={algo.generation} needs vLLM: run bash scripts/setup.sh (it installs "
                        "vLLM, or its CPU build on a machine without CUDA)")
    _check_trl_args(cfg)
    _check_trl_run("GRPO", cfg)
    if world_size is not None:
        check_world(cfg, world_size)


def check_world(cfg: DictConfig, world_size: int) -> None:
    """What ``cfg.algo`` needs of the number of processes that train: GRPO's groups split over them, and trl's
    rules across values hold for them."""
    algo, t = cfg.algo, cfg.trainer
    if algo.name == "grpo":
        completions = t.batch_size * t.grad_accum * world_size
        if completions % algo.num_generations:
            raise UserError(
                f"algo.num_generations={algo.num_generations} must divide the completions per step, trainer.batch_size"
                f" × trainer.grad_accum × processes = {t.batch_size} × {t.grad_accum} × {world_size} = {completions}"
                " (batch_size counts completions)")
    if algo.name in FIELDS:
        _check_trl_values(cfg, world_size)


def check_dpo(cfg: DictConfig, world_size: int | None = None) -> None:
    if "train" not in cfg.data or isinstance(cfg.data.train, DictConfig):
        raise UserError("algo=dpo trains on preference pairs: add data=pairs (data.train=[<pairs.jsonl>, …])")
    _check_trl_args(cfg)
    _check_trl_run("DPO", cfg)
    if world_size is not None:
        check_world(cfg, world_size)


CHECKS = {"grpo": check_grpo, "dpo": check_dpo}


def check(cfg: DictConfig, world_size: int | None = None) -> None:
    """The checks of ``cfg.algo.name`` (SFT has none beyond the trainer's)."""
    if cfg.algo.name in CHECKS:
        CHECKS[cfg.algo.name](cfg, world_size)
