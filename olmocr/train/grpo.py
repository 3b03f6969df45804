"""GRPO: trl's GRPOTrainer on bench pages, with the rewards of ``conf/rewards/``.

Shared with SFT and DPO (olmocr.train.recipe): the run's steps and their order, the model loader (full,
frozen parts or LoRA), the data steps that render and prompt a page, the optimizer and scheduler groups,
durations, the resume rule, the callbacks (console, wandb, metrics.jsonl, …) and the run dir. Checkpoints are trl's (Hugging Face Trainer) ``checkpoints/checkpoint-<step>/``: the model or
adapter with the processor, plus optimizer, scheduler, RNG and data position; a re-run resumes from the
newest one. :func:`olmocr.train.checkpoint.model_dir` finds the model in either layout.
"""

from __future__ import annotations

import functools
import json
import logging
import os

import torch
import trl
from omegaconf import OmegaConf

from olmocr.errors import UserError
from olmocr.train.algos import check_grpo, grpo_arguments
from olmocr.train.hf import HFRecipe, LoaderWorkersLeaveJobSignals, RunCheckpoints

log = logging.getLogger("olmocr.train")

def eos_token_ids(processor, model) -> list[int]:
    """The tokens generation stops on, as trl collects them: the tokenizer's and the generation config's."""
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    eos = processor.tokenizer.eos_token_id
    return ids if eos in ids else [eos, *ids]


@functools.cache
def trainer_class(generation: str) -> type:
    """trl's GRPO trainer, resuming with the weights our loader brought back.

    trl imports vLLM with its GRPO trainer whenever vLLM is installed; a run that generates with transformers
    never uses it, so in such a process trl is shown no vLLM while its trainer is imported
    (:func:`olmocr.private.trl.import_generation`). The first import decides for the process: a colocated run after
    one of those, in the same process, is refused."""
    from olmocr.private.trl import EagerGeneration, import_generation

    if not import_generation(with_vllm=generation != "transformers"):
        raise UserError(f"algo.generation={generation}: this process imported trl's GRPO trainer without vLLM "
                        "(for a run that generated with transformers); start the run in a process of its own")

    class GRPOTrainer(EagerGeneration, LoaderWorkersLeaveJobSignals, RunCheckpoints, trl.GRPOTrainer):
        """trl's GRPO trainer, resuming with the weights our loader brought back."""

    return GRPOTrainer


class GRPO(HFRecipe):
    unit = "bench pages"

    def check(self) -> None:
        check_grpo(self.cfg, self.dist.world_size)

    def before_loading(self) -> None:
        algo = self.resolved["algo"]
        if algo["generation"] == "vllm_server" and not torch.cuda.is_available():
            # Here, on the machine that trains, not when the config is checked (a login node has no GPU):
            # trl hands the server each update over NCCL, and nothing else carries it.
            raise UserError("algo.generation=vllm_server: trl's generation server takes weight updates over "
                            "NCCL, which needs CUDA GPUs; on this machine use algo.generation=vllm_colocate or "
                            "transformers")
        if algo["generation"] == "vllm_server":
            vllm = OmegaConf.to_object(self.cfg.algo.vllm)
            command = vllm.server_command(self.source.path)
            if self.dist.rank == 0:
                with open(os.path.join(self.output_dir, "launch_commands.json"), "w") as fh:
                    json.dump({"vllm_server": command}, fh, indent=2)
            vllm.wait(command)

    def datasets(self, processor) -> tuple:
        from olmocr.data.bench_prompts import build_prompt_dataset

        data, report = self.resolved["data"], os.path.join(self.output_dir, "rejected.jsonl")
        cache, wait_s = data.get("local_cache"), data["storage_wait_s"]
        train = build_prompt_dataset(data["train"], data["steps"], report, cache, wait_s, processor=processor)
        evals = None
        if data["eval"] and self.settings.eval_interval:
            evals = build_prompt_dataset(data["eval"], data["steps"], report, cache, wait_s, processor=processor)
        return train, evals

    def epoch_samples(self) -> int:
        return len(self.train_data) * self.cfg.algo.num_generations  # batch_size counts completions

    def trainer(self, callbacks: list):
        from olmocr.rewards import build_rewards

        if self.resolved["algo"]["generation"] == "vllm_colocate":
            from olmocr.utils.vllm_cpu import colocated_engine

            colocated_engine(str(self.model.dtype).removeprefix("torch."))
        from olmocr.train.grpo_signal import as_seen_by_grpo

        rewards, weights = build_rewards(self.resolved["rewards"],
                                         eos_token_ids=eos_token_ids(self.processor, self.model))
        rewards = as_seen_by_grpo(rewards, weights, self.cfg.seed if self.resolved["algo"]["shuffle_rewards"] else None)
        optimizer, scheduler = self.optimizer_and_scheduler(self.model)
        args = grpo_arguments(self.arguments(), self.resolved["algo"], reward_weights=weights,
                              image_token_id=getattr(self.model.config, "image_token_id", None))
        self.grpo_trainer = trainer_class(self.resolved["algo"]["generation"])(
            model=self.model, reward_funcs=rewards, args=args, train_dataset=self.train_data,
            eval_dataset=self.eval_data, processing_class=self.processor, optimizers=(optimizer, scheduler),
            callbacks=callbacks)
        return self.grpo_trainer

    def fit(self, callbacks: list) -> dict:
        try:
            return super().fit(callbacks)
        finally:
            self.release_engine()

    def release_engine(self) -> None:
        """The colocated vLLM engine ends, and with it the process groups vLLM set up, before the run ends its own:
        vLLM destroys its groups when its engine goes, which fails once the run has destroyed the group they
        belong to (a traceback after a run that succeeded)."""
        generation = getattr(getattr(self, "grpo_trainer", None), "vllm_generation", None)
        if getattr(generation, "llm", None) is None:
            return
        import gc

        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        generation.llm = None
        gc.collect()
        cleanup_dist_env_and_memory()
