"""SGLang and TensorRT-LLM adapters on their documented formats (neither engine runs here)."""

from __future__ import annotations

import json

import pytest
import yaml

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines import get_engine
from speedbench.engines.base import UnsupportedSpecError
from speedbench.figures import SpecCounters
from speedbench.metrics.acceptance import acceptance_from_counters

ENGINE = EngineConfig(model="/m", port=30000, dtype="bfloat16")
# TensorRT-LLM in its pinned image (release 1.2.0): some of its keys differ by release.
TRT_ENGINE = ENGINE.model_copy(update={"kind": "trtllm", "launcher": "docker"})


@pytest.fixture
def sglang():
    return get_engine("sglang")


@pytest.fixture
def trtllm():
    return get_engine("trtllm")


def flags(args):
    return {a: args[i + 1] for i, a in enumerate(args) if a.startswith("--speculative")}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (SpecConfig(), {}),
        (
            SpecConfig(method="eagle3", num_speculative_tokens=3, draft_model="/e"),
            {
                "--speculative-algorithm": "EAGLE3",
                "--speculative-draft-model-path": "/e",
                "--speculative-num-steps": "3",
                "--speculative-eagle-topk": "1",
                "--speculative-num-draft-tokens": "4",
            },
        ),
        (
            SpecConfig(
                method="eagle",
                num_speculative_tokens=5,
                draft_model="/e",
                options={"eagle_topk": 8, "num_draft_tokens": 64},
            ),
            {
                "--speculative-algorithm": "EAGLE",
                "--speculative-draft-model-path": "/e",
                "--speculative-num-steps": "5",
                "--speculative-eagle-topk": "8",
                "--speculative-num-draft-tokens": "64",
            },
        ),
        (
            SpecConfig(method="draft_model", num_speculative_tokens=4, draft_model="/d"),
            {
                "--speculative-algorithm": "STANDALONE",
                "--speculative-draft-model-path": "/d",
                "--speculative-num-steps": "4",
                "--speculative-eagle-topk": "1",
                "--speculative-num-draft-tokens": "5",
            },
        ),
        (
            SpecConfig(method="mtp", num_speculative_tokens=1),
            {
                "--speculative-algorithm": "NEXTN",
                "--speculative-num-steps": "1",
                "--speculative-eagle-topk": "1",
                "--speculative-num-draft-tokens": "2",
            },
        ),
        (
            SpecConfig(method="ngram", num_speculative_tokens=4),
            {"--speculative-algorithm": "NGRAM", "--speculative-num-draft-tokens": "5"},
        ),
    ],
)
def test_sglang_launch_flags(sglang, spec, expected):
    args = sglang.server_args(ENGINE, spec)
    assert args[:10] == [
        "--model-path", "/m", "--host", "127.0.0.1", "--port", "30000",
        "--dtype", "bfloat16", "--random-seed", "0",
    ]  # fmt: skip
    assert flags(args) == expected


def test_sglang_has_no_suffix_decoding(sglang):
    with pytest.raises(UnsupportedSpecError, match="SGLang has no SD method 'suffix'"):
        sglang.server_args(ENGINE, SpecConfig(method="suffix", num_speculative_tokens=3))


def test_sglang_request_body(sglang):
    body = sglang.request_body(ENGINE, [1, 2, 3], 64, 0.0, 7, True)
    assert body == {
        "input_ids": [1, 2, 3],
        "sampling_params": {
            "max_new_tokens": 64,
            "temperature": 0.0,
            "ignore_eos": True,
            "skip_special_tokens": False,
            "sampling_seed": 7,
        },
        "stream": True,
    }


def sglang_chunk(ids, completion, verify, finish=None):
    meta = {"id": "r1", "prompt_tokens": 3, "completion_tokens": completion}
    meta.update({"spec_verify_ct": verify, "finish_reason": finish})
    return json.dumps({"text": "...", "output_ids": ids, "meta_info": meta}).encode()


def test_sglang_stream_chunks(sglang):
    first = sglang.parse_event(sglang_chunk([11, 12, 13], 3, 1))
    assert first.token_ids == [11, 12, 13] and first.total_tokens == 3
    assert first.extra == {"verify_steps": 1} and first.finish_reason is None
    last = sglang.parse_event(sglang_chunk([14], 4, 2, {"type": "length", "length": 4}))
    assert last.finish_reason == "length"
    assert sglang.parse_event(b"[DONE]") is None
    err = sglang.parse_event(b'{"error": {"message": "bad input_ids"}}')
    assert err.error == "engine error in stream: bad input_ids"


def test_sglang_cumulative_output_ids_count_once(sglang):
    """Without incremental streaming, output_ids repeat: completion_tokens says what is new."""
    from speedbench.records import RequestRecord

    record = RequestRecord("r", "p")
    chunks = [
        sglang_chunk([11, 12], 2, 1),
        sglang_chunk([11, 12, 13, 14, 15], 5, 2),
        sglang_chunk([11, 12, 13, 14, 15, 16], 6, 3, {"type": "length"}),
    ]
    for payload in chunks:
        event = sglang.parse_event(payload)
        new = event.total_tokens - len(record.output_token_ids)
        ids = event.token_ids[-new:] if new > 0 else []
        record.chunk_tokens.append(len(ids))
        record.output_token_ids.extend(ids)
    assert record.output_token_ids == [11, 12, 13, 14, 15, 16]
    assert record.chunk_tokens == [2, 3, 1]


def test_sglang_server_acceptance_length(sglang):
    info = json.dumps({"internal_states": [{"avg_spec_accept_length": 2.78, "last_gen": 1}]})
    assert sglang.server_acceptance_length(info) == 2.78
    assert sglang.server_acceptance_length(json.dumps({"internal_states": [{}]})) is None


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (SpecConfig(), {"enable_iter_perf_stats": True}),
        (
            SpecConfig(method="eagle3", num_speculative_tokens=3, draft_model="/e"),
            {
                "enable_iter_perf_stats": True,
                "speculative_config": {
                    "decoding_type": "Eagle",
                    "max_draft_len": 3,
                    "speculative_model_dir": "/e",
                },
            },
        ),
        (
            SpecConfig(method="draft_model", num_speculative_tokens=4, draft_model="/d"),
            {
                "enable_iter_perf_stats": True,
                "disable_overlap_scheduler": True,
                "speculative_config": {
                    "decoding_type": "DraftTarget",
                    "max_draft_len": 4,
                    "speculative_model_dir": "/d",
                },
            },
        ),
        (
            SpecConfig(method="ngram", num_speculative_tokens=2, prompt_lookup_max=3),
            {
                "enable_iter_perf_stats": True,
                "disable_overlap_scheduler": True,
                "speculative_config": {
                    "decoding_type": "NGram",
                    "max_draft_len": 2,
                    "max_matching_ngram_size": 3,
                },
            },
        ),
        (
            SpecConfig(method="mtp", num_speculative_tokens=1),
            {
                "enable_iter_perf_stats": True,
                "speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 1},
            },
        ),
    ],
)
def test_trtllm_options_yaml(trtllm, spec, expected):
    ((name, text),) = trtllm.launch_files(TRT_ENGINE, spec).items()
    assert name == "extra_llm_api_options.yaml"
    # No reset endpoint: the default prefix_cache "reset" becomes no block reuse at all; the
    # dtype and the iteration-stat bound go to every launch.
    assert yaml.safe_load(text) == {
        **expected,
        "kv_cache_config": {"enable_block_reuse": False},
        "dtype": "bfloat16",
        "iter_stats_max_iterations": 100_000,
    }
    args = trtllm.server_args(TRT_ENGINE, spec)
    assert args == [
        "/m", "--backend", "pytorch", "--host", "127.0.0.1", "--port", "30000",
        "--extra_llm_api_options", "/speedbench/extra_llm_api_options.yaml",
    ]  # fmt: skip


def test_trtllm_has_no_eagle1_or_suffix(trtllm):
    with pytest.raises(UnsupportedSpecError, match="TensorRT-LLM has no SD method 'suffix'"):
        trtllm.server_args(ENGINE, SpecConfig(method="suffix", num_speculative_tokens=3))


def test_trtllm_request_and_chunks(trtllm):
    body = trtllm.request_body(ENGINE, [5, 6], 32, 0.0, None, True)
    assert body["prompt"] == [5, 6] and body["stream"] is True and "seed" not in body
    # trtllm-serve streams token ids only without detokenization (postprocess_handlers.py:
    # token_ids = None if args.detokenize else output.token_ids_diff; text "" then).
    assert body["detokenize"] is False
    with_ids = b'{"choices":[{"index":0,"text":"","token_ids":[7,8],"finish_reason":null}]}'
    assert trtllm.parse_event(with_ids).token_ids == [7, 8]
    last = b'{"choices":[{"index":0,"text":"","token_ids":[],"finish_reason":"length"}]}'
    event = trtllm.parse_event(last)
    assert event.token_ids == [] and event.finish_reason == "length" and event.error is None
    # A server that detokenized anyway: the request fails, saying why, not 0 tokens recorded.
    text_only = b'{"choices":[{"index":0,"text":" a","token_ids":null,"finish_reason":null}]}'
    assert "without token_ids" in trtllm.parse_event(text_only).error


def test_trtllm_iteration_stats_give_exact_al(trtllm):
    stats = [
        {"iter": 1, "specDecodingStats": {"numDraftTokens": 12, "numAcceptedTokens": 9,
                                          "numRequestsWithDraftTokens": 4}},
        {"iter": 2, "specDecodingStats": {"numDraftTokens": 12, "numAcceptedTokens": 6,
                                          "numRequestsWithDraftTokens": 4}},
        {"iter": 3},
    ]  # fmt: skip
    counters = trtllm.parse_counters(json.dumps(stats))
    assert counters == SpecCounters(
        num_drafts=8.0, num_draft_tokens=24.0, num_accepted_tokens=15.0, accepted_per_pos=()
    )
    acc = acceptance_from_counters(counters, 3)
    assert acc.al_token_weighted == 1 + 15 / 8
    assert trtllm.counters_reset_on_read is True


def test_sglang_ngram_windows_and_breadth_reach_its_flags(sglang):
    spec = SpecConfig(
        method="ngram",
        num_speculative_tokens=4,
        prompt_lookup_min=2,
        prompt_lookup_max=6,
        options={"max_bfs_breadth": 1},
    )
    assert flags(sglang.server_args(ENGINE, spec)) == {
        "--speculative-algorithm": "NGRAM",
        "--speculative-num-draft-tokens": "5",
        "--speculative-ngram-min-match-window-size": "2",
        "--speculative-ngram-max-match-window-size": "6",
        "--speculative-ngram-max-bfs-breadth": "1",
    }


@pytest.mark.parametrize(
    ("kind", "spec", "shape"),
    [
        ("vllm", SpecConfig(method="ngram", num_speculative_tokens=3), "chain of 3"),
        ("sglang", SpecConfig(method="ngram", num_speculative_tokens=3),
         "tree of 4 draft tokens (n-gram BFS breadth up to 10)"),
        ("sglang", SpecConfig(method="eagle3", num_speculative_tokens=3, draft_model="/e"),
         "chain of 3"),
        ("sglang", SpecConfig(method="eagle", num_speculative_tokens=5, draft_model="/e",
                              options={"eagle_topk": 8, "num_draft_tokens": 64}),
         "tree of 64 draft tokens (5 steps, top-8)"),
        ("trtllm", SpecConfig(method="ngram", num_speculative_tokens=3),
         "chain of 3, one n-gram pool shared by all requests"),
        ("trtllm", SpecConfig(method="ngram", num_speculative_tokens=3,
                              options={"is_public_pool": False}), "chain of 3"),
        ("trtllm", SpecConfig(), "none"),
    ],
)  # fmt: skip
def test_each_engine_names_its_drafting_shape(kind, spec, shape):
    assert get_engine(kind).drafting_shape(spec) == shape


def test_sglang_caps_sd_at_48_requests_unless_told(sglang):
    from speedbench.config import ConfigError
    from speedbench.run.plan import check_concurrency

    sd = SpecConfig(method="draft_model", num_speculative_tokens=3, draft_model="/d")
    assert sglang.concurrency_cap(ENGINE, SpecConfig()) is None
    assert sglang.concurrency_cap(ENGINE, sd) == 48
    with pytest.raises(ConfigError, match=r"at most 48 requests at once for draft_model-k3"):
        check_concurrency(ENGINE.model_copy(update={"kind": "sglang"}), [SpecConfig(), sd], [1, 64])
    raised = ENGINE.model_copy(update={"kind": "sglang", "max_num_seqs": 64})
    check_concurrency(raised, [SpecConfig(), sd], [1, 64])
    assert "--max-running-requests" in sglang.server_args(raised, sd)


def test_the_gpu_preflight_reads_nvidia_smi_and_the_image_cuda():
    from speedbench.engines.base import EngineError
    from speedbench.engines.docker import check_gpu_answer, image_cuda_version

    image = {"Config": {"Env": ["PATH=/usr/bin", "CUDA_VERSION=12.8.1"]}}
    assert image_cuda_version(image) == (12, 8)
    assert image_cuda_version({"Config": {"Env": ["PATH=/usr/bin"]}}) is None
    check_gpu_answer("all", (12, 8), "570.124.06\n570.124.06\n")
    check_gpu_answer("device=0,1", (12, 8), "570.124.06\n570.124.06\n")
    with pytest.raises(EngineError, match="gpus=4 asks for 4 GPUs; the Docker host has 2"):
        check_gpu_answer("4", (12, 8), "570.124.06\n570.124.06\n")
    with pytest.raises(EngineError, match=r"CUDA 13.0, which needs NVIDIA driver >= 580.65"):
        check_gpu_answer("1", (13, 0), "570.124.06\n")
    with pytest.raises(EngineError, match="saw no GPU"):
        check_gpu_answer("1", (12, 8), "\n")
