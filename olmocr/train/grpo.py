"""GRPO: trl's GRPOTrainer on bench pages, with the rewards of ``conf/rewards/``.

Shared with SFT: the model loader (full, frozen parts or LoRA), the data steps that render and prompt a
page, the optimizer and scheduler groups, the callbacks (console, wandb, metrics.jsonl, …) and the run
dir. Checkpoints are trl's (Hugging Face Trainer) ``checkpoints/checkpoint-<step>/``: the model or
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
from omegaconf import DictConfig, OmegaConf

from olmocr.train.hf import KeepLoadedWeights

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


def total_steps(duration, prompts: int, num_generations: int, completions_per_step: int) -> int:
    if duration.unit == "steps":
        return int(duration.value)
    per_epoch = math.ceil(prompts * num_generations / completions_per_step)
    return max(1, math.ceil(duration.value * per_epoch))


def eos_token_ids(processor, model) -> list[int]:
    """The tokens generation stops on, as trl collects them: the tokenizer's and the generation config's."""
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    eos = processor.tokenizer.eos_token_id
    return ids if eos in ids else [eos, *ids]


def grpo_arguments(*, output_dir: str, algo: dict, trainer: dict, max_steps: int, seed: int, use_cpu: bool,
                   eval_benches: bool, reward_weights: list[float] | None = None):
    """trl's GRPOConfig from our trainer and algo keys (``algo.trl_args`` passed through last)."""
    from olmocr.train.hf import training_arguments

    t = trainer
    backend = algo["generation"]
    args = dict(
        **training_arguments(t, output_dir=output_dir, max_steps=max_steps, seed=seed, use_cpu=use_cpu,
                             evaluate=eval_benches),
        # trl scores eval pages in whole groups too
        per_device_eval_batch_size=algo["num_generations"] * math.ceil(t["batch_size"] / algo["num_generations"]),
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


class GRPOTrainer(KeepLoadedWeights, trl.GRPOTrainer):
    """trl's GRPO trainer, resuming with the weights our loader brought back."""


def run(cfg: DictConfig, output_dir: str) -> dict:
    from olmocr.config import build
    from olmocr.data.bench_prompts import build_prompt_dataset
    from olmocr.rewards import build_rewards
    from olmocr.train.callbacks import MetricsFile, Plots
    from olmocr.train.trl_callbacks import HFTrainerBridge
    from olmocr.train.distributed import init_distributed
    from olmocr.train.hf import fit, load_policy, resume_point
    from olmocr.train.vllm_server import server_command, wait_for_server
    from olmocr.utils.runinfo import write_run_info

    dist_info = init_distributed(cfg.trainer.device)
    check(cfg, dist_info.world_size)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    algo, t, data = resolved["algo"], resolved["trainer"], resolved["data"]
    source = build(cfg.model)
    if algo["generation"] == "vllm_server":
        command = server_command(source.path, algo, algo["vllm_server_host"])
        if dist_info.rank == 0:
            with open(os.path.join(output_dir, "launch_commands.json"), "w") as fh:
                json.dump({"vllm_server": command}, fh, indent=2)
        wait_for_server(algo["vllm_server_host"], algo["vllm_server_port"], algo["vllm_server_timeout"], command)
    if dist_info.rank == 0:
        write_run_info(output_dir)

    processor = source.load_processor()
    train = build_prompt_dataset(data["train"], data["steps"], os.path.join(output_dir, "rejected.jsonl"),
                                 processor=processor)
    evals = (build_prompt_dataset(data["eval"], data["steps"], os.path.join(output_dir, "rejected.jsonl"),
                                  processor=processor) if data["eval"] and t["eval_interval"] else None)
    completions_per_step = t["batch_size"] * t["grad_accum"] * dist_info.world_size
    steps = total_steps(cfg.trainer.max_duration, len(train), algo["num_generations"], completions_per_step)
    stop = steps  # hard_stop ends the run early without changing the schedule
    if t["hard_stop"]["value"] is not None:
        stop = min(steps, total_steps(cfg.trainer.hard_stop, len(train), algo["num_generations"],
                                      completions_per_step))

    checkpoints, resume_from = resume_point(output_dir, t["resume"])
    model, (trainable, total) = load_policy(source, resolved["finetune"], resume_from)
    log.info("model %s: %.2fM of %.2fM parameters train; %d bench pages, %d steps of %d completions",
             source.path, trainable / 1e6, total / 1e6, len(train), steps, completions_per_step)
    rewards, weights = build_rewards(resolved["rewards"], eos_token_ids=eos_token_ids(processor, model))
    optimizer = build(cfg.optimizer, model=model)
    # The schedule counts optimizer steps, as ours does: trl steps the scheduler once per optimizer step.
    scheduler = build(cfg.scheduler, optimizer=optimizer, total_steps=steps)
    args = grpo_arguments(output_dir=checkpoints, algo=algo, trainer=t, max_steps=stop,
                          seed=cfg.seed, use_cpu=dist_info.device.type == "cpu", eval_benches=evals is not None,
                          reward_weights=weights)
    callbacks = [build(c, run_config=resolved, output_dir=output_dir) for c in cfg.callbacks.values() if c is not None]
    callbacks += [MetricsFile(output_dir), Plots(output_dir)]
    trainer = GRPOTrainer(model=model, reward_funcs=rewards, args=args, train_dataset=train, eval_dataset=evals,
                          processing_class=processor, optimizers=(optimizer, scheduler),
                          callbacks=[HFTrainerBridge(callbacks, dist_info.device)])
    return {**fit(trainer, resume_from), "total_steps": steps}
