"""The figure types that both the metrics and the results files carry: one shape per concept.

The metrics layer computes these objects (a level's as one :class:`LevelSummary`, from
:func:`speedbench.metrics.summary.summarize_level`) and the typed results
(:mod:`speedbench.results`) store the same objects; nothing converts one shape into another in
between. A figure that is undefined (no request, no drafted step) is NaN as the metrics compute
it and ``null`` in JSON (:func:`speedbench.results.write_json`); a level's ``LevelMetrics`` holds
None there, as it reads back from its file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

Figure = float | None
# Latency percentiles a Distribution reports.
PERCENTILES = (50, 90, 99)


class Result(BaseModel):
    """Base of every result model: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")


class Interval(Result):
    """A point estimate with a two-sided confidence interval (a bootstrap's, or Student's t)."""

    value: Figure
    low: Figure
    high: Figure
    # The interval's coverage; not written to results files (every stored one is 95 %).
    confidence: float = Field(default=0.95, exclude=True)

    @classmethod
    def undefined(cls, confidence: float = 0.95) -> Interval:
        """No estimate: every figure NaN."""
        return cls(value=math.nan, low=math.nan, high=math.nan, confidence=confidence)


class Distribution(Result):
    """Mean and percentiles of a sample, e.g. a latency over requests (NaN when empty)."""

    mean: Figure
    p50: Figure
    p90: Figure
    p99: Figure
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        """Summarise ``values``, ignoring NaNs."""
        arr = np.asarray([v for v in values if not np.isnan(v)], dtype=float)
        if arr.size == 0:
            nan = math.nan
            return cls(mean=nan, p50=nan, p90=nan, p99=nan, count=0)
        p = np.percentile(arr, PERCENTILES)
        return cls(
            mean=float(arr.mean()),
            p50=float(p[0]),
            p90=float(p[1]),
            p99=float(p[2]),
            count=int(arr.size),
        )


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


class SpreadFigures(Result):
    """A figure's mean over repeats with its Student-t interval."""

    mean: Figure
    low: Figure
    high: Figure
    count: int


class SpecCounters(Result):
    """An engine's speculative-decoding counters, in vLLM's names.

    Read cumulative from the engine's metrics; a level's are the difference of the reads after
    and before it (``after - before``), and that difference is what a level's results store.

    Attributes:
        num_drafts: Verification steps that carried a draft.
        num_draft_tokens: Draft tokens proposed.
        num_accepted_tokens: Draft tokens accepted.
        accepted_per_pos: Accepted tokens at draft position 0..k-1 (empty where the engine
            reports totals only: TensorRT-LLM).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_drafts: float = 0.0
    num_draft_tokens: float = 0.0
    num_accepted_tokens: float = 0.0
    accepted_per_pos: tuple[float, ...] = ()

    def __sub__(self, before: SpecCounters) -> SpecCounters:
        n = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        a = list(self.accepted_per_pos) + [0.0] * (n - len(self.accepted_per_pos))
        b = list(before.accepted_per_pos) + [0.0] * (n - len(before.accepted_per_pos))
        return SpecCounters(
            num_drafts=self.num_drafts - before.num_drafts,
            num_draft_tokens=self.num_draft_tokens - before.num_draft_tokens,
            num_accepted_tokens=self.num_accepted_tokens - before.num_accepted_tokens,
            accepted_per_pos=tuple(x - y for x, y in zip(a, b, strict=True)),
        )

    def __add__(self, other: SpecCounters) -> SpecCounters:
        negated = SpecCounters(
            num_drafts=-other.num_drafts,
            num_draft_tokens=-other.num_draft_tokens,
            num_accepted_tokens=-other.num_accepted_tokens,
            accepted_per_pos=tuple(-x for x in other.accepted_per_pos),
        )
        return self - negated


class OutputMismatch(Result):
    """One SD request whose greedy output differs from the baseline's."""

    prompt_id: str
    turn: int
    first_divergence: int
    baseline_tokens: int
    sd_tokens: int


class LosslessFigures(Result):
    """SD outputs against the no-SD baseline's, token for token (``metrics.lossless``)."""

    compared: int
    matched: int
    # matched / compared; None when nothing could be compared.
    match_rate: Figure
    mismatches: list[OutputMismatch] = Field(default_factory=list)


class Competitor(Result):
    """A process that used the host's CPUs during a level."""

    name: str
    pid: int
    cpu_s: float


class HostFigures(Result):
    """What else used the host during a level (:mod:`speedbench.hostcheck.contention`).

    ``others_fraction`` is the others' CPU time as a fraction of the machine (all its cores, or
    the engine's when it is bound) over the level; a level is ``flagged`` when that is above
    ``threshold`` or another engine ran, and ``warning`` then names them in one line.
    """

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
    # Interleaved grids: CPU time of the sweep's other resident engines while this one ran
    # (included in others_cpu_s; near 0 when idle engines do not spin). None: none resident.
    sibling_cpu_s: Figure = None
    threshold: float
    flagged: bool
    warning: str | None = None
    engine_cpus: str | None = None
    client_cpus: str | None = None


# The acceptance views by name, in the order every report lists them (each declares its rule
# and presentation in speedbench.metrics.views.VIEW_SPECS): a new view is named here once.
ViewName = Literal["speed_bench", "stream", "engine", "counters", "server"]


class ViewFigures(Result):
    """One named acceptance view (:mod:`speedbench.metrics.views`) of a set of requests.

    Attributes:
        view: Which rule produced it.
        k: Draft length.
        units: What was averaged for ``al_request_mean``: questions, requests or none.
        count: How many of those units entered (0 for counters).
        num_steps: Steps counted under this view's rule.
        num_tokens: Tokens those steps emitted (under this view's rule).
        conditional_ar: Conditional AR per draft position 1..k (NaN where undefined).
        joint_ar: P(accepted >= j) per position 1..k, the running product of the above.
        al_token_weighted: ``num_tokens / num_steps``, pooled.
        al_request_mean: Mean of each unit's own AL (SPEED-Bench's Average_AL in its view).
        al_request_mean_ci: Bootstrap interval of the request mean, over units.
        al_token_weighted_ci: Bootstrap interval of the pooled AL, over units.
        left_out: Units left out, and why (failed, merged chunks, no steps).
        per_unit: Each unit's own AL, by question id (speed_bench; ``<id>@r<n>`` for repeat
            n > 0) or request id: what a paired comparison of two runs over the same prompts
            needs.
        conditional_ar_by_length: speed_bench only: SPEED-Bench's conditional AR keyed by
            observed step length (as a string, for JSON).
        joint_ar_by_length: speed_bench only: its running product, keyed the same way.
        failed_units: The ids of the units left out as failed.

    ``server`` is the engine's own running AL as it states it (SGLang's
    ``avg_spec_accept_length``): one figure, ``al_token_weighted``, and nothing per request.
    """

    view: ViewName
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
    conditional_ar_by_length: dict[str, Figure] = Field(default_factory=dict)
    joint_ar_by_length: dict[str, Figure] = Field(default_factory=dict)
    failed_units: list[str] = Field(default_factory=list)


class CategoryFigures(Result):
    """One category's share of a level."""

    load: LoadFigures
    views: dict[str, ViewFigures] = Field(default_factory=dict)


class LevelFigures(Result):
    """A level's figures over all its requests: load, errors, raw SD counters, named views."""

    load: LoadFigures
    errors_by_kind: dict[str, int] = Field(default_factory=dict)
    counters: SpecCounters | None = None
    views: dict[str, ViewFigures] = Field(default_factory=dict)


class GoodputFigures(Result):
    """Requests that met every latency objective set (:mod:`speedbench.metrics.goodput`)."""

    objectives: dict[str, Figure]
    met: int
    total: int
    rate_rps: Figure
    fraction: Figure


class RepeatFigures(Result):
    """A level measured several times (:mod:`speedbench.metrics.repeats`)."""

    count: int
    confidence: float
    per_repeat: list[dict[str, Figure]]
    spread: dict[str, SpreadFigures]


class DelayFigures(Result):
    """A sample of delays in milliseconds: how many, median, p99 and the worst."""

    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float


class ClientFigures(Result):
    """The client's measure of itself over a level (:mod:`speedbench.client.selfmeasure`).

    Attributes:
        workers: Client processes that drove the level.
        loop_lag: How late a 5 ms sleep of the event loop woke (bounds a chunk's read delay).
        chunk_delay: Socket read time minus the server's send stamp, per chunk (where the
            server stamps chunks: the synthetic calibration server).
        cpu_fraction: Each worker's CPU time over the level's wall time.
        arrival_lag: Open loop only: how late each request was sent after it was due.
        warning: One line when the client, not the engine, may have set the pace.
        per_repeat: A level measured several times: each repeat's own figures.
    """

    workers: int
    loop_lag: DelayFigures | None = None
    chunk_delay: DelayFigures | None = None
    cpu_fraction: list[float] = Field(default_factory=list)
    arrival_lag: DelayFigures | None = None
    warning: str | None = None
    per_repeat: list[ClientFigures] | None = None


class LevelSummary(Result):
    """The figures of one level's requests (:func:`speedbench.metrics.summary.summarize_level`)."""

    overall: LevelFigures
    per_category: dict[str, CategoryFigures]
    goodput: GoodputFigures | None = None
    repeats: RepeatFigures | None = None
