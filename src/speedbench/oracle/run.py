"""The oracle inside a sweep: which baseline it replays, which measured levels it checks.

After the grid (and the draft-alone levels of the break-even model), :func:`with_oracle`
replays a no-SD baseline under every drafter of ``SweepConfig.oracle`` for k = 1..max_k:

- the baseline is the sweep's own closed-loop ``none`` levels, or, with
  ``oracle_per_category``, one level of its own at ``oracle_batch_size`` on more questions
  per category (one more launch of the target), so the per-category figures rest on more
  questions than the SD levels measure;
- every SD level of the same drafter and split the sweep measured is checked against the
  prediction for its k, request by request (:func:`speedbench.oracle.predict.check_measured`);
- the break-even model gives the expected speedup of every k at every batch size where the
  draft's cost is known (n-gram: none), and the best k there.

Output, beside the grid's::

    oracle/baseline/none/<split>/bs<N>/   the oracle's own baseline level (oracle_per_category)
    oracle/<drafter>/<split>/bs<N>/oracle.json   the OracleLevel, per-question figures included

The sweep runner (:mod:`speedbench.run.sweep`) measures the oracle's own baseline and calls
:func:`with_oracle`; this module runs no engine. The sweep's ``summary.json`` does not embed
the oracle's levels (their models build on the result models, not the other way round);
:func:`read_oracle` reads them back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from speedbench.config import EngineConfig
from speedbench.oracle.predict import (
    NGRAM_MAX,
    NGRAM_MIN,
    OracleDrafter,
    OracleK,
    OracleLevel,
    best_k,
    break_even_at,
    check_measured,
    figures_at,
    predict,
)
from speedbench.provision.models import resolve_dtype
from speedbench.records import read_parquet
from speedbench.report.oracle import plot_oracle
from speedbench.results import ConfigFailure, LevelMetrics, SummaryRow, SweepSummary, write_json
from speedbench.sweep_config import SweepConfig

log = logging.getLogger(__name__)

ORACLE_DIR = "oracle"
ORACLE_PLOT = "oracle.png"


def baseline_eos(directory: Path) -> int | None:
    """The EOS a baseline level stopped at (None: it ran with ignore_eos, or is not recorded)."""
    path = directory / "metrics.json"
    if not path.exists():
        return None
    value = LevelMetrics.read(path).config.get("eos_token_id")
    return int(value) if value is not None else None


def draft_cost_ratios(summary: SweepSummary) -> dict[tuple[str, int], float]:
    """(split, batch size) -> the draft's TPOT alone over the target's, where both were timed."""
    target = {
        (r.split, r.batch_size): r.tpot_p50_s
        for r in summary.levels
        if not r.is_speculative and not r.open_loop and r.tpot_p50_s
    }
    return {
        (r.split, r.batch_size): r.tpot_p50_s / target[(r.split, r.batch_size)]
        for r in summary.draft_alone
        if r.tpot_p50_s and (r.split, r.batch_size) in target and not r.open_loop
    }


def _measured_rows(summary: SweepSummary, drafter: str, split: str, k: int) -> list[SummaryRow]:
    return [
        r
        for r in summary.levels
        if r.method == drafter and r.k == k and r.split == split and not r.open_loop
    ]


def oracle_level(
    records_dir: Path,
    drafter: OracleDrafter,
    split: str,
    batch_size: int,
    ks: Sequence[int],
    summary: SweepSummary,
    out: Path,
    *,
    draft: Any = None,
    draft_model: str | None = None,
    dtype: str | None = None,
    max_model_len: int | None = None,
) -> OracleLevel:
    """One drafter over one baseline level: figures per k, checks, break-even, best k."""
    eos_id = baseline_eos(records_dir)
    records = read_parquet(records_dir / "records.parquet")
    prediction = predict(
        records, drafter, ks, draft=draft, ngram=(NGRAM_MIN, NGRAM_MAX), max_model_len=max_model_len
    )
    costs = draft_cost_ratios(summary)
    sizes = sorted({r.batch_size for r in summary.levels if r.split == split and not r.open_loop})
    by_k: list[OracleK] = []
    for k in ks:
        figures = figures_at(prediction, drafter, k, eos_id)
        rows = _measured_rows(summary, drafter, split, k)
        checks = []
        for r in rows:
            path = out / r.config / split / r.load / "records.parquet"
            if path.exists():
                check = check_measured(
                    prediction, k, read_parquet(path), r.config, eos_id, r.batch_size
                )
                checks.append(check)
        measured = {r.batch_size: r.speedup for r in rows}
        cost = (lambda bs: 0.0) if drafter == "ngram" else (lambda bs: costs.get((split, bs)))
        evens = [e for bs in sizes if (e := break_even_at(figures, bs, cost(bs), measured.get(bs)))]
        by_k.append(figures.model_copy(update={"checks": checks, "break_even": evens}))
    level = OracleLevel.of(
        prediction, drafter, by_k, str(records_dir), draft_model=draft_model, dtype=dtype
    )
    level = level.model_copy(update={"split": split, "batch_size": batch_size})
    best = {bs: best_at for bs in sizes if (best_at := best_k(by_k, bs)) is not None}
    return level.model_copy(update={"best_k": best})


def with_oracle(
    summary: SweepSummary,
    config: SweepConfig,
    engine: EngineConfig,
    draft_weights: str | None,
    baselines: Sequence[tuple[SummaryRow, Path]],
    out: Path,
) -> tuple[SweepSummary, list[OracleLevel]]:
    """Replay each baseline level (its row and folder) under every drafter of the sweep.

    Each oracle level is written to its oracle.json as it is done; the summary gains a failure
    for each drafter that could not replay a baseline (the level is kept out, the rest goes
    on). Readers find the levels beside ``summary.json`` (:func:`read_oracle`).
    """
    ks = list(range(1, config.oracle_max_k + 1))
    failures = list(summary.failures)
    dtype = resolve_dtype(engine.dtype) if engine.dtype == "auto" else engine.dtype
    draft = None
    if "draft_model" in config.oracle and draft_weights:
        from speedbench.oracle.draft import load_draft

        draft = load_draft(draft_weights, dtype)
    levels: list[OracleLevel] = []
    for row, records_dir in baselines:
        for drafter in config.oracle:
            print(f"oracle {drafter}: k = 1..{ks[-1]} over {row.split} {row.load}")
            try:
                level = oracle_level(
                    records_dir,
                    drafter,
                    row.split,
                    row.batch_size,
                    ks,
                    summary,
                    out,
                    draft=draft,
                    draft_model=config.draft_model,
                    dtype=dtype,
                    max_model_len=engine.max_model_len,
                )
            except ValueError as exc:
                # A baseline measured before records kept their prompt ids, for one.
                error = f"{exc} ({records_dir}; re-measure it with force)"
                print(f"oracle {drafter} failed: {error}")
                failures.append(ConfigFailure(config=f"oracle-{drafter}", error=error))
                continue
            path = out / ORACLE_DIR / drafter / row.split / row.load / "oracle.json"
            write_json(path, level.model_dump(mode="json"))
            levels.append(level)
    plots = list(summary.plots)
    if (plot := plot_oracle(levels, out / "plots" / ORACLE_PLOT)) is not None:
        plots.append(str(plot))
    done = summary.model_copy(update={"failures": failures, "plots": plots})
    done.write(out / "summary.json")
    return done, levels


def oracle_paths(out: Path) -> list[Path]:
    """The oracle's files in a sweep folder: each level's oracle.json, and its plot."""
    plot = out / "plots" / ORACLE_PLOT
    return sorted((out / ORACLE_DIR).glob("*/*/*/oracle.json")) + ([plot] if plot.exists() else [])


def read_oracle(out: Path) -> list[OracleLevel]:
    """The oracle levels of a sweep's output folder, from their oracle.json files."""
    paths = sorted((out / ORACLE_DIR).glob("*/*/*/oracle.json"))
    return [OracleLevel.model_validate_json(p.read_text()) for p in paths]


def oracle_scalars(levels: Sequence[OracleLevel]) -> dict[str, float]:
    """The oracle's headline figures as flat metrics for a tracker (MLflow parent run)."""
    out: dict[str, float] = {}
    for level in levels:
        prefix = f"oracle.{level.drafter}.{level.split}.bs{level.batch_size}"
        for f in level.by_k:
            sb, stream = f.views.get("speed_bench"), f.views.get("stream")
            if sb is not None and sb.al_request_mean is not None:
                out[f"{prefix}.k{f.k}.al_speed_bench_request_mean"] = sb.al_request_mean
            if stream is not None and stream.al_token_weighted is not None:
                out[f"{prefix}.k{f.k}.al_stream"] = stream.al_token_weighted
            for even in f.break_even:
                if even.expected_speedup is not None:
                    out[f"{prefix}.k{f.k}.expected_speedup.bs{even.batch_size}"] = (
                        even.expected_speedup
                    )
            for check in f.checks:
                if check.compared:
                    out[
                        f"{prefix}.k{f.k}.identical_fraction.{check.config}.bs{check.batch_size}"
                    ] = check.identical / check.compared
        for bs, k in level.best_k.items():
            out[f"{prefix}.best_k.bs{bs}"] = float(k)
        out[f"{prefix}.seconds"] = level.seconds
    return out
