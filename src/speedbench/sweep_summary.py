"""A sweep's summary: one row per measured level, its speedups, its failures and its fronts.

What the CLI, the Prefect flow and the DVC stages all write as ``summary.json`` and the reports,
MLflow and ``verify-reference`` read. Each row takes its figures from the level's
``metrics.json`` (:mod:`speedbench.results`), its acceptance as named views
(:class:`ViewSummary`), and its speedup by the one formula (:func:`with_speedup`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from speedbench.config import MODEL_FREE_METHODS
from speedbench.figures import (
    Figure,
    Interval,
    LosslessFigures,
    Result,
    SpreadFigures,
    ViewFigures,
)
from speedbench.metrics.paired import drift, paired_ratios, paired_speedup, round_throughputs
from speedbench.metrics.pareto import LoadPoint, pareto_front, speedup
from speedbench.provenance import SweepProvenance
from speedbench.results import (
    SCHEMA_VERSION,
    CategoryAL,
    LevelMetrics,
    LoadPointKey,
    QuestionAL,
    read_versioned,
    write_json,
)


class ViewSummary(Result):
    """One named view's figures of a level: the one shape every consumer reads.

    ``SummaryRow.views``, the stage's ``acceptance.json`` (without the intervals), the MLflow
    scalars, the report and verify-reference all read this type, keyed by view name
    (:data:`speedbench.metrics.views.VIEWS`). A figure the view does not define is None.
    """

    al_request_mean: Figure = None
    al_token_weighted: Figure = None
    al_request_mean_ci: Interval | None = None
    # Per draft position 1..k (speedbench's per-position form).
    conditional_ar: list[Figure] | None = None
    joint_ar: list[Figure] | None = None
    # speed_bench only: SPEED-Bench's conditional AR keyed by observed step length.
    conditional_ar_by_length: dict[str, Figure] | None = None
    # Units averaged for the request mean (questions for speed_bench, requests otherwise).
    count: int | None = None
    by_category: dict[str, CategoryAL] = Field(default_factory=dict)
    # speed_bench only: every question's own AL (verify-reference's paired test).
    questions: dict[str, QuestionAL] = Field(default_factory=dict)

    @classmethod
    def of(cls, view: ViewFigures, per_category: dict[str, ViewFigures]) -> ViewSummary:
        """The summary of a view and its per-category views.

        Args:
            view: The level's figures under the view.
            per_category: Each category's figures under the same view.
        """
        has_ar = any(a is not None for a in view.conditional_ar)  # none for server, SGLang
        has_units = view.units != "none"

        def category(c: ViewFigures) -> CategoryAL:
            many = len(c.per_unit) > 1
            return CategoryAL(
                al_request_mean=c.al_request_mean if has_units else None,
                al_token_weighted=c.al_token_weighted,
                al_request_mean_ci=c.al_request_mean_ci if many else None,
                count=c.count if has_units else None,
            )

        questions = {}
        if view.view == "speed_bench":
            questions = {
                qid: QuestionAL(category=cat, al=al)
                for cat, c in sorted(per_category.items())
                for qid, al in sorted(c.per_unit.items())
            }
        return cls(
            al_request_mean=view.al_request_mean if has_units else None,
            al_token_weighted=view.al_token_weighted,
            al_request_mean_ci=view.al_request_mean_ci if has_units else None,
            conditional_ar=list(view.conditional_ar) if has_ar else None,
            joint_ar=list(view.joint_ar) if has_ar else None,
            conditional_ar_by_length=dict(view.conditional_ar_by_length) or None,
            count=view.count if has_units else None,
            by_category={name: category(c) for name, c in sorted(per_category.items())},
            questions=questions,
        )

    def figures(self) -> dict[str, Any]:
        """The view as ``acceptance.json`` holds it: no intervals, nothing undefined."""
        return self.model_dump(
            mode="json",
            exclude_defaults=True,
            exclude={
                "al_request_mean_ci": True,
                "by_category": {"__all__": {"al_request_mean_ci"}},
            },
        )


def view_summaries(
    views: dict[str, ViewFigures], per_category: dict[str, dict[str, ViewFigures]]
) -> dict[str, ViewSummary]:
    """Every view of a level as :class:`ViewSummary`, from its overall and per-category views.

    Args:
        views: The level's views by name.
        per_category: Category -> that category's views by name.
    """
    return {
        name: ViewSummary.of(
            view, {c: by_view[name] for c, by_view in per_category.items() if name in by_view}
        )
        for name, view in views.items()
    }


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
    # How the repeats were timed against the grid point's other configs (off: back to back;
    # resident, relaunch: alternating rounds, speedbench.run.interleave).
    interleave: str = "off"
    # Repeat (round) index -> that repeat's output throughput (tok/s); empty with one repeat.
    round_throughput_tok_s: dict[int, float] = Field(default_factory=dict)
    # Range of the per-round throughput over its mean: the host's drift over the level's rounds.
    drift: Figure = None
    # Every acceptance view of the level by name (docs/acceptance-views.md); empty without SD.
    views: dict[str, ViewSummary] = Field(default_factory=dict)
    speedup: Figure = None
    # SD levels with rounds: the speedup paired round by round with the baseline's (geometric
    # mean and t interval over rounds, speedbench.metrics.paired), each round's ratio, how
    # the rounds were paired (interleaved: in one window; sequential: rounds of levels measured
    # apart, so drift is not cancelled), and the baseline's drift over its rounds.
    speedup_interval: SpreadFigures | None = None
    speedup_rounds: list[float] = Field(default_factory=list)
    speedup_pairing: Literal["interleaved", "sequential"] | None = None
    baseline_drift: Figure = None
    # The no-SD baseline's median end-to-end latency over this level's, at the same load point.
    e2e_speedup: Figure = None
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

    def figure(self, view: str, name: str) -> Any:
        """One figure of one view; None where the level lacks the view or the view the figure.

        ``figure("speed_bench", "al_request_mean")`` is SPEED-Bench's Average_AL.
        """
        summary = self.views.get(view)
        return None if summary is None else getattr(summary, name)

    @property
    def average_al(self) -> Figure:
        """SPEED-Bench's Average_AL: the speed_bench view's mean over questions."""
        return self.figure("speed_bench", "al_request_mean")

    @property
    def category_al(self) -> dict[str, Figure]:
        """SPEED-Bench's Category_AL per category (speed_bench view, mean over questions)."""
        view = self.views.get("speed_bench")
        return {} if view is None else {c: f.al_request_mean for c, f in view.by_category.items()}

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
        """``n=5`` when every category has 5 questions, ``n=1-3`` when not ('' if unknown).

        The speed_bench view's units are question runs (``q@r1`` is q's second round); a level
        measured in rounds counts its questions once and says how many rounds each ran, since
        the rounds of one greedy question are not more questions.
        """
        view = self.views.get("speed_bench")
        units = view.questions if view else {}
        questions = {uid.split("@r")[0]: q.category for uid, q in units.items()}
        counts = Counter(questions.values())
        if not counts:
            return ""
        low, high = min(counts.values()), max(counts.values())
        text = f"n={low}" if low == high else f"n={low}-{high}"
        rounds = len(units) // len(questions)
        return text if rounds <= 1 else f"{text}, {rounds} rounds"

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
        spec = metrics.config.spec
        row = cls(
            config=label,
            split=split,
            batch_size=batch_size,
            request_rate=request_rate,
            method=spec.method,
            k=spec.num_speculative_tokens,
            drafting_shape=metrics.config.drafting_shape,
            questions_on_fewer_turns=metrics.config.questions_on_fewer_turns,
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
        row.interleave = metrics.config.interleave
        if metrics.repeats is not None:
            row.repeats = metrics.repeats.count
            row.spread = dict(metrics.repeats.spread)
            row.round_throughput_tok_s = round_throughputs(metrics.repeats.per_repeat)
            row.drift = drift(row.round_throughput_tok_s)
        row.views = view_summaries(
            o.views, {c: entry.views for c, entry in metrics.per_category.items()}
        )
        if metrics.host is not None:
            row.host_others_fraction = metrics.host.others_fraction
            row.host_flagged = metrics.host.flagged
            row.host_warning = metrics.host.warning
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
        if r.method in MODEL_FREE_METHODS:
            c = 0.0
        elif (d := draft_tpot.get(speedup_key(r))) and (t := target_tpot.get(speedup_key(r))):
            c = d / t
        al = r.figure("stream", "al_token_weighted")
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
    # What the numbers rest on: dtype, engine and its version per config, the CPU, the protocol.
    provenance: SweepProvenance = Field(default_factory=SweepProvenance)
    # The draft model alone (draft_cost): TPOT p50 by split and batch size, and the model.
    draft_alone: list[SummaryRow] = Field(default_factory=list)
    break_even: list[BreakEven] = Field(default_factory=list)
    failures: list[ConfigFailure] = Field(default_factory=list)
    pareto_batch_sizes: dict[str, list[int]] = Field(default_factory=dict)
    plots: list[str] = Field(default_factory=list)
    parent_run_id: str | None = None
    tracking_uri: str | None = None
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def read(cls, path: Path) -> SweepSummary:
        """A sweep's ``summary.json`` (:class:`StaleResults` if another schema wrote it)."""
        return cls.model_validate(read_versioned(path))

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
    update: dict[str, Any] = {
        "speedup": None,
        "e2e_speedup": None,
        "speedup_interval": None,
        "speedup_rounds": [],
        "speedup_pairing": None,
        "baseline_drift": None,
    }
    if row.is_speculative and base is not None:
        sd_rounds, base_rounds = row.round_throughput_tok_s, base.round_throughput_tok_s
        if interval := paired_speedup(sd_rounds, base_rounds):
            both = row.interleave != "off" and base.interleave != "off"
            update.update(
                speedup_interval=interval,
                speedup_rounds=paired_ratios(sd_rounds, base_rounds),
                speedup_pairing="interleaved" if both else "sequential",
                baseline_drift=base.drift,
            )
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
