"""SGLang: launch arguments, native ``/generate`` token-ID requests, acceptance from meta_info.

Not run here (no GPU, and SGLang has no CPU wheel on PyPI); the formats follow SGLang's
documentation and source:

- Launch: ``python -m sglang.launch_server --model-path ... --speculative-algorithm ALG
  --speculative-draft-model-path ... --speculative-num-steps k --speculative-eagle-topk t
  --speculative-num-draft-tokens n`` (docs/advanced_features/speculative_decoding). A chain of k
  drafts is topk 1 with k + 1 draft tokens (the root counts); ``SpecConfig.options`` can ask for
  a tree (``eagle_topk``, ``num_draft_tokens``).
- Requests: ``POST /generate`` with ``input_ids`` and ``sampling_params`` (``max_new_tokens``,
  ``temperature``, ``ignore_eos``), ``stream: true`` (docs/basic_usage/sampling_params.md). Each
  SSE chunk carries ``output_ids`` and ``meta_info`` with ``completion_tokens`` (cumulative), a
  ``finish_reason`` object when it ends, and ``spec_verify_ct``, the verification steps so far
  (sgl-project/sglang#3152: average acceptance length = completion_tokens / spec_verify_ct).
  Depending on the server's ``--incremental-streaming-output``, ``output_ids`` is either the new
  ids or all of them; ``completion_tokens`` tells which part is new.
- Server-wide acceptance: ``GET /server_info`` (``/get_server_info`` before 0.5.10) ->
  ``internal_states[0].avg_spec_accept_length``; its ``version`` is the engine's version
  (SGLang serves no ``/version``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import (
    LAUNCH_FILES_DIR,
    EngineAdapter,
    StreamEvent,
    UnsupportedSpecError,
    engine_method,
    engine_python,
    load_chunk,
    register_engine,
    stream_error,
)
from speedbench.engines.containers import ContainerSpec, HostSettings, register_container
from speedbench.engines.releases import Release, engine_release, release_name
from speedbench.figures import SpecCounters

# SGLang's ServerArgs.__post_init__ sets max_running_requests to this for EAGLE, EAGLE3,
# STANDALONE and NGRAM when the flag is unset (sglang 0.5.5 srt/server_args.py).
SD_DEFAULT_MAX_RUNNING = 48
# ServerArgs.speculative_ngram_max_bfs_breadth, which NGRAM copies into speculative_eagle_topk.
NGRAM_DEFAULT_BFS_BREADTH = 10

NAME = "SGLang"
# speedbench method -> --speculative-algorithm
METHODS = {
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "mtp": "NEXTN",
    "draft_model": "STANDALONE",
    "ngram": "NGRAM",
}


# The n-gram match-window flags were removed in SGLang 0.5.10 (its ngram drafter became a trie
# with --speculative-ngram-max-trie-depth).
NGRAM_WINDOWS_REMOVED = (0, 5, 10)


def speculative_args(spec: SpecConfig, version: Release | None = None) -> list[str]:
    """SGLang's speculative flags for ``spec`` (none for the baseline) in release ``version``.

    Raises:
        UnsupportedSpecError: A method SGLang lacks, or a flag that release no longer has.
    """
    if not spec.is_speculative:
        return []
    windows = spec.prompt_lookup_min or spec.prompt_lookup_max
    if windows and version is not None and version >= NGRAM_WINDOWS_REMOVED:
        raise UnsupportedSpecError(
            f"SGLang {release_name(version)} has no --speculative-ngram-min/max-match-"
            "window-size (removed in 0.5.10): unset prompt_lookup_min/max for it"
        )
    algorithm = engine_method(NAME, METHODS, spec.method)
    k = spec.num_speculative_tokens
    topk = int(spec.options.get("eagle_topk", 1))
    draft_tokens = int(spec.options.get("num_draft_tokens", k + 1))
    args = ["--speculative-algorithm", algorithm]
    if spec.draft_model:
        args += ["--speculative-draft-model-path", spec.draft_model]
    if spec.method == "ngram":
        args += ["--speculative-num-draft-tokens", str(draft_tokens)]
        if spec.prompt_lookup_min:
            args += ["--speculative-ngram-min-match-window-size", str(spec.prompt_lookup_min)]
        if spec.prompt_lookup_max:
            args += ["--speculative-ngram-max-match-window-size", str(spec.prompt_lookup_max)]
        if "max_bfs_breadth" in spec.options:
            args += ["--speculative-ngram-max-bfs-breadth", str(spec.options["max_bfs_breadth"])]
        return args
    return [
        *args,
        "--speculative-num-steps",
        str(k),
        "--speculative-eagle-topk",
        str(topk),
        "--speculative-num-draft-tokens",
        str(draft_tokens),
    ]


@register_engine("sglang")
class SGLangAdapter(EngineAdapter):
    """Adapter for SGLang's native server."""

    kind = "sglang"
    name = NAME
    methods = METHODS
    health_path = "/health"
    # /server_info since 0.5.10 (/get_server_info deprecated); 0.5.5 serves only the old one.
    metrics_path = "/server_info"
    metrics_fallback_paths = ("/get_server_info",)
    generate_path = "/generate"
    # python/sglang/srt/mem_cache/flush_cache.py posts here; it empties the radix cache, and
    # answers 400 while requests are running or waiting (srt/entrypoints/http_server.py).
    reset_cache_path = "/flush_cache"
    reset_cache_busy_status = 400

    def release(self, engine: EngineConfig) -> Release | None:
        """The SGLang release this engine config runs (its image's tag, or the one installed)."""
        return engine_release(engine, "sglang")

    def concurrency_cap(self, engine: EngineConfig, spec: SpecConfig) -> int | None:
        """SGLang's own cap on running requests: 48 for SD when none is set, else the set one."""
        if engine.max_num_seqs:
            return engine.max_num_seqs
        return SD_DEFAULT_MAX_RUNNING if spec.method in METHODS else None

    def drafting_shape(self, spec: SpecConfig) -> str:
        """A chain for topk 1; a tree otherwise, and always for NGRAM (topk = BFS breadth)."""
        if not spec.is_speculative:
            return "none"
        k = spec.num_speculative_tokens
        tokens = int(spec.options.get("num_draft_tokens", k + 1))
        if spec.method == "ngram":
            breadth = int(spec.options.get("max_bfs_breadth", NGRAM_DEFAULT_BFS_BREADTH))
            return f"tree of {tokens} draft tokens (n-gram BFS breadth up to {breadth})"
        topk = int(spec.options.get("eagle_topk", 1))
        if topk == 1:
            return f"chain of {k}"
        return f"tree of {tokens} draft tokens ({k} steps, top-{topk})"

    def server_command(self, engine: EngineConfig) -> list[str]:
        """``python -m sglang.launch_server`` in the engine env (SGLang's documented command)."""
        return [engine_python(engine), "-m", "sglang.launch_server"]

    def server_args(
        self, engine: EngineConfig, spec: SpecConfig, *, files_dir: str = LAUNCH_FILES_DIR
    ) -> list[str]:
        """Arguments for ``python -m sglang.launch_server`` (it reads no launch files)."""
        args = [
            "--model-path",
            engine.model,
            "--host",
            engine.host,
            "--port",
            str(engine.port),
            "--dtype",
            engine.dtype,
            "--random-seed",
            "0",
        ]
        if engine.tokenizer:
            args += ["--tokenizer-path", engine.tokenizer]
        if engine.max_model_len:
            args += ["--context-length", str(engine.max_model_len)]
        if engine.max_num_seqs:
            args += ["--max-running-requests", str(engine.max_num_seqs)]
        if self.prefix_cache_mode(engine) == "off":
            args.append("--disable-radix-cache")
        return args + speculative_args(spec, self.release(engine)) + list(engine.extra_args)

    def request_body(
        self,
        engine: EngineConfig,
        prompt_ids: Sequence[int],
        max_tokens: int,
        temperature: float,
        seed: int | None,
        ignore_eos: bool,
    ) -> dict[str, Any]:
        """A streaming /generate body whose prompt is token IDs."""
        params: dict[str, Any] = {
            "max_new_tokens": max_tokens,
            "temperature": temperature,
            "ignore_eos": ignore_eos,
            "skip_special_tokens": False,
        }
        if seed is not None:
            params["sampling_seed"] = seed
        return {"input_ids": list(prompt_ids), "sampling_params": params, "stream": True}

    def parse_event(self, payload: bytes) -> StreamEvent | None:
        """One ``data:`` payload of a /generate stream."""
        data = load_chunk(payload)
        if data is None:
            return None
        if (error := stream_error(data)) is not None:
            return error
        meta = data.get("meta_info") or {}
        finish = meta.get("finish_reason")
        if isinstance(finish, dict):
            finish = finish.get("type")
        extra = {}
        if "spec_verify_ct" in meta:
            extra["verify_steps"] = int(meta["spec_verify_ct"])
        return StreamEvent(
            token_ids=data.get("output_ids") or [],
            finish_reason=finish,
            extra=extra,
            total_tokens=meta.get("completion_tokens"),
        )

    def parse_counters(self, metrics_text: str) -> SpecCounters:
        """SGLang exports no per-position counters; acceptance comes per request (meta_info)."""
        return SpecCounters()

    def server_version(self, base_url: str) -> str:
        """``version`` of the server info (SGLang serves no ``/version``), else unknown."""
        import httpx

        for path in (self.metrics_path, *self.metrics_fallback_paths):
            try:
                resp = httpx.get(f"{base_url}{path}", timeout=5)
                if resp.status_code == 200:
                    return str(orjson.loads(resp.content).get("version") or "unknown")
            except (httpx.HTTPError, ValueError, AttributeError):
                return "unknown"
        return "unknown"

    def server_acceptance_length(self, server_info: str) -> float | None:
        """``avg_spec_accept_length`` from the server info (None without SD)."""
        info = orjson.loads(server_info)
        for state in info.get("internal_states") or []:
            if state.get("avg_spec_accept_length") is not None:
                return float(state["avg_spec_accept_length"])
        return None


register_container(
    "sglang",
    ContainerSpec(
        image="lmsysorg/sglang:v0.5.5",
        entrypoint=("python3", "-m", "sglang.launch_server"),
        port=30000,
        gpu_host=HostSettings(
            ipc="host",
            shm_size="32g",
            source="SGLang docs, install with Docker: docker run --gpus all --shm-size 32g "
            "--ipc=host",
        ),
    ),
)
