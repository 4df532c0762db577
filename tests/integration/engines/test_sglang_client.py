"""The SGLang adapter through the real client, against the synthetic server's SGLang dialect.

No SGLang runs here, so this is the closest check of the whole path: ``/generate`` with token
ids, cumulative ``output_ids`` cut down to the new ones, ``spec_verify_ct`` into
``engine_steps``, and the server's own AL from its server info (``/server_info``, or
``/get_server_info`` before SGLang 0.5.10) into the level's metrics.
The expected values are rebuilt from the server's seeded chunk sizes.
"""

from __future__ import annotations

import random

import pytest

from speedbench.client.measure import run_load
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines import get_engine
from speedbench.engines.local import free_port
from speedbench.metrics.summary import summarize_level
from speedbench.results import LevelMetrics, finite, tracking_scalars
from speedbench.testing.synthetic import SyntheticOptions, chunk_sizes, serve_in_subprocess
from speedbench.workload import LoadSettings, WorkItem

K, ACCEPT_P, SEED, MAX_TOKENS = 3, 0.6, 7, 25
pytestmark = pytest.mark.integration

FIRST_IDS = (11, 12, 13, 14, 15)
TRUNCATED = 16


def expected_sizes(first: int) -> list[int]:
    return [1, *chunk_sizes(MAX_TOKENS - 1, K, ACCEPT_P, random.Random(SEED + first))]


@pytest.fixture(scope="module")
def sglang_level():
    options = SyntheticOptions(k=K, accept_p=ACCEPT_P, seed=SEED, faults={TRUNCATED: "truncate"})
    port = free_port()
    with serve_in_subprocess(options, port):
        items = [WorkItem(f"p{t}", prompt_ids=(t, 100)) for t in (*FIRST_IDS, TRUNCATED)]
        result = run_load(
            EngineConfig(kind="sglang", model="m", port=port),
            SpecConfig(method="ngram", num_speculative_tokens=K),
            get_engine("sglang"),
            items,
            LoadSettings(batch_size=3, max_tokens=MAX_TOKENS, show_progress=False),
        )
    return {r.prompt_id: r for r in result.records}, result


def test_cumulative_output_ids_become_the_new_ids_per_step(sglang_level):
    records, _ = sglang_level
    for first in FIRST_IDS:
        rec = records[f"p{first}"]
        assert rec.ok and rec.finish_reason == "length"
        assert rec.output_token_ids == list(range(first, first + MAX_TOKENS))
        assert rec.chunk_tokens == expected_sizes(first)


def test_verify_counts_become_engine_steps(sglang_level):
    records, _ = sglang_level
    for first in FIRST_IDS:
        assert records[f"p{first}"].engine_steps == len(expected_sizes(first)) - 1


def test_a_stream_without_finish_is_truncated(sglang_level):
    records, _ = sglang_level
    rec = records[f"p{TRUNCATED}"]
    assert rec.error_kind == "truncated" and not rec.ok


def test_engine_step_and_server_acceptance_reach_the_level_metrics(sglang_level):
    _, result = sglang_level
    steps = sum(len(expected_sizes(f)) - 1 for f in FIRST_IDS)
    # SGLang's own figure counts the prefill token; speedbench's leaves it out.
    assert result.extras["server_al"] == len(FIRST_IDS) * MAX_TOKENS / steps
    metrics = summarize_level(result.records, result.counters, K, result.extras["server_al"])
    views = metrics.overall.views
    # The engine view is SGLang's own rule: completion tokens over verify steps, prefill in.
    engine = views["engine"]
    assert engine.count == len(FIRST_IDS) and engine.num_steps == steps
    assert engine.al_token_weighted == len(FIRST_IDS) * MAX_TOKENS / steps
    # Every chunk after the first is one verify step, so the stream view (prefill left out)
    # counts the same steps exactly.
    assert views["stream"].num_steps == steps
    assert views["stream"].al_token_weighted == pytest.approx(
        len(FIRST_IDS) * (MAX_TOKENS - 1) / steps, rel=1e-12
    )
    assert views["server"].al_token_weighted == result.extras["server_al"]
    assert "counters" not in views  # SGLang exports no per-position counters
    scalars, _ = tracking_scalars(LevelMetrics.model_validate(finite(metrics.model_dump())))
    assert scalars["al_engine"] == engine.al_token_weighted
    assert scalars["al_server"] == result.extras["server_al"]


def test_the_server_info_of_a_release_before_0_5_10_is_found_and_gives_the_version():
    # The synthetic server speaks 0.5.5: /get_server_info only, no /server_info, no /version.
    from speedbench.client.measure import scrape_metrics

    port = free_port()
    adapter = get_engine("sglang")
    with serve_in_subprocess(SyntheticOptions(k=K, seed=SEED), port):
        engine = EngineConfig(kind="sglang", model="m", port=port)
        info = scrape_metrics(engine, adapter)
        assert info is not None and "avg_spec_accept_length" in info
        assert adapter.server_version(engine.base_url) == "synthetic"
