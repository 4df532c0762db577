import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from speedbench.metrics.acceptance import (
    SpecCounters,
    acceptance_from_counters,
    acceptance_from_histogram,
    acceptance_from_steps,
    counters_from_steps,
    steps_from_chunks,
)


def test_hand_computed_case():
    # k = 3; steps accept 3, 1, 0, 2 tokens -> emitted 4, 2, 1, 3 = 10 tokens over 4 steps.
    acc = acceptance_from_steps([[3, 1], [0, 2]], k=3)
    # #(a>=0)=4, #(a>=1)=3, #(a>=2)=2, #(a>=3)=1
    assert acc.conditional_ar == [3 / 4, 2 / 3, 1 / 2]
    assert acc.joint_ar == [3 / 4, 2 / 4, 1 / 4]
    assert acc.al_token_weighted == 10 / 4
    # request 1: (4 + 2) / 2 = 3.0; request 2: (1 + 3) / 2 = 2.0
    assert acc.al_request_mean == 2.5
    assert acc.histogram == [1, 1, 1, 1]
    assert acc.num_steps == 4


def test_request_mean_differs_from_token_weighted_when_lengths_differ():
    acc = acceptance_from_steps([[2, 2, 2], [0]], k=2)
    assert acc.al_token_weighted == (3 * 3 + 1) / 4
    assert acc.al_request_mean == (3.0 + 1.0) / 2


histograms = st.integers(min_value=1, max_value=8).flatmap(
    lambda k: st.lists(st.integers(0, 1000), min_size=k + 1, max_size=k + 1).filter(
        lambda h: sum(h) > 0
    )
)


@given(histograms)
def test_al_is_one_plus_sum_of_joint_ar(hist):
    acc = acceptance_from_histogram(hist)
    assert math.isclose(acc.al_token_weighted, 1 + sum(acc.joint_ar), rel_tol=1e-12)


@given(histograms)
def test_joint_ar_is_product_of_conditional(hist):
    acc = acceptance_from_histogram(hist)
    prod = 1.0
    for cond, joint in zip(acc.conditional_ar, acc.joint_ar, strict=True):
        if math.isnan(cond):
            assert joint == 0.0
            break
        prod *= cond
        assert math.isclose(prod, joint, rel_tol=1e-9, abs_tol=1e-12)


@given(
    st.integers(1, 6).flatmap(
        lambda k: st.tuples(st.just(k), st.lists(st.integers(0, k), min_size=1, max_size=300))
    )
)
def test_counter_delta_al_equals_step_histogram_al(case):
    k, steps = case
    from_steps = acceptance_from_steps([steps], k)
    from_counters = acceptance_from_counters(counters_from_steps(steps, k), k)
    assert math.isclose(
        from_counters.al_token_weighted, from_steps.al_token_weighted, rel_tol=1e-12
    )
    assert from_counters.conditional_ar == pytest.approx(from_steps.conditional_ar, nan_ok=True)
    assert from_counters.histogram == from_steps.histogram


@pytest.mark.parametrize("k", [1, 3, 5])
def test_identical_draft_gives_al_k_plus_one(k):
    steps = [[k] * 20, [k] * 7]
    acc = acceptance_from_steps(steps, k)
    assert acc.al_token_weighted == k + 1
    assert acc.al_request_mean == k + 1
    assert acc.conditional_ar == [1.0] * k
    counters = acceptance_from_counters(counters_from_steps([k] * 27, k))
    assert counters.al_token_weighted == k + 1


def test_counter_deltas_subtract_per_position():
    before = SpecCounters(
        num_drafts=10, num_draft_tokens=30, num_accepted_tokens=12, accepted_per_pos=(6, 4, 2)
    )
    after = SpecCounters(
        num_drafts=20, num_draft_tokens=60, num_accepted_tokens=27, accepted_per_pos=(13, 9, 5)
    )
    d = after - before
    assert d == SpecCounters(
        num_drafts=10, num_draft_tokens=30, num_accepted_tokens=15, accepted_per_pos=(7, 5, 3)
    )
    acc = acceptance_from_counters(d)
    assert acc.joint_ar == [0.7, 0.5, 0.3]
    assert acc.conditional_ar == [0.7, 5 / 7, 3 / 5]
    assert acc.al_token_weighted == 1 + 15 / 10
    assert acc.histogram == [3, 2, 2, 3]


def test_counters_before_any_position_seen():
    d = (
        SpecCounters(
            num_drafts=5, num_draft_tokens=15, num_accepted_tokens=6, accepted_per_pos=(3, 2, 1)
        )
        - SpecCounters()
    )
    assert d.accepted_per_pos == (3, 2, 1)


def test_steps_from_chunks_skips_prefill_and_empty_chunks():
    assert steps_from_chunks([1, 4, 2, 0, 1, 3], k=3) == [3, 1, 0, 2]


def test_steps_from_chunks_rejects_merged_steps():
    with pytest.raises(ValueError, match="exceeds k\\+1"):
        steps_from_chunks([1, 4, 7], k=3)


def test_out_of_range_step_is_rejected():
    with pytest.raises(ValueError, match=r"outside 0\.\.2"):
        acceptance_from_steps([[3]], k=2)
