"""Measure the speedup model's recommendation: each drafter at its recommended k, beside the grid's.

A recommendation is a prediction until it is measured. After the oracle and the speedup model
(:mod:`speedbench.oracle.recommend`), :func:`with_best_k` launches each drafter once more per
recommended k the grid did not measure (the model keeps a measured k unless another is
predicted faster by more than the drafter's leave-one-out error), at the batch sizes where it
is recommended, on the same questions as the grid's levels there. Those levels are ordinary
grid levels (their own folder ``<drafter>-k<k>/<split>/bs<N>``, identity, lossless check and
MLflow run), and the model, made before they ran, gains a check for each.

:func:`recommendation_verdicts` then puts the recommended k beside the grid's k at every
batch size: both measured speedups, and a paired interval over the questions both measured
(the sum of the grid level's end-to-end times over the recommended level's; "off" compares
with the no-SD baseline). It beat the grid's k where the interval lies above 1, matched it
where the interval holds 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from speedbench.config import SpecConfig
from speedbench.metrics.bootstrap import ratio_ci
from speedbench.metrics.latency import e2e_s
from speedbench.oracle.predict import OracleLevel
from speedbench.oracle.recommend import (
    Recommendation,
    SpeedupModel,
    check_level,
)
from speedbench.records import measured, read_parquet
from speedbench.sweep_summary import SummaryRow, SweepSummary, with_speedup

# Measures one SD config at some batch sizes of one split: (spec, split, batch sizes) -> grid.
MeasureGrid = Callable[[SpecConfig, str, Sequence[int]], SweepSummary]


def pending(
    model: SpeedupModel, measured_ks: Sequence[int]
) -> dict[tuple[str, int], dict[str, list[int]]]:
    """(drafter, recommended k) -> split -> batch sizes, where the grid did not measure that k."""
    todo: dict[tuple[str, int], dict[str, list[int]]] = {}
    for c in model.curves:
        k = c.recommended_k
        if k and k not in measured_ks:
            todo.setdefault((c.drafter, k), {}).setdefault(c.split, []).append(c.batch_size)
    return todo


def with_best_k(
    summary: SweepSummary,
    model: SpeedupModel,
    oracle: Sequence[OracleLevel],
    specs: Sequence[SpecConfig],
    measured_ks: Sequence[int],
    measure: MeasureGrid,
) -> tuple[SweepSummary, SpeedupModel]:
    """The summary with the recommended levels measured; the model with their checks.

    ``specs`` are the grid's SD configs (a drafter's draft weights and n-gram windows are
    taken from its config there); ``measure`` runs one config's levels (the sweep's runner).
    """
    rows = list(summary.levels)
    failures = list(summary.failures)
    checks = list(model.checks)
    for (drafter, k), by_split in sorted(pending(model, measured_ks).items()):
        template = next((s for s in specs if s.method == drafter), None)
        if template is None:
            continue
        spec = template.model_copy(update={"num_speculative_tokens": k})
        for split, sizes in sorted(by_split.items()):
            print(f"measuring the recommendation: {spec.label} on {split} at bs {sizes}")
            grid = measure(spec, split, sorted(sizes))
            failures += grid.failures
            for row in grid.levels:
                row = with_speedup(row, rows)
                rows.append(row)
                level = next((o for o in oracle if o.drafter == drafter and o.split == split), None)
                curve = model.curve(drafter, split, row.batch_size)
                predicted = curve.speedup.get(k) if curve else None
                checks.append(check_level(row, predicted, level))
    done = summary.model_copy(update={"levels": rows, "failures": failures})
    return done, model.model_copy(update={"checks": checks})


def _e2e_by_question(folder: Path) -> dict[tuple[str, int], float]:
    path = folder / "records.parquet"
    if not path.exists():
        return {}
    return {
        (r.prompt_id, r.turn): e2e_s(r)
        for r in measured(read_parquet(path))
        if r.ok and r.repeat == 0
    }


def recommendation_verdicts(
    summary: SweepSummary,
    model: SpeedupModel,
    grid_k: int,
    level_dir: Callable[[SummaryRow], Path],
) -> list[Recommendation]:
    """The recommended k against the grid's ``grid_k`` at every predicted batch size."""
    out = []
    for c in model.curves:

        def find(k: int, c: Any = c) -> SummaryRow | None:
            config = "none" if k == 0 else f"{c.drafter}-k{k}"
            return next(
                (r for r in summary.levels if r.config == config and r.split == c.split
                 and r.batch_size == c.batch_size and not r.open_loop),
                None,
            )  # fmt: skip

        grid, best = find(grid_k), find(c.recommended_k)
        if grid is None or best is None:
            continue
        ratio = None
        if best is not grid:
            mine, theirs = _e2e_by_question(level_dir(best)), _e2e_by_question(level_dir(grid))
            common = sorted(set(mine) & set(theirs))
            if common:
                ratio = ratio_ci([theirs[q] for q in common], [mine[q] for q in common])
        out.append(Recommendation.of(c, grid_k, grid, best, ratio))
    return out
