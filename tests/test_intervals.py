"""95% intervals by bootstrap over pages, and paired intervals for a difference (olmocr.bench.intervals)."""

import numpy as np
import pytest

from olmocr.bench.intervals import bootstrap, paired


def test_an_interval_holds_the_truth_about_as_often_as_it_says():
    """Pass/fail pages drawn at a known rate: the 95% interval of 256 of them holds that rate in about 95 of 100
    draws, and is about as wide as the binomial's."""
    rng = np.random.default_rng(0)
    held = 0
    for seed in range(100):
        scores = (rng.random(256) < 0.6).astype(float)
        interval = bootstrap(scores, resamples=1000, seed=seed)
        held += interval.low <= 0.6 <= interval.high
        assert 0.08 < interval.high - interval.low < 0.16  # 2 x 1.96 x sqrt(0.24 / 256) = 0.12
    assert 88 <= held <= 100


def test_the_paired_interval_sees_a_gain_that_two_intervals_side_by_side_cannot():
    """The same 256 pages, a second row that fixes one failing page in twelve and breaks none: the rows' own
    intervals overlap, the paired difference lies above 0."""
    rng = np.random.default_rng(1)
    a = (rng.random(256) < 0.5).astype(float)
    b = np.where((a == 0) & (rng.random(256) < 1 / 6), 1.0, a)
    first, second, gain = bootstrap(a), bootstrap(b), paired(a, b)
    assert first.high > second.low  # side by side: no decision
    assert gain.above_zero() and gain.mean == pytest.approx(b.mean() - a.mean())
    assert not paired(a, a).above_zero() and paired(b, a).below_zero()


def test_pages_with_several_tests_weigh_by_their_tests():
    interval = bootstrap([2, 1, 0, 3], weights=[2, 2, 1, 4])
    assert interval.mean == pytest.approx(6 / 9) and interval.low <= interval.mean <= interval.high
    with pytest.raises(ValueError, match="same pages"):
        paired([1, 0], [1])
    with pytest.raises(ValueError, match="one value per page"):
        bootstrap([])
