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
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from speedbench.metrics.pareto import LoadPoint, pareto_front, speedup


class Result(BaseModel):
    """Base of every result model: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")


Figure = float | None
# Where a speedup compares an SD level with the baseline: split, batch size, request rate.
LoadPointKey = tuple[str, int, float | None]


class Interval(Result):
    """A bootstrap confidence interval."""

    value: Figure
    low: Figure
    high: Figure


class Distribution(Result):
    """Mean and percentiles of a latency over requests."""

    mean: Figure
    p50: Figure
    p90: Figure
    p99: Figure
    count: int


class LoadFigures(Result):
    """Throughput and latency of a set of requests."""

    num_requests: int
    num_failed: int
    error_rate: Figure
    output_tokens: int
    duration_s: Figure
    output_throughput_tok_s: Figure
    per_user_tok_s: Figure
    request_throughput_rps: Figure = None  # absent from files written before it
    arrival_rate_rps: Figure = None  # open loop: the rate requests were really due at
    ttft_s: Distribution
    tpot_s: Distribution
    itl_s: Distribution
    e2e_s: Distribution


class AcceptanceFigures(Result):
    """One acceptance view: rates per draft position and acceptance length (AL)."""

    k: int
    num_steps: int
    conditional_ar: list[Figure]
    joint_ar: list[Figure]
    al_token_weighted: Figure
    al_request_mean: Figure
    histogram: list[float]
    al_request_mean_ci: Interval | None = None
    al_token_weighted_ci: Interval | None = None
    requests_with_merged_chunks: int | None = None


class EngineStepFigures(Result):
    """AL from the engine's own per-request verification-step counts (SGLang)."""

    al_token_weighted: Figure
    al_request_mean: Figure
    al_token_weighted_ci: Interval
    requests: int
    steps: int


class ServerFigures(Result):
    """The server's own running AL, as the engine states it."""

    al: Figure


class CounterDelta(Result):
    """The engine's SD counters over a level (after minus before)."""

    num_drafts: float
    num_draft_tokens: float
    num_accepted_tokens: float
    accepted_per_pos: list[float]


class ViewFigures(Result):
    """One named acceptance view (:mod:`speedbench.metrics.views`) of a set of requests."""

    view: Literal["speed_bench", "stream", "engine", "counters"]
    k: int
    units: Literal["questions", "requests", "none"]
    count: int
    num_steps: int
    num_tokens: int
    conditional_ar: list[Figure]
    joint_ar: list[Figure]
    al_token_weighted: Figure
    al_request_mean: Figure
    al_request_mean_ci: Interval | None = None
    al_token_weighted_ci: Interval | None = None
    left_out: dict[str, int] = Field(default_factory=dict)
    per_unit: dict[str, Figure] = Field(default_factory=dict)
    # speed_bench only: SPEED-Bench's rates keyed by observed step length, and failed units.
    conditional_ar_by_length: dict[str, Figure] = Field(default_factory=dict)
    joint_ar_by_length: dict[str, Figure] = Field(default_factory=dict)
    failed_units: list[str] = Field(default_factory=list)


class CategoryFigures(Result):
    """One category's share of a level."""

    load: LoadFigures
    acceptance_stream: AcceptanceFigures | None = None
    views: dict[str, ViewFigures] = Field(default_factory=dict)


class LevelFigures(Result):
    """A level's figures over all its requests, one field per acceptance view."""

    load: LoadFigures
    errors_by_kind: dict[str, int] = Field(default_factory=dict)
    acceptance_stream: AcceptanceFigures | None = None
    acceptance_counters: AcceptanceFigures | None = None
    counters: CounterDelta | None = None
    acceptance_engine_steps: EngineStepFigures | None = None
    acceptance_server: ServerFigures | None = None
    views: dict[str, ViewFigures] = Field(default_factory=dict)


class Competitor(Result):
    """A process that used the host's CPUs during a level."""

    name: str
    pid: int
    cpu_s: float


class HostFigures(Result):
    """What else used the host during a level (:mod:`speedbench.contention`)."""

    wall_s: float
    cores: int
    others_cpu_s: float
    others_fraction: float
    ours_cpu_s: float
    host_busy_s: float
    kernel_cpu_s: float = 0.0
    load_1m: Figure
    competitors: list[Competitor] = Field(default_factory=list)
    other_engines: list[str] = Field(default_factory=list)
    threshold: float
    flagged: bool
    warning: str | None = None
    engine_cpus: str | None = None
    client_cpus: str | None = None


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


class GoodputFigures(Result):
    """Requests that met every latency objective set (:mod:`speedbench.metrics.goodput`)."""

    objectives: dict[str, Figure]
    met: int
    total: int
    rate_rps: Figure
    fraction: Figure


class SpreadFigures(Result):
    """A figure's mean over repeats with its Student-t interval."""

    mean: Figure
    low: Figure
    high: Figure
    count: int


class RepeatFigures(Result):
    """A level measured several times (:mod:`speedbench.metrics.repeats`)."""

    count: int
    confidence: float
    per_repeat: list[dict[str, Figure]]
    spread: dict[str, SpreadFigures]


class LevelMetrics(Result):
    """Everything measured at one level: one SD config, one split, one load point."""

    overall: LevelFigures
    per_category: dict[str, CategoryFigures]
    goodput: GoodputFigures | None = None
    repeats: RepeatFigures | None = None
    client: dict[str, Any] | None = None
    host: HostFigures | None = None
    prefix_cache: PrefixCacheFigures | None = None
    failed: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> LevelMetrics:
        """A level's ``metrics.json``."""
        return cls.model_validate_json(path.read_text())


class MismatchFigures(Result):
    """One SD request whose greedy output differs from the baseline's."""

    prompt_id: str
    turn: int
    first_divergence: int
    baseline_tokens: int
    sd_tokens: int


class LosslessFigures(Result):
    """SD outputs against the no-SD baseline's, token for token (greedy levels only)."""

    compared: int
    matched: int
    match_rate: Figure
    mismatches: list[MismatchFigures] = Field(default_factory=list)


def load_key(batch_size: int, request_rate: float | None) -> str:
    """A load point's name: ``bs4`` (closed loop) or ``rate0.5`` (open loop, requests/s)."""
    return f"bs{batch_size}" if request_rate is None else f"rate{request_rate:g}"


class SummaryRow(Result):
    """One level in a sweep's summary table; acceptance figures are None without SD.

    A closed-loop level has its ``batch_size`` (streams); an open-loop one its
    ``request_rate`` (requests/s), and its ``batch_size`` is the concurrency cap (0: none).
    """

    config: str
    split: str
    batch_size: int
    request_rate: Figure = None
    method: str = "none"
    k: int = 0
    # The engine's drafting shape (chain of k, a tree, a shared n-gram pool); None: not recorded.
    drafting_shape: str | None = None
    # Questions measured on fewer turns than the split has (SPEED-Bench pools all turns).
    questions_on_fewer_turns: int = 0
    output_throughput_tok_s: Figure
    per_user_tok_s: Figure
    error_rate: Figure
    ttft_p50_s: Figure
    tpot_p50_s: Figure
    e2e_p50_s: Figure = None
    request_throughput_rps: Figure = None
    arrival_rate_rps: Figure = None
    # Requests that met the sweep's latency objectives, per second and as a share (None: no SLO).
    goodput_rps: Figure = None
    goodput_fraction: Figure = None
    # More than one repeat: each headline figure's mean and Student-t interval over repeats.
    repeats: int = 1
    spread: dict[str, SpreadFigures] = Field(default_factory=dict)
    al_stream: Figure = None
    al_request_mean: Figure = None
    conditional_ar: list[Figure] | None = None
    al_by_category: dict[str, Figure] = Field(default_factory=dict)
    al_counters: Figure = None
    conditional_ar_counters: list[Figure] | None = None
    al_engine_steps: Figure = None
    al_server: Figure = None
    speedup: Figure = None
    # The no-SD baseline's median end-to-end latency over this level's, at the same load point.
    e2e_speedup: Figure = None
    # SPEED-Bench's own view: Average_AL (mean over questions), its pooled AL, Category_AL.
    al_speed_bench_request_mean: Figure = None
    al_speed_bench: Figure = None
    conditional_ar_speed_bench: list[Figure] | None = None
    al_speed_bench_by_category: dict[str, Figure] = Field(default_factory=dict)
    # Its bootstrap interval over the category's questions (absent with one question).
    al_speed_bench_by_category_ci: dict[str, Interval] = Field(default_factory=dict)
    # Each question's own AL and category (what a paired comparison of two runs needs).
    al_speed_bench_by_question: dict[str, Figure] = Field(default_factory=dict)
    category_of_question: dict[str, str] = Field(default_factory=dict)
    # The engine's own per-request view (vLLM per-request metrics, SGLang spec_verify_ct).
    al_engine: Figure = None
    al_engine_request_mean: Figure = None
    conditional_ar_engine: list[Figure] | None = None
    # Greedy SD levels: outputs against the baseline's at the same split and batch size.
    lossless: LosslessFigures | None = None
    # Other processes' share of the host's CPUs during the level, and whether that was too much.
    host_others_fraction: Figure = None
    host_flagged: bool = False
    host_warning: str | None = None

    @property
    def is_speculative(self) -> bool:
        """Whether this level drafted (the no-SD baseline is labelled ``none``)."""
        return self.config != "none"

    @property
    def open_loop(self) -> bool:
        """Whether requests arrived at a rate (rather than from N closed-loop streams)."""
        return self.request_rate is not None

    @property
    def load(self) -> str:
        """The load point's name, ``bs4`` or ``rate0.5``."""
        return load_key(self.batch_size, self.request_rate)

    @property
    def questions_per_category(self) -> str:
        """``n=5`` when every category has 5 questions, ``n=1-3`` when not ('' if unknown)."""
        counts = Counter(self.category_of_question.values())
        if not counts:
            return ""
        low, high = min(counts.values()), max(counts.values())
        return f"n={low}" if low == high else f"n={low}-{high}"

    @classmethod
    def of(
        cls,
        label: str,
        split: str,
        batch_size: int,
        metrics: LevelMetrics,
        request_rate: float | None = None,
    ) -> SummaryRow:
        """The summary row of a measured level (speedup is set by :func:`summarize_sweep`)."""
        o = metrics.overall
        spec = metrics.config.get("spec") or {}
        row = cls(
            config=label,
            split=split,
            batch_size=batch_size,
            request_rate=request_rate,
            method=spec.get("method", "none"),
            k=spec.get("num_speculative_tokens", 0),
            drafting_shape=metrics.config.get("drafting_shape"),
            questions_on_fewer_turns=metrics.config.get("questions_on_fewer_turns") or 0,
            output_throughput_tok_s=o.load.output_throughput_tok_s,
            per_user_tok_s=o.load.per_user_tok_s,
            error_rate=o.load.error_rate,
            ttft_p50_s=o.load.ttft_s.p50,
            tpot_p50_s=o.load.tpot_s.p50,
            e2e_p50_s=o.load.e2e_s.p50,
            request_throughput_rps=o.load.request_throughput_rps,
            arrival_rate_rps=o.load.arrival_rate_rps,
        )
        if metrics.goodput is not None:
            row.goodput_rps = metrics.goodput.rate_rps
            row.goodput_fraction = metrics.goodput.fraction
        if metrics.repeats is not None:
            row.repeats = metrics.repeats.count
            row.spread = dict(metrics.repeats.spread)
        if o.acceptance_stream:
            row.al_stream = o.acceptance_stream.al_token_weighted
            row.al_request_mean = o.acceptance_stream.al_request_mean
            row.conditional_ar = o.acceptance_stream.conditional_ar
            row.al_by_category = {
                cat: entry.acceptance_stream.al_token_weighted
                for cat, entry in metrics.per_category.items()
                if entry.acceptance_stream
            }
        if o.acceptance_counters:
            row.al_counters = o.acceptance_counters.al_token_weighted
            row.conditional_ar_counters = o.acceptance_counters.conditional_ar
        if o.acceptance_engine_steps:
            row.al_engine_steps = o.acceptance_engine_steps.al_token_weighted
        if o.acceptance_server:
            row.al_server = o.acceptance_server.al
        if sb := o.views.get("speed_bench"):
            row.al_speed_bench_request_mean = sb.al_request_mean
            row.al_speed_bench = sb.al_token_weighted
            row.conditional_ar_speed_bench = sb.conditional_ar
            row.al_speed_bench_by_category = {
                cat: entry.views["speed_bench"].al_request_mean
                for cat, entry in metrics.per_category.items()
                if "speed_bench" in entry.views
            }
            row.al_speed_bench_by_category_ci = {
                cat: ci
                for cat, entry in metrics.per_category.items()
                if "speed_bench" in entry.views
                and len(entry.views["speed_bench"].per_unit) > 1
                and (ci := entry.views["speed_bench"].al_request_mean_ci) is not None
            }
            row.al_speed_bench_by_question = dict(sb.per_unit)
            row.category_of_question = {
                qid: cat
                for cat, entry in metrics.per_category.items()
                if "speed_bench" in entry.views
                for qid in entry.views["speed_bench"].per_unit
            }
        if metrics.host is not None:
            row.host_others_fraction = metrics.host.others_fraction
            row.host_flagged = metrics.host.flagged
            row.host_warning = metrics.host.warning
        if engine := o.views.get("engine"):
            row.al_engine = engine.al_token_weighted
            row.al_engine_request_mean = engine.al_request_mean
            row.conditional_ar_engine = engine.conditional_ar
        return row


class ConfigFailure(Result):
    """An SD configuration that could not be measured (in whole or in part), and why."""

    config: str
    error: str


class BreakEven(Result):
    """Why SD wins or loses at one level: the expected speedup AL / (1 + k c) and the measured.

    AL is tokens per target forward pass (the stream view, prefill left out); c is the cost of
    one draft step relative to one target step: 0 for drafters that run no model (n-gram,
    suffix), else the draft model's TPOT alone over the target's alone at the same batch size.
    The model assumes verifying k + 1 tokens costs one target step; where the measured speedup
    falls short of the expected one, verification (or the engine's SD overhead) costs more.
    """

    config: str
    split: str
    batch_size: int
    k: int
    al_per_step: Figure
    draft_cost_ratio: Figure
    expected_speedup: Figure
    measured_speedup: Figure


MODEL_FREE = ("ngram", "suffix")


def break_even(
    rows: Sequence[SummaryRow], draft_tpot: dict[LoadPointKey, float]
) -> list[BreakEven]:
    """The break-even model of every SD row (``draft_tpot``: speedup key -> draft-alone TPOT)."""
    target_tpot = {speedup_key(r): r.tpot_p50_s for r in rows if not r.is_speculative}
    out = []
    for r in rows:
        if not r.is_speculative:
            continue
        c: float | None = None
        if r.method in MODEL_FREE:
            c = 0.0
        elif (d := draft_tpot.get(speedup_key(r))) and (t := target_tpot.get(speedup_key(r))):
            c = d / t
        al = r.al_stream
        expected = al / (1 + r.k * c) if al is not None and c is not None else None
        out.append(
            BreakEven(
                config=r.config,
                split=r.split,
                batch_size=r.batch_size,
                k=r.k,
                al_per_step=al,
                draft_cost_ratio=c,
                expected_speedup=expected,
                measured_speedup=r.speedup,
            )
        )
    return out


class SweepSummary(Result):
    """A sweep's table of levels, its failures, Pareto fronts and plots."""

    levels: list[SummaryRow]
    status: Literal["running", "finished", "failed", "killed"] = "finished"
    # What the numbers rest on: dtype, engine and its version per config, the CPU they ran on.
    provenance: dict[str, Any] = Field(default_factory=dict)
    # The draft model alone (draft_cost): TPOT p50 by split and batch size, and the model.
    draft_alone: list[SummaryRow] = Field(default_factory=list)
    break_even: list[BreakEven] = Field(default_factory=list)
    failures: list[ConfigFailure] = Field(default_factory=list)
    pareto_batch_sizes: dict[str, list[int]] = Field(default_factory=dict)
    plots: list[str] = Field(default_factory=list)
    parent_run_id: str | None = None
    tracking_uri: str | None = None

    @classmethod
    def read(cls, path: Path) -> SweepSummary:
        """A sweep's ``summary.json``."""
        return cls.model_validate_json(path.read_text())

    def write(self, path: Path) -> Path:
        """Write ``summary.json`` (standard JSON: NaN as null)."""
        write_json(path, self.model_dump(mode="json"))
        return path

    @property
    def many_splits(self) -> bool:
        """Whether the sweep measured more than one split (labels then name the split)."""
        return len({r.split for r in self.levels}) > 1


def speedup_key(row: SummaryRow) -> LoadPointKey:
    """What a speedup compares across: the same split at the same load point."""
    return row.split, row.batch_size, row.request_rate


def with_speedup(row: SummaryRow, rows: Sequence[SummaryRow]) -> SummaryRow:
    """``row`` with its speedups over the no-SD row of ``rows`` at the same split and load.

    The one speedup formula (:func:`speedbench.metrics.pareto.speedup`): SD output throughput
    over no-SD output throughput at the same split and load point; None without a baseline.
    ``e2e_speedup`` is the baseline's median end-to-end latency over the SD level's: at a
    request rate the server keeps up with, throughput follows the arrivals whatever SD does,
    and what SD changes is how long each answer takes.
    """
    key = speedup_key(row)
    base = next((r for r in rows if not r.is_speculative and speedup_key(r) == key), None)
    update: dict[str, float | None] = {"speedup": None, "e2e_speedup": None}
    if row.is_speculative and base is not None:
        if base.output_throughput_tok_s is not None and row.output_throughput_tok_s is not None:
            update["speedup"] = speedup(
                {key: row.output_throughput_tok_s}, {key: base.output_throughput_tok_s}
            ).get(key)
        if base.e2e_p50_s and row.e2e_p50_s:
            update["e2e_speedup"] = base.e2e_p50_s / row.e2e_p50_s
    return row.model_copy(update=update)


def summarize_sweep(
    rows: Sequence[SummaryRow], failures: Sequence[ConfigFailure] = ()
) -> SweepSummary:
    """The sweep summary: rows with their speedup over the no-SD row of the same split and bs.

    Every entry point (CLI, Prefect flow, DVC stage) gets its speedups here, by
    :func:`with_speedup`; rows without a measured baseline keep ``speedup`` None.
    """
    levels = [with_speedup(r, rows) for r in rows]
    many = len({r.split for r in levels}) > 1
    fronts: dict[str, list[int]] = {}
    for label, split in dict.fromkeys((r.config, r.split) for r in levels if not r.open_loop):
        points = [
            LoadPoint(r.batch_size, r.per_user_tok_s or 0.0, r.output_throughput_tok_s or 0.0)
            for r in levels
            if r.config == label and r.split == split and not r.open_loop
        ]
        fronts[f"{label}/{split}" if many else label] = [p.batch_size for p in pareto_front(points)]
    return SweepSummary(levels=levels, failures=list(failures), pareto_batch_sizes=fronts)


CATEGORY_NAMESPACE = "by_category"
REPEATS_NAMESPACE = "repeats"


def tracking_scalars(metrics: LevelMetrics) -> tuple[dict[str, float], dict[str, list[float]]]:
    """A level as scalar metrics and per-position series for a tracker.

    Scalars: acceptance lengths of every view, named ``al_<view>`` (token-weighted) and
    ``al_<view>_request_mean`` (``al_speed_bench_request_mean`` is SPEED-Bench's Average_AL),
    plus ``al_engine_steps`` and ``al_server`` where the engine gives them; throughput,
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
    for view in ("stream", "counters"):
        acc: AcceptanceFigures | None = getattr(overall, f"acceptance_{view}")
        if acc is None:
            continue
        scalars[f"al_{view}"] = acc.al_token_weighted
        scalars[f"al_{view}_request_mean"] = acc.al_request_mean
        series[f"conditional_ar_{view}"] = [_nan(v) for v in acc.conditional_ar]
        series[f"joint_ar_{view}"] = [_nan(v) for v in acc.joint_ar]
    if steps := overall.acceptance_engine_steps:
        scalars["al_engine_steps"] = steps.al_token_weighted
        scalars["al_engine_steps_request_mean"] = steps.al_request_mean
    if server := overall.acceptance_server:
        scalars["al_server"] = server.al
    for name in ("speed_bench", "engine"):
        if view := overall.views.get(name):
            scalars[f"al_{name}"] = view.al_token_weighted
            scalars[f"al_{name}_request_mean"] = view.al_request_mean
            series[f"conditional_ar_{name}"] = [_nan(v) for v in view.conditional_ar]
            series[f"joint_ar_{name}"] = [_nan(v) for v in view.joint_ar]
    for kind, count in overall.errors_by_kind.items():
        scalars[f"errors_{kind}"] = count
    client = metrics.client or {}
    for name in ("loop_lag", "chunk_delay"):
        if client.get(name):
            scalars[f"client_{name}_p99_ms"] = client[name]["p99_ms"]
    if client.get("cpu_fraction"):
        scalars["client_cpu_max"] = max(client["cpu_fraction"])
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
