"""Fault injection with an in-process transport: failures become records, nothing is raised."""

import asyncio
import json

import httpx

from speedbench.client.loadgen import LoadSettings, WorkItem, run_load_async
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines import get_engine


def sse(*chunks, finish="length"):
    lines = [
        "data: " + json.dumps({"choices": [{"index": 0, "token_ids": c, "finish_reason": None}]})
        for c in chunks
    ]
    if finish:
        done = {"choices": [{"index": 0, "token_ids": [], "finish_reason": finish}]}
        lines.append("data: " + json.dumps(done))
    lines.append("data: [DONE]")
    return ("\n\n".join(lines) + "\n\n").encode()


def handler(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/metrics":
        return httpx.Response(200, text="")
    first = json.loads(request.content)["prompt"][0]
    if first == 1:
        return httpx.Response(200, content=sse([5], [6, 7, 8], [9, 10]))
    if first == 2:
        return httpx.Response(500, text="Internal Server Error\n  boom")
    if first == 3:
        return httpx.Response(200, content=sse([5], [6], finish=None))  # truncated stream
    raise httpx.ReadError("connection reset by peer")


def run(items, batch_size=2):
    transport = httpx.MockTransport(handler)
    seen = []
    spec = SpecConfig(method="ngram", num_speculative_tokens=3)
    result = asyncio.run(
        run_load_async(
            EngineConfig(model="m"),
            spec,
            get_engine("vllm"),
            items,
            LoadSettings(batch_size=batch_size, show_progress=False),
            on_record=seen.append,
            transport=transport,
        )
    )
    return result, seen


def test_failures_are_recorded_not_raised():
    items = [WorkItem(f"p{i}", prompt_ids=(i, 100)) for i in (1, 2, 3, 4)]
    result, seen = run(items)
    errors = {r.prompt_id: r.error for r in result.records}
    assert errors["p1"] is None
    assert errors["p2"] == "HTTP 500: Internal Server Error boom"
    assert errors["p3"] == "truncated stream: ended after 2 tokens with no finish reason"
    assert errors["p4"] == "ReadError: connection reset by peer"
    assert len(seen) == 4  # every record reached the sink as it ended


def test_successful_request_keeps_chunks_and_ids():
    result, _ = run([WorkItem("p1", prompt_ids=(1, 100))], batch_size=1)
    (rec,) = result.records
    assert rec.chunk_tokens == [1, 3, 2]
    assert rec.output_token_ids == [5, 6, 7, 8, 9, 10]
    assert rec.finish_reason == "length"
    assert rec.start_s <= rec.chunk_times_s[0] <= rec.chunk_times_s[-1] <= rec.end_s
    assert rec.prompt_tokens == 2 and rec.k == 3 and rec.config_label == "ngram-k3"
