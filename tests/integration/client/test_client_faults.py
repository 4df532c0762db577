"""Per-request faults over real TCP (synthetic server): recorded with a kind, never raised."""

from __future__ import annotations

import pytest

from speedbench.client.measure import run_load
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines import get_engine
from speedbench.engines.local import free_port
from speedbench.metrics.summary import summarize_level
from speedbench.workload import LoadSettings, WorkItem

pytestmark = pytest.mark.integration


def engine_at(url: str) -> EngineConfig:
    return EngineConfig(model="m", port=int(url.rsplit(":", 1)[1]))


def run(url, items, batch_size=3, **settings):
    seen = []
    result = run_load(
        engine_at(url),
        SpecConfig(method="ngram", num_speculative_tokens=3),
        get_engine("vllm"),
        items,
        LoadSettings(batch_size=batch_size, max_tokens=20, show_progress=False, **settings),
        on_record=seen.append,
    )
    return result, seen


@pytest.fixture(scope="module")
def faulty(fault_server):
    items = [WorkItem(f"p{i}", prompt_ids=(i, 100)) for i in range(1, 10)]
    items.append(WorkItem("oov", prompt_ids=(10, 151936)))
    result, seen = run(fault_server, items, request_timeout_s=2.0)
    return {r.prompt_id: r for r in result.records}, result, seen


@pytest.mark.parametrize(
    ("prompt", "kind", "message"),
    [
        ("p2", "http_5xx", "HTTP 500: Internal Server Error boom"),
        ("p3", "truncated", "truncated stream: ended after 10 tokens with no finish reason"),
        ("p4", "connection", "connection closed mid-response after 10 tokens"),
        ("p6", "engine_error", "engine error in stream: engine overloaded"),
        ("p7", "bad_payload", 'chunk is not JSON: b\'{"choices": [{"token_ids": [1, 2\''),
        ("p8", "rate_limited", "HTTP 429: slow down (after 6 attempts)"),
        ("p9", "timeout", "request timed out: no finish within 2 s (0 tokens received)"),
        ("oov", "http_4xx", "HTTP 400: Token id 151936 is out of vocabulary"),
    ],
)
def test_each_fault_is_recorded_with_its_kind(faulty, prompt, kind, message):
    records, _, _ = faulty
    assert (records[prompt].error_kind, records[prompt].error) == (kind, message)


def test_a_429_is_retried_with_backoff_then_measured(faulty):
    records, _, _ = faulty
    rec = records["p5"]
    assert rec.ok and rec.attempts == 3  # two 429s (Retry-After: 0), then served
    assert sum(rec.chunk_tokens) == 20 and rec.finish_reason == "length"


def test_partial_streams_stay_on_failed_records(faulty):
    records, _, _ = faulty
    assert sum(records["p3"].chunk_tokens) == 10 and records["p3"].output_token_ids[0] == 3


def test_every_record_reached_the_sink_and_failures_leave_latency_alone(faulty):
    records, result, seen = faulty
    assert len(seen) == len(records) == 10
    summary = summarize_level(result.records, None, 3).overall
    assert summary.errors_by_kind == {
        "bad_payload": 1,
        "connection": 1,
        "engine_error": 1,
        "http_4xx": 1,
        "http_5xx": 1,
        "rate_limited": 1,
        "timeout": 1,
        "truncated": 1,
    }
    load = summary.load
    assert load.num_requests == 10 and load.error_rate == 0.8
    assert load.output_tokens == 40  # p1 and p5 only
    assert load.ttft_s.count == 2


def test_successful_request_keeps_chunks_and_ids(fault_server):
    result, _ = run(fault_server, [WorkItem("p1", prompt_ids=(1, 100))], batch_size=1)
    (rec,) = result.records
    assert sum(rec.chunk_tokens) == 20 and max(rec.chunk_tokens) <= 4
    assert rec.output_token_ids == list(range(1, 21))
    assert rec.finish_reason == "length" and rec.error is None
    assert rec.start_s <= rec.chunk_times_s[0] <= rec.chunk_times_s[-1] <= rec.end_s
    assert rec.prompt_tokens == 2 and rec.k == 3 and rec.config_label == "ngram-k3"
    delay = result.extras["client"].chunk_delay
    assert delay is not None
    assert delay.count == len(rec.chunk_tokens) and 0 < delay.p50_ms < 50


def test_an_engine_that_refuses_connections_stops_the_run():
    closed = f"http://127.0.0.1:{free_port()}"
    items = [WorkItem(f"p{i}", prompt_ids=(1,)) for i in range(6)]
    result, seen = run(closed, items, batch_size=2)
    assert result.aborted.startswith("engine unreachable: cannot connect to 127.0.0.1:")
    assert len(seen) == 2  # the two requests that tried; the other four were never sent
    assert {r.error_kind for r in seen} == {"connection"}
