"""Open-loop arrival schedules and goodput: seeded distributions and hand-counted objectives."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from speedbench.client.arrivals import ArrivalError, arrival_gaps, arrival_offsets
from speedbench.metrics.goodput import LatencyObjectives, goodput, meets
from speedbench.records import RequestRecord


def test_poisson_gaps_pass_a_kolmogorov_smirnov_test_against_the_exponential():
    rate = 4.0
    gaps = arrival_gaps(5000, rate, "poisson", seed=7)
    # Scaled to unit rate, the gaps must look Exponential(1); a uniform sample must not.
    assert stats.kstest(gaps * rate, "expon").pvalue > 0.05
    assert stats.kstest(np.linspace(0, 0.5, 5000), "expon").pvalue < 1e-6
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.05)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_burstiness_sets_the_coefficient_of_variation_and_keeps_the_rate(burstiness):
    rate = 2.0
    gaps = arrival_gaps(20000, rate, "gamma", burstiness=burstiness, seed=3)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.03)
    # The distribution itself, not only its two moments.
    scale = 1 / (rate * burstiness)
    assert stats.kstest(gaps, "gamma", args=(burstiness, 0, scale)).pvalue > 0.05


def test_offsets_start_at_zero_and_are_the_cumulative_gaps():
    offsets = arrival_offsets(4, 2.0, "constant")
    assert offsets == [0.0, 0.5, 1.0, 1.5]
    seeded = arrival_offsets(5, 3.0, "poisson", seed=11)
    assert seeded == arrival_offsets(5, 3.0, "poisson", seed=11)  # the same every run
    assert seeded != arrival_offsets(5, 3.0, "poisson", seed=12)
    assert seeded[0] == 0.0 and seeded == sorted(seeded)
    assert np.diff(seeded).tolist() == pytest.approx(arrival_gaps(4, 3.0, seed=11).tolist())
    assert arrival_offsets(0, 1.0) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": 0.0}, "request rate must be a positive number of requests/s, got 0.0"),
        ({"rate": math.inf}, "request rate must be a positive number of requests/s, got inf"),
        ({"rate": 1.0, "burstiness": -1.0}, "burstiness must be a positive number, got -1.0"),
        ({"rate": 1.0, "process": "uniform"}, "unknown arrival process 'uniform'"),
    ],
)
def test_bad_schedules_fail_with_one_line_naming_the_value(kwargs, message):
    with pytest.raises(ArrivalError, match=message.replace("(", r"\(").replace(")", r"\)")):
        arrival_gaps(3, **kwargs)


def record(name, start, chunks, tokens, error=None):
    """A record whose chunks arrive at ``chunks`` (seconds) and end at the last one."""
    r = RequestRecord(request_id=name, prompt_id=name, start_s=start, end_s=chunks[-1])
    r.chunk_times_s = list(chunks)
    r.chunk_tokens = [1] * (len(chunks) - 1) + [tokens - len(chunks) + 1]
    if error:
        r.fail("http_5xx", error)
    return r


RECORDS = [
    record("fast", 0.0, [0.1, 0.2, 0.3], 3),  # ttft 0.1, tpot 0.1, e2e 0.3
    record("slow-start", 0.0, [0.9, 1.0, 1.1], 3),  # ttft 0.9, tpot 0.1, e2e 1.1
    record("slow-decode", 0.0, [0.1, 0.6, 1.1], 3),  # ttft 0.1, tpot 0.5, e2e 1.1
    record("one-token", 0.0, [0.2], 1),  # ttft 0.2, no tpot, e2e 0.2
    record("failed", 0.0, [0.1, 0.2, 0.3], 3, error="HTTP 500"),
]


@pytest.mark.parametrize(
    ("objectives", "met"),
    [
        (LatencyObjectives(), ["fast", "slow-start", "slow-decode", "one-token"]),
        (LatencyObjectives(ttft_s=0.5), ["fast", "slow-decode", "one-token"]),
        (LatencyObjectives(tpot_s=0.2), ["fast", "slow-start", "one-token"]),
        (LatencyObjectives(e2e_s=0.5), ["fast", "one-token"]),
        (LatencyObjectives(ttft_s=0.5, tpot_s=0.2), ["fast", "one-token"]),
        (LatencyObjectives(ttft_s=0.05), []),
    ],
)
def test_goodput_counts_the_requests_that_meet_every_set_objective(objectives, met):
    assert [r.request_id for r in RECORDS if meets(r, objectives)] == met
    figures = goodput(RECORDS, objectives, duration_s=2.0)
    assert (figures.met, figures.total) == (len(met), 5)
    assert figures.rate_rps == len(met) / 2.0
    assert figures.fraction == len(met) / 5


def test_objectives_must_be_positive_and_goodput_over_nothing_is_nan():
    with pytest.raises(ValueError, match="latency objective ttft_s must be > 0 seconds, got 0"):
        LatencyObjectives(ttft_s=0)
    assert not LatencyObjectives().any_set and LatencyObjectives(e2e_s=1.0).any_set
    empty = goodput([], LatencyObjectives(ttft_s=1.0), duration_s=0.0)
    assert math.isnan(empty.rate_rps) and math.isnan(empty.fraction)
