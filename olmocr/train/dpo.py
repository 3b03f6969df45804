"""DPO: trl's DPOTrainer on preference pairs (data=pairs, mined by ``python -m olmocr.pairs``).

Shared with SFT and GRPO: the model loader (full, frozen parts or LoRA), the data steps that render and
prompt a page (the pair's page is shown exactly as inference shows it), the optimizer and scheduler
groups, the callbacks and the run dir. The reference model is the starting checkpoint (also when a run
resumes). Checkpoints are trl's ``checkpoints/checkpoint-<step>/``; a re-run resumes from the newest.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os

import trl
from omegaconf import DictConfig, OmegaConf

from olmocr.train.hf import KeepLoadedWeights

log = logging.getLogger("olmocr.train")
LOSS_TYPES = ("sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot",
              "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm")


def trl_config_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(trl.DPOConfig)}


def check(cfg: DictConfig) -> None:
    """Everything that can be wrong with a DPO config, before a model is loaded."""
    algo, t = cfg.algo, cfg.trainer
    if "train" not in cfg.data or isinstance(cfg.data.train, DictConfig):
        raise ValueError("algo=dpo trains on preference pairs: add data=pairs (data.train=[<pairs.jsonl>, …])")
    if algo.loss_type not in LOSS_TYPES:
        raise ValueError(f"algo.loss_type: expected one of {', '.join(LOSS_TYPES)}, got {algo.loss_type!r}")
    if algo.beta <= 0:
        raise ValueError(f"algo.beta: must be positive, got {algo.beta}")
    unknown = sorted(set(algo.trl_args) - trl_config_fields())
    if unknown:
        raise ValueError(f"algo.trl_args: {', '.join(unknown)} not trl DPOConfig field(s)")
    if t.max_duration.unit not in ("steps", "epochs") or t.max_duration.value is None:
        raise ValueError("trainer.max_duration: DPO counts steps or epochs, with a value")
    if t.strategy == "fsdp":
        raise ValueError("trainer.strategy=fsdp is not available for DPO: use ddp or deepspeed (ZeRO-1/2)")


def total_steps(duration, pairs: int, pairs_per_step: int) -> int:
    if duration.unit == "steps":
        return int(duration.value)
    return max(1, math.ceil(duration.value * math.ceil(pairs / pairs_per_step)))


def dpo_arguments(*, output_dir: str, algo: dict, trainer: dict, max_steps: int, seed: int, use_cpu: bool,
                  evaluate: bool):
    """trl's DPOConfig from our trainer and algo keys (``algo.trl_args`` passed through last)."""
    from olmocr.train.hf import training_arguments

    args = dict(**training_arguments(trainer, output_dir=output_dir, max_steps=max_steps, seed=seed,
                                     use_cpu=use_cpu, evaluate=evaluate),
                per_device_eval_batch_size=trainer["batch_size"], beta=algo["beta"], loss_type=[algo["loss_type"]],
                label_smoothing=algo["label_smoothing"], max_length=algo["max_length"],
                precompute_ref_log_probs=algo["precompute_ref_log_probs"])
    args.update(algo["trl_args"])
    return trl.DPOConfig(**args)


class DPOTrainer(KeepLoadedWeights, trl.DPOTrainer):
    """trl's DPO trainer, resuming with the weights our loader brought back."""


def run(cfg: DictConfig, output_dir: str) -> dict:
    from olmocr.config import build
    from olmocr.data.preference import build_preference_dataset
    from olmocr.train.callbacks import MetricsFile, Plots
    from olmocr.train.distributed import init_distributed
    from olmocr.train.hf import fit, load_policy, resume_point
    from olmocr.train.trl_callbacks import HFTrainerBridge
    from olmocr.utils.runinfo import write_run_info

    dist_info = init_distributed(cfg.trainer.device)
    check(cfg)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    algo, t, data = resolved["algo"], resolved["trainer"], resolved["data"]
    source = build(cfg.model)
    if dist_info.rank == 0:
        write_run_info(output_dir)
    processor = source.load_processor()
    report = os.path.join(output_dir, "rejected.jsonl")
    special = processor.tokenizer.all_special_tokens
    train = build_preference_dataset(data["train"], data["steps"], special, report)
    evals = build_preference_dataset(data["eval"], data["steps"], special, report) if data["eval"] else None
    pairs_per_step = t["batch_size"] * t["grad_accum"] * dist_info.world_size
    steps = total_steps(cfg.trainer.max_duration, len(train), pairs_per_step)
    stop = steps if t["hard_stop"]["value"] is None else min(
        steps, total_steps(cfg.trainer.hard_stop, len(train), pairs_per_step))
    checkpoints, resume_from = resume_point(output_dir, t["resume"])
    model, (trainable, total) = load_policy(source, resolved["finetune"], resume_from)
    log.info("model %s: %.2fM of %.2fM parameters train; %d pairs, %d steps of %d pairs", source.path,
             trainable / 1e6, total / 1e6, len(train), steps, pairs_per_step)
    optimizer = build(cfg.optimizer, model=model)
    scheduler = build(cfg.scheduler, optimizer=optimizer, total_steps=steps)
    args = dpo_arguments(output_dir=checkpoints, algo=algo, trainer=t, max_steps=stop, seed=cfg.seed,
                         use_cpu=dist_info.device.type == "cpu", evaluate=evals is not None)
    callbacks = [build(c, run_config=resolved, output_dir=output_dir) for c in cfg.callbacks.values() if c is not None]
    callbacks += [MetricsFile(output_dir), Plots(output_dir)]
    trainer = DPOTrainer(model=model, args=args, train_dataset=train, eval_dataset=evals, processing_class=processor,
                         optimizers=(optimizer, scheduler), callbacks=[HFTrainerBridge(callbacks, dist_info.device)])
    return {**fit(trainer, resume_from), "total_steps": steps}
