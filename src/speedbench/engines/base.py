"""The engine adapter protocol and its registry.

An adapter knows three things about one inference engine: how to launch its server from an
``EngineConfig`` + ``SpecConfig``, what a streaming token-ID generation request looks like and how
to parse its chunks, and how to read its speculative-decoding counters. Launchers (local process,
Docker) and the load generator consume only this protocol, so adding an engine is one module that
calls :func:`register_engine`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import orjson

from speedbench import REPO_ROOT
from speedbench.config import ENGINE_KINDS, EngineConfig, SpecConfig
from speedbench.figures import SpecCounters

DEFAULT_ENGINE_PYTHON = REPO_ROOT / ".venv-engine" / "bin" / "python"
# Where a container sees the launch files (an options YAML) the Docker launcher copies in; a
# local launch writes them beside its log and passes that folder instead.
LAUNCH_FILES_DIR = "/speedbench"


class EngineError(RuntimeError):
    """An engine failed (bad launch arguments, crash, health timeout). One-line message."""


class UnsupportedSpecError(EngineError):
    """The engine does not implement the requested speculative-decoding method."""


@dataclass(slots=True)
class StreamEvent:
    """One parsed streaming chunk.

    Attributes:
        token_ids: Tokens generated in this chunk (may be empty for a final bookkeeping chunk).
        finish_reason: Set on the chunk that ends the request.
        error: An error the engine reported inside the stream.
        extra: Engine-specific fields worth keeping (e.g. per-request acceptance info).
        sent_ns: When the server sent the chunk (CLOCK_MONOTONIC ns), from servers that say so:
            the synthetic calibration server does, engines do not.
        total_tokens: Output tokens so far, for engines whose chunks may repeat earlier ids
            (SGLang without incremental streaming); the new ids are the last ones.
        draft_totals: The request's cumulative (drafted, accepted) draft tokens so far, from
            engines that stream one token per event and annotate the counts (llama.cpp): the
            request function rejoins each verify step's tokens into one chunk from them.
    """

    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    sent_ns: int | None = None
    total_tokens: int | None = None
    draft_totals: tuple[int, int] | None = None


class MalformedChunk(ValueError):
    """A streamed chunk that is not in the engine's format."""


def load_chunk(payload: bytes) -> dict[str, Any] | None:
    """The JSON object of one SSE ``data:`` payload; None for the ``[DONE]`` marker.

    Raises:
        MalformedChunk: The payload is not a JSON object.
    """
    if payload == b"[DONE]":
        return None
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise MalformedChunk(f"chunk is not JSON: {payload[:80]!r}") from None
    if not isinstance(data, dict):
        raise MalformedChunk(f"chunk is not a JSON object: {payload[:80]!r}")
    return data


def stream_error(data: dict[str, Any]) -> StreamEvent | None:
    """An error the engine put in the stream instead of a chunk, as an event (else None)."""
    if "error" not in data or data.get("choices"):
        return None
    err = data["error"]
    msg = err.get("message", err) if isinstance(err, dict) else err
    return StreamEvent(error=f"engine error in stream: {msg}")


def engine_python(engine: EngineConfig) -> str:
    """The engine environment's interpreter: config, $SPEEDBENCH_ENGINE_PYTHON or .venv-engine.

    Raises:
        EngineError: It does not exist (with the make target that builds it).
    """
    python = (
        engine.python or os.environ.get("SPEEDBENCH_ENGINE_PYTHON") or str(DEFAULT_ENGINE_PYTHON)
    )
    if not Path(python).exists():
        raise EngineError(
            f"engine interpreter not found: {python} "
            "(run `make engine-env` or set EngineConfig.python)"
        )
    return python


def engine_method(engine_name: str, methods: Mapping[str, str], method: str) -> str:
    """The engine's own name for SD ``method``, from the methods its adapter declares.

    Raises:
        UnsupportedSpecError: The engine does not run ``method`` (one line naming those it does).
    """
    if method not in methods:
        raise UnsupportedSpecError(
            f"{engine_name} has no SD method {method!r}; it has {sorted(methods)}"
        )
    return methods[method]


def console_script(engine: EngineConfig, name: str) -> str:
    """The engine's own command (``vllm``, ``trtllm-serve``) beside its environment's python.

    The path is not resolved: a venv's python is a symlink, and its scripts live beside the
    link, not beside the interpreter it points to.

    Raises:
        EngineError: The environment has no such command.
    """
    script = Path(engine_python(engine)).parent / name
    if not script.exists():
        raise EngineError(f"{name} not found beside {engine_python(engine)}: install the engine")
    return str(script)


@runtime_checkable
class EngineAdapter(Protocol):
    """What speedbench needs from an inference engine.

    Adapters subclass this protocol explicitly, so the members with a default body below are
    inherited by engines that have nothing to say there.
    """

    kind: str
    # The engine's name in messages and tables ("SGLang").
    name: str
    # The SD methods this engine runs: speedbench's method name -> the engine's own. A sweep
    # naming another is refused before any launch (speedbench.run.plan.check_specs).
    methods: Mapping[str, str]
    health_path: str
    metrics_path: str
    generate_path: str
    # Whether reading the metrics endpoint resets the SD counters (TensorRT-LLM's per-iteration
    # stats): then the read after a level is the level's delta, not a cumulative total.
    counters_reset_on_read: bool = False
    # POST here empties the engine's prefix cache between levels (None: the engine has none).
    reset_cache_path: str | None = None
    # The HTTP status with which the reset endpoint says "busy, try again" (SGLang: 400).
    reset_cache_busy_status: int | None = None
    # What the engine loads: a Hugging Face model directory ("hf") or a GGUF file ("gguf").
    weights_format: str = "hf"
    # Older spellings of ``metrics_path`` that releases still in use serve instead (tried in
    # order when the current one answers 404).
    metrics_fallback_paths: tuple[str, ...] = ()

    def server_version(self, base_url: str) -> str:
        """The running server's version (vLLM and SGLang serve ``/version``), else unknown."""
        import httpx

        try:
            resp = httpx.get(f"{base_url}/version", timeout=5)
            return str(resp.json().get("version", "unknown"))
        except (httpx.HTTPError, ValueError, AttributeError):
            return "unknown"

    def release(self, engine: EngineConfig) -> tuple[int, ...] | None:
        """The engine release this config will run, where its flags differ by release.

        Read before launch (:mod:`speedbench.engines.releases`); None where nothing the adapter
        builds depends on it.
        """
        return None

    def server_command(self, engine: EngineConfig) -> list[str]:
        """What a local launch runs before the server arguments (the engine's own command)."""
        ...

    def drafting_shape(self, spec: SpecConfig) -> str:
        """What this engine drafts for ``spec``, in words a cross-engine table can show.

        The same ``method`` and ``k`` are not the same drafter everywhere (SGLang's n-gram
        drafts a tree, TensorRT-LLM's shares one n-gram pool across requests), so an AL is
        only comparable next to this.
        """
        if not spec.is_speculative:
            return "none"
        return f"chain of {spec.num_speculative_tokens}"

    def concurrency_cap(self, engine: EngineConfig, spec: SpecConfig) -> int | None:
        """The most requests the server runs at once for this config, where it sets one.

        A batch size above it would be measured as the cap, so the sweep refuses it up front.
        """
        return engine.max_num_seqs

    def launch_files(self, engine: EngineConfig, spec: SpecConfig) -> dict[str, str]:
        """Files the server needs at launch (name -> text), e.g. an options YAML; none here."""
        return {}

    def iteration_token_budget(self, engine: EngineConfig) -> int | None:
        """The most tokens the server processes in one iteration, where it is known.

        Long prompts are prefilled in chunks that fill it (chunked prefill); the speedup model
        reads and replays iterations by it. None: not known, each prompt counted whole.
        """
        return None

    def server_acceptance_length(self, metrics_text: str) -> float | None:
        """The server's own running AL from its metrics page, where it states one."""
        return None

    def server_env(self, engine: EngineConfig) -> dict[str, str]:
        """Environment the server needs for this engine config (before ``engine.env``)."""
        return {}

    def prefix_cache_mode(self, engine: EngineConfig) -> str:
        """What this engine does with ``engine.prefix_cache``: reset, keep or off.

        An engine without a reset endpoint turns ``reset`` into ``off`` (no level can reuse
        another's prefill either way); the level records the mode that applied.
        """
        if engine.prefix_cache == "reset" and self.reset_cache_path is None:
            return "off"
        return engine.prefix_cache

    def parse_prefix_cache(self, metrics_text: str) -> tuple[float, float] | None:
        """Cumulative prefix-cache (queried, hit) tokens on the metrics page, where it has them."""
        return None

    def server_args(
        self, engine: EngineConfig, spec: SpecConfig, *, files_dir: str = LAUNCH_FILES_DIR
    ) -> list[str]:
        """Server CLI arguments (after the command) for this target and SD configuration.

        ``files_dir`` is where the server finds :meth:`launch_files` (engines without any
        ignore it).
        """
        ...

    def request_body(
        self,
        engine: EngineConfig,
        prompt_ids: Sequence[int],
        max_tokens: int,
        temperature: float,
        seed: int | None,
        ignore_eos: bool,
    ) -> dict[str, Any]:
        """JSON body of one streaming generation request from token IDs."""
        ...

    def parse_event(self, payload: bytes) -> StreamEvent | None:
        """Parse the payload of one SSE ``data:`` line; None for the end marker.

        Raises:
            MalformedChunk: The payload is not in the engine's format.
        """
        ...

    def parse_counters(self, metrics_text: str) -> SpecCounters:
        """Cumulative SD counters from the server's metrics endpoint text."""
        ...


ENGINES: dict[str, Callable[[], EngineAdapter]] = {}


def register_engine(
    kind: str,
) -> Callable[[Callable[[], EngineAdapter]], Callable[[], EngineAdapter]]:
    """Class decorator registering an adapter factory under ``kind``."""

    def deco(factory: Callable[[], EngineAdapter]) -> Callable[[], EngineAdapter]:
        if kind in ENGINES:
            raise ValueError(f"engine {kind!r} is already registered")
        ENGINES[kind] = factory
        return factory

    return deco


def get_engine(kind: str) -> EngineAdapter:
    """The adapter for ``kind``, with a one-line error naming the known engines."""
    # The built-in adapters are registered by the package's __init__, which Python runs
    # before this module whenever anything is imported from speedbench.engines.
    if kind not in ENGINES:
        known = ", ".join(sorted(ENGINES)) or ", ".join(ENGINE_KINDS)
        raise EngineError(f"unknown engine {kind!r}; available: {known}")
    return ENGINES[kind]()
