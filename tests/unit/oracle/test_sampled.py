"""The sampled oracle's arithmetic: acceptance terms, expected steps, predicted AL."""

from __future__ import annotations

import math

import pytest
import torch

from speedbench.oracle.sampled import (
    SampledPass,
    acceptance_terms,
    by_k,
    check_level,
    expected_steps,
    predicted_al,
)


def logits(*probs: list[float]) -> torch.Tensor:
    return torch.tensor([[math.log(x) for x in row] for row in probs], dtype=torch.float64)


def test_acceptance_terms_of_both_draft_sampling_methods():
    p = logits([0.5, 0.3, 0.2], [0.5, 0.3, 0.2])
    q = logits([0.2, 0.6, 0.2], [0.2, 0.6, 0.2])
    terms = acceptance_terms(p, q, [1, 0], temperature=1.0)
    # Probabilistic draft: sum_x min(p, q) = 0.2 + 0.3 + 0.2; given the answer token x,
    # min(p, q)(x) / p(x): 0.3 / 0.3 for x = 1, 0.2 / 0.5 for x = 0.
    assert terms.prob_alpha == pytest.approx([0.7, 0.7])
    assert terms.prob_beta == pytest.approx([1.0, 0.4])
    # Greedy draft (vLLM's default): it proposes argmax q = 1, accepted with p(1) = 0.3; given
    # the answer token, accepted exactly where the token is that argmax.
    assert terms.greedy_alpha == pytest.approx([0.3, 0.3])
    assert terms.greedy_beta == [1.0, 0.0]


def test_temperature_scales_both_distributions():
    p = logits([0.5, 0.3, 0.2])
    q = logits([0.2, 0.6, 0.2])
    # At T = 2 each distribution is the square root of the T = 1 one, renormalised.
    hot = acceptance_terms(p, q, [0], temperature=2.0)
    sp = [math.sqrt(x) for x in (0.5, 0.3, 0.2)]
    sq = [math.sqrt(x) for x in (0.2, 0.6, 0.2)]
    pn = [x / sum(sp) for x in sp]
    qn = [x / sum(sq) for x in sq]
    assert hot.prob_alpha[0] == pytest.approx(sum(min(a, b) for a, b in zip(pn, qn, strict=True)))
    assert hot.greedy_alpha[0] == pytest.approx(pn[1])
    with pytest.raises(ValueError, match="temperature > 0"):
        acceptance_terms(p, q, [0], temperature=0.0)


def test_expected_steps_exact_values():
    # Every draft accepted: 7 decode tokens at k = 3 take a step of 4 and one of the last 3.
    assert expected_steps([1.0] * 8, 3) == 2.0
    # None accepted: one token a step.
    assert expected_steps([0.0] * 8, 3) == 7.0
    # Two decode tokens at k = 1 with acceptance 1/2: the first step emits both (accepted, plus
    # the bonus) or one, and then one more step: 1 + 0.5.
    assert expected_steps([0.9, 0.5, 0.5], 1) == pytest.approx(1.5)
    # k = 2, three decode tokens, acceptance a: the first step emits 1 (1 - a), 2 (a (1 - a))
    # or 3 (a^2) tokens; then 2 tokens left take 1 + (1 - a) steps, 1 token left one step.
    a = 0.6
    left2 = 1 + (1 - a)
    assert expected_steps([0.0, a, a, a], 2) == pytest.approx(1 + (1 - a) * left2 + a * (1 - a) * 1)
    # The prefill's position 0 never counts.
    assert expected_steps([0.0, 1.0, 1.0], 2) == expected_steps([1.0, 1.0, 1.0], 2) == 1.0
    assert expected_steps([1.0], 3) == 0.0


def test_predicted_al_counts_the_prefill_step_and_cuts_the_eos():
    # 8 tokens: the prefill's, then two decode steps at k = 3.
    assert predicted_al([1.0] * 8, 3, ends_at_eos=False) == pytest.approx(8 / 3)
    assert predicted_al([1.0] * 8, 3, ends_at_eos=True) == pytest.approx(7 / 3)


def test_by_k_and_a_check_on_shared_questions():
    sampled = SampledPass()
    p = logits(*[[0.5, 0.3, 0.2]] * 5)
    q = logits(*[[0.2, 0.6, 0.2]] * 5)
    sampled.terms["a"] = acceptance_terms(p, q, [1, 1, 1, 1, 1], 1.0)
    sampled.terms["b"] = acceptance_terms(p, q, [0, 0, 0, 0, 0], 1.0)
    sampled.ends_at_eos = {"a": False, "b": False}
    (k1,) = by_k(sampled, [1])
    # Greedy draft, conditional rule: "a" accepts everywhere (5 tokens: prefill + 2 steps of
    # 2), "b" nowhere (prefill + 4 steps).
    assert k1.al["greedy/beta"] == pytest.approx((5 / 3 + 5 / 5) / 2)
    check = check_level(sampled, "lvl", {"a": 5 / 3, "zz": 9.0}, 1, 4, "greedy")
    assert check.questions == 1
    assert check.predicted_al["beta"] == pytest.approx(5 / 3)
    assert check.overlaps("beta")
    with pytest.raises(ValueError, match="no question in common"):
        check_level(sampled, "lvl", {"zz": 1.0}, 1, 4, "greedy")
