"""The speed_bench view, rule by rule, on the smallest cases, worked out by hand (k = 3).

Each rule is SPEED-Bench's own (tests/specdec_reference.py cites where specdec_bench does it);
each case is also recomputed by that second implementation, which must agree exactly.
"""

from __future__ import annotations

import pytest
from tests.specdec_reference import specbench_figures

from speedbench.metrics.views import rates_by_length, speed_bench_view
from speedbench.records import RequestRecord

K, EOS = 3, 9


def rec(qid, chunks, ends_at_eos, turn=0, repeat=0, category="a", ok=True):
    ids = list(range(100, 100 + sum(chunks)))
    if ends_at_eos:
        ids[-1] = EOS
    r = RequestRecord(
        request_id=f"{qid}/t{turn}/r{repeat}",
        prompt_id=qid,
        category=category,
        turn=turn,
        repeat=repeat,
        chunk_tokens=list(chunks),
        output_token_ids=ids,
        finish_reason="stop" if ends_at_eos else "length",
    )
    if not ok:
        r.fail("connection", "closed")
    return r


@pytest.mark.parametrize(
    ("chunks", "eos", "al"),
    [
        # [1,4,2] ending in EOS: the EOS leaves the last step, [1,4,1]: 6/3.
        ([1, 4, 2], EOS, 2.0),
        # [1,4,1] whose last chunk is the EOS alone: that step is dropped, [1,4]: 5/2.
        ([1, 4, 1], EOS, 2.5),
        # The same streams with ignore_eos (no EOS to cut): every token counts.
        ([1, 4, 2], None, 7 / 3),
        ([1, 4, 1], None, 2.0),
    ],
)
def test_the_eos_is_cut_from_the_last_step_only_when_the_level_stops_at_eos(chunks, eos, al):
    records = [rec("q", chunks, ends_at_eos=True)]
    view = speed_bench_view(records, K, eos)
    assert view.al_request_mean == pytest.approx(al, abs=1e-12)
    if eos is not None:
        assert specbench_figures(records, EOS)["Average_AL"] == pytest.approx(al, abs=1e-12)


def test_an_answer_that_is_only_the_eos_has_no_step():
    # Upstream drops the only step; the question then has no lengths (its mean would raise):
    # speedbench leaves it out, counted, and the other questions keep their figures.
    view = speed_bench_view([rec("q", [1], True), rec("p", [1, 3], True)], K, EOS)
    assert view.left_out == {"no_steps": 1}
    assert view.count == 1 and view.al_request_mean == pytest.approx(3 / 2)


def test_conditional_ar_is_keyed_by_observed_length():
    cond, joint = rates_by_length([1, 2, 4])
    assert cond == pytest.approx({"1": 1.0, "2": 2 / 3, "4": 1 / 2})
    assert joint == pytest.approx({"1": 1.0, "2": 2 / 3, "4": 1 / 3})
    view = speed_bench_view([rec("q", [1, 2, 4], False)], K, EOS)
    assert view.conditional_ar_by_length == cond
    # speedbench's per-position form stays beside it: AR_j = #(len >= j+1) / #(len >= j).
    assert view.conditional_ar == pytest.approx([2 / 3, 1 / 2, 1.0])
    reference = specbench_figures([rec("q", [1, 2, 4], False)], EOS)
    assert {str(k): v for k, v in reference["Conditional_Acceptance_Rate"].items()} == (
        pytest.approx(cond)
    )


def test_turns_pool_per_question_and_repeats_are_runs():
    records = [
        rec("q", [1, 4], False, turn=0),
        rec("q", [1, 2], True, turn=1),  # -> [1, 1]
        rec("q", [1, 4, 4], False, repeat=1),
        rec("q", [1], False, turn=1, repeat=1),
    ]
    view = speed_bench_view(records, K, EOS)
    assert view.per_unit == pytest.approx({"q": 7 / 4, "q@r1": 10 / 4})
    assert view.al_request_mean == pytest.approx((7 / 4 + 10 / 4) / 2)  # the mean over runs


def test_a_question_with_a_failed_turn_is_left_out_counted_and_named():
    records = [rec("q", [1, 4], False), rec("q", [1], False, turn=1, ok=False)]
    records.append(rec("p", [1, 2], False))
    view = speed_bench_view(records, K, EOS)
    assert view.left_out == {"failed": 1} and view.failed_units == ["q"]
    assert view.per_unit == {"p": 1.5}
    assert specbench_figures(records, EOS)["Request_AL"] == {"p": 1.5}


def test_categories_take_the_mean_of_their_questions_as_specdec_bench_does():
    records = [
        rec("a1", [1, 4, 2], True, category="x"),
        rec("a2", [1, 3], False, category="x"),
        rec("b1", [1, 1, 4, 1], True, category="y"),
    ]
    ref = specbench_figures(records, EOS)
    views = {c: speed_bench_view([r for r in records if r.category == c], K, EOS) for c in "xy"}
    assert {c: v.al_request_mean for c, v in views.items()} == pytest.approx(
        ref["Category_AL"], abs=1e-12
    )
    assert speed_bench_view(records, K, EOS).al_request_mean == pytest.approx(
        ref["Average_AL"], abs=1e-12
    )


def test_questions_sent_on_fewer_turns_than_the_split_has_are_flagged():
    from speedbench.data.prompts import PromptRow
    from speedbench.report.text import fewer_turns_note
    from speedbench.sweep_summary import SummaryRow, SweepSummary

    row = PromptRow(question_id="q", category="a", turns=["first?", "second?"])
    assert row.work_item(first_turn_only=True).on_fewer_turns
    assert not row.work_item().on_fewer_turns
    level = SummaryRow(
        config="ngram-k3", split="qualitative", batch_size=1, method="ngram", k=3,
        output_throughput_tok_s=1.0, per_user_tok_s=1.0, error_rate=0.0, ttft_p50_s=0.1,
        tpot_p50_s=0.1, questions_on_fewer_turns=8,
    )  # fmt: skip
    (note,) = fewer_turns_note(SweepSummary(levels=[level]))
    assert note.startswith("- ngram-k3 bs1: 8 questions measured on their first turn only")


def test_the_report_says_when_greedy_sd_was_not_lossless_on_this_dtype():
    from speedbench.figures import LosslessFigures
    from speedbench.provenance import SweepProvenance
    from speedbench.report.text import lossless_verdict
    from speedbench.sweep_summary import SummaryRow, SweepSummary

    def level(matched):
        return SummaryRow(
            config="draft_model-k3", split="qualitative", batch_size=1, method="draft_model",
            k=3, output_throughput_tok_s=1.0, per_user_tok_s=1.0, error_rate=0.0,
            ttft_p50_s=0.1, tpot_p50_s=0.1,
            lossless=LosslessFigures(compared=11, matched=matched, match_rate=matched / 11),
        )  # fmt: skip

    bf16 = SweepSummary(levels=[level(10)], provenance=SweepProvenance(dtype="bfloat16"))
    (line,) = lossless_verdict(bf16)
    assert line.startswith("**1 of 11 greedy SD answers differ from the baseline's**: in bf")
    assert "SD is not lossless on this host" in line
    fp32 = SweepSummary(levels=[level(10)], provenance=SweepProvenance(dtype="float32"))
    assert "a bug to report" in lossless_verdict(fp32)[0]
    assert (
        lossless_verdict(
            SweepSummary(levels=[level(11)], provenance=SweepProvenance(dtype="bfloat16"))
        )
        == []
    )
