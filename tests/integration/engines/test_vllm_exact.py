"""Exact acceptance and losslessness on a real vLLM-CPU server with draft == target.

The baseline server of the tiny target also shows the prefix-cache reset between levels, and
serves the greedy oracle's check: with a draft that agrees with the target only in part (the
tiny target with noise in its last MLP), the stream the oracle predicts from the baseline's
records (one teacher-forced transformers pass of the draft) is, chunk for chunk, the stream
vLLM's ``draft_model`` SD sends at k = 2 and k = 4, for every request.
"""

from __future__ import annotations

import dataclasses

import pytest
from tests.integration.conftest import TINY_PROMPTS

from speedbench.client.measure import run_load
from speedbench.config import SpecConfig
from speedbench.engines.local import free_port, launch_local
from speedbench.engines.vllm import cpu_vllm_engine
from speedbench.metrics.acceptance import (
    acceptance_from_counters,
    acceptance_from_steps,
    steps_from_chunks,
)
from speedbench.oracle.draft import load_draft
from speedbench.oracle.predict import check_measured, figures_at, predict
from speedbench.run.level import measure_level
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings, WorkItem

pytestmark = pytest.mark.integration

K = 3
# 1 prefill token + 12 full steps of k+1: no step is cut short by max_tokens.
MAX_TOKENS = 1 + 12 * (K + 1)
PROMPTS = TINY_PROMPTS


@pytest.fixture(scope="module")
def tiny_baseline(tiny_pair, tmp_path_factory):
    """The tiny target without SD, one server for every test of this module that needs one."""
    target, _ = tiny_pair
    log_dir = tmp_path_factory.mktemp("tiny-logs")
    engine = cpu_vllm_engine(str(target), port=free_port())
    with launch_local(engine, SpecConfig(), log_dir / "none.log") as running:
        yield running


@pytest.fixture(scope="module")
def tiny_runs(tiny_pair, tiny_baseline, tmp_path_factory):
    target, draft = tiny_pair
    log_dir = tmp_path_factory.mktemp("tiny-logs")
    tok = PromptTokenizer.from_pretrained(str(target))
    items = [WorkItem(f"p{i}", "mixed", (p,)) for i, p in enumerate(PROMPTS)]
    settings = LoadSettings(batch_size=2, max_tokens=MAX_TOKENS, show_progress=False)
    base = tiny_baseline
    runs = {"none": run_load(base.engine, base.spec, base.adapter, items, settings, tok)}
    spec = SpecConfig(method="draft_model", num_speculative_tokens=K, draft_model=str(draft))
    engine = cpu_vllm_engine(str(target), port=free_port())
    with launch_local(engine, spec, log_dir / f"{spec.label}.log") as running:
        runs[spec.label] = run_load(engine, spec, running.adapter, items, settings, tok)
        two_workers = dataclasses.replace(settings, workers=2)
        runs["two-workers"] = run_load(engine, spec, running.adapter, items, two_workers, tok)
        faults = [
            WorkItem("oov", prompt_ids=(9707, 10**6)),
            WorkItem("slow", prompt_ids=(9707, 11, 1879)),
        ]
        quick = dataclasses.replace(settings, request_timeout_s=0.5, max_tokens=4000)
        runs["faults"] = run_load(engine, spec, running.adapter, faults, quick)
    return runs


def test_two_client_processes_measure_what_one_does(tiny_runs):
    one, two = tiny_runs[f"draft_model-k{K}"], tiny_runs["two-workers"]
    assert two.extras["client"].workers == 2
    assert {r.prompt_id: r.output_token_ids for r in one.records} == {
        r.prompt_id: r.output_token_ids for r in two.records
    }
    assert {r.prompt_id: r.chunk_tokens for r in one.records} == {
        r.prompt_id: r.chunk_tokens for r in two.records
    }
    assert acceptance_from_counters(two.counters, K) == acceptance_from_counters(one.counters, K)


def test_real_engine_faults_are_recorded_with_their_kind(tiny_runs):
    records = {r.prompt_id: r for r in tiny_runs["faults"].records}
    # vLLM 0.32 answers 200 and puts the validation error in the stream.
    oov = records["oov"]
    assert oov.error_kind == "engine_error"
    assert oov.error == "engine error in stream: Token id 1000000 is out of vocabulary"
    assert records["slow"].error_kind == "timeout"
    assert records["slow"].error.startswith("request timed out: no finish within 0.5 s")


def test_every_request_succeeded(tiny_runs):
    for name, result in tiny_runs.items():
        if name == "faults":
            continue
        assert [r.error for r in result.records] == [None] * len(PROMPTS)
        assert all(r.output_tokens == MAX_TOKENS for r in result.records)


def test_identical_draft_gives_al_k_plus_one_from_counters(tiny_runs):
    counters = tiny_runs[f"draft_model-k{K}"].counters
    assert counters is not None and counters.num_drafts > 0
    acc = acceptance_from_counters(counters, K)
    assert acc.al_token_weighted == K + 1
    assert acc.conditional_ar == [1.0] * K


def test_identical_draft_gives_al_k_plus_one_from_stream(tiny_runs):
    records = tiny_runs[f"draft_model-k{K}"].records
    steps = [steps_from_chunks(r.chunk_tokens, K) for r in records]
    acc = acceptance_from_steps(steps, K)
    assert acc.al_token_weighted == K + 1
    assert acc.al_request_mean == K + 1
    assert acc.histogram == [0] * K + [12 * len(PROMPTS)]


def test_greedy_output_is_identical_with_and_without_sd(tiny_runs):
    base = {r.prompt_id: r.output_token_ids for r in tiny_runs["none"].records}
    sd = {r.prompt_id: r.output_token_ids for r in tiny_runs[f"draft_model-k{K}"].records}
    assert base == sd


def test_baseline_streams_one_token_per_chunk(tiny_runs):
    for r in tiny_runs["none"].records:
        assert set(r.chunk_tokens) == {1}


def test_engine_view_equals_the_stream_request_by_request(tiny_runs):
    """The per-request spec-decode metrics of vLLM: draft == target accepts every draft."""
    from speedbench.metrics.lossless import lossless_check
    from speedbench.metrics.views import counters_view, engine_view, speed_bench_view, stream_view

    result = tiny_runs[f"draft_model-k{K}"]
    for r in result.records:
        assert r.engine_accepted == [K] * 12 and r.engine_drafted == [K] * 12
        assert [a + 1 for a in r.engine_accepted] == r.chunk_tokens[1:]  # no chunk merged
    engine, stream = engine_view(result.records, K), stream_view(result.records, K)
    assert engine.per_unit == stream.per_unit == {r.request_id: K + 1 for r in result.records}
    assert engine.al_token_weighted == counters_view(result.counters, K).al_token_weighted == K + 1
    # SPEED-Bench counts the prefill step too: (1 + 12 (k + 1)) / 13 per question.
    assert speed_bench_view(result.records, K).al_request_mean == pytest.approx(MAX_TOKENS / 13)
    check = lossless_check(result.records, tiny_runs["none"].records)
    assert (check.compared, check.matched) == (len(PROMPTS), len(PROMPTS))


# The prefix cache is reset before every level: no prefill is served from an earlier level. The
# same prompts are measured three times on one engine. With ``reset`` (the default), the second
# level's prefix-cache hits, from vLLM's own counters, are zero; the third level, told to keep
# the cache, hits on what the second one left, which is what the reset prevented.
# 320-token prompts with no shared prefix: at least two whole KV blocks each (vLLM-CPU's blocks
# hold 128 tokens; only whole blocks are cached).
PROMPT_LEN = 320
ITEMS = [
    WorkItem(f"p{i}", "qa", prompt_ids=tuple(1000 + 331 * i + j for j in range(PROMPT_LEN)))
    for i in range(3)
]


@pytest.fixture(scope="module")
def levels(tiny_baseline, tmp_path_factory):
    out = tmp_path_factory.mktemp("prefix")
    running = tiny_baseline
    settings = LoadSettings(batch_size=1, max_tokens=8, show_progress=False, split="s")
    found = {}
    for name in ("first", "second"):
        found[name] = measure_level(running, ITEMS, settings, None, out / name).metrics
    kept = dataclasses.replace(
        running, engine=running.engine.model_copy(update={"prefix_cache": "keep"})
    )
    found["kept"] = measure_level(kept, ITEMS, settings, None, out / "kept").metrics
    return found


def test_each_level_starts_from_an_empty_prefix_cache(levels):
    for name in ("first", "second"):
        cache = levels[name].prefix_cache
        assert cache.mode == "reset"
        assert cache.query_tokens == 3 * PROMPT_LEN  # every prompt token was looked up
        assert cache.hit_tokens == 0
        load = levels[name].overall.load
        assert (load.num_requests, load.num_failed) == (3, 0)


def test_without_the_reset_the_earlier_level_would_have_served_the_prefill(levels):
    cache = levels["kept"].prefix_cache
    assert cache.mode == "keep"
    # The whole blocks of each repeated prompt (the last token is always recomputed).
    assert 3 * 256 <= cache.hit_tokens < cache.query_tokens == 3 * PROMPT_LEN


NEAR_PROMPTS = [
    "Write a Python function that merges two sorted lists.",
    "Explain the difference between a process and a thread.",
    "Summarize the plot of Hamlet in three sentences.",
    "List five prime numbers greater than one hundred.",
    "Translate 'good morning' into French, German and Spanish.",
    "What is the derivative of x squared times sine x?",
]
DRAFT_LENGTHS = (2, 4)
# The draft length of the temperature-1 run (served by the k = 4 server of near_draft_runs).
SAMPLED_K = DRAFT_LENGTHS[-1]


@pytest.fixture(scope="module")
def near_draft_runs(tiny_pair, tiny_near_draft, tiny_baseline, tmp_path_factory):
    """The baseline and draft_model SD at k = 2 and 4 with the partly agreeing draft.

    The k = 4 server also serves the same prompts sampled at temperature 1 ("sampled"), for
    the sampled-acceptance test below (one launch fewer than a server of its own).
    """
    target, _ = tiny_pair
    log_dir = tmp_path_factory.mktemp("oracle-logs")
    tok = PromptTokenizer.from_pretrained(str(target))
    items = [WorkItem(f"p{i}", f"cat{i % 2}", (p,)) for i, p in enumerate(NEAR_PROMPTS)]
    settings = LoadSettings(batch_size=2, max_tokens=40, show_progress=False)
    base = tiny_baseline
    runs = {"none": run_load(base.engine, base.spec, base.adapter, items, settings, tok).records}
    for spec in [
        SpecConfig(method="draft_model", num_speculative_tokens=k, draft_model=str(tiny_near_draft))
        for k in DRAFT_LENGTHS
    ]:
        engine = cpu_vllm_engine(str(target), port=free_port())
        with launch_local(engine, spec, log_dir / f"{spec.label}.log") as running:
            runs[spec.label] = run_load(engine, spec, running.adapter, items, settings, tok).records
            if spec.num_speculative_tokens == SAMPLED_K:
                sampled = dataclasses.replace(settings, temperature=1.0, seed=7)
                runs["sampled"] = run_load(
                    engine, spec, running.adapter, items, sampled, tok
                ).records
    return runs


@pytest.fixture(scope="module")
def near_prediction(near_draft_runs, tiny_near_draft):
    draft = load_draft(str(tiny_near_draft), "float32")
    return predict(near_draft_runs["none"], "draft_model", range(1, 7), draft=draft,
                   show_progress=False)  # fmt: skip


@pytest.mark.parametrize("k", DRAFT_LENGTHS)
def test_draft_model_oracle_predicts_every_step_vllm_takes(near_draft_runs, near_prediction, k):
    measured = near_draft_runs[f"draft_model-k{k}"]
    check = check_measured(near_prediction, k, measured, f"draft_model-k{k}", None)
    assert (check.compared, check.output_differs) == (len(NEAR_PROMPTS), 0)
    assert check.mismatches == []
    assert check.identical == len(NEAR_PROMPTS)
    assert check.predicted_al == check.measured_al


def test_the_partial_draft_accepts_runs_of_every_length(near_prediction):
    # A fair test: neither all-accepted nor all-rejected steps, at every predicted k.
    for k in range(1, 7):
        figures = figures_at(near_prediction, "draft_model", k, None)
        stream = figures.views["stream"]
        assert 1.2 < stream.al_token_weighted < k + 1
        assert figures.drafted_fraction == 1.0
    accepted = {a for s in near_prediction.streams[4] for a in s.accepted}
    assert accepted >= {0, 1, 2, 3, 4}


# At temperature 1, vLLM's draft_model drafts greedily (SpeculativeConfig.draft_sample_method
# "greedy", vllm-project/vllm#16899): the draft proposes its argmax and the rejection sampler
# takes its probabilities as one-hot, so an answer token is an accepted draft exactly where it
# is the draft's argmax given the answer before it (the sampled oracle's greedy-draft rule). On
# the CPU build (vllm-cpu 0.32) the engine's own per-request counts show almost no draft
# accepted at T > 0, even where the rule says the token was one
# (docs/findings/sampled-acceptance.md).


@pytest.fixture(scope="module")
def sampled_run(near_draft_runs):
    return near_draft_runs["sampled"]


def test_vllm_cpu_accepts_almost_none_of_the_drafts_its_rule_accepts_at_t1(
    sampled_run, tiny_pair, tiny_near_draft
):
    from speedbench.oracle.sampled import sampled_pass

    assert all(r.ok for r in sampled_run)
    target, _ = tiny_pair
    along = sampled_pass(
        load_draft(str(target), "float32"), load_draft(str(tiny_near_draft), "float32"),
        sampled_run, 1.0, None, show_progress=False,
    )  # fmt: skip
    # The rule: decode tokens that are the draft's argmax were accepted drafts (certainly).
    rule = [b for t in along.terms.values() for b in t.greedy_beta[1:]]
    rule_rate = sum(rule) / len(rule)
    engine_rate = sum(sum(r.engine_accepted) for r in sampled_run) / sum(
        sum(r.engine_drafted) for r in sampled_run
    )
    assert rule_rate > 0.2, "the near draft agrees with the sampled answers too rarely to tell"
    # vllm-cpu 0.32 accepts a small fraction of that. Should this fail, the CPU build accepts
    # what the rule does: then assert its steps equal the rule's, chunk for chunk.
    assert engine_rate < rule_rate / 4, (engine_rate, rule_rate)
