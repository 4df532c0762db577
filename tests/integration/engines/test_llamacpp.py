"""A real llama-server (scripts/build_llama_server.sh) on real GGUF files.

The files are the packaged Qwen 0.5B GGUF and the tiny random-weight pair converted to GGUF by
llama.cpp's own converter.

- Tiny pair (float32), draft == target, greedy: every drafted token is accepted, so acceptance
  is exactly k + 1 in the stream (one-token events rejoined into steps), in the server's
  per-request counts and in its Prometheus counters, and the output is the baseline's token for
  token. Random weights with a large init scale keep greedy argmaxes far from ties.
- Real Qwen 0.5B (Q4_K_M), draft == target: acceptance is not k + 1 everywhere and the output is
  not always the baseline's. The target verifies k + 1 tokens in one batch, through other
  kernels than a one-token decode, and near-ties round the other way (docs/llamacpp.md has
  the measurements). The stream's rejoined steps still equal the server's own
  counts, step by step, and the counters their sum.
- Faults: bad prompt ids and the server killed mid-level end up on the records with their kinds,
  keeping what was streamed.
- The container (``speedbench/llama-server``, containers/build.sh) streams what the local
  process does, and leaves no container behind.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from pathlib import Path

import pytest
from tests.integration.conftest import our_containers
from tests.integration.engines.test_vllm_exact import PROMPTS

from speedbench.client.measure import run_load
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.launchers import engine_session
from speedbench.engines.llamacpp import LLAMA_CPP_VERSION, hf_to_gguf
from speedbench.engines.local import free_port, launch_local
from speedbench.metrics.acceptance import acceptance_from_counters
from speedbench.metrics.lossless import lossless_check
from speedbench.metrics.views import counters_view, engine_view, speed_bench_view, stream_view
from speedbench.provision.models import engine_weights
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings, WorkItem

# Its server is compiled from source, 13.5 minutes of both cores on a 2-core host: more than
# make test's budget leaves, so `make test-llamacpp` builds it and runs this file.
pytestmark = [pytest.mark.integration, pytest.mark.llamacpp]

IMAGE = f"speedbench/llama-server:{LLAMA_CPP_VERSION}"
K = 3
STEPS = 10
# 1 prefill token + full steps of k + 1: no step is cut short by max_tokens.
MAX_TOKENS = 1 + STEPS * (K + 1)


@pytest.fixture(scope="module")
def runs(qwen_small, tiny_pair, tmp_path_factory):
    """Every level this module asserts on: baseline, draft == target, and the faults."""
    qwen = engine_weights(str(qwen_small), "gguf")
    gguf_dir = tmp_path_factory.mktemp("tiny-gguf")
    tiny = str(hf_to_gguf(tiny_pair[0], gguf_dir / "tiny.gguf"))
    # The container's server runs as an unprivileged user of its own.
    gguf_dir.chmod(0o755)
    Path(tiny).chmod(0o644)
    logs = tmp_path_factory.mktemp("llamacpp-logs")
    tok = PromptTokenizer.from_pretrained(str(qwen_small))
    items = [WorkItem(f"p{i}", "mixed", (p,)) for i, p in enumerate(PROMPTS)]
    settings = LoadSettings(batch_size=2, max_tokens=MAX_TOKENS, show_progress=False)
    found = {}

    def measure(name: str, gguf: str, spec: SpecConfig, **where) -> None:
        engine = EngineConfig(
            kind="llamacpp", model=gguf, port=free_port(), max_model_len=2048, **where
        )
        with engine_session(engine, spec, logs / f"{name}.log") as running:
            found[name] = run_load(engine, spec, running.adapter, items, settings, tok)

    def identical_draft(gguf: str) -> SpecConfig:
        return SpecConfig(method="draft_model", num_speculative_tokens=K, draft_model=gguf)

    measure("none", tiny, SpecConfig())
    measure("tiny-sd", tiny, identical_draft(tiny))
    measure("tiny-sd-docker", tiny, identical_draft(tiny), launcher="docker", image=IMAGE)
    spec = identical_draft(qwen)
    engine = EngineConfig(kind="llamacpp", model=qwen, port=free_port(), max_model_len=2048)
    with launch_local(engine, spec, logs / "sd.log") as running:
        found["sd"] = run_load(engine, spec, running.adapter, items, settings, tok)
        bad = [WorkItem("oov", prompt_ids=(9707, 10**6))]
        found["bad"] = run_load(engine, spec, running.adapter, bad, settings)
        # The server dies while a long answer streams: kill its process group 3 s in.
        killer = threading.Timer(3.0, os.killpg, (running.process.pid, signal.SIGKILL))
        killer.start()
        long = dataclasses.replace(settings, batch_size=1, max_tokens=2000)
        found["killed"] = run_load(engine, spec, running.adapter, items[:1], long, tok)
        killer.join()
    return found


def test_every_request_succeeded_to_the_token(runs):
    for name in ("none", "sd", "tiny-sd"):
        records = runs[name].records
        assert [r.error for r in records] == [None] * len(PROMPTS)
        assert [r.output_tokens for r in records] == [MAX_TOKENS] * len(PROMPTS)
        assert {r.finish_reason for r in records} == {"length"}


def test_greedy_output_is_identical_with_and_without_sd(runs):
    check = lossless_check(runs["tiny-sd"].records, runs["none"].records)
    assert (check.compared, check.matched) == (len(PROMPTS), len(PROMPTS))


def test_baseline_streams_one_token_per_step(runs):
    for r in runs["none"].records:
        assert r.chunk_tokens == [1] * MAX_TOKENS
        assert r.engine_accepted is None  # nothing drafted, nothing reported


def test_identical_draft_gives_al_k_plus_one_in_every_view(runs):
    result = runs["tiny-sd"]
    for r in result.records:
        # The one-token events rejoined into the server's verify steps...
        assert r.chunk_tokens == [1] + [K + 1] * STEPS
        # ...and the server's own per-request draft counts, step by step.
        assert r.engine_accepted == [K] * STEPS and r.engine_drafted == [K] * STEPS
    expected = {r.request_id: K + 1 for r in result.records}
    assert stream_view(result.records, K).per_unit == expected
    assert engine_view(result.records, K).per_unit == expected
    counters = result.counters
    assert counters.num_drafts == STEPS * len(PROMPTS)
    assert counters_view(counters, K).al_token_weighted == K + 1
    assert acceptance_from_counters(counters, K).conditional_ar == [1.0] * K
    # SPEED-Bench counts the prefill step too.
    assert speed_bench_view(result.records, K).al_request_mean == pytest.approx(
        MAX_TOKENS / (STEPS + 1)
    )


def test_real_model_steps_in_the_stream_are_the_servers_own(runs):
    """Drafted steps are the server's; undrafted ones (a request's last token) are one token.

    A drafted step that accepted nothing is one token too, so size-1 steps are left out of
    the comparison and counted instead.
    """
    result = runs["sd"]
    accepted = drafts = drafted = 0
    for r in result.records:
        steps = r.chunk_tokens[1:]  # after the prefill token
        assert [c for c in steps if c > 1] == [a + 1 for a in r.engine_accepted if a > 0]
        undrafted = len(steps) - len(r.engine_accepted)
        assert undrafted >= 0
        assert r.output_tokens == 1 + sum(r.engine_accepted) + len(r.engine_accepted) + undrafted
        # k every step, fewer only where max_tokens leaves less room (the last one).
        assert set(r.engine_drafted[:-1]) == {K} and 1 <= r.engine_drafted[-1] <= K
        accepted, drafts = accepted + sum(r.engine_accepted), drafts + len(r.engine_accepted)
        drafted += sum(r.engine_drafted)
    counters = result.counters
    assert (counters.num_accepted_tokens, counters.num_drafts) == (accepted, drafts)
    assert counters.num_draft_tokens == drafted


def test_bad_prompt_ids_fail_the_request_with_the_servers_message(runs):
    (record,) = runs["bad"].records
    assert record.error_kind == "http_4xx"
    assert "HTTP 400" in record.error and record.output_tokens == 0


def test_a_killed_server_ends_the_request_keeping_what_streamed(runs):
    (record,) = runs["killed"].records
    assert record.error_kind == "connection"
    assert 0 < record.output_tokens < 2000
    assert sum(record.chunk_tokens) == record.output_tokens


def test_the_container_streams_what_the_local_process_does(runs):
    local = {r.prompt_id: (r.output_token_ids, r.chunk_tokens) for r in runs["tiny-sd"].records}
    docker = {
        r.prompt_id: (r.output_token_ids, r.chunk_tokens) for r in runs["tiny-sd-docker"].records
    }
    assert docker == local
    assert our_containers() == []
