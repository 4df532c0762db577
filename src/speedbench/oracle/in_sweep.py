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
  draft's cost is known (n-gram: none), and the best k there;
- the speedup model (:mod:`speedbench.oracle.recommend`) prices every k at every batch size
  with step costs fitted on the sweep's no-SD and draft-alone levels, checks each measured SD
  level against it, and writes the best k per batch size as a schedule each engine loads.

Output, beside the grid's::

    oracle/baseline/none/<split>/bs<N>/   the oracle's own baseline level (oracle_per_category)
    oracle/<drafter>/<split>/bs<N>/oracle.json   the OracleLevel, per-question figures included
    oracle/speedup_model.json             step costs, predicted speedup by k, checks, schedules
    oracle/schedule-<drafter>.json        the schedule as vLLM and SGLang load it

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
from speedbench.engines import get_engine
from speedbench.oracle.predict import (
    NGRAM_MAX,
    NGRAM_MIN,
    OracleDrafter,
    OracleK,
    OracleLevel,
    Prediction,
    best_k,
    break_even_at,
    check_measured,
    figures_at,
    predict,
)
from speedbench.oracle.profile import SpeculationProfile, profile_requests
from speedbench.oracle.recommend import (
    MIN_CHANGE,
    SPEEDUP_MODEL_FILE,
    KSchedule,
    SpeedupModel,
    schedule,
    speedup_model,
)
from speedbench.oracle.schedule import engine_schedules
from speedbench.oracle.speedup import ReplayRequest
from speedbench.oracle.variants import PrunedVocab, draft_variants, pruned_vocab
from speedbench.provision.models import resolve_dtype
from speedbench.records import measured, read_parquet
from speedbench.results import LevelMetrics, write_json
from speedbench.sweep_config import SweepConfig
from speedbench.sweep_summary import ConfigFailure, SummaryRow, SweepSummary

log = logging.getLogger(__name__)

ORACLE_DIR = "oracle"


def baseline_eos(directory: Path) -> int | None:
    """The EOS a baseline level stopped at (None: it ran with ignore_eos, or is not recorded)."""
    path = directory / "metrics.json"
    if not path.exists():
        return None
    return LevelMetrics.read(path).config.eos_token_id


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
    vocab: PrunedVocab | None = None,
    trees: Sequence[str] = (),
) -> tuple[OracleLevel, Prediction]:
    """One drafter over one baseline level: figures per k, checks, break-even, best k.

    A draft model's level also gets the draft's pruned vocabularies (``vocab``) and static
    ``trees`` from the same pass (:mod:`speedbench.oracle.variants`). Returns the level and
    the prediction it was made from (the speedup model replays it).
    """
    eos_id = baseline_eos(records_dir)
    records = read_parquet(records_dir / "records.parquet")
    kept = vocab.kept if vocab is not None and drafter == "draft_model" else None
    prediction = predict(records, drafter, ks, draft=draft, ngram=(NGRAM_MIN, NGRAM_MAX),
                         max_model_len=max_model_len, kept=kept)  # fmt: skip
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
    variants = None
    if prediction.draft_pass is not None and (kept or trees):
        source = vocab.source if vocab is not None else None
        variants = draft_variants(prediction, prediction.draft_pass, ks, kept or {}, source,
                                  trees, eos_id)  # fmt: skip
    return level.model_copy(update={"best_k": best, "variants": variants}), prediction


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
    dtype = resolve_dtype(engine.dtype)
    draft = None
    vocab = None
    if "draft_model" in config.oracle and draft_weights:
        from speedbench.oracle.draft import load_draft

        draft = load_draft(draft_weights, dtype)
        if config.oracle_draft_vocab:
            vocab = pruned_vocab(draft_weights, config.oracle_draft_vocab)
    levels: list[OracleLevel] = []
    predictions: list[tuple[OracleLevel, Prediction]] = []
    for row, records_dir in baselines:
        for drafter in config.oracle:
            print(f"oracle {drafter}: k = 1..{ks[-1]} over {row.split} {row.load}")
            try:
                level, prediction = oracle_level(
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
                    vocab=vocab,
                    trees=config.oracle_trees,
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
            predictions.append((level, prediction))
    if predictions and config.speedup_model:
        budget = get_engine(engine.kind).iteration_token_budget(engine)
        failures += with_speedup_model(
            summary, config, baselines, predictions, out, config.draft_lengths, budget
        )
    done = summary.model_copy(update={"failures": failures})
    done.write(out / "summary.json")
    return done, levels


def with_speedup_model(
    summary: SweepSummary,
    config: SweepConfig | None,
    baselines: Sequence[tuple[SummaryRow | None, Path]],
    predictions: Sequence[tuple[OracleLevel, Prediction]],
    out: Path,
    measured_ks: Sequence[int] = (),
    token_budget: int | None = None,
) -> list[ConfigFailure]:
    """Fit step costs, predict every k, check the measured SD levels, write the schedules.

    ``measured_ks``: the grid's draft lengths, which a recommendation keeps unless another k
    is predicted faster by more than the drafter's noise
    (:func:`~speedbench.oracle.recommend.decide`).
    ``token_budget``: the engine's cap on one iteration's tokens (chunked prefill), where
    known (:meth:`~speedbench.engines.base.EngineAdapter.iteration_token_budget`).

    Calibrated on every closed-loop no-SD level of the target (the grid's and the oracle's own
    baseline) and every draft-alone level; no SD level's timings are an input. Returns the
    failure to record where the no-SD levels cannot be calibrated on (none otherwise).
    """
    target = {
        f"{r.config}/{r.split}/{r.load}": out / r.config / r.split / r.load
        for r in summary.levels
        if not r.is_speculative and not r.open_loop
    }
    for _, folder in baselines:
        label = str(folder.relative_to(out)) if folder.is_relative_to(out) else str(folder)
        target.setdefault(label, folder)
    draft = [
        (
            f"draft-alone/{r.config}/{r.split}/{r.load}",
            out / "draft-alone" / r.config / r.split / r.load,
        )
        for r in summary.draft_alone
        if not r.open_loop
    ]
    try:
        model = speedup_model(
            summary, predictions, lambda r: out / r.config / r.split / r.load,
            sorted(target.items()), draft, measured_ks=measured_ks, token_budget=token_budget,
        )  # fmt: skip
    except ValueError as exc:
        print(f"speedup model failed: {exc}")
        return [ConfigFailure(config="speedup-model", error=str(exc))]
    write_speedup_model(model, out)
    ngram = (NGRAM_MIN, NGRAM_MAX)
    for plan in model.schedules:
        drafts = plan.drafter == "draft_model"
        draft_model = config.draft_model if config else _draft_name(predictions)
        files = engine_schedules(
            plan.drafter, plan.ranges, draft_model if drafts else None,
            None if drafts else ngram,
        )  # fmt: skip
        write_json(out / ORACLE_DIR / f"schedule-{plan.drafter}.json", files)
    for check in model.checks:
        print(
            f"speedup model: {check.level} measured {check.measured_speedup or float('nan'):.2f}x, "
            f"predicted {check.predicted_speedup or float('nan'):.2f}x"
        )
    return []


def _draft_name(predictions: Sequence[tuple[OracleLevel, Prediction]]) -> str | None:
    return next((lv.draft_model for lv, _ in predictions if lv.draft_model), None)


def refit_speedup_model(out: Path, token_budget: int | None = None) -> SpeedupModel | None:
    """The speedup model of a finished sweep fitted again on its records (``speedbench tune``).

    The oracle's streams are replayed again from each oracle level's baseline (the draft's
    teacher-forced pass runs again); the measured recommendations of the earlier model are
    kept, since they are measurements. ``token_budget``: the engine's iteration cap (default:
    the one the earlier model recorded). None where the sweep ran no oracle.

    Raises:
        ValueError: An oracle level's baseline records are gone.
    """
    summary = SweepSummary.read(out / "summary.json")
    levels = read_oracle(out)
    if not levels:
        return None
    previous = read_speedup_model(out)
    predictions = []
    baselines: list[tuple[SummaryRow | None, Path]] = []
    drafts: dict[tuple[str, str], Any] = {}
    for level in levels:
        folder = Path(level.baseline)
        if not (folder / "records.parquet").exists():
            raise ValueError(f"{folder}: the oracle's baseline records are gone")
        draft = None
        if level.drafter == "draft_model" and level.draft_model and level.dtype:
            from speedbench.oracle.draft import load_draft
            from speedbench.provision.models import resolve_model

            key = (level.draft_model, level.dtype)
            if key not in drafts:
                drafts[key] = load_draft(resolve_model(key[0], dtype=key[1]), key[1])
            draft = drafts[key]
        ks = [f.k for f in level.by_k]
        ngram = (level.ngram_min or NGRAM_MIN, level.ngram_max or NGRAM_MAX)
        records = read_parquet(folder / "records.parquet")
        predictions.append((level, predict(records, level.drafter, ks, draft=draft, ngram=ngram)))
        baselines.append((None, folder.resolve()))
    measured_ks = previous.measured_ks if previous is not None else ()
    if token_budget is None and previous is not None:
        token_budget = previous.token_budget
    failures = with_speedup_model(
        summary, None, baselines, predictions, out.resolve(), measured_ks, token_budget
    )
    if failures:
        raise ValueError(failures[0].error)
    model = read_speedup_model(out)
    if model is not None and previous is not None and previous.recommendations:
        model = model.model_copy(update={"recommendations": previous.recommendations})
        write_speedup_model(model, out)
    return model


def write_speedup_model(model: SpeedupModel, out: Path) -> None:
    """The model's JSON in a sweep's output folder (its plot: ``report.plots.write_plots``)."""
    write_json(out / ORACLE_DIR / SPEEDUP_MODEL_FILE, model.model_dump(mode="json"))


def read_speedup_model(out: Path) -> SpeedupModel | None:
    """The speedup model of a sweep's output folder (None where none was made)."""
    path = out / ORACLE_DIR / SPEEDUP_MODEL_FILE
    return SpeedupModel.model_validate_json(path.read_text()) if path.exists() else None


def speedup_scalars(model: SpeedupModel | None) -> dict[str, float]:
    """The speedup model's figures as flat metrics for a tracker (MLflow parent run)."""
    if model is None:
        return {}
    out: dict[str, float] = {}
    for c in model.curves:
        prefix = f"speedup_model.{c.drafter}.{c.split}.bs{c.batch_size}"
        out.update({f"{prefix}.k{k}.predicted_speedup": v for k, v in c.speedup.items()})
        out[f"{prefix}.best_k"] = float(c.best_k)
        out[f"{prefix}.recommended_k"] = float(c.recommended_k)
    for check in model.checks:
        prefix = f"speedup_model.check.{check.level.replace('/', '.')}"
        for name in ("measured_speedup", "predicted_speedup", "error"):
            if (value := getattr(check, name)) is not None:
                out[f"{prefix}.{name}"] = value
    return out


def oracle_paths(out: Path) -> list[Path]:
    """The oracle's files in a sweep folder: oracle.json files, speedup model, schedules.

    Their plots are among the summary's (``report.plots.write_plots``).
    """
    extra = [
        out / ORACLE_DIR / SPEEDUP_MODEL_FILE,
        *sorted((out / ORACLE_DIR).glob("schedule-*.json")),
    ]
    found = sorted((out / ORACLE_DIR).glob("*/*/*/oracle.json"))
    return found + [p for p in extra if p.exists()]


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


def profile_schedule(
    out: Path, profile: SpeculationProfile, max_batch_size: int | None = None
) -> KSchedule:
    """The schedule a speculation profile implies on this sweep's host (``tune --profile``).

    The sweep's fitted step costs price it (the target's, and the profile's drafter's passes:
    a draft model's or prompt lookup's, fitted on this sweep's SD levels); the requests are
    the oracle's baseline of the profile's split (else the sweep's largest-batch baseline),
    their steps drawn from the profile at every k up to its own
    (:func:`~speedbench.oracle.profile.profile_requests`). Batch sizes run 1..the largest the
    sweep measured.

    Raises:
        ValueError: No speedup model, no fitted cost for the profile's drafter, or no
            baseline records to replay.
    """
    model = read_speedup_model(out)
    if model is None:
        raise ValueError(f"{out}: no oracle/speedup_model.json to price the profile with")
    fitted = {"draft_model": model.draft_pass, "ngram": model.ngram_search}
    if fitted.get(profile.method) is None:
        raise ValueError(
            f"{out}: the speedup model has no fitted pass cost for {profile.method} (it has "
            f"{', '.join(m for m, c in fitted.items() if c is not None) or 'none'}): this "
            "host has not measured that drafter's cost"
        )
    summary = SweepSummary.read(out / "summary.json")
    split = profile.measurement_conditions.get("split")
    folders = [Path(level.baseline) for level in read_oracle(out) if level.split == split]
    closed = [r for r in summary.levels if not r.open_loop and not r.is_speculative]
    folders += [out / r.config / r.split / r.load
                for r in sorted(closed, key=lambda r: -r.batch_size)]  # fmt: skip
    folder = next((f for f in folders if (f / "records.parquet").exists()), None)
    if folder is None:
        raise ValueError(f"{out}: no baseline records to replay the profile on")
    sent = sorted((r for r in measured(read_parquet(folder / "records.parquet")) if r.repeat == 0),
                  key=lambda r: r.start_s)  # fmt: skip
    baseline = [ReplayRequest.baseline(r.prompt_tokens, r.output_tokens)
                for r in sent]  # fmt: skip
    ks = range(1, profile.num_speculative_tokens + 1)
    if profile.accept_length_model != "chain_analytic":
        ks = range(profile.num_speculative_tokens, profile.num_speculative_tokens + 1)
    requests = {0: baseline, **{k: profile_requests(baseline, profile, k) for k in ks}}
    top = max_batch_size or max((r.batch_size for r in closed), default=1)
    passes = fitted[profile.method]
    assert passes is not None  # checked above
    ranges, gains = schedule(requests, top, model.target.costs(), passes.costs(),
                             profile.method, model.measured_ks, model.token_budget,
                             model.noise.get(profile.method, MIN_CHANGE - 1))  # fmt: skip
    return KSchedule(drafter=profile.method, split=split or folder.parent.name,
                     ranges=ranges, speedup=gains)  # fmt: skip
