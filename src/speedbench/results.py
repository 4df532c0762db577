"""Typed results: what one measured level and one sweep produce, from metrics to report.

The metrics layer computes plain figures; these models give them one schema that every
consumer reads: the level's ``metrics.json``, the sweep's ``summary.json``, the MLflow scalars
(:func:`tracking_scalars`), the DVC metrics files and the report. Nothing downstream parses a
string key back into a meaning. Every model forbids unknown fields, so a renamed figure fails
loudly where it is read instead of silently reading as missing.

Floats are ``float | None``: a figure that is undefined for a level (no drafted step, no
successful request) is NaN in memory and ``null`` in JSON.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import Field

from speedbench.config import SpecConfig
from speedbench.figures import (
    ClientFigures,
    Distribution,
    Figure,
    HostFigures,
    Interval,
    LevelSummary,
    Result,
)

# The shape of every results file speedbench writes (a level's metrics.json, a sweep's
# summary.json, a stage's acceptance.json / throughput.json / oracle.json / provenance.json).
# 1: files without the key (acceptance beside the views in per-view fields); 2: acceptance
# only as named views (``views: {view: figures}``), stage files as ``{"levels": ...}``.
SCHEMA_VERSION = 2


class StaleResults(ValueError):
    """A results file written in another schema than this speedbench reads."""


def read_versioned(path: Path) -> dict[str, Any]:
    """A results file's JSON, refused in one line if its schema is not :data:`SCHEMA_VERSION`.

    Raises:
        StaleResults: The file was written by another speedbench (its schema named).
    """
    data = json.loads(path.read_text())
    version = data.get("schema_version", 1) if isinstance(data, dict) else 1
    if version != SCHEMA_VERSION:
        raise StaleResults(
            f"{path}: results schema {version}, this speedbench reads {SCHEMA_VERSION}; "
            "measure it again (a sweep re-measures such levels by itself)"
        )
    return data


# Where a speedup compares an SD level with the baseline: split, batch size, request rate.
LoadPointKey = tuple[str, int, float | None]


class PrefixCacheFigures(Result):
    """The engine's prefix cache over a level: what applied, and what the engine reported.

    ``mode`` is ``reset`` (emptied before the level), ``keep`` or ``off``. The token counts are
    the engine's own counters over the level (vLLM's ``prefix_cache_queries``/``hits``), absent
    where the engine does not report them; with ``reset``, hits come only from prompts within
    the level sharing a prefix (turns of one conversation, a common system prompt).
    """

    mode: str
    query_tokens: float | None = None
    hit_tokens: float | None = None


class LevelConfig(Result):
    """What one level ran, written beside its figures: the inputs, not a measurement.

    Attributes:
        engine: The engine's config as saved: no environment, credentials redacted
            (:func:`speedbench.secrets.redacted_engine`).
        spec: The SD configuration.
        drafting_shape: What this engine drafts for ``spec``, in words (the same method and k
            are not the same drafter on every engine).
        eos_token_id: The EOS the speed_bench view cut from each turn's last step (None: none
            was cut, the level ran with ``ignore_eos``).
        questions: Questions sent.
        questions_on_fewer_turns: Of those, sent with fewer turns than the split has (first
            turns only): SPEED-Bench's figure pools every turn, so their ALs are not its figure.
        warmup_requests, repeats: Requests sent before the measured ones; measured passes.
        interleave: How the level's repeats were timed against the other configs' at the
            same grid point (``off``: back to back; :mod:`speedbench.run.interleave`).
        request_rate, arrival, burstiness, max_concurrency: The open loop (None: closed).
        objectives: Goodput's latency objectives by name (None: no goodput).
    """

    engine: dict[str, Any] = Field(default_factory=dict)
    spec: SpecConfig = Field(default_factory=SpecConfig)
    drafting_shape: str | None = None
    eos_token_id: int | None = None
    questions: int | None = None
    questions_on_fewer_turns: int = 0
    batch_size: int | None = None
    max_tokens: int | None = None
    temperature: float = 0.0
    split: str | None = None
    warmup_requests: int = 0
    repeats: int = 1
    interleave: str = "off"
    request_rate: float | None = None
    arrival: str | None = None
    burstiness: float | None = None
    max_concurrency: int | None = None
    objectives: dict[str, float] | None = None


class LevelMetrics(LevelSummary):
    """Everything measured at one level: one SD config, one split, one load point.

    The figures of its requests (:class:`~speedbench.figures.LevelSummary`), and what the run
    around them saw: the client's own health, the host, the prefix cache, a failure, the config.
    """

    client: ClientFigures | None = None
    host: HostFigures | None = None
    prefix_cache: PrefixCacheFigures | None = None
    failed: str | None = None
    config: LevelConfig = Field(default_factory=LevelConfig)
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def read(cls, path: Path) -> LevelMetrics:
        """A level's ``metrics.json`` (:class:`StaleResults` if another schema wrote it)."""
        return cls.model_validate(read_versioned(path))


class CategoryAL(Result):
    """One category's acceptance length under one view.

    ``al_request_mean`` is the mean of its units' own AL (SPEED-Bench's Category_AL in the
    ``speed_bench`` view, where the units are questions); ``al_token_weighted`` pools its steps.
    """

    al_request_mean: Figure = None
    al_token_weighted: Figure = None
    # Bootstrap interval of the request mean over the category's units (None with one unit).
    al_request_mean_ci: Interval | None = None
    count: int | None = None


class QuestionAL(Result):
    """One question's own AL and its category: what a paired comparison of two runs needs."""

    category: str
    al: Figure


CATEGORY_NAMESPACE = "by_category"
REPEATS_NAMESPACE = "repeats"


def tracking_scalars(metrics: LevelMetrics) -> tuple[dict[str, float], dict[str, list[float]]]:
    """A level as scalar metrics and per-position series for a tracker.

    Scalars: acceptance lengths of every view, named ``al_<view>`` (token-weighted) and
    ``al_<view>_request_mean`` (``al_speed_bench_request_mean`` is SPEED-Bench's Average_AL;
    ``al_server`` is the engine's own running AL where it states one); throughput,
    per-user speed, error rate, TTFT/TPOT/ITL/E2E percentiles, error counts and the client's
    self-measurement. Per-category figures live in their own namespace,
    ``by_category/<category>/al_<view>[_request_mean]`` for every view the category has
    (``al_speed_bench_request_mean`` there is SPEED-Bench's Category_AL), so no category name
    can collide with a figure.
    With goodput objectives, ``goodput_rps`` and ``goodput_fraction``; with repeats, each
    headline figure's mean and interval bounds as ``repeats/<figure>/<mean|low|high>``.
    Series (step = draft position j, from 1): conditional and joint acceptance rates of every
    view that has them.
    """
    overall = metrics.overall
    load = overall.load
    scalars: dict[str, float | None] = {
        "output_throughput_tok_s": load.output_throughput_tok_s,
        "request_throughput_rps": load.request_throughput_rps,
        "per_user_tok_s": load.per_user_tok_s,
        "error_rate": load.error_rate,
        "num_requests": load.num_requests,
        "output_tokens": load.output_tokens,
    }
    for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        dist: Distribution = getattr(load, name)
        for q in ("p50", "p90", "p99"):
            scalars[f"{name.removesuffix('_s')}_{q}_s"] = getattr(dist, q)
    series: dict[str, list[float]] = {}
    for name, view in overall.views.items():
        scalars[f"al_{name}"] = view.al_token_weighted
        scalars[f"al_{name}_request_mean"] = view.al_request_mean
        if any(v is not None for v in view.conditional_ar):
            series[f"conditional_ar_{name}"] = [_nan(v) for v in view.conditional_ar]
            series[f"joint_ar_{name}"] = [_nan(v) for v in view.joint_ar]
    for kind, count in overall.errors_by_kind.items():
        scalars[f"errors_{kind}"] = count
    if client := metrics.client:
        for name, delays in (("loop_lag", client.loop_lag), ("chunk_delay", client.chunk_delay)):
            if delays:
                scalars[f"client_{name}_p99_ms"] = delays.p99_ms
        if client.cpu_fraction:
            scalars["client_cpu_max"] = max(client.cpu_fraction)
    if host := metrics.host:
        scalars["host_others_cpu_fraction"] = host.others_fraction
        scalars["host_load_1m"] = host.load_1m
        scalars["host_flagged"] = float(host.flagged)
    if good := metrics.goodput:
        scalars["goodput_rps"] = good.rate_rps
        scalars["goodput_fraction"] = good.fraction
    if repeats := metrics.repeats:
        scalars["repeats"] = repeats.count
        for figure, spread in repeats.spread.items():
            for end in ("mean", "low", "high"):
                scalars[f"{REPEATS_NAMESPACE}/{figure}/{end}"] = getattr(spread, end)
    if (cache := metrics.prefix_cache) and cache.hit_tokens is not None:
        scalars["prefix_cache_hit_tokens"] = cache.hit_tokens
    for cat, entry in metrics.per_category.items():
        for name, view in entry.views.items():
            scalars[f"{CATEGORY_NAMESPACE}/{cat}/al_{name}"] = view.al_token_weighted
            scalars[f"{CATEGORY_NAMESPACE}/{cat}/al_{name}_request_mean"] = view.al_request_mean
    finite = {k: float(v) for k, v in scalars.items() if v is not None and math.isfinite(v)}
    return finite, series


def _nan(v: float | None) -> float:
    return float("nan") if v is None else v


def write_json(path: Path, data: Any) -> None:
    """Write standard JSON (NaN and infinities as null), creating parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(finite(data), indent=2, sort_keys=True))


def finite(x: Any) -> Any:
    """NaN/inf -> None, recursively, so the JSON is standard."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    return x
