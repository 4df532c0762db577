"""TensorRT-LLM: ``trtllm-serve`` launch, OpenAI token-ID completions, iteration-stat acceptance.

Not run here (no GPU, and PyPI carries only a stub sdist of ``tensorrt-llm`` that downloads the
wheel from NVIDIA's own index). The formats are read in TensorRT-LLM's source
(``tensorrt_llm/commands/serve.py``, ``serve/openai_protocol.py``,
``serve/postprocess_handlers.py``, ``llmapi/llm_args.py``) and transcribed, with the commit,
in ``tests/contracts/trtllm.json``, which the contract tests check every argv, body and
options file against:

- Launch: ``trtllm-serve <model> --backend pytorch --host --port --extra_llm_api_options
  <yaml>``. The YAML holds ``speculative_config`` (``decoding_type``: Eagle, NGram, MTP, and
  for a draft model ``DraftTarget`` up to 1.2 and ``Draft_Target`` from 1.3; ``max_draft_len``;
  the drafter as ``speculative_model_dir`` up to 1.2, ``speculative_model`` from 1.3),
  ``dtype``, and ``enable_iter_perf_stats`` with ``iter_stats_max_iterations`` so
  ``/metrics`` keeps enough iteration statistics between two reads.
- Requests: ``POST /v1/completions`` with ``prompt`` as token ids, ``stream: true`` and
  ``detokenize: false``. The completion post-processor sends
  ``token_ids = None if detokenize else token_ids_diff`` (and empty text when not
  detokenizing), so token ids arrive only without detokenization. A chunk that carries text
  but no ids is a server that ignored the flag: the request fails with that said, instead of
  recording zero tokens.
- Acceptance: ``GET /metrics`` returns the iteration statistics gathered since the previous
  call, from a ``deque(maxlen=iter_stats_max_iterations or 1000)`` that the read empties, each
  with ``specDecodingStats`` (``numDraftTokens``, ``numAcceptedTokens``,
  ``numRequestsWithDraftTokens``). The level reads them while it runs
  (:mod:`speedbench.client.measure`), so a long level loses none; TensorRT-LLM reports no
  per-position counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import yaml

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import (
    LAUNCH_FILES_DIR,
    EngineAdapter,
    StreamEvent,
    UnsupportedSpecError,
    console_script,
    engine_method,
    load_chunk,
    register_engine,
    stream_error,
)
from speedbench.engines.containers import ContainerSpec, HostSettings, register_container
from speedbench.engines.releases import Release, engine_release
from speedbench.figures import SpecCounters

NAME = "TensorRT-LLM"
# speedbench method -> speculative_config.decoding_type (up to 1.2: dispatched by name in
# DecodingBaseConfig.from_dict; the 1.2.0 release's llmapi/llm_args.py).
METHODS = {
    "eagle3": "Eagle",
    "draft_model": "DraftTarget",
    "ngram": "NGram",
    "mtp": "MTP",
}
# After 1.2 speculative_config is a union discriminated by Literal decoding types, and the draft
# model's is "Draft_Target" (llm_args.py on main); "DraftTarget" matches no member there. Its
# drafter field is speculative_model (speculative_model_dir its older alias).
DRAFT_TARGET_RENAMED = (1, 3, 0)
OPTIONS_FILE = "extra_llm_api_options.yaml"
# Iteration statistics the server keeps between two reads of /metrics (its default is 1,000).
# The level reads every ITER_STATS_POLL_S seconds (client/measure.py), so this holds minutes of
# iterations even at a millisecond each.
ITER_STATS_MAX_ITERATIONS = 100_000


def decoding_type(method: str, release: Release | None) -> str:
    """TensorRT-LLM's ``decoding_type`` for ``method`` in ``release``.

    Raises:
        UnsupportedSpecError: A method TensorRT-LLM lacks, or a draft model whose spelling
            depends on a release that cannot be told.
    """
    name = engine_method(NAME, METHODS, method)
    if method != "draft_model":
        return name
    if release is None:
        raise UnsupportedSpecError(
            "TensorRT-LLM's release is unknown (an image tag without one, or no tensorrt_llm "
            "beside the engine's python), and draft_model is spelt DraftTarget up to 1.2 and "
            "Draft_Target from 1.3: name the release in the image tag (e.g. release:1.2.0)"
        )
    return "Draft_Target" if release >= DRAFT_TARGET_RENAMED else "DraftTarget"


def llm_api_options(
    engine: EngineConfig, spec: SpecConfig, release: Release | None = None
) -> dict[str, Any]:
    """The ``--extra_llm_api_options`` mapping for ``spec`` in TensorRT-LLM ``release``."""
    options: dict[str, Any] = {
        "enable_iter_perf_stats": True,
        "iter_stats_max_iterations": ITER_STATS_MAX_ITERATIONS,
        "dtype": engine.dtype,
    }
    if engine.max_num_seqs:
        options["max_batch_size"] = engine.max_num_seqs
    # No reset endpoint is known for trtllm-serve, so "reset" means no block reuse at all
    # (KvCacheConfig.enable_block_reuse, on by default; TensorRT-LLM's LLM API reference).
    if engine.prefix_cache != "keep":
        options["kv_cache_config"] = {"enable_block_reuse": False}
    if not spec.is_speculative:
        return options
    k = spec.num_speculative_tokens
    config: dict[str, Any] = {"decoding_type": decoding_type(spec.method, release)}
    if spec.method == "mtp":
        config["num_nextn_predict_layers"] = k
    else:
        config["max_draft_len"] = k
    if spec.draft_model:
        renamed = release is not None and release >= DRAFT_TARGET_RENAMED
        config["speculative_model" if renamed else "speculative_model_dir"] = spec.draft_model
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
    name = NAME
    methods = METHODS
    health_path = "/health"
    metrics_path = "/metrics"
    generate_path = "/v1/completions"
    counters_reset_on_read = True

    def release(self, engine: EngineConfig) -> Release | None:
        """The TensorRT-LLM release this config runs (its image's tag, or the one installed)."""
        return engine_release(engine, "tensorrt_llm")

    def launch_files(self, engine: EngineConfig, spec: SpecConfig) -> dict[str, str]:
        """Files the server reads at start: the LLM API options YAML."""
        options = llm_api_options(engine, spec, self.release(engine))
        return {OPTIONS_FILE: yaml.safe_dump(options, sort_keys=True)}

    def server_command(self, engine: EngineConfig) -> list[str]:
        """``trtllm-serve`` of the engine environment (the console script beside its python)."""
        return [console_script(engine, "trtllm-serve")]

    def server_args(
        self, engine: EngineConfig, spec: SpecConfig, *, files_dir: str = LAUNCH_FILES_DIR
    ) -> list[str]:
        """Arguments for ``trtllm-serve``; ``files_dir`` is where the server sees launch files."""
        llm_api_options(engine, spec, self.release(engine))  # refuses a bad spec before launch
        args = [
            engine.model,
            "--backend",
            "pytorch",
            "--host",
            engine.host,
            "--port",
            str(engine.port),
            "--extra_llm_api_options",
            f"{files_dir.rstrip('/')}/{OPTIONS_FILE}",
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
            # Token ids are streamed only without detokenization (see the module docstring).
            "detokenize": False,
        }
        if seed is not None:
            body["seed"] = seed
        return body

    def drafting_shape(self, spec: SpecConfig) -> str:
        """A chain of k; NGram's pool is shared by all requests unless is_public_pool is false."""
        if not spec.is_speculative:
            return "none"
        shape = f"chain of {spec.num_speculative_tokens}"
        if spec.method == "ngram" and spec.options.get("is_public_pool", True):
            shape += ", one n-gram pool shared by all requests"
        return shape

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
        if ids is None and choice.get("text"):
            return StreamEvent(
                error="TensorRT-LLM streamed text without token_ids: the server detokenized "
                "despite detokenize=false, so the chunk's tokens cannot be counted"
            )
        return StreamEvent(token_ids=ids or [], finish_reason=choice.get("finish_reason"))

    def parse_counters(self, metrics_text: str) -> SpecCounters:
        """Drafts, draft tokens and accepted tokens summed over the iterations returned."""
        stats = orjson.loads(metrics_text or "[]")
        drafts = draft_tokens = accepted = 0.0
        for it in stats if isinstance(stats, list) else []:
            sd = it.get("specDecodingStats") or {}
            drafts += sd.get("numRequestsWithDraftTokens", 0)
            draft_tokens += sd.get("numDraftTokens", 0)
            accepted += sd.get("numAcceptedTokens", 0)
        return SpecCounters(
            num_drafts=drafts, num_draft_tokens=draft_tokens, num_accepted_tokens=accepted
        )


register_container(
    "trtllm",
    ContainerSpec(
        image="nvcr.io/nvidia/tensorrt-llm/release:1.2.0",
        entrypoint=("trtllm-serve",),
        gpu_host=HostSettings(
            ipc="host",
            ulimits=(("memlock", -1), ("stack", 67108864)),
            source="TensorRT-LLM docs, containers: docker run --ipc host --gpus all "
            "--ulimit memlock=-1 --ulimit stack=67108864",
        ),
    ),
)
