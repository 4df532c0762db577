"""Measure a prompt set against engines: launch per SD config, sweep batch sizes, write results.

Layout of an output directory::

    OUT/<config>/<split>/bs<N>/records.jsonl   written per request as it finishes (crash-safe)
    OUT/<config>/<split>/bs<N>/records.parquet consolidated at the end of the level
    OUT/<config>/<split>/bs<N>/metrics.json    summary of the level
    OUT/<config>/engine.log                    the engine's log
    OUT/summary.json                         every level, plus speedup vs the no-SD baseline
    OUT/plots/*.png                          conditional AR by position, Pareto curve

This module sequences core pieces only; Prefect tasks and the CLI call it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speedbench.client.loadgen import LoadSettings, WorkItem, run_load
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineError
from speedbench.engines.local import RunningEngine, attach_external, launch_local, log_tail
from speedbench.metrics.pareto import LoadPoint, pareto_front, speedup
from speedbench.metrics.summary import summarize_level
from speedbench.records import RecordSink, write_parquet
from speedbench.report.plots import write_plots
from speedbench.secrets import redacted_engine
from speedbench.tokenize import PromptTokenizer, check_token_ids

# Settings that make vLLM usable on a small CPU host (see docs/architecture.md, "vLLM on CPU").
log = logging.getLogger(__name__)

# One engine process (no multiprocessing) and a KV cache sized for a 24 GiB host.
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
        "env": CPU_VLLM_ENV,
    }
    fields.update(overrides)
    return EngineConfig(**fields)


@contextlib.contextmanager
def engine_session(
    engine: EngineConfig, spec: SpecConfig, log_path: Path
) -> Iterator[RunningEngine]:
    """Launch (or attach to) the engine for one SD configuration."""
    if engine.launcher == "local":
        with launch_local(engine, spec, log_path) as running:
            yield running
    elif engine.launcher == "docker":
        from speedbench.engines.docker import launch_docker

        with launch_docker(engine, spec, log_path) as running:
            yield running
    else:
        with attach_external(engine, spec) as running:
            yield running


class OpenEngine:
    """An engine session opened by one call and closed by another (for orchestrators).

    ``engine_session`` is a context manager; Prefect tasks cannot share a ``with`` block, so this
    holds the session's exit stack until :meth:`close`, which is safe to call more than once.
    """

    def __init__(self, engine: EngineConfig, spec: SpecConfig, log_path: Path):
        self._stack = contextlib.ExitStack()
        try:
            self.running = self._stack.enter_context(engine_session(engine, spec, log_path))
        except BaseException:
            self._stack.close()
            raise

    def close(self) -> None:
        """Stop the engine (kill its process group) and release its port."""
        self._stack.close()


def check_alive(running: RunningEngine, when: str) -> None:
    """Raise EngineError (quoting the log tail) if a local engine process has exited."""
    code = running.exit_code()
    if code is not None:
        tail = log_tail(running.log_path)
        raise EngineError(f"engine exited with code {code} {when}: {tail}")


@dataclass
class LevelResult:
    """Where one measured level's outputs are, and its summary."""

    label: str
    batch_size: int
    metrics: dict[str, Any]
    directory: Path
    split: str = ""


def load_level(directory: Path, label: str, split: str, batch_size: int) -> LevelResult | None:
    """A level measured earlier, from its ``metrics.json`` (None if it is not on disk)."""
    path = directory / "metrics.json"
    if not path.exists():
        return None
    metrics = json.loads(path.read_text())
    return LevelResult(label, batch_size, metrics, directory, split=split)


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
    during it; ``metrics["failed"]`` then says why (quoting the engine log), and the caller
    decides what a failed level means for the sweep.
    """
    directory.mkdir(parents=True, exist_ok=True)
    jsonl = directory / "records.jsonl"
    jsonl.unlink(missing_ok=True)
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
    write_parquet(result.records, directory / "records.parquet")
    metrics = summarize_level(
        result.records,
        result.counters,
        running.spec.num_speculative_tokens,
        server_al=result.extras.get("server_al"),  # type: ignore[arg-type]
    )
    metrics["client"] = result.extras.get("client")
    failed = engine_failure(running, settings, result.aborted)
    if failed:
        metrics["failed"] = failed
    metrics["config"] = {
        "engine": redacted_engine(running.engine),
        "spec": running.spec.model_dump(),
        "batch_size": settings.batch_size,
        "max_tokens": settings.max_tokens,
        "temperature": settings.temperature,
        "split": settings.split,
    }
    _write_json(directory / "metrics.json", metrics)
    warning = (metrics["client"] or {}).get("warning")
    if warning:
        log.warning(
            "%s %s bs%d: %s", running.spec.label, settings.split, settings.batch_size, warning
        )
    return LevelResult(
        running.spec.label, settings.batch_size, metrics, directory, split=settings.split
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


def measure(
    engine: EngineConfig,
    specs: Sequence[SpecConfig],
    items: Sequence[WorkItem] | Mapping[str, Sequence[WorkItem]],
    batch_sizes: Sequence[int],
    out_dir: str | Path,
    *,
    settings: LoadSettings | None = None,
    tokenizer: PromptTokenizer | None = None,
    on_level: Callable[[LevelResult], None] | None = None,
) -> dict[str, Any]:
    """Measure every SD config on every split at every batch size; one launch per SD config.

    Args:
        engine: The engine to launch (or attach to).
        specs: SD configurations; put the no-SD baseline first so speedups are known early.
        items: Prompts of one split (named by ``settings.split``) or a mapping split -> prompts.
        batch_sizes: Concurrency levels.
        out_dir: Output root (layout in the module docstring).
        settings: Load settings shared by all levels.
        tokenizer: Templates text prompts and validates pre-tokenized ones.
        on_level: Called with each level as soon as it is measured.

    A config whose engine fails to start or dies is recorded under ``failures`` (with the tail
    of its log) and the sweep goes on with the next config; levels already measured are kept.
    """
    out = Path(out_dir)
    base = settings or LoadSettings()
    splits = dict(items) if isinstance(items, Mapping) else {base.split: items}
    if tokenizer is not None:
        for split_items in splits.values():
            validate_items(split_items, tokenizer.vocab_size)
    levels: list[LevelResult] = []
    failures: list[dict[str, str]] = []
    for spec in specs:
        spec_dir = out / spec.label
        try:
            with engine_session(engine, spec, spec_dir / "engine.log") as running:
                for split, split_items in splits.items():
                    for bs in batch_sizes:
                        level = dataclasses.replace(base, batch_size=bs, split=split)
                        where = spec_dir / split / f"bs{bs}"
                        result = measure_level(running, split_items, level, tokenizer, where)
                        if on_level is not None:
                            on_level(result)
                        if result.metrics.get("failed"):
                            raise EngineError(result.metrics["failed"])
                        levels.append(result)
        except EngineError as exc:
            log.error("config %s failed: %s", spec.label, exc)
            failures.append({"config": spec.label, "error": str(exc)})
    summary = build_summary(levels)
    summary["failures"] = failures
    _write_json(out / "summary.json", summary)
    summary["plots"] = [str(p) for p in write_plots(summary, out / "plots")]
    return summary


def build_summary(levels: Sequence[LevelResult]) -> dict[str, Any]:
    """Flat table of levels plus throughput speedups over the no-SD baseline."""
    rows = []
    for lv in levels:
        o = lv.metrics["overall"]
        load = o["load"]
        row = {
            "config": lv.label,
            "split": lv.split,
            "batch_size": lv.batch_size,
            "output_throughput_tok_s": load["output_throughput_tok_s"],
            "per_user_tok_s": load["per_user_tok_s"],
            "error_rate": load["error_rate"],
            "ttft_p50_s": load["ttft_s"]["p50"],
            "tpot_p50_s": load["tpot_s"]["p50"],
        }
        if "acceptance_stream" in o:
            row["al_stream"] = o["acceptance_stream"]["al_token_weighted"]
            row["al_request_mean"] = o["acceptance_stream"]["al_request_mean"]
            row["conditional_ar"] = o["acceptance_stream"]["conditional_ar"]
        by_cat = lv.metrics["per_category"]
        if "acceptance_stream" in o:
            row["al_by_category"] = {
                cat: entry["acceptance_stream"]["al_token_weighted"]
                for cat, entry in by_cat.items()
            }
        if "acceptance_counters" in o:
            row["al_counters"] = o["acceptance_counters"]["al_token_weighted"]
            row["conditional_ar_counters"] = o["acceptance_counters"]["conditional_ar"]
        if "acceptance_engine_steps" in o:
            row["al_engine_steps"] = o["acceptance_engine_steps"]["al_token_weighted"]
        if "acceptance_server" in o:
            row["al_server"] = o["acceptance_server"]["al"]
        rows.append(row)
    add_speedups(rows)
    fronts = {}
    for label, split in dict.fromkeys((r["config"], r["split"]) for r in rows):
        points = [
            LoadPoint(r["batch_size"], r["per_user_tok_s"], r["output_throughput_tok_s"])
            for r in rows
            if r["config"] == label and r["split"] == split
        ]
        key = label if len({r["split"] for r in rows}) == 1 else f"{label}/{split}"
        fronts[key] = [p.batch_size for p in pareto_front(points)]
    return {"levels": rows, "pareto_batch_sizes": fronts}


def add_speedups(rows: list[dict[str, Any]]) -> None:
    """Set ``speedup`` on SD rows: throughput over the no-SD row of the same split and bs."""
    baseline = {
        (r.get("split", ""), r["batch_size"]): r["output_throughput_tok_s"]
        for r in rows
        if r["config"] == "none"
    }
    for r in rows:
        key = (r.get("split", ""), r["batch_size"])
        if r["config"] != "none" and key in baseline:
            ratio = speedup(
                {r["batch_size"]: r["output_throughput_tok_s"]}, {key[1]: baseline[key]}
            )
            r["speedup"] = ratio.get(r["batch_size"])


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_finite(data), indent=2, sort_keys=True))


def _finite(x: Any) -> Any:
    """NaN/inf -> None, so the JSON is standard."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x
