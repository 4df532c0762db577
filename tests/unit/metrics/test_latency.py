import math

from speedbench.metrics.latency import summarize_load, tpot_s, ttft_s
from speedbench.records import RequestRecord


def rec(rid, start, chunks, sizes, end, error=None):
    ids = list(range(sum(sizes)))
    return RequestRecord(
        request_id=rid,
        prompt_id=rid,
        start_s=start,
        end_s=end,
        chunk_times_s=chunks,
        chunk_tokens=sizes,
        output_token_ids=ids,
        error=error,
    )


def test_per_request_latencies():
    r = rec("a", 10.0, [10.5, 10.7, 11.1], [1, 3, 2], 11.2)
    assert ttft_s(r) == 0.5
    assert math.isclose(tpot_s(r), (11.1 - 10.5) / 5)


def test_failed_request_counts_in_error_rate_not_latency():
    good = rec("a", 0.0, [1.0, 2.0], [1, 1], 2.0)
    bad = rec("b", 0.0, [0.1], [1], 0.2, error="HTTP 500: boom")
    s = summarize_load([good, bad])
    assert s.num_requests == 2
    assert s.num_failed == 1
    assert s.error_rate == 0.5
    assert s.ttft_s.count == 1 and s.ttft_s.mean == 1.0
    assert s.e2e_s.mean == 2.0
    assert s.output_tokens == 2
    assert s.output_throughput_tok_s == 2 / 2.0


def test_throughput_and_per_user_speed():
    a = rec("a", 0.0, [1.0, 2.0, 3.0], [1, 1, 1], 3.0)  # tpot 1.0
    b = rec("b", 1.0, [2.0, 2.5, 3.0, 4.0], [1, 1, 1, 1], 5.0)  # tpot 2/3
    s = summarize_load([a, b])
    assert s.duration_s == 5.0
    assert s.output_throughput_tok_s == 7 / 5.0
    assert math.isclose(s.tpot_s.mean, (1.0 + 2 / 3) / 2)
    assert math.isclose(s.per_user_tok_s, 1 / ((1.0 + 2 / 3) / 2))
    assert s.itl_s.count == 5


def test_empty_run():
    s = summarize_load([])
    assert s.num_requests == 0 and math.isnan(s.error_rate)
