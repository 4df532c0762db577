"""Which k at which batch size: calibrate step costs, predict every k, check, write a schedule.

After the oracle has replayed a baseline under a drafter (:mod:`speedbench.oracle.predict`),
:func:`speedup_model` answers the question every SD deployment asks:

1. **Calibrate** what an engine iteration costs on this host (:mod:`speedbench.oracle.steptime`)
   from the no-SD levels the sweep measured anyway (the target), the draft-alone levels (the
   draft's cost per token) and the draft-model SD levels (what a draft pass costs inside the
   engine, which the draft served alone does not tell). Every input level is named.
2. **Predict** the speedup of every k = 0 (SD off) .. K at every batch size the sweep
   measured, replaying that level's own requests in a closed loop with the oracle's steps
   (:mod:`speedbench.oracle.speedup`); the best k there, and the **recommended** k: a measured
   k where its interval or predicted gain clears the noise, moved to another k only for a
   predicted gain beyond the model's leave-one-out error for the drafter (:func:`decide`).
3. **Check** every measured SD level against the prediction for its k and batch size made
   without its timings (prompt lookup: no SD level is an input at all; a draft model: its
   passes fitted on the other draft-model levels), with the error, and the break-even
   model's expectation (``AL / (1 + f k c)``, the model this one replaces) beside it.
4. **Schedule**: the recommended k at every batch size 1..B on the oracle's own requests (the
   table's k at the measured batch sizes, never growing with the batch size), as
   inclusive ranges ``(first, last, k)``: what vLLM's ``num_speculative_tokens_per_batch_size``
   reads (:mod:`speedbench.oracle.schedule` writes it for each engine).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field

from speedbench.figures import Figure, Interval, Result
from speedbench.oracle.calibrate import DraftLevel, calibrate, fit_sd_passes
from speedbench.oracle.predict import OracleLevel, Prediction
from speedbench.oracle.speedup import (
    ReplayRequest,
    draft_passes,
    predicted_speedup,
    replay_seconds,
)
from speedbench.oracle.steptime import StepCosts
from speedbench.records import RequestRecord, measured, read_parquet
from speedbench.results import SCHEMA_VERSION
from speedbench.sweep_summary import SummaryRow, SweepSummary

# A recommendation of k needs a predicted gain over SD off of at least this much; below it,
# run without SD (a 1 % gain is inside any host's run-to-run spread).
MIN_GAIN = 1.01
# The least error a recommendation must clear (the floor of drafter_noise): a change needs a
# predicted gain beyond the drafter's leave-one-out error, and never less than this, since
# the paired interval of an 11-question level spans about +-2 % (measured: prompt lookup's
# three predicted gains of 1.4-2.1 % all lost).
MIN_CHANGE = 1.03
SPEEDUP_MODEL_FILE = "speedup_model.json"


class StepCostFigures(Result):
    """A fitted :class:`~speedbench.oracle.steptime.StepCosts` and what it rests on."""

    fixed_s: float
    per_sequence_s: float
    per_token_s: float
    # Older models had no square terms (0).
    per_token_sq_s: float = 0.0
    per_verifying_sq_s: float = 0.0
    # Older models had no context term (0).
    per_context_s: float = 0.0
    iterations: int
    outliers: int
    r2: Figure
    sources: list[str]

    @classmethod
    def of(cls, costs: StepCosts) -> StepCostFigures:
        """The figures of a fit."""
        return cls.model_validate({**dataclasses.asdict(costs), "sources": list(costs.sources)})

    def costs(self) -> StepCosts:
        """Back to the fit."""
        fields = self.model_dump()
        return StepCosts(**{**fields, "r2": self.r2 or float("nan"),
                            "sources": tuple(self.sources)})  # fmt: skip


class SpeedupCurve(Result):
    """Predicted speedup of one drafter at one measured batch size, for every k (0: SD off).

    ``best_k`` is the highest prediction; ``recommended_k`` is what to run: the best only where
    it clears the drafter's noise and the measured intervals allow it (:func:`decide`).
    """

    drafter: str
    split: str
    batch_size: int
    questions: int
    speedup: dict[int, float]
    best_k: int
    recommended_k: int


class SpeedupCheck(Result):
    """One measured SD level beside the prediction made without its timings."""

    level: str
    drafter: str
    split: str
    batch_size: int
    k: int
    measured_speedup: Figure
    predicted_speedup: Figure
    # predicted / measured - 1
    error: Figure
    # The break-even model AL / (1 + f k c) on the oracle's AL, and its error.
    old_model_speedup: Figure = None
    old_model_error: Figure = None


class KSchedule(Result):
    """The best k at every batch size 1..max_batch_size, as inclusive ranges (k 0: SD off)."""

    drafter: str
    split: str
    ranges: list[tuple[int, int, int]]
    # Batch size -> predicted speedup of its k over SD off.
    speedup: dict[int, float]


class Recommendation(Result):
    """The recommended k at one batch size, measured beside the grid's k.

    ``paired_ratio`` is the sum of the grid level's end-to-end times over the recommended
    level's, over the questions both measured, with a bootstrap interval over questions
    (above 1: the recommendation answered faster). ``verdict``: ``beat`` (interval above 1),
    ``matched`` (it holds 1), ``lost`` (below 1), or ``same`` where the grid's k is the one
    recommended.
    """

    drafter: str
    split: str
    batch_size: int
    grid_k: int
    recommended_k: int
    predicted_recommended: Figure
    predicted_grid: Figure
    measured_recommended: Figure
    measured_grid: Figure
    paired_ratio: Interval | None = None
    verdict: Literal["beat", "matched", "lost", "same", "untested"]

    @classmethod
    def of(
        cls,
        curve: SpeedupCurve,
        grid_k: int,
        grid: SummaryRow,
        best: SummaryRow,
        ratio: Interval | None,
    ) -> Recommendation:
        """The verdict of one curve's recommended k against the grid's measured level."""
        speed = lambda r: 1.0 if not r.is_speculative else r.speedup  # noqa: E731
        verdict: Literal["beat", "matched", "lost", "same", "untested"] = "same"
        if best is not grid:
            verdict = "untested"
            low, high = (ratio.low, ratio.high) if ratio is not None else (None, None)
            if low is not None and high is not None and low == low:  # not NaN
                verdict = "beat" if low > 1 else "lost" if high < 1 else "matched"
        return cls(
            drafter=curve.drafter,
            split=curve.split,
            batch_size=curve.batch_size,
            grid_k=grid_k,
            recommended_k=curve.recommended_k,
            predicted_recommended=curve.speedup.get(curve.recommended_k),
            predicted_grid=curve.speedup.get(grid_k),
            measured_recommended=speed(best),
            measured_grid=speed(grid),
            paired_ratio=ratio,
            verdict=verdict,
        )


class SpeedupModel(Result):
    """What a sweep's step costs and oracle say about every k at every batch size."""

    kind: Literal["speedup_model"] = "speedup_model"
    target: StepCostFigures
    # The draft served alone (its per-token cost) and its passes inside SD iterations.
    draft: StepCostFigures | None = None
    draft_pass: StepCostFigures | None = None
    # Prompt lookup's n-gram search in an SD iteration (fixed and per sequence).
    ngram_search: StepCostFigures | None = None
    # The engine's cap on one iteration's tokens, by which prompts are prefilled in chunks
    # (vLLM's max_num_batched_tokens; None: not known, each prompt prefilled whole).
    token_budget: int | None = None
    min_gain: float = MIN_GAIN
    min_change: float = MIN_CHANGE
    # The k the sweep measured, which a recommendation keeps unless another clears the noise.
    measured_ks: list[int] = Field(default_factory=list)
    # Drafter -> the model's error a recommendation must clear (drafter_noise); empty in
    # models made before 2026-12-06, which used min_change for every drafter.
    noise: dict[str, float] = Field(default_factory=dict)
    curves: list[SpeedupCurve] = Field(default_factory=list)
    checks: list[SpeedupCheck] = Field(default_factory=list)
    schedules: list[KSchedule] = Field(default_factory=list)
    recommendations: list[Recommendation] = Field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def fits(self) -> list[tuple[str, str, StepCostFigures]]:
        """Every step-cost fit made: (key, what it prices, fit)."""
        named = (("target", "target", self.target), ("draft", "draft alone", self.draft),
                 ("draft_pass", "draft pass in SD", self.draft_pass),
                 ("ngram_search", "n-gram search in SD", self.ngram_search))  # fmt: skip
        return [(key, label, fit) for key, label, fit in named if fit is not None]

    def curve(self, drafter: str, split: str, batch_size: int) -> SpeedupCurve | None:
        """The predicted curve of one drafter at one split and batch size, if made."""
        match = (drafter, split, batch_size)
        return next((c for c in self.curves if (c.drafter, c.split, c.batch_size) == match), None)


def best_of(speedup: dict[int, float]) -> int:
    """The k of the highest predicted speedup; 0 (SD off) unless one gains ``MIN_GAIN``."""
    k, best = max(speedup.items(), key=lambda kv: (kv[1], -kv[0]))
    return k if best >= MIN_GAIN else 0


def drafter_noise(checks: Sequence[SpeedupCheck], drafter: str) -> float:
    """The model's error for one drafter: its mean absolute leave-one-out error, at least 3 %.

    A predicted gain smaller than this is not told apart from none by the model that made it.
    Without a check of its own (no level the model could leave out), the floor
    ``MIN_CHANGE - 1`` stands.
    """
    errors = [abs(c.error) for c in checks if c.drafter == drafter and c.error is not None]
    floor = MIN_CHANGE - 1
    return max(floor, sum(errors) / len(errors)) if errors else floor


def recommended_k(
    speedup: dict[int, float],
    measured_ks: Sequence[int] = (),
    noise: float = MIN_CHANGE - 1,
    intervals: Mapping[int, tuple[float, float]] | None = None,
) -> int:
    """The k to run at one batch size: a change only where the evidence clears the noise.

    ``noise`` is the model's error for the drafter (:func:`drafter_noise`); ``intervals``
    holds the measured paired speedup interval (low, high) of the ks measured here.

    - A measured k runs with SD on where its measured interval lies above 1, or where its
      interval (if any) does not lie below 1 and its predicted gain exceeds the noise. Of
      those the one predicted fastest is the incumbent; SD off (exactly 1) otherwise.
    - A k not measured replaces the incumbent only where it is predicted faster by more than
      the noise.
    """
    intervals = intervals or {}

    def runs(k: int) -> bool:
        low, high = intervals.get(k, (None, None))
        if low is not None and low > 1:
            return True
        if high is not None and high < 1:
            return False
        return speedup[k] > 1 + noise

    known = [k for k in measured_ks if k and k in speedup and runs(k)]
    incumbent = max(known, key=lambda k: (speedup[k], -k)) if known else 0
    others = [k for k in speedup if k and k not in measured_ks]
    if not others:
        return incumbent
    best = max(others, key=lambda k: (speedup[k], -k))
    return best if speedup[best] > speedup[incumbent] * (1 + noise) else incumbent


def monotone(ks: Sequence[int]) -> list[int]:
    """``ks`` by batch size capped by every k before it: SD's k never grows with the batch.

    A bigger batch makes a step more compute-bound, so a draft pays less there, never more; a
    schedule reading off, k=1, off, k=1 follows noise.
    """
    out: list[int] = []
    for k in ks:
        out.append(min(k, out[-1]) if out else k)
    return out


def _key(r: RequestRecord) -> tuple[str, int]:
    return r.prompt_id, r.turn


def replay_requests(
    prediction: Prediction, level_records: Sequence[RequestRecord], ks: Sequence[int]
) -> dict[int, list[ReplayRequest]] | None:
    """A measured baseline level's requests, in the order sent, for k = 0 and every k.

    None where one of them is not among the oracle's (another question set).
    """
    index = {_key(r): i for i, r in enumerate(prediction.requests) if r.repeat == 0}
    sent = sorted((r for r in measured(level_records) if r.repeat == 0), key=lambda r: r.start_s)
    if not sent or any(_key(r) not in index for r in sent):
        return None
    out: dict[int, list[ReplayRequest]] = {0: []}
    for k in ks:
        out[k] = []
    for r in sent:
        i = index[_key(r)]
        base = prediction.requests[i]
        out[0].append(ReplayRequest.baseline(base.prompt_tokens, base.output_tokens))
        for k in ks:
            out[k].append(ReplayRequest.of(base.prompt_tokens, prediction.streams[k][i], k))
    return out


def speedups(
    requests: dict[int, list[ReplayRequest]],
    batch_size: int,
    target: StepCosts,
    passes: StepCosts | None,
    drafter: str = "draft_model",
    token_budget: int | None = None,
) -> dict[int, float]:
    """Predicted speedup of every k in ``requests`` (0 is SD off: 1.0 by definition)."""
    base = replay_seconds(requests[0], batch_size, target, token_budget=token_budget)
    out = {0: 1.0}
    for k, reqs in requests.items():
        if k:
            sd = replay_seconds(reqs, batch_size, target, passes, draft_passes(drafter, k),
                                token_budget)  # fmt: skip
            out[k] = base / sd
    return out


def schedule(
    requests: dict[int, list[ReplayRequest]],
    max_batch_size: int,
    target: StepCosts,
    passes: StepCosts | None,
    drafter: str = "draft_model",
    measured_ks: Sequence[int] = (),
    token_budget: int | None = None,
    noise: float = MIN_CHANGE - 1,
    decided: Mapping[int, int] | None = None,
) -> tuple[list[tuple[int, int, int]], dict[int, float]]:
    """The recommended k at every batch size 1..max_batch_size, merged into inclusive ranges.

    Each batch size takes :func:`recommended_k` of the replay's curve there, or ``decided``'s
    k where the sweep measured that batch size (the recommendation table's, which weighs the
    measured intervals); then no k exceeds the one before it (:func:`monotone`).
    """
    decided = decided or {}
    curves = {bs: speedups(requests, bs, target, passes, drafter, token_budget)
              for bs in range(1, max_batch_size + 1)}  # fmt: skip
    chosen = [
        decided[bs] if bs in decided and decided[bs] in curve
        else recommended_k(curve, measured_ks, noise)
        for bs, curve in curves.items()
    ]  # fmt: skip
    ranges: list[tuple[int, int, int]] = []
    gains: dict[int, float] = {}
    for bs, k in zip(curves, monotone(chosen), strict=True):
        gains[bs] = curves[bs][k]
        if ranges and ranges[-1][2] == k:
            ranges[-1] = (ranges[-1][0], bs, k)
        else:
            ranges.append((bs, bs, k))
    return ranges, gains


def decide(model: SpeedupModel, closed: Sequence[SummaryRow]) -> None:
    """Every curve's recommended k from the model's own error and the measured intervals.

    Run after the checks: each drafter's noise is its mean leave-one-out error
    (:func:`drafter_noise`); a curve's ks measured at its batch size bring their paired
    intervals (interleaved rounds). Per drafter and split the ks are then made monotone in
    batch size, so the table and the schedule built from it agree.
    """
    model.noise = {d: drafter_noise(model.checks, d) for d in dict.fromkeys(
        c.drafter for c in model.curves)}  # fmt: skip
    for c in model.curves:
        intervals = {
            r.k: (r.speedup_interval.low, r.speedup_interval.high)
            for r in closed
            if r.method == c.drafter and r.split == c.split and r.batch_size == c.batch_size
            and r.speedup_interval is not None and r.speedup_interval.low is not None
            and r.speedup_interval.high is not None
        }  # fmt: skip
        c.recommended_k = recommended_k(c.speedup, model.measured_ks, model.noise[c.drafter],
                                        intervals)  # fmt: skip
    groups: dict[tuple[str, str], list[SpeedupCurve]] = {}
    for c in model.curves:
        groups.setdefault((c.drafter, c.split), []).append(c)
    for group in groups.values():
        group.sort(key=lambda c: c.batch_size)
        for c, k in zip(group, monotone([c.recommended_k for c in group]), strict=True):
            c.recommended_k = k


def speedup_model(
    summary: SweepSummary,
    oracles: Sequence[tuple[OracleLevel, Prediction]],
    level_dir: Callable[[SummaryRow], Path],
    target_levels: Sequence[tuple[str, Path]],
    draft_levels: Sequence[tuple[str, Path]] = (),
    max_batch_size: int | None = None,
    measured_ks: Sequence[int] = (),
    token_budget: int | None = None,
) -> SpeedupModel:
    """Calibrate, predict every k at every measured batch size, check each SD level.

    Args:
        summary: The sweep's levels (the measured SD levels to check, their speedups).
        oracles: Each oracle level with the prediction it was made from.
        level_dir: A summary row's folder (its records).
        target_levels: (label, folder) of the no-SD levels of the target to calibrate on.
        draft_levels: (label, folder) of the draft model's levels alone (its per-token cost).
        max_batch_size: The schedule's last batch size (default: the largest measured).
        measured_ks: The k the sweep's grid measured; a recommendation keeps one of them
            unless another k is predicted faster by more than the drafter's noise
            (:func:`decide`).
        token_budget: The engine's cap on one iteration's tokens (chunked prefill), both in
            reading the levels' iterations and in replaying them; None: prompts whole.

    The target's costs come from no-SD levels only, so every prompt-lookup prediction is made
    without any SD timing. A draft model's passes are priced from the draft-model SD levels;
    each such level's check uses a fit on the *other* draft-model levels (leave one out).

    Raises:
        ValueError: The no-SD levels cannot be calibrated on (too few iterations, no prefill).
    """
    target = calibrate(target_levels, token_budget)
    alone = calibrate(draft_levels, token_budget) if draft_levels else None
    closed = [r for r in summary.levels if not r.open_loop]
    sd_levels: dict[str, list[tuple[SummaryRow, DraftLevel]]] = {}
    for r in closed:
        if r.is_speculative:
            entry = (f"{r.config}/{r.split}/{r.load}", level_dir(r), r.k)
            sd_levels.setdefault(r.method, []).append((r, entry))
    passes: dict[str, StepCosts] = {}
    if sd_levels:
        passes = fit_sd_passes(
            {drafter: [d for _, d in levels] for drafter, levels in sd_levels.items()},
            target, alone, token_budget,
        )  # fmt: skip
    draft_pass, search = passes.get("draft_model"), passes.get("ngram")
    model = SpeedupModel(
        target=StepCostFigures.of(target),
        draft=StepCostFigures.of(alone) if alone else None,
        draft_pass=StepCostFigures.of(draft_pass) if draft_pass else None,
        ngram_search=StepCostFigures.of(search) if search else None,
        measured_ks=sorted(set(measured_ks)),
        token_budget=token_budget,
    )
    baselines = {(r.split, r.batch_size): r for r in closed if not r.is_speculative}
    # One curve per drafter, split and batch size: from the oracle level replaying the
    # baseline at that batch size where there is one (its own requests), else any that
    # holds the level's questions; one schedule per drafter and split, from the largest.
    usable = [
        (level, prediction)
        for level, prediction in oracles
        if level.drafter != "draft_model" or draft_pass is not None
    ]
    for (split, bs), row in sorted(baselines.items()):
        records = read_parquet(level_dir(row) / "records.parquet")
        for drafter in dict.fromkeys(level.drafter for level, _ in usable):
            mine = sorted(
                (p for p in usable if p[0].drafter == drafter and p[0].split == split),
                key=lambda p: p[0].batch_size != bs,
            )
            for level, prediction in mine:
                requests = replay_requests(prediction, records, sorted(prediction.streams))
                if requests is not None:
                    _predict_level(model, level, requests, row, closed, sd_levels,
                                   target, passes.get(drafter), alone)  # fmt: skip
                    break
    decide(model, closed)
    top = max_batch_size or max((bs for _, bs in baselines), default=1)
    planned: set[tuple[str, str]] = set()
    for level, prediction in sorted(usable, key=lambda p: -p[0].requests):
        if (level.drafter, level.split) in planned:
            continue
        own = replay_requests(prediction, prediction.requests, sorted(prediction.streams))
        if own is not None:
            decided = {c.batch_size: c.recommended_k for c in model.curves
                       if (c.drafter, c.split) == (level.drafter, level.split)}  # fmt: skip
            ranges, gains = schedule(own, top, target, passes.get(level.drafter), level.drafter,
                                     model.measured_ks, token_budget,
                                     model.noise.get(level.drafter, MIN_CHANGE - 1),
                                     decided)  # fmt: skip
            model.schedules.append(KSchedule(drafter=level.drafter, split=level.split,
                                             ranges=ranges, speedup=gains))  # fmt: skip
            planned.add((level.drafter, level.split))
    return model


def _predict_level(
    model: SpeedupModel,
    level: OracleLevel,
    requests: dict[int, list[ReplayRequest]],
    baseline: SummaryRow,
    closed: Sequence[SummaryRow],
    sd_levels: Mapping[str, Sequence[tuple[SummaryRow, DraftLevel]]],
    target: StepCosts,
    passes: StepCosts | None,
    alone: StepCosts | None,
) -> None:
    """The curve of one drafter at one baseline's batch size, and checks of its SD levels."""
    split, bs = baseline.split, baseline.batch_size
    curve = speedups(requests, bs, target, passes, level.drafter, model.token_budget)
    model.curves.append(
        SpeedupCurve(drafter=level.drafter, split=split, batch_size=bs,
                     questions=len(requests[0]), speedup=curve, best_k=best_of(curve),
                     recommended_k=best_of(curve))  # decide() sets it once the checks are in
    )  # fmt: skip
    for r in closed:
        if r.method != level.drafter or r.split != split or r.batch_size != bs:
            continue
        predicted = _left_out(r, level.drafter, requests, sd_levels, target, alone,
                              model.token_budget)  # fmt: skip
        model.checks.append(check_level(r, predicted, level))


def _left_out(
    row: SummaryRow,
    drafter: str,
    requests: dict[int, list[ReplayRequest]],
    sd_levels: Mapping[str, Sequence[tuple[SummaryRow, DraftLevel]]],
    target: StepCosts,
    alone: StepCosts | None,
    token_budget: int | None = None,
) -> float | None:
    """An SD level's speedup predicted with its own timings left out of every fit.

    The drafters' pass costs are fitted on every *other* SD level (the shared cost of
    verifying many streams from other drafters' levels too); a draft model with no other
    level of its own cannot be priced (None), prompt lookup is then priced without its
    search.
    """
    others = {d: [level for r, level in levels if r is not row] for d, levels in sd_levels.items()}
    if row.k not in requests or (drafter == "draft_model" and not others.get(drafter)):
        return None
    passes = None
    if any(others.values()):
        passes = fit_sd_passes(others, target, alone, token_budget).get(drafter)
    return predicted_speedup(requests[0], requests[row.k], row.batch_size, target, passes,
                             draft_passes(drafter, row.k), token_budget)  # fmt: skip


def check_level(
    row: SummaryRow, predicted: float | None, level: OracleLevel | None
) -> SpeedupCheck:
    """A measured SD level beside its predicted speedup and the break-even model's."""
    measured_speedup = row.speedup
    old = None
    figures = level.at(row.k) if level is not None else None
    if figures is not None and (even := figures.expected_at(row.batch_size)):
        old = even.expected_speedup
    err = lambda p: p / measured_speedup - 1 if p is not None and measured_speedup else None  # noqa: E731
    return SpeedupCheck(
        level=f"{row.config}/{row.split}/{row.load}",
        drafter=row.method,
        split=row.split,
        batch_size=row.batch_size,
        k=row.k,
        measured_speedup=measured_speedup,
        predicted_speedup=predicted,
        error=err(predicted),
        old_model_speedup=old,
        old_model_error=err(old),
    )
