"""How sure a score is: 95% intervals by bootstrap over pages, and paired intervals for a difference.

A pass rate over a few hundred pages moves by a point or more with which pages happened to be drawn. The
interval of a score resamples its pages with replacement; the interval of a difference resamples the same
pages for both (each page's score under B minus its score under A), which removes what the pages themselves
contribute and is much narrower than two intervals side by side. A gain is claimed only when the paired
interval lies above 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from olmocr.errors import UserError

RESAMPLES = 2000


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int

    def above_zero(self) -> bool:
        return self.low > 0

    def below_zero(self) -> bool:
        return self.high < 0

    def scaled(self, factor: float) -> Interval:
        return Interval(self.mean * factor, self.low * factor, self.high * factor, self.n)

    def __str__(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def bootstrap(values: Sequence[float], weights: Sequence[float] | None = None, level: float = 0.95,
              resamples: int = RESAMPLES, seed: int = 0) -> Interval:
    """The mean of ``values`` (one per page) and its percentile bootstrap interval. With ``weights`` (a page's
    number of tests, ``values`` then the tests it passed), the ratio of their sums: a pass rate over tests
    where pages hold different numbers of them."""
    data = np.asarray(values, dtype=float)
    if data.ndim != 1 or not len(data):
        raise UserError(f"bootstrap: expected one value per page, got an array of shape {data.shape}")
    weight = np.ones_like(data) if weights is None else np.asarray(weights, dtype=float)
    if weight.shape != data.shape or not weight.sum() > 0:
        raise UserError(f"bootstrap: expected a positive weight per page ({len(data)}), got {weight.shape}")
    picks = np.random.default_rng(seed).integers(0, len(data), size=(resamples, len(data)))
    with np.errstate(invalid="ignore", divide="ignore"):  # a resample of pages that weigh nothing: left out
        means = data[picks].sum(axis=1) / weight[picks].sum(axis=1)
    tail = (1 - level) / 2
    low, high = np.nanquantile(means, [tail, 1 - tail])
    return Interval(float(data.sum() / weight.sum()), float(low), float(high), len(data))


def paired(a: Sequence[float], b: Sequence[float], weights: Sequence[float] | None = None, level: float = 0.95,
           resamples: int = RESAMPLES, seed: int = 0) -> Interval:
    """B minus A on the same pages (``a[i]`` and ``b[i]`` scores of page i, over ``weights[i]`` tests where
    given), with its bootstrap interval."""
    if len(a) != len(b):
        raise UserError(f"paired: the two rows must score the same pages, got {len(a)} and {len(b)} values")
    return bootstrap(np.asarray(b, dtype=float) - np.asarray(a, dtype=float), weights, level, resamples, seed)
