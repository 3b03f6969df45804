"""Hooks into vLLM's internals (as pinned), for its CPU build; ``olmocr.utils.vllm_cpu`` says when each applies."""

from __future__ import annotations

from olmocr.private import Hook

HOOKS = {
    "compute_with_loaded_weights": Hook(
        "vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm", ("layer", "remove_weight"),
        "the CPU build repacks each linear layer's weight after loading and frees the original, so a weight loaded "
        "later (trl's colocated GRPO syncs every step) never takes effect; no engine argument turns it off"),
    "offline_engine_defaults": Hook(
        "vllm.LLM.__init__", ("dtype", "enforce_eager"),
        "trl builds the colocated engine itself, with arguments of its own choosing: only a default given to the "
        "constructor reaches it"),
}


def compute_with_loaded_weights() -> None:
    """Engines built after this call compute each linear layer with the weight it loaded (torch's linear) instead of
    a repacked copy."""
    import torch.nn.functional as F
    from vllm.model_executor.layers import utils

    def use_loaded_weight(layer, remove_weight: bool) -> None:
        layer.cpu_linear = F.linear

    # vllm.model_executor.layers.linear and .vocab_parallel_embedding import it from here at each call.
    utils.dispatch_cpu_unquantized_gemm = use_loaded_weight


def offline_engine_defaults(**defaults) -> None:
    """Every ``vllm.LLM`` built after this call gets ``defaults`` for the arguments its builder did not give."""
    import vllm

    build = vllm.LLM.__init__

    def init(self, *args, **kwargs):
        for key, value in defaults.items():
            kwargs.setdefault(key, value)
        build(self, *args, **kwargs)

    vllm.LLM.__init__ = init
