"""The greedy oracle's step rule on hand-made answers (every expected value worked by hand)."""

from __future__ import annotations

import pytest

from speedbench.metrics.views import speed_bench_view, stream_view
from speedbench.oracle.predict import (
    best_k,
    break_even_at,
    check_measured,
    figures_at,
    predict,
    predicted_records,
)
from speedbench.oracle.steps import draft_model_stream, ngram_proposal, ngram_streams
from speedbench.records import RequestRecord

T, F = True, False


def test_every_draft_matching_gives_full_steps_cut_by_the_answer_end():
    # 8 tokens, k=3: prefill 1, then 3 accepted + bonus = 4, then the last 3 (cut at the end).
    stream = draft_model_stream([T] * 8, 3)
    assert stream.chunks == [1, 4, 3]
    assert stream.drafted == [F, T, T]
    assert stream.accepted == [3, 3]


def test_a_mismatch_at_the_first_position_emits_only_the_correction():
    stream = draft_model_stream([T, F, F, F, F], 3)
    assert stream.chunks == [1, 1, 1, 1, 1]
    assert stream.accepted == [0, 0, 0, 0]


def test_the_same_matches_give_every_k_its_own_steps():
    matches = [F, T, T, F, T, T, T, T, F, T]  # position 0 (the prefill's token) is ignored
    # k=1: runs capped at 1: p1 T->2, p3 F->1, p4 T->2, p6 T->2, p8 F->1, p9 T (last) -> 1.
    assert draft_model_stream(matches, 1).chunks == [1, 2, 1, 2, 2, 1, 1]
    # k=2: p1 run 2 -> 3; p4 run 2 -> 3; p7 run 1 (p8 F) -> 2; p9 run 1, cut -> 1.
    assert draft_model_stream(matches, 2).chunks == [1, 3, 3, 2, 1]
    # k=4: p1 run 2 (p3 F) -> 3; p4 run 4 -> 5; p9 run 1, cut -> 1.
    assert draft_model_stream(matches, 4).chunks == [1, 3, 5, 1]
    assert draft_model_stream(matches, 4).accepted == [2, 4, 1]


def test_empty_and_one_token_answers():
    assert draft_model_stream([], 3).chunks == []
    assert draft_model_stream([T], 3).chunks == [1]
    with pytest.raises(ValueError, match="at least 1"):
        draft_model_stream([T, T], 0)


def test_ngram_proposal_takes_the_longest_suffix_match_and_its_earliest_occurrence():
    # Suffix [1, 2] occurs at 0 and 3; the earliest is followed by 9, 1.
    assert ngram_proposal([1, 2, 9, 1, 2, 7, 1, 2], 1, 4, 2) == [9, 1]
    # The 3-gram [7, 1, 2] beats the 2-gram: it occurs once, at 2, followed by 5.
    assert ngram_proposal([1, 2, 7, 1, 2, 5, 7, 1, 2], 1, 4, 3) == [5, 7, 1]
    # Nothing before the suffix: no proposal; min_n above every match: none either.
    assert ngram_proposal([1, 2, 3], 1, 4, 3) == []
    assert ngram_proposal([1, 2, 9, 1, 2], 3, 4, 3) == []
    # The proposal stops at the context's end and at the model's length limit.
    assert ngram_proposal([4, 4, 4], 1, 1, 5) == [4, 4]
    assert ngram_proposal([1, 2, 9, 8, 1, 2], 1, 4, 3, max_model_len=8) == [9, 8]


def test_ngram_stream_replays_prompt_lookup_over_the_answer():
    prompt, answer = [5, 6, 7, 8], [9, 5, 6, 7, 8, 1]
    # p1: context ...8, 9 has no earlier 9: undrafted, 1 token. p2: suffix [5] occurs at 0 ->
    # proposal [6, 7, 8], all three right -> 4 tokens, the last 6 - 2 = 4 allowed.
    streams = ngram_streams(prompt, answer, [1, 3], 1, 4)
    assert streams[3].chunks == [1, 1, 4]
    assert streams[3].drafted == [F, F, T]
    assert streams[3].accepted == [3]
    # k=1: p2 proposes [6] -> 2 tokens; p4: suffix [5, 6, 7] -> [8], right -> 2; p6 = end.
    assert streams[1].chunks == [1, 1, 2, 2]


def record(pid: str, answer: list[int], prompt: list[int], category: str = "c") -> RequestRecord:
    return RequestRecord(
        request_id=pid, prompt_id=pid, category=category, prompt_token_ids=prompt,
        output_token_ids=answer, chunk_tokens=[1] * len(answer), finish_reason="stop",
    )  # fmt: skip


EOS = 0


def test_an_answer_ending_at_eos_loses_the_eos_in_the_speed_bench_view_only():
    base = [record("q", [3, 4, 5, EOS], [1, 2])]
    (stream,) = [draft_model_stream([T, T, T, T], 3)]
    assert stream.chunks == [1, 3]  # p1: 3 matches, cut by the end at 3 tokens
    (rec,) = predicted_records(base, [stream], "draft_model", 3)
    # SPEED-Bench cuts the EOS from the last step: [1, 2], AL 3 / 2; the stream view keeps [3].
    assert speed_bench_view([rec], 3, EOS).al_request_mean == 1.5
    assert stream_view([rec], 3).al_request_mean == 3.0


def test_prediction_figures_and_the_check_against_a_measured_level():
    base = [
        record("a", [9, 5, 6, 7, 8, 1], [5, 6, 7, 8], "code"),
        record("b", [3, 3, 3, 3], [3], "chat"),
    ]
    prediction = predict(base, "ngram", [1, 3], show_progress=False)
    # b: prompt [3], p1 context [3, 3]: [3] at 0 -> [3, 3, 3] (cut at the context end: [3]).
    assert prediction.streams[3][1].chunks == [1, 2, 1]
    figures = figures_at(prediction, "ngram", 3, None)
    # Stream view: a [1, 4] -> 5 tokens / 2 steps; b [2, 1] -> 3 / 2: 8 / 4 = 2.0.
    assert figures.views["stream"].al_token_weighted == 2.0
    assert figures.drafted_fraction == 3 / 4  # a's first step found nothing
    assert set(figures.per_category) == {"chat", "code"}
    same = predicted_records(prediction.requests, prediction.streams[3], "ngram", 3)
    other = [same[0], RequestRecord(**{**same[1].__dict__, "chunk_tokens": [1, 1, 2]})]
    lost = RequestRecord(**{**same[0].__dict__, "output_token_ids": [9, 9, 9, 9, 9, 9]})
    assert check_measured(prediction, 3, same, "ngram-k3", None).identical == 2
    check = check_measured(prediction, 3, other, "ngram-k3", None)
    assert (check.compared, check.identical, check.steps_differ) == (2, 1, 1)
    assert check.mismatches[0].model_dump() == {
        "prompt_id": "b", "turn": 0, "repeat": 0, "step": 1, "predicted": 2, "measured": 1,
    }  # fmt: skip
    assert check_measured(prediction, 3, [lost], "ngram-k3", None).output_differs == 1


def test_expected_speedup_charges_the_draft_only_on_drafted_steps():
    base = [record("a", [9, 5, 6, 7, 8, 1], [5, 6, 7, 8])]
    prediction = predict(base, "ngram", [1, 3], show_progress=False)
    at3, at1 = (figures_at(prediction, "ngram", k, None) for k in (3, 1))
    # Stream AL 5 / 2 = 2.5; half the steps drafted: cost 1 + 0.5 * 3 * 0.5 = 1.75.
    even3 = break_even_at(at3, 16, 0.5, measured_speedup=1.2)
    assert even3.expected_speedup == pytest.approx(2.5 / 1.75)
    assert even3.measured_speedup == 1.2
    # k=1: stream [1, 2, 2] -> 5 / 3; drafted 2 of 3: cost 1 + 2/3 * 0.5.
    even1 = break_even_at(at1, 16, 0.5)
    assert even1.expected_speedup == pytest.approx((5 / 3) / (1 + 2 / 3 * 0.5))
    assert break_even_at(at1, 16, None) is None
    with_costs = [f.model_copy(update={"break_even": [e]}) for f, e in ((at1, even1), (at3, even3))]
    assert best_k(with_costs, 16) == 3
    assert best_k(with_costs, 1) is None


def test_a_baseline_without_prompt_ids_cannot_be_replayed():
    old = RequestRecord(request_id="x", prompt_id="x", output_token_ids=[1, 2])
    with pytest.raises(ValueError, match="1 no_prompt_ids"):
        predict([old], "ngram", [3], show_progress=False)
