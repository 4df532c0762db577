"""TensorRT-LLM: ``trtllm-serve`` launch, OpenAI token-ID completions, iteration-stat acceptance.

Not run here (no GPU); the formats follow TensorRT-LLM's documentation:

- Launch: ``trtllm-serve <model> --backend pytorch --host --port --extra_llm_api_options
  <yaml>`` (docs/source/commands/trtllm-serve.rst). The YAML holds ``speculative_config``
  (``decoding_type``: Eagle, DraftTarget, NGram or MTP; ``max_draft_len``;
  ``speculative_model_dir`` for a drafter) and ``enable_iter_perf_stats: true`` so ``/metrics``
  reports iteration statistics.
- Requests: ``POST /v1/completions`` with ``prompt`` as token ids and ``stream: true``; chunks
  are OpenAI completion chunks. Where a build returns ``token_ids`` per choice they are used;
  otherwise the chunk counts as one step whose size is unknown, and acceptance comes from the
  engine's statistics only.
- Acceptance: ``GET /metrics`` returns the iteration statistics gathered since the previous call
  (the queue is drained on read), each with ``specDecodingStats`` (``numDraftTokens``,
  ``numAcceptedTokens``, ``numRequestsWithDraftTokens``). Summed over a run they give drafts,
  draft tokens and accepted tokens; TensorRT-LLM reports no per-position counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import yaml

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import (
    EngineAdapter,
    StreamEvent,
    UnsupportedSpecError,
    load_chunk,
    register_engine,
    stream_error,
)
from speedbench.engines.containers import ContainerSpec, register_container
from speedbench.metrics.acceptance import SpecCounters

# speedbench method -> speculative_config.decoding_type
TRTLLM_DECODING = {
    "eagle3": "Eagle",
    "draft_model": "DraftTarget",
    "ngram": "NGram",
    "mtp": "MTP",
}
OPTIONS_FILE = "extra_llm_api_options.yaml"
FILES_DIR = "/speedbench"  # where the Docker launcher mounts launch files


def llm_api_options(engine: EngineConfig, spec: SpecConfig) -> dict[str, Any]:
    """The ``--extra_llm_api_options`` mapping for ``spec``."""
    options: dict[str, Any] = {"enable_iter_perf_stats": True}
    if engine.max_num_seqs:
        options["max_batch_size"] = engine.max_num_seqs
    # No reset endpoint is known for trtllm-serve, so "reset" means no block reuse at all
    # (KvCacheConfig.enable_block_reuse, on by default; TensorRT-LLM's LLM API reference).
    if engine.prefix_cache != "keep":
        options["kv_cache_config"] = {"enable_block_reuse": False}
    if not spec.is_speculative:
        return options
    if spec.method not in TRTLLM_DECODING:
        raise UnsupportedSpecError(
            f"TensorRT-LLM has no SD method {spec.method!r}; it has {sorted(TRTLLM_DECODING)}"
        )
    k = spec.num_speculative_tokens
    config: dict[str, Any] = {"decoding_type": TRTLLM_DECODING[spec.method]}
    if spec.method == "mtp":
        config["num_nextn_predict_layers"] = k
    else:
        config["max_draft_len"] = k
    if spec.draft_model:
        config["speculative_model_dir"] = spec.draft_model
    if spec.method == "ngram":
        config["max_matching_ngram_size"] = spec.prompt_lookup_max or 4
    config.update(spec.options)
    options["speculative_config"] = config
    # The two-model drafters need the overlap scheduler off (TensorRT-LLM docs).
    if spec.method in ("draft_model", "ngram"):
        options["disable_overlap_scheduler"] = True
    return options


@register_engine("trtllm")
class TRTLLMAdapter(EngineAdapter):
    """Adapter for TensorRT-LLM's ``trtllm-serve`` (PyTorch backend)."""

    kind = "trtllm"
    health_path = "/health"
    metrics_path = "/metrics"
    generate_path = "/v1/completions"
    counters_reset_on_read = True

    def launch_files(self, engine: EngineConfig, spec: SpecConfig) -> dict[str, str]:
        """Files the server reads at start: the LLM API options YAML."""
        return {OPTIONS_FILE: yaml.safe_dump(llm_api_options(engine, spec), sort_keys=True)}

    def server_args(self, engine: EngineConfig, spec: SpecConfig) -> list[str]:
        """Arguments for ``trtllm-serve`` (the options file as the container sees it)."""
        llm_api_options(engine, spec)  # validates spec before anything starts
        args = [
            engine.model,
            "--backend",
            "pytorch",
            "--host",
            engine.host,
            "--port",
            str(engine.port),
            "--extra_llm_api_options",
            f"{FILES_DIR}/{OPTIONS_FILE}",
        ]
        if engine.tokenizer:
            args += ["--tokenizer", engine.tokenizer]
        if engine.max_model_len:
            args += ["--max_seq_len", str(engine.max_model_len)]
        return args + list(engine.extra_args)

    def request_body(
        self,
        engine: EngineConfig,
        prompt_ids: Sequence[int],
        max_tokens: int,
        temperature: float,
        seed: int | None,
        ignore_eos: bool,
    ) -> dict[str, Any]:
        """A streaming OpenAI completions body whose prompt is token IDs."""
        body: dict[str, Any] = {
            "model": engine.model,
            "prompt": list(prompt_ids),
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": True,
            "ignore_eos": ignore_eos,
            "detokenize": True,
        }
        if seed is not None:
            body["seed"] = seed
        return body

    def parse_event(self, payload: bytes) -> StreamEvent | None:
        """One ``data:`` payload of a completions stream."""
        data = load_chunk(payload)
        if data is None:
            return None
        if (error := stream_error(data)) is not None:
            return error
        choices = data.get("choices") or []
        if not choices:
            return StreamEvent()
        choice = choices[0]
        ids = choice.get("token_ids")
        extra = {} if ids is not None or not choice.get("text") else {"text_only": True}
        return StreamEvent(
            token_ids=ids or [], finish_reason=choice.get("finish_reason"), extra=extra
        )

    def parse_counters(self, metrics_text: str) -> SpecCounters:
        """Drafts, draft tokens and accepted tokens summed over the iterations returned."""
        stats = orjson.loads(metrics_text or "[]")
        drafts = draft_tokens = accepted = 0.0
        for it in stats if isinstance(stats, list) else []:
            sd = it.get("specDecodingStats") or {}
            drafts += sd.get("numRequestsWithDraftTokens", 0)
            draft_tokens += sd.get("numDraftTokens", 0)
            accepted += sd.get("numAcceptedTokens", 0)
        return SpecCounters(drafts, draft_tokens, accepted, ())


register_container(
    "trtllm",
    ContainerSpec(
        image="nvcr.io/nvidia/tensorrt-llm/release:1.2.0",
        entrypoint=("trtllm-serve",),
    ),
)
