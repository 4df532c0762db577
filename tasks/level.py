"""Tasks that measure one load level and record it in MLflow.

A level is not retried: a level that failed half-way should show as failed, not be silently
averaged with a second attempt. Logging to MLflow is retried, since SQLite can be briefly locked.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from speedbench.engines.running import RunningEngine
from speedbench.results import tracking_scalars
from speedbench.run.level import LevelResult, measure_level
from speedbench.sweep_summary import SummaryRow, load_key
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings, WorkItem
from tasks.tracking import Tracker

# What a level's run carries, and what a host without its folder fetches to resume it.
LEVEL_ARTIFACTS = ("records.parquet", "metrics.json")


@task(cache_policy=NO_CACHE)
def run_level(
    running: RunningEngine,
    items: list[WorkItem],
    settings: LoadSettings,
    tokenizer: PromptTokenizer | None,
    directory: Path,
) -> LevelResult:
    """Drive ``items`` at the level's load point (streams or a rate); records land on disk."""
    return measure_level(running, items, settings, tokenizer, directory)


@task(cache_policy=NO_CACHE)
def run_grid_point(measure: Callable[[], dict[str, LevelResult]]) -> dict[str, LevelResult]:
    """One grid point's configs in alternating rounds (speedbench.run.interleave), as one task.

    Not retried, as a level is not: a round lost half-way shows as a failed level.
    """
    return measure()


@task(retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def log_level(
    tracker: Tracker,
    parent_id: str,
    level: LevelResult,
    identity: dict[str, Any],
    config_hash: str,
    extra_params: dict[str, Any],
    row: SummaryRow,
    engine_log: Path | None = None,
) -> str:
    """A child run with the level's metrics, AR series and artifacts.

    A level during which the engine died (``level.failed``) is logged FAILED, with its
    partial records and metrics, the error (quoting the engine log) and the log itself.
    """
    scalars, series = tracking_scalars(level.metrics)
    for name in ("speedup", "e2e_speedup", "drift", "baseline_drift"):
        if (value := getattr(row, name)) is not None:
            scalars[name] = value
    if (paired := row.speedup_interval) is not None:  # speedbench.metrics.paired
        bounds = {"": paired.mean, "_low": paired.low, "_high": paired.high}
        scalars |= {f"speedup_paired{end}": v for end, v in bounds.items() if v is not None}
    if row.speedup_rounds:  # each round's ratio, stepped by round
        series["speedup_round"] = list(row.speedup_rounds)
    if row.lossless is not None and row.lossless.match_rate is not None:
        scalars["lossless_match_rate"] = row.lossless.match_rate
    name = f"{level.label} {level.split} {load_key(level.batch_size, level.request_rate)}"
    files = [level.directory / name for name in LEVEL_ARTIFACTS]
    failed = level.failed
    if failed and engine_log is not None:
        files.append(engine_log)
    duration = level.metrics.overall.load.duration_s
    return tracker.log_config(
        parent_id,
        name,
        identity,
        config_hash,
        scalars,
        series,
        files,
        extra_params,
        duration_s=duration,
        status="FAILED" if failed else "FINISHED",
        error=failed or None,
        tags={"speedbench.host_warning": row.host_warning} if row.host_warning else None,
    )


@task(retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def log_failure(
    tracker: Tracker,
    parent_id: str,
    name: str,
    identity: dict[str, Any],
    config_hash: str,
    error: str,
    artifacts: list[Path],
) -> str:
    """A FAILED child run carrying the error (with the engine log tail) and the log file."""
    return tracker.log_config(
        parent_id, name, identity, config_hash, {}, {}, artifacts, status="FAILED", error=error
    )
