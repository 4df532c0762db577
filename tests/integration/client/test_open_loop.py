"""Open-loop levels, warm-up and repeats against the synthetic server.

Arrivals keep their schedule, a cap's wait is latency, a level warms up at its own load and then
measures each repeat, and goodput is counted from the records.

The synthetic server answers each request in at least 9 sleeps of 10 ms (10 tokens, one a
chunk), so every bound below is a lower bound that a slow host cannot break: sleeps end late,
never early.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from speedbench.client.arrivals import ArrivalError, arrival_offsets
from speedbench.client.measure import run_load
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines import get_engine
from speedbench.engines.local import free_port
from speedbench.engines.running import RunningEngine
from speedbench.metrics.latency import arrival_lag_s, e2e_s, summarize_load, ttft_s
from speedbench.records import read_jsonl, read_parquet
from speedbench.run.level import measure_level
from speedbench.testing.synthetic import SyntheticOptions, serve_in_subprocess
from speedbench.workload import LoadSettings, WorkItem

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
    assert result.extras["client"].arrival_lag.count == len(ITEMS)
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
    assert result.extras["client"].arrival_lag is None


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


def test_a_level_warms_up_at_its_own_load_then_measures_each_repeat(server, tmp_path):
    external = server.model_copy(update={"launcher": "external"})
    running = RunningEngine(external, SpecConfig(), get_engine("vllm"), Path(os.devnull))
    settings = LoadSettings(
        max_tokens=TOKENS,
        show_progress=False,
        request_rate=50.0,
        arrival="constant",
        max_concurrency=1,
        warmup_requests=3,
        repeats=2,
        objectives={"e2e_s": 0.2},
        split="s",
    )
    level = measure_level(running, ITEMS, settings, None, tmp_path / "level")
    records = read_parquet(tmp_path / "level" / "records.parquet")
    assert read_jsonl(tmp_path / "level" / "records.jsonl") == records  # durable as they came
    warm = [r for r in records if r.warmup]
    measured = [r for r in records if not r.warmup]
    # The warm-up: the first three prompts, sent on the level's own schedule and cap.
    assert [r.prompt_id for r in sorted(warm, key=lambda r: r.scheduled_s)] == ["p0", "p1", "p2"]
    assert all(r.request_id.endswith("/warmup") and r.scheduled_s is not None for r in warm)
    for before, after in itertools.pairwise(sorted(warm, key=lambda r: r.start_s)):
        assert after.start_s >= before.end_s  # the cap held in the warm-up too
    assert max(r.end_s for r in warm) <= min(r.start_s for r in measured)
    # Each repeat sent every prompt once; the second in another order.
    in_due_order = sorted(measured, key=lambda r: r.scheduled_s)
    orders = [[r.prompt_id for r in in_due_order if r.repeat == i] for i in (0, 1)]
    assert orders[0] == [it.prompt_id for it in ITEMS]
    assert sorted(orders[1]) == sorted(orders[0]) and orders[1] != orders[0]
    # Every figure counts the 16 measured requests and nothing of the warm-up.
    m = level.metrics
    assert m.overall.load.num_requests == 16 and m.overall.load.output_tokens == 16 * TOKENS
    assert m.overall.load.e2e_s.count == 16
    assert sum(c.load.num_requests for c in m.per_category.values()) == 16
    assert m.repeats is not None and m.repeats.count == 2
    assert [f["request_throughput_rps"] for f in m.repeats.per_repeat] == pytest.approx(
        [8 / summarize_load([r for r in measured if r.repeat == i]).duration_s for i in (0, 1)]
    )
    # Goodput by hand: requests whose end minus due time is within 0.2 s. Under a cap of one,
    # each waits for those before it, so at most the first two of a repeat can make it
    # (0.09 s, then 0.09 + 0.09 - 0.02 s at the least).
    by_hand = sum(1 for r in measured if r.end_s - r.scheduled_s <= 0.2)
    assert m.goodput is not None and (m.goodput.met, m.goodput.total) == (by_hand, 16)
    assert by_hand <= 4
    assert m.config.warmup_requests == 3 and m.config.request_rate == 50.0
