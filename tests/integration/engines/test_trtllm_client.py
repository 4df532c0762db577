"""The TensorRT-LLM adapter through the real client, against the synthetic trtllm dialect.

No TensorRT-LLM runs here (no GPU, no wheel on PyPI). The synthetic server's trtllm dialect
behaves as trtllm-serve's post-processor and metrics endpoint do
(tensorrt_llm/serve/postprocess_handlers.py; tests/contracts/trtllm.json): token ids only when
the request does not detokenize, iteration statistics in a deque of 1,000 emptied on read. A
level of more than 1,000 iterations must still count every one of them, and a server that sends
text instead of ids must fail its requests, not record 0 tokens. Also here: SGLang's
``/flush_cache``, which answers 400 while a request is running.
"""

from __future__ import annotations

import sys
import threading
import time

import httpx
import pytest
import yaml

from speedbench.client.measure import reset_prefix_cache, run_load
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines import get_engine
from speedbench.engines.local import free_port
from speedbench.testing.synthetic import SyntheticOptions, serve_in_subprocess
from speedbench.workload import LoadSettings, WorkItem

pytestmark = pytest.mark.integration

K, MAX_TOKENS, REQUESTS = 3, 160, 16


@pytest.fixture(scope="module")
def trtllm_level():
    # 16 requests of ~80 verify steps each: about 1,300 iterations, past the deque's 1,000, at
    # about 400 iterations/s (8 streams, a step per 20 ms), so reads 2 s apart keep them all.
    options = SyntheticOptions(k=K, accept_p=0.5, seed=3, interval_s=0.02, completions="trtllm")
    port = free_port()
    engine = EngineConfig(kind="trtllm", model="m", port=port)
    with serve_in_subprocess(options, port) as url:
        items = [WorkItem(f"p{i}", prompt_ids=(i, 100)) for i in range(REQUESTS)]
        result = run_load(
            engine,
            SpecConfig(method="ngram", num_speculative_tokens=K),
            get_engine("trtllm"),
            items,
            LoadSettings(batch_size=8, max_tokens=MAX_TOKENS, show_progress=False),
        )
        stats = httpx.get(url + "/stats").json()
    return result, stats


def test_token_ids_arrive_without_detokenization(trtllm_level):
    result, _ = trtllm_level
    assert len(result.records) == REQUESTS
    for rec in result.records:
        assert rec.ok and rec.output_tokens == MAX_TOKENS
        assert rec.chunk_tokens[0] == 1  # the prefill token, then one chunk per verify step


def test_a_level_past_the_iteration_deque_counts_every_iteration(trtllm_level):
    result, stats = trtllm_level
    steps = sum(len(r.chunk_tokens) - 1 for r in result.records)
    accepted = sum(c - 1 for r in result.records for c in r.chunk_tokens[1:])
    assert stats["iterations"] == steps > 1000
    counters = result.counters
    assert counters.num_drafts == steps
    assert counters.num_draft_tokens == K * steps
    assert counters.num_accepted_tokens == accepted
    # Read once at the end, the deque would have held its last 1,000 only; read during the
    # level, it never filled.
    assert stats["iterations_lost"] == 0


def test_a_detokenizing_server_fails_the_requests_saying_why():
    options = SyntheticOptions(k=K, completions="trtllm")
    port = free_port()
    adapter = get_engine("trtllm")

    class Detokenizing(type(adapter)):
        def request_body(self, *args, **kwargs):
            return {**super().request_body(*args, **kwargs), "detokenize": True}

    with serve_in_subprocess(options, port):
        result = run_load(
            EngineConfig(kind="trtllm", model="m", port=port),
            SpecConfig(method="ngram", num_speculative_tokens=K),
            Detokenizing(),
            [WorkItem("p", prompt_ids=(5, 6))],
            LoadSettings(batch_size=1, max_tokens=8, show_progress=False),
        )
    (rec,) = result.records
    assert not rec.ok and rec.error_kind == "engine_error"
    assert "without token_ids" in rec.error


def test_sglang_flush_waits_while_a_request_runs():
    # One long stream holds the server busy; the flush must wait for it, not fail on its 400.
    options = SyntheticOptions(k=K, interval_s=0.05)
    port = free_port()
    engine = EngineConfig(kind="sglang", model="m", port=port)
    with serve_in_subprocess(options, port) as url:
        body = {"input_ids": [7], "sampling_params": {"max_new_tokens": 40}, "stream": True}
        ended = []

        def stream() -> None:
            with httpx.stream("POST", url + "/generate", json=body, timeout=60) as resp:
                for _ in resp.iter_lines():
                    pass
            ended.append(time.monotonic())

        runner = threading.Thread(target=stream)
        runner.start()
        time.sleep(0.3)
        assert httpx.post(url + "/flush_cache").status_code == 400  # SGLang's answer while busy
        reset_prefix_cache(engine, get_engine("sglang"))
        flushed = time.monotonic()
        runner.join()
    assert ended and flushed >= ended[0]


def test_a_local_trtllm_launch_reads_the_options_file_it_was_given(tmp_path):
    # A stand-in trtllm-serve (this test's python) that keeps the options file it is pointed
    # at and exits: before, the path was the container's /speedbench/..., absent on the host.
    from speedbench.engines.base import EngineError
    from speedbench.engines.local import launch_local

    bin_dir = tmp_path / "env" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    seen = tmp_path / "seen.yaml"
    script = bin_dir / "trtllm-serve"
    script.write_text(
        f"#!{sys.executable}\n"
        "import shutil, sys\n"
        "path = sys.argv[sys.argv.index('--extra_llm_api_options') + 1]\n"
        f"shutil.copy(path, {str(seen)!r})\n"
        "sys.exit(3)\n"
    )
    script.chmod(0o755)
    engine = EngineConfig(
        kind="trtllm", model="/m", port=free_port(), python=str(bin_dir / "python"),
        startup_timeout_s=30,
    )  # fmt: skip
    spec = SpecConfig(method="ngram", num_speculative_tokens=K)
    with pytest.raises(EngineError, match="exit"), launch_local(engine, spec, tmp_path / "e.log"):
        pass
    options = yaml.safe_load(seen.read_text())
    assert options["speculative_config"]["decoding_type"] == "NGram"
    assert options["iter_stats_max_iterations"] >= 1000
