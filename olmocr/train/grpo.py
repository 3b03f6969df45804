"""GRPO: trl's GRPOTrainer on bench pages, with the rewards of ``conf/rewards/``.

Shared with SFT and DPO (olmocr.train.recipe): the run's steps and their order, the model loader (full,
frozen parts or LoRA), the data steps that render and prompt a page, the optimizer and scheduler groups,
durations, the resume rule, the callbacks (console, wandb, metrics.jsonl, …) and the run dir. Checkpoints are trl's (Hugging Face Trainer) ``checkpoints/checkpoint-<step>/``: the model or
adapter with the processor, plus optimizer, scheduler, RNG and data position; a re-run resumes from the
newest one. :func:`olmocr.train.checkpoint.model_dir` finds the model in either layout.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import math
import os

import trl
from omegaconf import DictConfig

from olmocr.train.hf import HFRecipe, RunCheckpoints

log = logging.getLogger("olmocr.train")

GENERATION_BACKENDS = ("transformers", "vllm_colocate", "vllm_server")


def trl_config_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(trl.GRPOConfig)}


def check(cfg: DictConfig, world_size: int) -> None:
    """Everything that can be wrong with a GRPO config, before a model is loaded or a server touched."""
    algo, t = cfg.algo, cfg.trainer
    if not cfg.rewards:
        raise ValueError("algo=grpo needs rewards: add rewards=olmocr2 (or another file in conf/rewards/)")
    if algo.generation not in GENERATION_BACKENDS:
        raise ValueError(f"algo.generation: expected one of {', '.join(GENERATION_BACKENDS)}, got {algo.generation!r}")
    if algo.generation != "transformers" and importlib.util.find_spec("vllm") is None:
        raise ValueError(f"algo.generation={algo.generation} needs vLLM: pip install -e '.[vllm]' (CUDA only)")
    unknown = sorted(set(algo.trl_args) - trl_config_fields())
    if unknown:
        raise ValueError(f"algo.trl_args: {', '.join(unknown)} not trl GRPOConfig field(s)")
    if t.max_duration.unit not in ("steps", "epochs"):
        raise ValueError(f"trainer.max_duration.unit: GRPO counts steps or epochs, got {t.max_duration.unit!r}")
    if t.max_duration.value is None:
        raise ValueError("trainer.max_duration.value must be set")
    completions = t.batch_size * t.grad_accum * world_size
    if algo.num_generations < 2 or completions % algo.num_generations:
        raise ValueError(
            f"algo.num_generations={algo.num_generations} must be at least 2 and divide the completions per "
            f"step, trainer.batch_size × trainer.grad_accum × GPUs = {completions} (batch_size counts completions)")
    if t.strategy == "fsdp":
        raise ValueError("trainer.strategy=fsdp is not available for GRPO: use ddp or deepspeed (ZeRO-1/2)")


def eos_token_ids(processor, model) -> list[int]:
    """The tokens generation stops on, as trl collects them: the tokenizer's and the generation config's."""
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    eos = processor.tokenizer.eos_token_id
    return ids if eos in ids else [eos, *ids]


def grpo_arguments(base: dict, algo: dict, reward_weights: list[float] | None = None):
    """trl's GRPOConfig: the Trainer's arguments (:func:`olmocr.train.hf.training_arguments`), then the algo
    keys (``algo.trl_args`` passed through last)."""
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
        args.update(vllm_mode="server" if backend == "vllm_server" else "colocate",
                    vllm_server_host=algo["vllm_server_host"], vllm_server_port=algo["vllm_server_port"],
                    vllm_server_timeout=algo["vllm_server_timeout"],
                    vllm_gpu_memory_utilization=algo["vllm_gpu_memory_utilization"],
                    vllm_tensor_parallel_size=algo["vllm_tensor_parallel_size"],
                    vllm_max_model_length=algo["vllm_max_model_length"])
    args.update(algo["trl_args"])
    return trl.GRPOConfig(**args)


class GRPOTrainer(RunCheckpoints, trl.GRPOTrainer):
    """trl's GRPO trainer, resuming with the weights our loader brought back."""


class GRPO(HFRecipe):
    unit = "bench pages"

    def check(self) -> None:
        check(self.cfg, self.dist.world_size)

    def before_loading(self) -> None:
        from olmocr.train.vllm_server import server_command, wait_for_server

        algo = self.resolved["algo"]
        if algo["generation"] == "vllm_server":
            command = server_command(self.source.path, algo, algo["vllm_server_host"])
            if self.dist.rank == 0:
                with open(os.path.join(self.output_dir, "launch_commands.json"), "w") as fh:
                    json.dump({"vllm_server": command}, fh, indent=2)
            wait_for_server(algo["vllm_server_host"], algo["vllm_server_port"], algo["vllm_server_timeout"], command)

    def datasets(self) -> tuple:
        from olmocr.data.bench_prompts import build_prompt_dataset

        data, report = self.resolved["data"], os.path.join(self.output_dir, "rejected.jsonl")
        cache = data.get("local_cache")
        train = build_prompt_dataset(data["train"], data["steps"], report, cache, processor=self.processor)
        evals = None
        if data["eval"] and self.settings.eval_interval:
            evals = build_prompt_dataset(data["eval"], data["steps"], report, cache, processor=self.processor)
        return train, evals

    def epoch_samples(self) -> int:
        return len(self.train_data) * self.cfg.algo.num_generations  # batch_size counts completions

    def trainer(self, callbacks: list):
        from olmocr.rewards import build_rewards

        rewards, weights = build_rewards(self.resolved["rewards"],
                                         eos_token_ids=eos_token_ids(self.processor, self.model))
        optimizer, scheduler = self.optimizer_and_scheduler(self.model)
        args = grpo_arguments(self.arguments(), self.resolved["algo"], reward_weights=weights)
        return GRPOTrainer(model=self.model, reward_funcs=rewards, args=args, train_dataset=self.train_data,
                           eval_dataset=self.eval_data, processing_class=self.processor,
                           optimizers=(optimizer, scheduler), callbacks=callbacks)
