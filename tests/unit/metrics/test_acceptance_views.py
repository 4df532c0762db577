"""Every acceptance view on hand-made records, with the answers worked out by hand (k = 3).

The records cover multi-turn pooling (q1), a 1-token request (q2), a failed request (q3), an
n-gram miss (q1's step of 1 token), a merged chunk (q4: 6 tokens > k + 1) and a last step cut
by max_tokens (q5: 2 tokens emitted where the engine accepted 3).
"""

from __future__ import annotations

import pytest

from speedbench.figures import SpecCounters
from speedbench.metrics.summary import summarize_level
from speedbench.metrics.views import (
    all_views,
    counters_view,
    engine_view,
    speed_bench_view,
    stream_view,
)
from speedbench.records import RequestRecord
from speedbench.results import LevelMetrics, finite
from speedbench.sweep_summary import SummaryRow

K = 3


def rec(qid, turn, chunks, accepted, category="a", error=None, finish="length"):
    r = RequestRecord(
        request_id=f"{qid}/t{turn}",
        prompt_id=qid,
        category=category,
        turn=turn,
        chunk_tokens=chunks,
        output_token_ids=list(range(sum(chunks))),
        finish_reason=finish,
        engine_accepted=accepted,
    )
    if error:
        r.fail("connection", error)
    return r


RECORDS = [
    rec("q1", 0, [1, 4, 2, 1], [3, 1]),  # the 1-token step after prefill is an n-gram miss
    rec("q1", 1, [1, 3, 3], [2, 2]),
    rec("q2", 0, [1], [], finish="stop"),
    rec("q3", 0, [1, 4], [3], category="b", error="connection closed mid-response"),
    rec("q4", 0, [1, 4, 6], [3, 3, 1], category="b"),  # the client read two steps at once
    rec("q5", 0, [1, 4, 4, 2], [3, 3, 3], category="b"),  # max_tokens cut the last step
]
COUNTERS = SpecCounters(num_drafts=10, num_draft_tokens=30, num_accepted_tokens=24,
                        accepted_per_pos=(10, 8, 6))  # fmt: skip


def test_speed_bench_pools_turns_counts_prefill_and_takes_the_question_mean():
    v = speed_bench_view(RECORDS, K)
    # q1 pooled: 1+4+2+1 + 1+3+3 = 15 tokens in 7 steps; q2: 1/1; q4: 11/3; q5: 11/4.
    assert v.units == "questions" and v.count == 4 and v.left_out == {"failed": 1}
    assert v.al_request_mean == pytest.approx((15 / 7 + 1 + 11 / 3 + 11 / 4) / 4)
    assert (v.num_tokens, v.num_steps) == (38, 15)
    assert v.al_token_weighted == pytest.approx(38 / 15)
    # Lengths: six 1s, two 2s, two 3s, four 4s and one 6 -> >=2: 9, >=3: 7, >=4: 5 of 15.
    assert v.conditional_ar == pytest.approx([9 / 15, 7 / 9, 5 / 7])
    assert v.joint_ar == pytest.approx([9 / 15, 7 / 15, 5 / 15])


def test_stream_skips_prefill_and_leaves_out_merged_failed_and_stepless_requests():
    v = stream_view(RECORDS, K)
    # q1 t0: [4, 2, 1] = 7/3; q1 t1: [3, 3] = 3; q5: [4, 4, 2] = 10/3.
    assert v.units == "requests" and v.count == 3
    assert v.left_out == {"failed": 1, "merged": 1, "no_steps": 1}
    assert v.al_request_mean == pytest.approx((7 / 3 + 3 + 10 / 3) / 3)
    assert v.al_token_weighted == pytest.approx(23 / 8)
    assert v.conditional_ar == pytest.approx([7 / 8, 5 / 7, 3 / 5])


def test_engine_counts_drafted_steps_only_and_is_immune_to_merged_chunks():
    v = engine_view(RECORDS, K)
    # Steps of accepted + 1 tokens: q1 t0 [4, 2], q1 t1 [3, 3], q4 [4, 4, 2], q5 [4, 4, 4].
    assert v.count == 4 and v.left_out == {"failed": 1, "no_steps": 1}
    assert v.al_request_mean == pytest.approx((3 + 3 + 10 / 3 + 4) / 4)
    assert v.al_token_weighted == pytest.approx(34 / 10)
    assert v.conditional_ar == pytest.approx([10 / 10, 8 / 10, 6 / 8])


def test_counters_give_the_engine_view_summed_over_the_level():
    v = counters_view(COUNTERS, K)
    engine = engine_view(RECORDS, K)
    assert v.al_token_weighted == pytest.approx(engine.al_token_weighted)
    assert v.conditional_ar == pytest.approx(engine.conditional_ar)
    assert v.al_request_mean != v.al_request_mean  # NaN: counters have no request mean
    assert counters_view(SpecCounters(), K) is None


def test_sglang_engine_view_is_completion_tokens_over_verify_steps():
    records = [rec("s1", 0, [1, 4, 4], None), rec("s2", 0, [1, 2], None)]
    records[0].engine_steps, records[1].engine_steps = 3, 2
    v = engine_view(records, K)
    assert v.al_request_mean == pytest.approx((9 / 3 + 3 / 2) / 2)
    assert v.al_token_weighted == pytest.approx(12 / 5)
    assert all(x != x for x in v.conditional_ar)  # no per-position rates from SGLang


def test_the_views_reach_the_summary_row_and_category_al():
    levels = summarize_level(RECORDS, COUNTERS, K)
    metrics = LevelMetrics.model_validate(finite(levels.model_dump()))
    assert list(metrics.overall.views) == ["speed_bench", "stream", "engine", "counters"]
    row = SummaryRow.of("ngram-k3", "s", 1, metrics)
    assert row.average_al == pytest.approx((15 / 7 + 1 + 11 / 3 + 11 / 4) / 4)
    assert row.category_al == pytest.approx({"a": (15 / 7 + 1) / 2, "b": (11 / 3 + 11 / 4) / 2})
    sb = row.views["speed_bench"]
    assert sb.by_category["a"].count == 2 and sb.count == 4
    assert {q: v.category for q, v in sb.questions.items()} == {
        q: c for q, (c, _) in sb_questions().items()
    }
    assert {q: v.al for q, v in sb.questions.items()} == pytest.approx(
        {q: al for q, (_, al) in sb_questions().items()}
    )
    assert row.figure("engine", "al_token_weighted") == pytest.approx(3.4)
    assert row.figure("counters", "al_token_weighted") == pytest.approx(3.4)
    assert row.figure("counters", "al_request_mean") is None  # counters have no units
    assert "server" not in row.views
    assert set(all_views(RECORDS, None, K)) == {"speed_bench", "stream", "engine"}


def sb_questions() -> dict[str, tuple[str, float]]:
    """Each question's own AL under the speed_bench view, by hand (its steps in RECORDS)."""
    return {"q1": ("a", 15 / 7), "q2": ("a", 1.0), "q4": ("b", 11 / 3), "q5": ("b", 11 / 4)}


def test_the_engine_s_own_running_al_is_the_server_view():
    levels = summarize_level(RECORDS, None, K, server_al=2.75)
    row = SummaryRow.of(
        "ngram-k3", "s", 1, LevelMetrics.model_validate(finite(levels.model_dump()))
    )
    server = row.views["server"]
    assert server.al_token_weighted == 2.75 and server.al_request_mean is None
    assert server.conditional_ar is None and server.by_category == {}


def test_lossless_check_finds_the_first_divergent_token():
    from speedbench.metrics.lossless import lossless_check

    def out(qid, ids, turn=0, error=None):
        r = RequestRecord(request_id=f"{qid}/{turn}", prompt_id=qid, turn=turn)
        r.output_token_ids = ids
        if error:
            r.fail("timeout", error)
        return r

    baseline = [out("p", [5, 6, 7, 8]), out("q", [1, 2, 3]), out("r", [9, 9]), out("s", [4])]
    sd = [
        out("p", [5, 6, 0, 8]),  # one token differs, at position 2
        out("q", [1, 2, 3]),
        out("r", [9, 9, 9]),  # a longer answer: diverges where the baseline ended
        out("s", [4], error="request timed out"),  # failed: not compared
        out("t", [1]),  # no baseline: not compared
    ]
    check = lossless_check(sd, baseline)
    assert (check.compared, check.matched) == (3, 1)
    assert [(m.prompt_id, m.first_divergence) for m in check.mismatches] == [("p", 2), ("r", 2)]
    assert check.match_rate == pytest.approx(1 / 3)
