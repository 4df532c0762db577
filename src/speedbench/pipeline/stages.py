"""The DVC stages' file contract: params sections -> sweep configs, summaries -> metrics files.

``dvc.yaml`` stages call thin entry points (``speedbench`` for the core, ``python -m
flows.stage`` for the Prefect sweeps); what they read from params.yaml and what they write for
``dvc metrics`` / ``dvc plots`` is defined here, so the reference check and the report agree.

Acceptance at greedy decoding is deterministic at a fixed batch size, so ``acceptance.json`` is
compared exactly against the committed reference; throughput is hardware-dependent and lives in
``throughput.json``, compared by ratio only. Each of them (and ``oracle.json``) is
``{"schema_version": N, "levels": {<config>/<split>/<load>: ...}}``; ``provenance.json``
carries ``schema_version`` beside its keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from speedbench.config import METHODS_NEEDING_DRAFT_MODEL, ConfigError, load_config
from speedbench.oracle.predict import OracleK, OracleLevel, average_al
from speedbench.oracle.recommend import SpeedupModel
from speedbench.results import SCHEMA_VERSION
from speedbench.sweep_config import SweepConfig
from speedbench.sweep_summary import SummaryRow, SweepSummary, view_summaries

ACCEPTANCE_FILE = "acceptance.json"
PROVENANCE_FILE = "provenance.json"
THROUGHPUT_FILE = "throughput.json"
AR_CSV = "conditional_ar.csv"
ORACLE_FILE = "oracle.json"
SPEEDUP_FILE = "speedup_model.json"
STAGES = ("measure_qualitative", "measure_throughput", "measure_eagle3")


def stage_sweep(params: dict[str, Any], stage: str, results_dir: str = "results") -> SweepConfig:
    """The sweep config of a measure stage: its params section plus the shared ``models``."""
    if stage not in params:
        raise ConfigError(f"params has no {stage!r} section; expected one of {', '.join(STAGES)}")
    models = params.get("models", {}) or {}
    section = params[stage] or {}
    if not isinstance(section, dict):
        raise ConfigError(f"params {stage}: expected a mapping of sweep fields")
    defaults = {
        "name": stage.removeprefix("measure_"),
        "model": models.get("target", "qwen2.5-coder-1.5b-instruct"),
        "draft_model": models.get("draft"),
        "dtype": models.get("dtype", "auto"),
        "out_dir": results_dir,
    }
    try:
        # The section may name a field flat (dtype) or in its section (engine: {dtype: ...}).
        fields = SweepConfig.with_defaults(defaults, section)
    except ValueError as exc:
        raise ConfigError(f"SweepConfig: {exc}") from None
    # The draft stays where a method drafts with it or its oracle replays it.
    drafts = [*fields.get("methods", []), *fields.get("oracle", [])]
    if not any(m in METHODS_NEEDING_DRAFT_MODEL for m in drafts):
        fields["draft_model"] = None
    return load_config(SweepConfig, fields)


def acceptance_views(row: SummaryRow) -> dict[str, dict[str, Any]]:
    """A level's acceptance figures by view (:meth:`ViewSummary.figures`; absent views left out).

    ``speed_bench.al_request_mean`` is SPEED-Bench's Average_AL and
    ``speed_bench.by_category.<c>.al_request_mean`` its Category_AL; every view's
    ``by_category`` holds both its request mean and its token-weighted AL where it defines them.
    """
    return {name: view.figures() for name, view in row.views.items()}


def versioned(levels: dict[str, Any]) -> dict[str, Any]:
    """A stage metrics file's content: its schema version and its levels."""
    return {"schema_version": SCHEMA_VERSION, "levels": levels}


def acceptance_metrics(summary: SweepSummary) -> dict[str, Any]:
    """Per SD config, split and load point: every acceptance view's AL, AR and AL by category.

    Keys are ``<config>/<split>/<load>``, the load ``bs<N>`` or ``rate<R>`` (requests/s).

    Values are rounded to 6 digits, far below any real change and above float noise in JSON.
    """
    return {
        f"{row.config}/{row.split}/{row.load}": _round(acceptance_views(row))
        for row in summary.levels
        if row.is_speculative
    }


def throughput_metrics(summary: SweepSummary) -> dict[str, Any]:
    """Per config, split and load point: output throughput, per-user speed and speedup.

    A level measured in rounds (``repeats`` >= 2) also carries its drift over the rounds; an SD
    level's speedup then carries the paired interval (``speedup_low``, ``speedup_high``, the
    rounds' geometric mean ``speedup_paired``), how it was paired and the baseline's drift, the
    figures verify-reference judges a speedup by (:mod:`speedbench.pipeline.verify_speedup`).
    """
    return {f"{r.config}/{r.split}/{r.load}": _throughput_entry(r) for r in summary.levels}


def _throughput_entry(row: SummaryRow) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "output_tok_s": row.output_throughput_tok_s,
        "per_user_tok_s": row.per_user_tok_s,
        "speedup": row.speedup,
        "error_rate": row.error_rate,
    }
    if row.drift is not None:
        entry["drift"] = row.drift
    if (interval := row.speedup_interval) is not None:
        entry |= {
            "speedup_paired": interval.mean,
            "speedup_low": interval.low,
            "speedup_high": interval.high,
            "speedup_rounds": interval.count,
            "speedup_pairing": row.speedup_pairing,
            "baseline_drift": row.baseline_drift,
        }
    return _round(entry)


def oracle_views(figures: OracleK) -> dict[str, dict[str, Any]]:
    """An oracle level's figures at one k, in the shape of :func:`acceptance_views`.

    So verify-reference judges predicted levels by the same rules as measured ones (exact where
    exactness is promised, else the paired test over per-question AL).
    """
    summaries = view_summaries(figures.views, figures.per_category)
    return {name: view.figures() for name, view in summaries.items()}


def oracle_acceptance(levels: list[OracleLevel]) -> dict[str, Any]:
    """Every oracle level's figures per k, keyed ``oracle-<drafter>-k<k>/<split>/<load>``."""
    return {
        f"{level.label}-k{f.k}/{level.split}/bs{level.batch_size}": _round(oracle_views(f))
        for level in levels
        for f in level.by_k
    }


def oracle_metrics(levels: list[OracleLevel]) -> dict[str, Any]:
    """The oracle's break-even figures: expected (and measured) speedup by batch size and k."""
    out: dict[str, Any] = {}
    for level in levels:
        expected: dict[str, dict[str, Any]] = {}
        for f in level.by_k:
            for even in f.break_even:
                entry = {"expected": even.expected_speedup, "measured": even.measured_speedup}
                expected.setdefault(f"bs{even.batch_size}", {})[f"k{f.k}"] = entry
        out[f"{level.label}/{level.split}/bs{level.batch_size}"] = _round(
            {
                "best_k": {f"bs{bs}": k for bs, k in sorted(level.best_k.items())},
                "speedup": expected,
                "questions": level.questions,
                "seconds": level.seconds,
                **variant_metrics(level),
            }
        )
    return out


def variant_metrics(level: OracleLevel) -> dict[str, Any]:
    """A draft level's pruned vocabularies and trees (empty without them).

    Per kept-vocabulary size: its coverage of the answer tokens, and per k the Average_AL with
    its loss against the full vocabulary's, overall and per category (with the category's
    coverage); per tree: Average_AL and the tokens verified per step.
    """
    variants = level.variants
    if variants is None:
        return {}

    def al_and_loss(pruned: float | None, full: float | None) -> dict[str, float | None]:
        return {"al": pruned, "loss": pruned / full - 1 if pruned and full else None}

    vocab: dict[str, Any] = {}
    for v in variants.vocabs:
        entry: dict[str, Any] = {"coverage": v.coverage, "kept_sha256": v.kept_sha256}
        for f in v.by_k:
            full = level.at(f.k)
            at_k = al_and_loss(average_al(f), average_al(full) if full else None)
            by_category = {}
            for c in sorted(f.per_category):
                whole = average_al(full, c) if full else None
                by_category[c] = {**al_and_loss(average_al(f, c), whole),
                                  "coverage": v.coverage_by_category.get(c)}  # fmt: skip
            entry[f"k{f.k}"] = {**at_k, "by_category": by_category}
        vocab[str(v.size)] = entry
    trees = {
        t.shape: {"al": average_al(t.figures), "tokens_per_step": t.tokens_per_step}
        for t in variants.trees
    }
    return {k: v for k, v in (("draft_vocab", vocab), ("trees", trees)) if v}


def speedup_metrics(model: SpeedupModel | None) -> dict[str, Any]:
    """The speedup model's figures: every measured SD level predicted without its timings.

    ``levels``: per measured SD level, ``predicted_speedup`` and ``measured_speedup`` with
    ``error`` (predicted / measured - 1), and the break-even model's (``old_model_*``);
    ``predicted``: per drafter, split and batch size, the speedup of every k (``k0``: SD off)
    with the best and the recommended k; ``schedules``: the recommended k by batch-size range;
    ``step_costs``: the fits; ``recommendations``: the recommended k measured beside the grid's
    k (:mod:`speedbench.run.best_k`).
    """
    if model is None:
        return {}
    levels = {c.level: _round(c.model_dump(exclude={"level", "split"})) for c in model.checks}
    predicted = {
        f"{c.drafter}/{c.split}/bs{c.batch_size}": _round(
            {
                **{f"k{k}": v for k, v in sorted(c.speedup.items())},
                "best_k": c.best_k,
                "recommended_k": c.recommended_k,
            }
        )
        for c in model.curves
    }
    recommended = {
        f"{r.drafter}/{r.split}/bs{r.batch_size}/k{r.grid_k}": _round(
            r.model_dump(exclude={"drafter", "split", "batch_size", "grid_k"})
        )
        for r in model.recommendations
    }
    return {
        "recommendations": recommended,
        "levels": levels,
        "predicted": predicted,
        "schedules": {
            f"{s.drafter}/{s.split}": [list(r) for r in s.ranges] for s in model.schedules
        },
        "step_costs": {
            key: _round(fit.model_dump(exclude={"sources"})) for key, _, fit in model.fits()
        },
    }


def write_stage_metrics(
    summary: SweepSummary,
    out_dir: Path,
    oracle: list[OracleLevel] | None = None,
    speedup: SpeedupModel | None = None,
) -> list[Path]:
    """acceptance.json, throughput.json, conditional_ar.csv and provenance.json of a stage.

    With ``oracle`` levels, their acceptance joins acceptance.json (one key per k) and their
    break-even figures go to oracle.json (no levels without them); the ``speedup`` model's
    predicted and measured speedups go to speedup_model.json (empty without one).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    prov = out_dir / PROVENANCE_FILE
    _write(prov, summary.provenance.file_form(SCHEMA_VERSION))
    acc = out_dir / ACCEPTANCE_FILE
    acceptance = {**acceptance_metrics(summary), **oracle_acceptance(oracle or [])}
    _write(acc, versioned(acceptance))
    thr = out_dir / THROUGHPUT_FILE
    _write(thr, versioned(throughput_metrics(summary)))
    lines = ["config,view,position,conditional_ar"]
    for key, views in acceptance.items():
        for view, figures in views.items():
            for j, ar in enumerate(figures.get("conditional_ar") or [], start=1):
                lines.append(f"{key},{view},{j},{ar}")
    csv = out_dir / AR_CSV
    csv.write_text("\n".join(lines) + "\n")
    # Written (empty) without oracle levels too: dvc.yaml declares it as the stage's metric.
    orc = out_dir / ORACLE_FILE
    _write(orc, versioned(oracle_metrics(oracle or [])))
    spd = out_dir / SPEEDUP_FILE
    figures = speedup_metrics(speedup)
    _write(spd, {"schema_version": SCHEMA_VERSION, "levels": {}, **figures})
    return [acc, thr, csv, prov, orc, spd]


# Keys of acceptance.json before the views were named, and the view each figure was in.
LEGACY_KEYS = {"al_stream", "al_counters", "conditional_ar", "al_by_category"}


def stage_levels(data: dict[str, Any]) -> dict[str, Any]:
    """The levels of a stage metrics file of any schema (version 2 nests them under "levels")."""
    return data["levels"] if "schema_version" in data else data


def upgrade(acceptance: dict[str, Any]) -> dict[str, Any]:
    """An acceptance.json of any schema, as today's levels (figures grouped by view).

    Schema 2 holds its levels under ``levels``, each view's per-category figures under
    ``by_category.<c>`` with both weightings named. Schema 1 files hold the levels at the top,
    one ``al_by_category`` per view: the request mean (Category_AL) in the ``speed_bench``
    view, the token-weighted AL in the others; they are reshaped, no number changed. Files
    written before the views were named hold ``al_stream`` and ``al_by_category`` (the stream
    view, token-weighted), ``al_counters`` (the counters view) and one ``conditional_ar`` (the
    counters' where there were counters, else the stream's).
    """
    if "schema_version" in acceptance:
        return stage_levels(acceptance)
    return {key: _named_categories(_named_views(entry)) for key, entry in acceptance.items()}


def _named_views(entry: dict[str, Any]) -> dict[str, Any]:
    """A level written before the views were named, as schema 1's views."""
    if not (set(entry) & LEGACY_KEYS):
        return entry
    views: dict[str, dict[str, Any]] = {}
    stream = {"al_token_weighted": entry.get("al_stream")}
    if entry.get("al_by_category"):
        stream["al_by_category"] = entry["al_by_category"]
    counters = {"al_token_weighted": entry.get("al_counters")}
    ar_owner = counters if entry.get("al_counters") is not None else stream
    if entry.get("conditional_ar") is not None:
        ar_owner["conditional_ar"] = entry["conditional_ar"]
    for name, figures in (("stream", stream), ("counters", counters)):
        present = {k: v for k, v in figures.items() if v is not None}
        if present:
            views[name] = present
    return views


def _named_categories(views: dict[str, Any]) -> dict[str, Any]:
    """Schema 1's ``al_by_category`` as schema 2's ``by_category`` with the weighting named."""
    out = {}
    for name, figures in views.items():
        figures = dict(figures)
        if (by_cat := figures.pop("al_by_category", None)) is not None:
            weighting = "al_request_mean" if name == "speed_bench" else "al_token_weighted"
            figures["by_category"] = {c: {weighting: al} for c, al in by_cat.items()}
        out[name] = figures
    return out


def migrate_stage_files(folder: Path) -> list[Path]:
    """Rewrite a stage folder's metrics files of an earlier schema in today's; returns them.

    Only the shape changes (:func:`upgrade`): levels nest under ``levels``,
    each view's per-category figures name their weighting; no number is recomputed. Files
    already in today's schema are left as they are.
    """
    changed = []
    for name in (ACCEPTANCE_FILE, THROUGHPUT_FILE, ORACLE_FILE, PROVENANCE_FILE):
        path = folder / name
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        if data.get("schema_version") == SCHEMA_VERSION:
            continue
        if name == PROVENANCE_FILE:
            data = {**data, "schema_version": SCHEMA_VERSION}
        elif name == ACCEPTANCE_FILE:
            data = versioned(upgrade(data))
        else:
            data = versioned(data)
        _write(path, data)
        changed.append(path)
    return changed


def _write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _round(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 6)
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v) for v in x]
    return x
