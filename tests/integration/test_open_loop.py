"""Open-loop levels against the synthetic server: arrivals on schedule, a cap's wait is latency.

The synthetic server answers each request in at least 9 sleeps of 10 ms (10 tokens, one a
chunk), so every bound below is a lower bound that a slow host cannot break: sleeps end late,
never early.
"""

from __future__ import annotations

import itertools

import pytest

from speedbench.client.arrivals import ArrivalError, arrival_offsets
from speedbench.client.loadgen import LoadSettings, WorkItem
from speedbench.client.run import run_load
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines import get_engine
from speedbench.engines.local import free_port
from speedbench.metrics.latency import arrival_lag_s, e2e_s, summarize_load, ttft_s
from speedbench.synthetic import SyntheticOptions, serve_in_subprocess

pytestmark = pytest.mark.integration
TOKENS = 10
MIN_SERVICE_S = (TOKENS - 1) * 0.01
ITEMS = [WorkItem(f"p{i}", "qa", prompt_ids=(1000 + i, 5)) for i in range(8)]


@pytest.fixture(scope="module")
def server():
    with serve_in_subprocess(SyntheticOptions(interval_s=0.01), free_port()) as url:
        yield EngineConfig(model="m", port=int(url.rsplit(":", 1)[1]))


def measure(engine, **load):
    settings = LoadSettings(max_tokens=TOKENS, show_progress=False, **load)
    return run_load(engine, SpecConfig(), get_engine("vllm"), ITEMS, settings)


def test_a_capped_level_counts_the_wait_for_a_slot_as_latency(server):
    # 50 arrivals/s, one slot: each request waits for every one before it.
    result = measure(server, request_rate=50.0, arrival="constant", max_concurrency=1)
    records = sorted(result.records, key=lambda r: r.scheduled_s)
    assert [r.prompt_id for r in records] == [it.prompt_id for it in ITEMS]
    assert all(r.ok and r.output_tokens == TOKENS for r in records)
    for before, after in itertools.pairwise(records):
        assert after.start_s >= before.end_s  # the cap held: one request at a time
    last = records[-1]
    waited = last.start_s - last.scheduled_s
    # Seven requests of at least 90 ms each went first; it was due 7 x 20 ms after the first.
    assert waited >= 7 * MIN_SERVICE_S - 7 * 0.02
    assert arrival_lag_s(last) == waited
    assert e2e_s(last) == pytest.approx(waited + (last.end_s - last.start_s), abs=1e-9)
    assert ttft_s(last) > waited  # from when it was due, not from when it was sent
    # Only the dispatcher's own lateness is the client's arrival lag, not the slot wait.
    assert result.extras["client"]["arrival_lag"]["count"] == len(ITEMS)
    assert summarize_load(records).e2e_s.p99 >= waited


def test_an_uncapped_level_sends_on_the_seeded_schedule(server):
    result = measure(server, request_rate=50.0, arrival="poisson", seed=5)
    records = sorted(result.records, key=lambda r: r.scheduled_s)
    t0 = records[0].scheduled_s
    due = arrival_offsets(len(ITEMS), 50.0, "poisson", seed=5)
    assert [r.scheduled_s - t0 for r in records] == pytest.approx(due, abs=1e-9)
    assert all(r.start_s >= r.scheduled_s for r in records)  # never sent early
    assert all(r.ok for r in records)


def test_a_closed_loop_level_has_no_schedule(server):
    result = measure(server, batch_size=2)
    assert all(r.scheduled_s is None for r in result.records)
    assert all(ttft_s(r) == r.chunk_times_s[0] - r.start_s for r in result.records)
    assert "arrival_lag" not in result.extras["client"]


@pytest.mark.parametrize(
    ("load", "error", "message"),
    [
        ({"request_rate": 0.0}, ArrivalError, "request rate must be a positive number"),
        ({"request_rate": 5.0, "arrival": "gamma", "burstiness": 0.0}, ArrivalError, "burstiness"),
        ({"request_rate": 5.0, "max_concurrency": 0}, ValueError, "max_concurrency must be >= 1"),
        ({"request_rate": 5.0, "workers": 2}, ValueError, "one client process, got workers=2"),
    ],
)
def test_bad_open_loop_settings_fail_before_anything_is_sent(server, load, error, message):
    with pytest.raises(error, match=message):
        measure(server, **load)
