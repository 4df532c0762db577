"""vLLM: OpenAI-compatible server launch arguments, token-ID requests and SD counters.

The server takes its SD setup as one JSON ``--speculative-config`` (vLLM's ``SpeculativeConfig``:
``method``, ``model``, ``num_speculative_tokens``, ``prompt_lookup_min/max``). Requests go to
``/v1/completions`` with ``prompt`` as a list of token IDs and ``return_token_ids`` so every
streamed chunk carries its exact delta token IDs instead of text we would have to re-tokenize.
Counters come from ``/metrics`` (``vllm:spec_decode_*``), parsed with prometheus_client.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import (
    LAUNCH_FILES_DIR,
    EngineAdapter,
    StreamEvent,
    console_script,
    engine_method,
    load_chunk,
    register_engine,
    stream_error,
)
from speedbench.figures import SpecCounters

# The embedded default (README): vLLM's CPU build as a local process.

# Settings that make vLLM usable on a small CPU host (see docs/machines.md, "vLLM on CPU").
# No worker processes beside the engine core (the uni executor), and a KV cache sized for a
# 24 GiB host; a host with less memory sets VLLM_CPU_KVCACHE_SPACE (GiB) in its environment.
# The context limit of the CPU engines (vLLM, llama.cpp): prompts and answers of the qualitative
# split fit; the long throughput tiers raise it.
CPU_CONTEXT = 4096
CPU_VLLM_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "4"}
CPU_VLLM_ARGS = [
    "--enforce-eager",
    "--distributed-executor-backend",
    "uni",
    # On the CPU this flag reserves host memory; vLLM refuses to start when NUMA node 0
    # has less free than asked.
    "--gpu-memory-utilization",
    "0.3",
]


# vLLM's own default of max_num_batched_tokens for its OpenAI server on the CPU (world size 1):
# vLLM 0.32 engine/arg_utils.py get_batch_defaults. On a GPU it depends on the device's memory.
CPU_TOKEN_BUDGET = 2048


class EnginePlacement(Protocol):
    """Where an engine runs: an EngineConfig or a sweep's engine section."""

    @property
    def kind(self) -> str:
        """The engine."""
        ...

    @property
    def launcher(self) -> str:
        """local, docker or external."""
        ...

    @property
    def gpus(self) -> str | None:
        """GPUs asked for (None: none)."""
        ...


def runs_on_cpu(engine: EnginePlacement) -> bool:
    """Whether speedbench launches this vLLM on the CPU (its CPU build, no GPUs asked for)."""
    return engine.kind == "vllm" and engine.launcher != "external" and engine.gpus is None


def kv_cache_override() -> dict[str, str]:
    """The host's own VLLM_CPU_KVCACHE_SPACE, where it sets one."""
    space = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    return {"VLLM_CPU_KVCACHE_SPACE": space} if space else {}


def cpu_vllm_engine(model: str, port: int = 8000, **overrides: Any) -> EngineConfig:
    """EngineConfig of the embedded default: vLLM's CPU build as a local process."""
    fields: dict[str, Any] = {
        "kind": "vllm",
        "model": model,
        "launcher": "local",
        "port": port,
        "dtype": "float32",
        "max_model_len": CPU_CONTEXT,
        "extra_args": CPU_VLLM_ARGS,
        "env": {**CPU_VLLM_ENV, **kv_cache_override()},
    }
    fields.update(overrides)
    return EngineConfig(**fields)


NAME = "vLLM"
# speedbench method -> vLLM SpeculativeConfig.method
METHODS = {
    "ngram": "ngram",
    "draft_model": "draft_model",
    "eagle": "eagle",
    "eagle3": "eagle3",
    "mtp": "mtp",
    "suffix": "suffix",
}

_COUNTER_PREFIX = "vllm:spec_decode_"


def speculative_config(spec: SpecConfig) -> dict[str, Any] | None:
    """VLLM's ``--speculative-config`` mapping for ``spec`` (None for the baseline)."""
    if not spec.is_speculative:
        return None
    cfg: dict[str, Any] = {
        "method": engine_method(NAME, METHODS, spec.method),
        "num_speculative_tokens": spec.num_speculative_tokens,
    }
    if spec.draft_model:
        cfg["model"] = spec.draft_model
    if spec.method == "ngram":
        cfg["prompt_lookup_min"] = spec.prompt_lookup_min or 1
        cfg["prompt_lookup_max"] = spec.prompt_lookup_max or max(cfg["prompt_lookup_min"], 4)
    cfg.update(spec.options)
    return cfg


@register_engine("vllm")
class VLLMAdapter(EngineAdapter):
    """Adapter for vLLM's OpenAI-compatible server (GPU images and the CPU build alike)."""

    kind = "vllm"
    name = NAME
    methods = METHODS
    health_path = "/health"
    metrics_path = "/metrics"
    generate_path = "/v1/completions"
    served_model_name = "target"
    # A development endpoint: served only with VLLM_SERVER_DEV_MODE=1 (server_env), vLLM 0.32
    # vllm/entrypoints/serve/dev/cache/api_router.py.
    reset_cache_path = "/reset_prefix_cache"

    def server_command(self, engine: EngineConfig) -> list[str]:
        """``vllm serve``: vLLM's supported command (its module entrypoint is deprecated)."""
        return [console_script(engine, "vllm"), "serve"]

    def server_args(
        self, engine: EngineConfig, spec: SpecConfig, *, files_dir: str = LAUNCH_FILES_DIR
    ) -> list[str]:
        """Arguments for ``vllm serve`` (the model is its positional argument)."""
        args = [
            engine.model,
            "--served-model-name",
            self.served_model_name,
            "--host",
            engine.host,
            "--port",
            str(engine.port),
            "--dtype",
            engine.dtype,
            "--seed",
            "0",
        ]
        if engine.tokenizer:
            args += ["--tokenizer", engine.tokenizer]
        if engine.max_model_len:
            args += ["--max-model-len", str(engine.max_model_len)]
        if engine.max_num_seqs:
            args += ["--max-num-seqs", str(engine.max_num_seqs)]
        if self.prefix_cache_mode(engine) == "off":
            args.append("--no-enable-prefix-caching")
        cfg = speculative_config(spec)
        if cfg is not None:
            args += ["--speculative-config", json.dumps(cfg, sort_keys=True)]
            # The engine view of acceptance: every request's ordered accepted/proposed counts
            # of its drafted verify steps, in the final usage chunk of its stream (vLLM 0.32,
            # vllm/config/observability.py).
            args += ["--per-request-spec-decode-metrics", "detailed"]
        return args + list(engine.extra_args)

    def iteration_token_budget(self, engine: EngineConfig) -> int | None:
        """``--max-num-batched-tokens`` where the launch sets it, else vLLM's CPU default."""
        args = list(engine.extra_args)
        for i, arg in enumerate(args):
            if arg == "--max-num-batched-tokens" and i + 1 < len(args):
                return int(args[i + 1])
            if arg.startswith("--max-num-batched-tokens="):
                return int(arg.split("=", 1)[1])
        return CPU_TOKEN_BUDGET if runs_on_cpu(engine) else None

    def server_env(self, engine: EngineConfig) -> dict[str, str]:
        """Development mode for ``reset``: it serves the reset endpoint.

        It also serves /collective_rpc and /sleep, so a server in reset mode belongs on loopback
        or a trusted network.
        """
        return {"VLLM_SERVER_DEV_MODE": "1"} if self.prefix_cache_mode(engine) == "reset" else {}

    def parse_prefix_cache(self, metrics_text: str) -> tuple[float, float] | None:
        """``vllm:prefix_cache_queries_total`` and ``vllm:prefix_cache_hits_total`` (tokens)."""
        found: dict[str, float] = {}
        for family in text_string_to_metric_families(metrics_text):
            for sample in family.samples:
                if sample.name in (
                    "vllm:prefix_cache_queries_total",
                    "vllm:prefix_cache_hits_total",
                ):
                    found[sample.name] = found.get(sample.name, 0.0) + sample.value
        if len(found) < 2:
            return None
        return found["vllm:prefix_cache_queries_total"], found["vllm:prefix_cache_hits_total"]

    def request_body(
        self,
        engine: EngineConfig,
        prompt_ids: Sequence[int],
        max_tokens: int,
        temperature: float,
        seed: int | None,
        ignore_eos: bool,
    ) -> dict[str, Any]:
        """A streaming /v1/completions body whose prompt is token IDs."""
        body: dict[str, Any] = {
            "model": self.served_model_name,
            "prompt": list(prompt_ids),
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": True,
            "return_token_ids": True,
            "ignore_eos": ignore_eos,
            "skip_special_tokens": False,
            # The final usage chunk carries the per-request spec-decode metrics when streaming.
            "stream_options": {"include_usage": True},
        }
        if seed is not None:
            body["seed"] = seed
        return body

    def parse_event(self, payload: bytes) -> StreamEvent | None:
        """Parse one ``data:`` payload of a /v1/completions stream."""
        data = load_chunk(payload)
        if data is None:
            return None
        if (error := stream_error(data)) is not None:
            return error
        choices = data.get("choices") or []
        if not choices:
            return StreamEvent(extra=_spec_decode_steps(data))
        choice = choices[0]
        return StreamEvent(
            token_ids=choice.get("token_ids") or [],
            finish_reason=choice.get("finish_reason"),
            sent_ns=data.get("sent_ns"),
        )

    def parse_counters(self, metrics_text: str) -> SpecCounters:
        """VLLM's cumulative SD counters, summed over label sets other than position."""
        return prometheus_spec_counters(metrics_text, _COUNTER_PREFIX)


def prometheus_spec_counters(metrics_text: str, prefix: str) -> SpecCounters:
    """Cumulative SD counters named ``<prefix>num_drafts_total`` and so on, as vLLM names them.

    ``num_accepted_tokens_per_pos`` is keyed by its ``position`` label; every other label set
    (model, engine index) is summed. llama.cpp's server uses the same names under its prefix.
    """
    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if not sample.name.startswith(prefix) or not sample.name.endswith("_total"):
                continue
            key = sample.name[len(prefix) : -len("_total")]
            if key == "num_accepted_tokens_per_pos":
                pos = int(sample.labels["position"])
                per_pos[pos] = per_pos.get(pos, 0.0) + sample.value
            else:
                values[key] = values.get(key, 0.0) + sample.value
    n = max(per_pos) + 1 if per_pos else 0
    return SpecCounters(
        num_drafts=values.get("num_drafts", 0.0),
        num_draft_tokens=values.get("num_draft_tokens", 0.0),
        num_accepted_tokens=values.get("num_accepted_tokens", 0.0),
        accepted_per_pos=tuple(per_pos.get(i, 0.0) for i in range(n)),
    )


def _spec_decode_steps(data: dict[str, Any]) -> dict[str, Any]:
    """The per-step accepted/proposed arrays of a final usage chunk (empty if absent)."""
    metrics = data.get("metrics") or {}
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if not isinstance(spec, dict) or "per_step_accepted" not in spec:
        # A request whose steps all missed (no draft) has no arrays but a zero step count.
        if isinstance(spec, dict) and spec.get("num_spec_steps") == 0:
            return {"accepted_steps": [], "drafted_steps": []}
        return {}
    return {
        "accepted_steps": [int(a) for a in spec["per_step_accepted"]],
        "drafted_steps": [int(d) for d in spec.get("per_step_drafted") or []],
    }
