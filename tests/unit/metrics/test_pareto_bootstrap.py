import math

import numpy as np
import pytest

from speedbench.metrics.bootstrap import bootstrap_ci, mean_ci, ratio_ci
from speedbench.metrics.pareto import LoadPoint, pareto_front, speedup


def test_pareto_front_drops_dominated_points():
    pts = [
        LoadPoint(1, 10.0, 10.0),
        LoadPoint(2, 8.0, 16.0),
        LoadPoint(4, 5.0, 15.0),  # dominated by bs=2 (slower per user, less total)
        LoadPoint(8, 3.0, 24.0),
    ]
    assert [p.batch_size for p in pareto_front(pts)] == [1, 2, 8]


def test_speedup_per_key_and_missing_baseline():
    assert speedup({1: 12.0, 8: 30.0}, {1: 8.0, 8: 40.0}) == {1: 1.5, 8: 0.75}
    with pytest.raises(ValueError, match="no no-SD baseline"):
        speedup({4: 1.0}, {1: 1.0})


def test_bootstrap_constant_sample_has_zero_width():
    ci = mean_ci([2.0] * 50)
    assert (ci.value, ci.low, ci.high) == (2.0, 2.0, 2.0)


def test_bootstrap_interval_brackets_mean_and_is_seeded():
    rng = np.random.default_rng(1)
    values = rng.normal(3.0, 1.0, size=200)
    a = mean_ci(values, seed=7)
    b = mean_ci(values, seed=7)
    assert a == b
    assert a.low < values.mean() < a.high
    assert a.high - a.low < 0.5


def test_ratio_ci_resamples_pairs():
    ci = ratio_ci([4.0, 6.0], [2.0, 2.0])
    assert ci.value == 2.5
    assert 2.0 <= ci.low <= ci.high <= 3.0


def test_bootstrap_empty_and_bad_confidence():
    assert math.isnan(bootstrap_ci(lambda idx: 0.0, 0).value)
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci(lambda idx: 0.0, 3, confidence=1.5)
