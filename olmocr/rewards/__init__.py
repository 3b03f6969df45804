"""GRPO rewards: small functions with trl's reward signature, ``fn(completions, **columns)``, returning
one float per completion (or None where the reward does not apply). Options are keyword-only
parameters; ``conf/rewards/`` lists which rewards are on, with their weights and options."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from olmocr.config import locate, runtime_parameters


def build_rewards(entries: Mapping, **runtime) -> tuple[list[Callable], list[float]]:
    """Reward functions (named after their config entry, which is how trl logs them) and weights.

    ``runtime`` objects (e.g. ``eos_token_ids``) are bound where a reward declares them
    (:func:`olmocr.config.runtime`)."""
    funcs, weights = [], []
    for name, entry in entries.items():
        options = {k: v for k, v in entry.items() if k not in ("_target_", "weight")}
        fn = locate(entry["_target_"])
        bound = {k: v for k, v in runtime.items() if k in runtime_parameters(fn)}
        reward = functools.update_wrapper(functools.partial(fn, **options, **bound), fn)
        reward.__name__ = name
        funcs.append(reward)
        weights.append(float(entry.get("weight", 1.0)))
    return funcs, weights
