"""Hooks into trl's internals (as pinned), for the GRPO recipe (``olmocr.train.grpo``)."""

from __future__ import annotations

import importlib
import sys

import torch

from olmocr.private import Hook

HOOKS = {
    "import_generation": Hook(
        "trl.import_utils.is_vllm_available", (),
        "trl imports vLLM with its GRPO trainer whenever vLLM is installed (15 s or more of CPU for every process "
        "on a small machine, and vLLM's settings of torch with it), and has no switch for a run that never uses it"),
    "EagerGeneration": Hook(
        "trl.GRPOTrainer._generate_single_turn", (),
        "under torch.compile, trl decodes through the compiled blocks a token at a time, recompiling them for "
        "each layer's cache; no argument makes its generation eager"),
}
GENERATION = "trl.generation.vllm_generation"  # the module of trl's that imports vLLM


def import_generation(with_vllm: bool) -> bool:
    """Import trl's generation module with or without vLLM; the first import decides for the process. False when
    it was imported before without vLLM and vLLM is asked for now (the process cannot have it any more)."""
    import trl.import_utils as imports

    loaded = GENERATION in sys.modules
    if not with_vllm and not loaded:
        def hidden(*_, **__) -> bool:
            return False

        available, imports.is_vllm_available = imports.is_vllm_available, hidden
        try:
            importlib.import_module(GENERATION)  # binds the answer above
        finally:
            # Only the trainer's imports skip vLLM; later users (trl's server client, say) see the truth. A module
            # that decided its own imports by the hidden answer is forgotten, so that the next import of it runs
            # with vLLM (the trainer keeps the copy it holds).
            for name, module in list(sys.modules.items()):
                if name.split(".")[0] == "trl" and getattr(module, "is_vllm_available", None) is hidden:
                    module.is_vllm_available = available
                    if name != GENERATION and not hasattr(module, "__path__"):
                        del sys.modules[name]
        return True
    return not (with_vllm and loaded and not hasattr(sys.modules[GENERATION], "LLM"))


class EagerGeneration:
    """For trl's GRPO trainer: generation runs eagerly under ``trainer.compile`` (the compiled blocks' cached,
    no-grad, token-at-a-time decode would compile them again for each layer's cache, filling dynamo's recompile
    limit before the first training step, whose graphs would then never be compiled)."""

    @torch.compiler.set_stance("force_eager")
    def _generate_single_turn(self, *args, **kwargs):
        return super()._generate_single_turn(*args, **kwargs)
