"""One level: one SD configuration, one split, one batch size, measured on a running engine.

A level's directory (``OUT/<config>/<split>/bs<N>/``) holds:

    records.jsonl    written per request as it finishes (crash-safe)
    records.parquet  consolidated at the end of the level
    metrics.json     the level's :class:`~speedbench.results.LevelMetrics`

The sweep runner (:mod:`speedbench.sweep`) calls :func:`measure_level` for every point of its
grid; this module knows nothing of grids, MLflow or Prefect.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speedbench import contention
from speedbench.client.loadgen import LoadSettings, WorkItem
from speedbench.client.run import reset_prefix_cache, run_load
from speedbench.config import EngineConfig
from speedbench.engines.base import EngineError
from speedbench.engines.docker import remote_host
from speedbench.engines.running import RunningEngine, log_tail
from speedbench.host import format_cpu_list, keep_off
from speedbench.metrics.summary import summarize_level
from speedbench.records import RecordSink, write_parquet
from speedbench.results import LevelMetrics, finite, write_json
from speedbench.secrets import redacted_engine
from speedbench.tokenize import PromptTokenizer, check_token_ids

log = logging.getLogger(__name__)

# Settings that make vLLM usable on a small CPU host (see docs/machines.md, "vLLM on CPU").
# No worker processes beside the engine core (the uni executor), and a KV cache sized for a
# 24 GiB host; a host with less memory sets VLLM_CPU_KVCACHE_SPACE (GiB) in its environment.
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
        "max_model_len": 4096,
        "extra_args": CPU_VLLM_ARGS,
        "env": {**CPU_VLLM_ENV, **kv_cache_override()},
    }
    fields.update(overrides)
    return EngineConfig(**fields)


def check_alive(running: RunningEngine, when: str) -> None:
    """Raise EngineError (quoting the log tail) if a local engine process has exited."""
    code = running.exit_code()
    if code is not None:
        tail = log_tail(running.log_path)
        raise EngineError(f"engine exited with code {code} {when}: {tail}")


@dataclass
class LevelResult:
    """Where one measured level's outputs are, and its metrics."""

    label: str
    batch_size: int
    metrics: LevelMetrics
    directory: Path
    split: str = ""

    @property
    def failed(self) -> str | None:
        """Why the engine failed during the level (None if it did not)."""
        return self.metrics.failed


def load_level(directory: Path, label: str, split: str, batch_size: int) -> LevelResult | None:
    """A level measured earlier, from its ``metrics.json`` (None if it is not on disk)."""
    path = directory / "metrics.json"
    if not path.exists():
        return None
    return LevelResult(label, batch_size, LevelMetrics.read(path), directory, split=split)


def validate_items(items: Sequence[WorkItem], vocab_size: int) -> None:
    """Fail before any request on pre-tokenized prompts with out-of-vocabulary ids."""
    for it in items:
        if it.prompt_ids is not None:
            try:
                check_token_ids(it.prompt_ids, vocab_size)
            except ValueError as exc:
                raise type(exc)(f"prompt {it.prompt_id}: {exc}") from None


def measure_level(
    running: RunningEngine,
    items: Sequence[WorkItem],
    settings: LoadSettings,
    tokenizer: PromptTokenizer | None,
    directory: Path,
) -> LevelResult:
    """Run one load level; records are durable as they arrive.

    The level's records, metrics and client report are written even when the engine died
    during it; ``metrics.failed`` then says why (quoting the engine log), and the caller
    decides what a failed level means for the sweep.
    """
    directory.mkdir(parents=True, exist_ok=True)
    jsonl = directory / "records.jsonl"
    jsonl.unlink(missing_ok=True)
    if settings.strict_host:
        refuse_busy_host(running, settings)
    cache_mode = running.adapter.prefix_cache_mode(running.engine)
    if cache_mode == "reset":
        reset_prefix_cache(running.engine, running.adapter)
    engine_cores = engine_cores_here(running.engine)
    with keep_off(engine_cores) as client_cores:
        before = contention.snapshot()
        with RecordSink(jsonl) as sink:
            result = run_load(
                running.engine,
                running.spec,
                running.adapter,
                items,
                settings,
                tokenizer,
                sink.write,
                parts_dir=directory / "parts",
            )
        after = contention.snapshot()
    host = contention.compare(
        before, after, engine_ownership(running, {**before.procs, **after.procs}),
        settings.contention_threshold, engine_cores,
    )  # fmt: skip
    write_parquet(result.records, directory / "records.parquet")
    figures: dict[str, Any] = summarize_level(
        result.records,
        result.counters,
        running.spec.num_speculative_tokens,
        server_al=result.extras.get("server_al"),  # type: ignore[arg-type]
    )
    figures["client"] = result.extras.get("client")
    figures["prefix_cache"] = {"mode": cache_mode, **(result.extras.get("prefix_cache") or {})}
    figures["host"] = {
        **host.as_dict(),
        "engine_cpus": format_cpu_list(engine_cores) if engine_cores else None,
        "client_cpus": format_cpu_list(client_cores),
    }
    figures["failed"] = engine_failure(running, settings, result.aborted) or None
    figures["config"] = {
        "engine": redacted_engine(running.engine),
        "spec": running.spec.model_dump(),
        "batch_size": settings.batch_size,
        "max_tokens": settings.max_tokens,
        "temperature": settings.temperature,
        "split": settings.split,
    }
    metrics = LevelMetrics.model_validate(finite(figures))
    write_json(directory / "metrics.json", metrics.model_dump(mode="json"))
    if host.flagged:
        log.warning(
            "%s %s bs%d: %s", running.spec.label, settings.split, settings.batch_size,
            host.warning(),
        )  # fmt: skip
    warning = (metrics.client or {}).get("warning")
    if warning:
        log.warning(
            "%s %s bs%d: %s", running.spec.label, settings.split, settings.batch_size, warning
        )
    return LevelResult(
        running.spec.label, settings.batch_size, metrics, directory, split=settings.split
    )


class HostBusyError(RuntimeError):
    """``strict_host``: other processes are using the host, so a level is not measured."""


def engine_ownership(
    running: RunningEngine, procs: dict[int, contention.ProcSample]
) -> Callable[[int], bool]:
    """Which processes are this measurement's: the client, and the engine wherever it runs."""
    pgid = running.process.pid if running.process is not None else None
    external = None
    if running.engine.launcher == "external":  # a local server someone else started
        external = f"--port\0{running.engine.port}\0".encode()
    ours = contention.ownership(procs, engine_pgid=pgid, container_id=running.container_id)
    if external is None:
        return ours

    def ours_or_external(pid: int) -> bool:
        if ours(pid):
            return True
        try:
            return external in (contention.PROC / str(pid) / "cmdline").read_bytes()
        except OSError:
            return False

    return ours_or_external


def engine_cores_here(engine: EngineConfig) -> frozenset[int]:
    """The cores a bound engine owns on this host (empty: unbound, or on another machine)."""
    if not engine.cpus or engine.launcher == "external":
        return frozenset()
    if engine.launcher == "docker" and remote_host(engine) is not None:
        return frozenset()
    return frozenset(engine.cpu_ids)


def refuse_busy_host(running: RunningEngine, settings: LoadSettings, probe_s: float = 2.0) -> None:
    """Sample the host for ``probe_s`` before a level; raise HostBusyError if others use it."""
    before = contention.snapshot()
    time.sleep(probe_s)
    after = contention.snapshot()
    ours = engine_ownership(running, {**before.procs, **after.procs})
    probe = contention.compare(
        before, after, ours, settings.contention_threshold, engine_cores_here(running.engine)
    )
    if probe.flagged:
        raise HostBusyError(
            f"not measuring {running.spec.label} {settings.split} at batch size "
            f"{settings.batch_size} (strict_host): {probe.warning()}"
        )


def engine_failure(running: RunningEngine, settings: LoadSettings, aborted: str | None) -> str:
    """Why the engine failed during a level ('' if it did not): it exited, or stopped answering."""
    when = f"while measuring {settings.split} at batch size {settings.batch_size}"
    try:
        check_alive(running, when)
    except EngineError as exc:
        return str(exc)
    if aborted:
        return f"{aborted} {when}: {log_tail(running.log_path)}"
    return ""
