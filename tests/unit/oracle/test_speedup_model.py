"""Step costs, the closed-loop replay and schedules on hand-made numbers (worked by hand)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from speedbench.engines.base import UnsupportedSpecError
from speedbench.figures import SpreadFigures
from speedbench.oracle.calibrate import fit_sd_passes
from speedbench.oracle.recommend import (
    SpeedupCheck,
    SpeedupCurve,
    SpeedupModel,
    StepCostFigures,
    best_of,
    decide,
    drafter_noise,
    monotone,
    recommended_k,
    schedule,
    speedups,
)
from speedbench.oracle.schedule import check_ranges, engine_schedules
from speedbench.oracle.speedup import (
    ReplayRequest,
    draft_passes,
    iteration_seconds,
    predicted_speedup,
    replay_seconds,
)
from speedbench.oracle.steptime import (
    Iteration,
    StepCosts,
    engine_iterations,
    fit_step_costs,
    prefill_chunks,
    step_drafts,
)
from speedbench.records import RequestRecord, write_parquet
from speedbench.sweep_summary import SummaryRow


def _record(
    rid: str, prompt: int, times: list[float], k: int = 0, **fields: object
) -> RequestRecord:
    return RequestRecord(
        request_id=rid, prompt_id=rid, prompt_tokens=prompt, chunk_times_s=times,
        chunk_tokens=fields.pop("chunk_tokens", [1] * len(times)), k=k, **fields,
    )  # fmt: skip


def test_iterations_are_the_bursts_of_every_request_chunk():
    records = [
        _record("a", 10, [1.0, 1.5, 2.0], start_s=0.2),
        _record("b", 20, [1.001, 1.501, 2.001, 2.5], start_s=0.2),
        _record("c", 30, [2.502, 3.0], start_s=2.01),  # prefilled beside b's last step
    ]
    its = engine_iterations(records)
    # The first burst, a's and b's prefill, is timed from their send. Context: each decoding
    # request's prompt and the tokens it has made, a's 10 + 1 and b's 20 + 1 in the first
    # step, and so on.
    assert its == [
        Iteration(seconds=0.8, sequences=2, tokens=30, prefill_tokens=30),
        Iteration(seconds=0.5, sequences=2, tokens=2, decoding=2, context=11 + 21),
        Iteration(seconds=0.5, sequences=2, tokens=2, decoding=2, context=12 + 22),
        Iteration(seconds=0.5, sequences=2, tokens=31, prefill_tokens=30, decoding=1, context=23),
        Iteration(seconds=0.5, sequences=1, tokens=1, decoding=1, context=31),
    ]


def test_a_draft_model_level_verifies_k_drafted_tokens_per_request():
    records = [_record("a", 10, [1.0, 1.5, 2.0], k=3), _record("b", 20, [1.001, 1.501], k=3)]
    # A verify step reads each request's KV once, whatever it verifies: 11 + 21, then 12.
    assert engine_iterations(records, drafted=3)[1:] == [
        Iteration(seconds=0.5, sequences=2, tokens=8, decoding=2, context=11 + 21),
        Iteration(seconds=0.5, sequences=1, tokens=4, decoding=1, context=12),
    ]


def test_the_fit_recovers_known_costs_and_drops_a_pause():
    truth = StepCosts(fixed_s=0.1, per_sequence_s=0.01, per_token_s=0.001)
    shapes = [(1, 1), (2, 2), (4, 4), (8, 8), (16, 16), (2, 101), (4, 203), (1, 50)]
    its = [Iteration(truth.seconds(b, n), b, n, n - b) for b, n in shapes]
    its.append(Iteration(5.0, 4, 4))  # a garbage-collection pause, no step
    fit = fit_step_costs(its, ["none/q/bs1"])
    assert fit.fixed_s == pytest.approx(0.1, abs=1e-9)
    assert fit.per_sequence_s == pytest.approx(0.01, abs=1e-9)
    assert fit.per_token_s == pytest.approx(0.001, abs=1e-9)
    assert (fit.iterations, fit.outliers, fit.sources) == (8, 1, ("none/q/bs1",))


def test_the_fit_needs_a_prefill_to_tell_a_token_from_a_sequence():
    its = [Iteration(0.1 * b, b, b) for b in (1, 2, 4, 8)]
    with pytest.raises(ValueError, match="no prefill iteration"):
        fit_step_costs(its)


def test_an_sd_iteration_is_the_verify_pass_and_k_draft_passes():
    target = StepCosts(fixed_s=0.2, per_sequence_s=0.01, per_token_s=0.004)
    draft = StepCosts(fixed_s=0.3, per_sequence_s=0.01, per_token_s=0.001)
    # Two requests with 3 drafted each: the target verifies 8 tokens, 0.2 + 0.02 + 0.032;
    # the draft's first pass runs over the same 8 (padded), 0.3 + 0.02 + 0.008; two more
    # over one token per request, 2 x (0.3 + 0.02 + 0.002).
    seconds = iteration_seconds(target, draft, 3, [], [3, 3])
    assert seconds == pytest.approx(0.252 + 0.328 + 0.644)
    # A prefill joins: its 10 prompt tokens go through both models, plus one sequence each.
    joined = iteration_seconds(target, draft, 3, [10], [3, 3])
    assert joined == pytest.approx(0.2 + 0.03 + 0.072 + 0.3 + 0.03 + 0.018 + 2 * 0.333)


def test_replay_counts_iterations_of_a_closed_loop():
    unit = StepCosts(fixed_s=1.0, per_sequence_s=0.0, per_token_s=0.0)
    three, two = ReplayRequest.baseline(5, 3), ReplayRequest.baseline(5, 2)
    assert replay_seconds([three, two], 1, unit) == 5.0  # one after the other
    assert replay_seconds([three, two], 2, unit) == 3.0  # side by side
    # Three requests on two streams: the third joins when the two-step one ends.
    assert replay_seconds([three, two, two], 2, unit) == 4.0


def test_sd_pays_at_batch_size_1_and_not_at_8_when_tokens_cost():
    # 1 s per iteration and 0.1 s per token: a weight-bound step at bs 1, compute-bound at 8.
    costs = StepCosts(fixed_s=1.0, per_sequence_s=0.0, per_token_s=0.1)
    base = ReplayRequest.baseline(1, 4)
    sd = ReplayRequest(1, (1, 2, 1), (0, 3, 3))  # 4 tokens in 3 steps, 3 drafted a step
    # bs 1, two requests: baseline 2 x (1.1 + 3 x 1.1) = 8.8; SD 2 x (1.1 + 2 x 1.4) = 7.8.
    assert predicted_speedup([base] * 2, [sd] * 2, 1, costs, None, 3) == pytest.approx(8.8 / 7.8)
    # bs 8, eight requests: baseline 4 x 1.8 = 7.2; SD 1.8 + 2 x (1 + 32 x 0.1) = 10.2.
    assert predicted_speedup([base] * 8, [sd] * 8, 8, costs, None, 3) == pytest.approx(7.2 / 10.2)


def test_the_best_k_needs_a_gain_of_one_percent_else_sd_is_off():
    assert best_of({0: 1.0, 1: 1.2, 2: 1.3, 3: 1.25}) == 2
    assert best_of({0: 1.0, 1: 1.005, 2: 0.9}) == 0
    assert best_of({0: 1.0, 2: 1.3, 3: 1.3}) == 2  # a tie goes to the shorter draft


def test_a_measured_k_is_kept_unless_another_is_predicted_three_percent_faster():
    # Prompt lookup's curve at bs 1 of the AMX host's main job: k=5 best by 1.4 % over k=3.
    ngram = {0: 1.0, 1: 1.209, 2: 1.277, 3: 1.2985, 4: 1.3129, 5: 1.3167, 6: 1.3121}
    assert best_of(ngram) == 5
    assert recommended_k(ngram, [3]) == 3
    assert recommended_k(ngram, []) == 5  # nothing measured: the best
    # The draft at bs 1 (k=2 3.5 % over k=3) and at bs 16 (SD off 11.8 % over k=3).
    assert recommended_k({0: 1.0, 1: 1.229, 2: 1.3173, 3: 1.2732}, [3]) == 2
    assert recommended_k({0: 1.0, 1: 0.947, 2: 0.9402, 3: 0.8942}, [3]) == 0
    # Of two measured ks the faster is kept; a measured k that does not pay is not kept.
    assert recommended_k({0: 1.0, 2: 1.20, 3: 1.22, 4: 1.24}, [2, 3]) == 3
    # Neither gain clears 3 %: SD off.
    assert recommended_k({0: 1.0, 2: 1.02, 3: 1.005}, [3]) == 0


def _check(drafter: str, error: float | None) -> SpeedupCheck:
    return SpeedupCheck(level="x", drafter=drafter, split="qualitative", batch_size=1, k=3,
                        measured_speedup=1.0, predicted_speedup=None, error=error)  # fmt: skip


def test_a_drafters_noise_is_its_mean_leave_one_out_error_and_never_below_three_percent():
    checks = [_check("draft_model", 0.10), _check("draft_model", -0.136), _check("ngram", 0.01),
              _check("ngram", None)]  # fmt: skip
    assert drafter_noise(checks, "draft_model") == pytest.approx(0.118)
    assert drafter_noise(checks, "ngram") == pytest.approx(0.03)  # 1 %: the floor
    assert drafter_noise(checks, "eagle3") == pytest.approx(0.03)  # no check: the floor


def test_a_gain_inside_the_drafters_noise_changes_nothing():
    # The draft at bs 1 with an 11.8 % leave-one-out error: k=2 predicted 4.7 % over k=3.
    draft = {0: 1.0, 1: 1.21, 2: 1.333, 3: 1.273}
    assert recommended_k(draft, [3]) == 2  # at the 3 % floor k=2 would be worth a launch
    assert recommended_k(draft, [3], noise=0.118) == 3
    # A predicted 7 % gain of the measured k is inside 11.8 %: off, unless measured.
    thin = {0: 1.0, 2: 1.06, 3: 1.07}
    assert recommended_k(thin, [3], noise=0.118) == 0
    assert recommended_k(thin, [3], noise=0.118, intervals={3: (1.02, 1.12)}) == 3
    # Its interval holds 1: the prediction decides, and 7 % is not enough.
    assert recommended_k(thin, [3], noise=0.118, intervals={3: (0.97, 1.12)}) == 0


def test_a_measured_loss_turns_sd_off_whatever_the_model_predicted():
    curve = {0: 1.0, 3: 1.25}
    assert recommended_k(curve, [3], noise=0.05) == 3
    assert recommended_k(curve, [3], noise=0.05, intervals={3: (0.88, 0.97)}) == 0


def test_k_never_grows_with_the_batch_size():
    assert monotone([3, 1, 0, 1]) == [3, 1, 0, 0]  # off, then k=1 again: noise
    assert monotone([0, 1, 0, 1]) == [0, 0, 0, 0]
    assert monotone([2, 3, 3, 1]) == [2, 2, 2, 1]
    assert monotone([]) == []


def _fit() -> StepCostFigures:
    return StepCostFigures.of(StepCosts(fixed_s=1.0, per_sequence_s=0.0, per_token_s=0.0))


def _row(bs: int, low: float, high: float) -> SummaryRow:
    return SummaryRow(
        config="ngram-k3", split="qualitative", batch_size=bs, method="ngram", k=3,
        output_throughput_tok_s=1.0, per_user_tok_s=1.0, error_rate=0.0, ttft_p50_s=0.1,
        tpot_p50_s=0.1, speedup=(low + high) / 2,
        speedup_interval=SpreadFigures(mean=(low + high) / 2, low=low, high=high, count=3),
    )  # fmt: skip


def test_the_table_weighs_measured_intervals_and_agrees_with_a_monotone_schedule():
    # Prompt lookup predicted 1.05, 1.08, 1.04 at bs 1, 4, 16 with a 5.9 % error: bs 1 runs
    # on its interval (above 1) though its prediction is inside the error; bs 4's interval
    # holds 1 and its prediction clears the error; bs 16's does neither.
    curves = [
        SpeedupCurve(drafter="ngram", split="qualitative", batch_size=bs, questions=6,
                     speedup={0: 1.0, 3: gain}, best_k=3, recommended_k=3)
        for bs, gain in ((1, 1.05), (4, 1.08), (16, 1.04))
    ]  # fmt: skip
    model = SpeedupModel(target=_fit(), measured_ks=[3], curves=curves,
                         checks=[_check("ngram", 0.059)])  # fmt: skip
    rows = [_row(1, 1.01, 1.09), _row(4, 0.99, 1.15), _row(16, 0.97, 1.12)]
    decide(model, rows)
    assert model.noise == {"ngram": pytest.approx(0.059)}
    assert [c.recommended_k for c in model.curves] == [3, 3, 0]
    # bs 1 measured a loss instead: SD off there, so off at every larger batch size too.
    rows[0] = _row(1, 0.90, 0.98)
    decide(model, rows)
    assert [c.recommended_k for c in model.curves] == [0, 0, 0]


def test_the_schedule_takes_the_tables_k_at_a_measured_batch_size():
    costs = StepCosts(fixed_s=1.0, per_sequence_s=0.0, per_token_s=0.0)
    requests = {0: [ReplayRequest.baseline(1, 6)], 3: [ReplayRequest(1, (1, 3, 2), (0, 3, 3))]}
    ranges, _ = schedule(requests, 4, costs, None, measured_ks=[3])
    assert ranges == [(1, 4, 3)]  # 2x at every batch size
    # The table turned SD off at bs 2 (a measured loss): off from there on.
    ranges, gains = schedule(requests, 4, costs, None, measured_ks=[3], decided={2: 0})
    assert ranges == [(1, 1, 3), (2, 4, 0)]
    assert gains == {1: 2.0, 2: 1.0, 3: 1.0, 4: 1.0}


def test_the_schedule_keeps_a_measured_k_within_three_percent_of_the_best():
    costs = StepCosts(fixed_s=1.0, per_sequence_s=0.0, per_token_s=0.1)
    base = ReplayRequest.baseline(1, 4)
    sd = ReplayRequest(1, (1, 2, 1), (0, 3, 3))
    # k=2 drafts the same three steps with two tokens each (4 tokens in 3 steps too): at bs 1
    # a round costs 1.1 + 2 x 1.3 = 3.7 against k=3's 3.9, a 5.4 % gain; at bs 2 1.2 + 2 x 1.6
    # = 4.4 against 4.8 (+9.1 %) while SD off (4 x 1.2 = 4.8) ties k=3.
    k2 = ReplayRequest(1, (1, 2, 1), (0, 2, 2))
    requests = {0: [base] * 2, 2: [k2] * 2, 3: [sd] * 2}
    ranges, _ = schedule(requests, 2, costs, None, measured_ks=[3])
    assert ranges == [(1, 2, 2)]
    assert recommended_k(speedups(requests, 1, costs, None), [3]) == 2


def test_the_schedule_merges_batch_sizes_with_the_same_k():
    costs = StepCosts(fixed_s=1.0, per_sequence_s=0.0, per_token_s=0.1)
    base = ReplayRequest.baseline(1, 4)
    sd = ReplayRequest(1, (1, 2, 1), (0, 3, 3))
    requests = {0: [base] * 8, 3: [sd] * 8}
    ranges, gains = schedule(requests, 8, costs, None)
    # Worked as in test_sd_pays_at_batch_size_1_and_not_at_8_when_tokens_cost, per batch size:
    # bs b runs ceil(8 / b) rounds; a round costs 4 x (1 + 0.1 b) without SD and
    # (1 + 0.1 b) + 2 x (1 + 0.4 b) with it, so SD gains while 4 + 0.4 b > 3 + 0.9 b: b < 2.
    assert ranges == [(1, 1, 3), (2, 8, 0)]
    assert gains[1] == pytest.approx(4.4 / 3.9)
    assert gains[8] == 1.0


def test_vllm_takes_one_config_with_the_ranges_and_sglang_one_launch_per_range():
    files = engine_schedules("draft_model", [(1, 4, 3), (5, 16, 0)], "/models/draft")
    assert files["vllm"]["speculative_config"] == {
        "method": "draft_model",
        "model": "/models/draft",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 16, 0]],
    }
    first, second = files["sglang"]["launches"]
    assert first["args"] == [
        "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path",
        "/models/draft", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4", "--max-running-requests", "4",
    ]  # fmt: skip
    assert second == {"batch_sizes": [5, 16], "k": 0, "args": ["--max-running-requests", "16"]}
    # SD off everywhere: vLLM runs without a speculative config.
    off = engine_schedules("ngram", [(1, 16, 0)], None, (1, 4))
    assert off["vllm"]["speculative_config"] is None


def test_sglang_launches_carry_the_flags_of_the_release_they_name():
    # The pinned image (0.5.5) takes the n-gram match windows; 0.5.10 and later refuse them, so
    # a schedule for a newer image is refused in one line instead of written with dead flags.
    pinned = engine_schedules("ngram", [(1, 4, 3), (5, 16, 1)], None, (1, 4))
    assert pinned["sglang"]["image"] == "lmsysorg/sglang:v0.5.5"
    assert "--speculative-ngram-max-match-window-size" in pinned["sglang"]["launches"][0]["args"]
    with pytest.raises(UnsupportedSpecError, match=r"SGLang 0\.5\.23 has no --speculative-ngram"):
        engine_schedules(
            "ngram", [(1, 4, 3)], None, (1, 4), sglang_image="lmsysorg/sglang:v0.5.23-cu129"
        )


def test_tune_writes_the_files_sglang_and_trtllm_load_as_they_are(tmp_path, capsys):
    import yaml

    from speedbench.oracle_cli import write_engine_files

    files = engine_schedules(
        "eagle3", [(1, 4, 3), (5, 8, 3), (9, 16, 1)], "/m/e3", None, "lmsysorg/sglang:v0.5.23"
    )
    written = write_engine_files(files, tmp_path, "eagle3")
    assert [p.name for p in written] == ["sglang-adaptive-eagle3.json", "trtllm-eagle3.yaml"]
    # One adaptive server, pointed at the file written: 1-8 draft 3 (merged), 9 and above 1.
    adaptive = files["sglang"]["adaptive"]
    assert adaptive["args"][-2:] == ["--speculative-adaptive-config", str(written[0])]
    assert json.loads(written[0].read_text()) == {
        "1": {"candidate_steps": [3]}, "9": {"candidate_steps": [1]}
    }  # fmt: skip
    # The pinned TensorRT-LLM (1.2.0): keys are each length's smallest batch size.
    options = yaml.safe_load(written[1].read_text())
    assert options["speculative_config"]["draft_len_schedule"] == {1: 3, 9: 1}
    assert options["speculative_config"]["max_draft_len"] == 3
    assert "trtllm-serve ... --extra_llm_api_options" in capsys.readouterr().out


@pytest.mark.parametrize(
    "ranges",
    [[], [(2, 4, 3)], [(1, 4, 3), (6, 8, 2)], [(1, 4, 3), (4, 8, 2)], [(1, 4, -1)]],
    ids=["empty", "not-from-1", "gap", "overlap", "negative-k"],
)
def test_a_schedule_no_engine_could_load_is_refused(ranges):
    with pytest.raises(ValueError, match="schedule"):
        check_ranges(ranges)


def test_a_schedule_keeps_its_k_through_near_ties():
    costs = StepCosts(fixed_s=1.0, per_sequence_s=0.0, per_token_s=0.0)
    # Every iteration costs 1 s: k=2 takes 3 steps, k=3 also 3 (its extra draft never lands).
    requests = {
        0: [ReplayRequest.baseline(1, 6)],
        2: [ReplayRequest(1, (1, 3, 2), (0, 2, 2))],
        3: [ReplayRequest(1, (1, 3, 2), (0, 3, 3))],
    }
    ranges, gains = schedule(requests, 3, costs, None)
    assert ranges == [(1, 3, 2)]  # the tie goes to the shorter draft and is kept
    assert gains == {1: 2.0, 2: 2.0, 3: 2.0}


def test_the_draft_pass_is_fitted_on_what_sd_iterations_cost_beyond_the_verify(tmp_path):
    target = StepCosts(fixed_s=0.1, per_sequence_s=0.01, per_token_s=0.001)
    truth = StepCosts(fixed_s=0.05, per_sequence_s=0.02, per_token_s=0.002)
    k = 2

    def step(b: int) -> float:  # verify 3 tokens a request, then k passes
        return iteration_seconds(target, truth, k, [], [k] * b)

    # Two requests start together; B ends after 2 steps, A takes 3 more alone.
    times, t = [0.0], 0.0
    for b in (2, 2, 1, 1, 1):
        t += step(b)
        times.append(t)
    # Both were sent one prefill iteration (two prompts, then k draft passes) before it ended.
    sent = -iteration_seconds(target, truth, k, [10, 10], [])
    a = _record("a", 10, times, k=k, start_s=sent)
    b = _record("b", 10, times[:3], k=k, start_s=sent)
    level = tmp_path / "draft_model-k2" / "q" / "bs2"
    write_parquet([a, b], level / "records.parquet")
    alone = StepCosts(fixed_s=0.03, per_sequence_s=0.02, per_token_s=0.002)
    fit = fit_sd_passes({"draft_model": [("draft_model-k2/q/bs2", level, k)]}, target, alone)[
        "draft_model"
    ]
    assert fit.fixed_s == pytest.approx(0.05)
    assert fit.per_sequence_s == pytest.approx(0.02)
    assert (fit.per_token_s, fit.iterations, fit.sources) == (0.002, 6, ("draft_model-k2/q/bs2",))
    assert fit.per_verifying_sq_s == 0.0  # two batch sizes (2, 1): the shared square not fitted
    with pytest.raises(ValueError, match="no SD iteration of draft_model to fit on"):
        fit_sd_passes({"draft_model": []}, target, alone)


def test_prefills_that_all_look_like_outliers_are_kept_to_price_a_token():
    # Long prompts prefilled in chunks over several iterations: every prefill burst is far
    # longer than its tokens say. Trimming them all would leave no way to tell a token's cost
    # from a sequence's; the fit keeps them.
    truth = StepCosts(fixed_s=0.2, per_sequence_s=0.0, per_token_s=0.002)
    decodes = [
        Iteration(truth.decode_s(b) + 0.001 * (i % 3), b, b)
        for i, b in enumerate([1, 2, 3, 4] * 10)
    ]
    prefills = [
        Iteration(2 * truth.seconds(b, n), b, n, n - b + 1) for b, n in ((4, 2051), (3, 1030))
    ]
    fit = fit_step_costs(decodes + prefills)
    assert fit.outliers == 0 and fit.iterations == 42
    assert fit.per_token_s > 0.0015  # the prefills' tokens priced, not split with the sequences


def test_a_cost_the_fit_would_make_negative_is_held_at_zero():
    from speedbench.oracle.steptime import nonnegative_lstsq

    # y = 0.2 - 0.01 s + 0.002 t exactly: the unconstrained fit recovers the negative -0.01.
    st = [(1, 1), (2, 2), (4, 4), (1, 100)]
    x = np.array([[1.0, s, t] for s, t in st])
    y = np.array([0.2 - 0.01 * s + 0.002 * t for s, t in st])
    assert np.linalg.lstsq(x, y, rcond=None)[0][1] == pytest.approx(-0.01)
    # Held at 0, the rest is y = a + c t over (1, .192), (2, .184), (4, .168), (100, .39):
    # t mean 26.75, y mean .2335, Sxx 7158.75, Sxy 15.2475.
    c = 15.2475 / 7158.75
    assert nonnegative_lstsq(x, y) == pytest.approx([0.2335 - 26.75 * c, 0.0, c])
    # A fit with no negative coefficient is plain least squares.
    y2 = np.array([0.2 + 0.01 * s + 0.002 * t for s, t in st])
    assert nonnegative_lstsq(x, y2) == pytest.approx([0.2, 0.01, 0.002])


def test_a_step_drafts_what_the_engine_counts_say():
    # Chunks after the prefill: 1 (drafted 3, none accepted), 4 (3 accepted), 1 (no proposal:
    # the next count says 1 accepted), 2 (that one).
    r = _record("a", 10, [1.0, 1.1, 1.2, 1.3, 1.4], k=3, chunk_tokens=[1, 1, 4, 1, 2],
                engine_drafted=[3, 3, 3], engine_accepted=[0, 3, 1])  # fmt: skip
    assert step_drafts(r, 3) == [0, 3, 3, 0, 3]
    # Without the engine's counts every step drafted k; without SD nothing.
    assert step_drafts(_record("b", 10, [1.0, 1.1, 1.2], k=3), 3) == [0, 3, 3]
    assert step_drafts(_record("c", 10, [1.0, 1.1]), 0) == [0, 0]


def test_prompts_fill_the_token_budget_in_arrival_order():
    pending = {0: 1000, 1: 1000, 2: 500}
    # 0 finishes; 1 takes what is left of the 1,500 tokens; 2 waits.
    assert prefill_chunks(pending, [0], 1500) == {0: 1000, 1: 500}
    assert pending == {1: 500, 2: 500}
    # Without a budget only the prompts finishing are prefilled.
    assert prefill_chunks(pending, [2], None) == {2: 500} and pending == {1: 500}


def test_a_long_prompt_is_charged_to_the_iterations_that_prefilled_it():
    # Budget 100: a (60 tokens) and b (80) are sent together; the first iteration prefills a
    # and 40 of b, the second a's decode step and b's other 40 (b's first token), the third
    # both decode steps.
    records = [_record("a", 60, [1.0, 1.5, 2.0]), _record("b", 80, [1.501, 2.001])]
    assert engine_iterations(records, token_budget=100) == [
        Iteration(seconds=1.0, sequences=2, tokens=100, prefill_tokens=100),
        Iteration(seconds=0.5, sequences=2, tokens=41, prefill_tokens=40, decoding=1, context=61),
        Iteration(seconds=0.5, sequences=2, tokens=2, decoding=2, context=62 + 81),
    ]
    # Counted whole, b's 80 tokens would all land in the second iteration.
    assert engine_iterations(records)[1] == Iteration(0.5, 2, 81, 80, 1, 61)


def test_the_replay_prefills_in_chunks_of_the_token_budget():
    # a (60) and b (80), two tokens each; 1 s an iteration plus 10 ms a token.
    costs = StepCosts(fixed_s=1.0, per_sequence_s=0.0, per_token_s=0.01)
    a, b = ReplayRequest.baseline(60, 2), ReplayRequest.baseline(80, 2)
    # Whole: both prefilled (140 tokens), then both decode (2): 2 iterations, 142 tokens.
    assert replay_seconds([a, b], 2, costs) == pytest.approx(2 + 1.42)
    # Budget 100: a and 40 of b (100); a's decode and b's other 40 (41); b's decode (1).
    assert replay_seconds([a, b], 2, costs, token_budget=100) == pytest.approx(3 + 1.42)


def test_the_context_a_step_reads_is_fitted_where_prompt_lengths_differ():
    # Decode steps over 150-token and 1,000-token contexts at bs 1, 4 and 16, and prefills.
    truth = StepCosts(fixed_s=0.1, per_sequence_s=0.002, per_token_s=0.001, per_context_s=2e-6)
    shapes = [(b, b, 0, b * ctx) for b in (1, 4, 16) for ctx in (150, 1000)]
    shapes += [(1, 151, 150, 0), (2, 1002, 1000, 0), (4, 1004, 1000, 2 * 1000)]
    its = [Iteration(truth.seconds(b, n, c), b, n, p, b - (p > 0), c) for b, n, p, c in shapes]
    fit = fit_step_costs(its)
    assert fit.per_context_s == pytest.approx(2e-6, rel=1e-6)
    assert fit.per_sequence_s == pytest.approx(0.002, rel=1e-6)
    # One prompt length: the context is the sequences' multiple, and the fit keeps a cost
    # that explains the steps exactly (it cannot tell the two apart, and none is negative).
    one = [Iteration(truth.seconds(b, b, 150 * b), b, b, 0, b, 150 * b) for b in (1, 4, 16)]
    one += [Iteration(truth.seconds(1, 151), 1, 151, 150, 0)]
    fit = fit_step_costs(one)
    assert min(fit.per_context_s, fit.per_sequence_s) >= 0
    assert fit.seconds(4, 4, 600) == pytest.approx(truth.seconds(4, 4, 600), rel=1e-6)


def test_the_replay_prices_each_step_by_the_context_it_reads():
    # 1 s per iteration and 1 ms per token-position read; a 10-token prompt, 3 tokens out.
    costs = StepCosts(fixed_s=1.0, per_sequence_s=0.0, per_token_s=0.0, per_context_s=0.001)
    # Baseline: the prefill (no step reads a KV), then two decode steps over 10 + 1 and 10 + 2.
    assert replay_seconds([ReplayRequest.baseline(10, 3)], 1, costs) == pytest.approx(
        3 + 0.011 + 0.012
    )
    # SD: after the prefill one verify step of 1 + 3 tokens, which reads the KV of 10 + 1 once
    # and emits the rest: SD saves the second read.
    sd = ReplayRequest(10, (1, 2), (0, 3))
    assert replay_seconds([sd], 1, costs) == pytest.approx(2 + 0.011)


def test_the_square_of_an_iterations_tokens_is_fitted_where_long_prefills_show_it():
    truth = StepCosts(fixed_s=0.15, per_sequence_s=0.002, per_token_s=0.0014,
                      per_token_sq_s=5e-7)  # fmt: skip
    shapes = [(1, 1), (2, 2), (4, 4), (16, 16), (1, 101), (2, 1030), (4, 2048), (3, 700)]
    its = [Iteration(truth.seconds(b, n), b, n, n - b) for b, n in shapes]
    fit = fit_step_costs(its)
    assert fit.per_token_sq_s == pytest.approx(5e-7, rel=1e-6)
    assert fit.per_token_s == pytest.approx(0.0014, rel=1e-6)
    # 2,048 tokens cost more than twice 1,024: 0.15 + 2.867 + 2.097 against 2 x 2.11.
    assert truth.seconds(1, 2048) > 2 * truth.seconds(1, 1024)


def test_prompt_lookups_search_is_what_its_iterations_cost_beyond_the_verify(tmp_path):
    target = StepCosts(fixed_s=0.1, per_sequence_s=0.01, per_token_s=0.001)
    search = StepCosts(fixed_s=0.005, per_sequence_s=0.002, per_token_s=0.0)
    # a drafts at its first two steps (1 and 0 accepted), not at its third; b never does.
    steps = [(2, 5), (1, 4), (1, 1)]  # (sequences, tokens) of each timed iteration
    times, t = [1.0], 1.0
    for seqs, tokens in steps:
        t += iteration_seconds(target, search, draft_passes("ngram", 3), [], [0] * seqs) + (
            target.seconds(seqs, tokens) - target.seconds(seqs, seqs)
        )
        times.append(t)
    a = _record("a", 10, times, k=3, chunk_tokens=[1, 2, 1, 1], engine_drafted=[3, 3],
                engine_accepted=[1, 0])  # fmt: skip
    b = _record("b", 10, [1.001, times[1] + 0.001], k=3, engine_drafted=[], engine_accepted=[])
    level = tmp_path / "ngram-k3" / "q" / "bs2"
    write_parquet([a, b], level / "records.parquet")
    fit = fit_sd_passes({"ngram": [("ngram-k3/q/bs2", level, 3)]}, target, None)["ngram"]
    assert fit.fixed_s == pytest.approx(0.005) and fit.per_sequence_s == pytest.approx(0.002)
    assert (fit.per_token_s, fit.iterations) == (0.0, 3)
    # One search an iteration whatever k; a draft model runs k passes.
    assert (draft_passes("ngram", 3), draft_passes("draft_model", 3), draft_passes("ngram", 0)) == (
        1,
        3,
        0,
    )


def _sd_level(root, drafter, bs, costs, target, k=3, steps=4):
    """``bs`` requests prefilled together, then ``steps`` SD iterations priced by ``costs``."""
    times, t = [1.0], 1.0
    for _ in range(steps):
        t += iteration_seconds(target, costs, draft_passes(drafter, k), [], [k] * bs)
        times.append(t)
    sent = 1.0 - iteration_seconds(target, costs, draft_passes(drafter, k), [10] * bs, [])
    records = [
        _record(f"r{i}", 10, [x + 1e-4 * i for x in times], k=k, start_s=sent) for i in range(bs)
    ]
    folder = root / f"{drafter}-k{k}" / f"bs{bs}"
    write_parquet(records, folder / "records.parquet")
    return (f"{drafter}-k{k}/q/bs{bs}", folder, k)


def test_the_cost_of_verifying_many_streams_is_learnt_from_another_drafters_level(tmp_path):
    # Both drafters' iterations carry 0.2 ms per verifying request squared: 51 ms at 16.
    target = StepCosts(fixed_s=0.1, per_sequence_s=0.01, per_token_s=0.001)
    alone = StepCosts(fixed_s=0.03, per_sequence_s=0.004, per_token_s=0.002)
    draft = StepCosts(0.05, 0.004, 0.002, per_verifying_sq_s=2e-4)
    search = StepCosts(0.005, 0.002, 0.0, per_verifying_sq_s=2e-4)
    levels = {
        "draft_model": [_sd_level(tmp_path, "draft_model", b, draft, target) for b in (1, 4, 16)],
        "ngram": [_sd_level(tmp_path, "ngram", b, search, target) for b in (1, 4, 16)],
    }
    fits = fit_sd_passes(levels, target, alone)
    assert fits["draft_model"].fixed_s == pytest.approx(0.05)
    assert fits["draft_model"].per_sequence_s == pytest.approx(0.004)
    assert fits["ngram"].fixed_s == pytest.approx(0.005)
    assert fits["ngram"].per_sequence_s == pytest.approx(0.002)
    assert fits["ngram"].per_verifying_sq_s == pytest.approx(2e-4)
    assert fits["ngram"].iterations == 3 * 4 and fits["ngram"].outliers == 0

    def step16(costs):
        return iteration_seconds(target, costs, 1, [], [3] * 16)

    # Prompt lookup at bs 16 left out: the draft model's bs-16 level still teaches the square.
    left_out = {"draft_model": levels["draft_model"], "ngram": levels["ngram"][:2]}
    assert step16(fit_sd_passes(left_out, target, alone)["ngram"]) == pytest.approx(step16(search))
    # From its own bs 1 and 4 alone (two batch sizes) no square is fitted, and the straight
    # line through what 1 and 4 streams cost (0.2 and 3.2 ms of square) prices 16 streams
    # 26 ms too cheap, of the square's 51 ms.
    own = fit_sd_passes({"ngram": levels["ngram"][:2]}, target, None)["ngram"]
    assert own.per_verifying_sq_s == 0.0
    assert step16(search) - step16(own) == pytest.approx(0.02626, abs=1e-4)


def test_levels_of_one_long_prompt_each_calibrate_from_their_prefills():
    # The long-context preset's levels: one request each, bs 1. Its only prefill is its first
    # burst, timed from the send; before, none was timed and the fit had no prefill to read.
    truth = StepCosts(fixed_s=0.1, per_sequence_s=0.0, per_token_s=0.002, per_context_s=2e-5)
    its = []
    for prompt in (1024, 2048, 8192, 16384):
        times = [0.5 + truth.seconds(1, prompt)]
        for made in range(1, 6):
            times.append(times[-1] + truth.seconds(1, 1, context=prompt + made))
        its += engine_iterations([_record(f"p{prompt}", prompt, times, start_s=0.5)])
    assert sum(it.prefill_tokens for it in its) == 1024 + 2048 + 8192 + 16384
    fit = fit_step_costs(its)
    assert fit.seconds(1, 32512) == pytest.approx(truth.seconds(1, 32512), rel=1e-6)
    decode_32k = truth.seconds(1, 1, context=32512)
    assert fit.seconds(1, 1, context=32512) == pytest.approx(decode_32k, rel=1e-6)
