"""The rewards as GRPO sees them: the signal each batch carries, logged, and the control that carries none.

GRPO learns from differences between the completions of one page: a group whose completions all score alike
has an advantage of 0 everywhere and teaches nothing, however high its reward. So beside the mean reward each
logged step says how much the totals spread within groups (``signal/group_std``, the mean over the batch's
pages of their completions' standard deviation) and the share of pages whose completions all scored alike
(``signal/alike_groups``). A run whose groups are all alike needs samples that differ (temperature, more
generations) before it needs more steps.

``shuffle``: the control of an experiment that credits a gain to the rewards. Every batch's rewards are
permuted across its completions before GRPO sees them (one permutation for all reward functions, so each
completion gets another completion's whole score): the same values, the same spread, nothing about which text
earned them. A run that gains as much with it gains from its extra steps, not from the rewards. What the
functions log themselves (``bench/present``: the tests the completions really passed) is measured before the
permutation, so the control shows whether its completions got any better.

The wrappers keep trl's reward interface (keyword arguments, ``log_metric``): trl calls every function once per
batch, in order, with the same completions, which is what lets the last one see the batch's totals.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np


class RewardBatch:
    def __init__(self, weights: Sequence[float], shuffle_seed: int | None = None):
        self.weights = list(weights)
        self.rng = None if shuffle_seed is None else np.random.default_rng(shuffle_seed)
        self.order: np.ndarray | None = None
        self.values: dict[int, list] = {}

    def wrap(self, index: int, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def reward(completions, **columns):
            values = list(fn(completions, **columns))
            if index == 0:  # a new batch
                self.values = {}
                self.order = None if self.rng is None else self.rng.permutation(len(values))
            if self.order is not None:
                values = [values[j] for j in self.order]
            self.values[index] = values
            if len(self.values) == len(self.weights):
                self.log(columns.get("page_id"), columns.get("log_metric"))
            return values

        return reward

    def totals(self) -> list[float | None]:
        """Each completion's weighted total as trl forms it (a reward that does not apply counts as 0), None where
        no reward applied."""
        rows = zip(*(self.values[i] for i in range(len(self.weights))))
        out = []
        for row in rows:
            given = [(w, v) for w, v in zip(self.weights, row) if v is not None and not math.isnan(v)]
            out.append(sum(w * v for w, v in given) if given else None)
        return out

    def log(self, page_ids: Sequence | None, log_metric: Callable | None) -> None:
        if log_metric is None or page_ids is None:
            return
        groups: dict = {}
        for page, total in zip(page_ids, self.totals()):
            if total is not None:
                groups.setdefault(page, []).append(total)
        spreads = [float(np.std(g)) for g in groups.values() if len(g) > 1]
        if spreads:
            log_metric("signal/group_std", float(np.mean(spreads)))
            log_metric("signal/alike_groups", float(np.mean([s < 1e-9 for s in spreads])))


def as_seen_by_grpo(funcs: Sequence[Callable], weights: Sequence[float], shuffle_seed: int | None = None) -> list[Callable]:
    """``funcs`` wrapped so that each batch logs its signal and, with ``shuffle_seed``, is permuted (the control)."""
    batch = RewardBatch(weights, shuffle_seed)
    return [batch.wrap(i, fn) for i, fn in enumerate(funcs)]
