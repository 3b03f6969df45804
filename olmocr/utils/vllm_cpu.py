"""Where vLLM's CPU build needs settings its GPU build does not: the one place for them.

Machines without CUDA run vLLM's CPU build (scripts/setup.sh installs it), the same engine and version.
What differs, and is handled here only when no CUDA device is present:

- KV cache: the CPU engine sizes it in GiB of host memory (``VLLM_CPU_KVCACHE_SPACE``), not as a share of
  device memory.
- Linear weights: after loading, the CPU engine repacks each linear layer's weight for its GEMM kernels
  and frees the original. Its weights can then no longer be loaded again, which is how trl's colocated
  GRPO hands the engine each update (``'Parameter' object has no attribute 'weight_loader'``).
  :func:`keep_linear_weights` makes the engine compute with the weights it loaded, so updates reach it.
- In-process engines (compare, GRPO's colocated engine) skip graph capture: a page at a time on a CPU
  gains nothing from it, and it costs a minute at start.
- GRPO's colocated engine samples in the trainer's precision (vLLM's CPU build would cast a float32
  checkpoint to bfloat16, and the importance-sampling ratio would compare two different models).
"""

from __future__ import annotations

import functools
import os


def on_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def server_env(kv_cache_gib: int | None) -> dict[str, str]:
    """Environment for a ``vllm serve`` process on this machine."""
    if not on_cpu() or kv_cache_gib is None:
        return {}
    return {"VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib)}


def offline_engine_kwargs(dtype: str = "auto") -> dict:
    """Arguments for an in-process ``vllm.LLM`` beyond the caller's own; on a CPU, one process and no graph
    capture. ``dtype`` "auto" keeps vLLM's choice (on CPU it casts float32 checkpoints to bfloat16)."""
    kwargs = {} if dtype == "auto" else {"dtype": dtype}
    if on_cpu():
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        kwargs["enforce_eager"] = True
    return kwargs


@functools.cache
def keep_linear_weights() -> None:
    """On a CPU, make engines built after this call keep each linear layer's loaded weight and compute with
    it (torch's linear), instead of a repacked copy, so that weights loaded later take effect. Nothing on
    a GPU."""
    if on_cpu():
        from olmocr.private.vllm import compute_with_loaded_weights

        compute_with_loaded_weights()


@functools.cache
def colocated_engine(dtype: str) -> None:
    """On a CPU, the engine trl builds inside the trainer (``vllm.LLM``, built after this call): keeps its
    linear weights so each weight sync takes effect, computes in ``dtype`` (the trainer's), no graph
    capture. Nothing on a GPU."""
    if not on_cpu():
        return
    from olmocr.private.vllm import offline_engine_defaults

    keep_linear_weights()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    offline_engine_defaults(dtype=dtype, enforce_eager=True)
