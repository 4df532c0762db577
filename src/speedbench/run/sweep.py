"""The sweep runner: every SD configuration x split x batch size, one engine launch per config.

This is the one loop that measures a grid. The CLI (``speedbench sweep``), the Prefect flow
(``flows/sweep.py``) and the DVC stages all run it; they differ only in the
:class:`SweepHooks` they pass:

- the CLI's hooks resume from disk (:class:`DiskResume`);
- the flow's hooks run each step as a Prefect task and log every level to MLflow as it lands.

The runner owns what must be the same everywhere:

- the order (the no-SD baseline first, so speedups are known as SD levels land);
- the speedup formula (:func:`speedbench.sweep_summary.with_speedup`);
- the failure path: an engine that fails to start or dies is a :class:`ConfigFailure`, the
  levels it did not reach are reported to ``level_failed``, and the next config runs;
- Ctrl-C: the engine is stopped, ``summary.json`` is written with status ``killed`` and the
  interrupt propagates (entry points exit 130).

Output layout under ``out_dir``::

    <config>/engine.log                 the engine's log
    <config>/<split>/bs<N>/...          one closed-loop level (see :mod:`speedbench.run.level`)
    <config>/<split>/rate<R>/...        one open-loop level (R requests/s)
    <config>/<split>/<load>/identity.json  what defines the level (the resume key)
    summary.json                        the SweepSummary, rewritten as each config ends
    oracle/...                          the greedy acceptance oracle (speedbench.oracle.in_sweep)
    plots/*.png                         conditional AR, Pareto, AL heatmap, speedup
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineError, get_engine
from speedbench.engines.launchers import OpenEngine, check_available
from speedbench.engines.running import engine_environment, free_port, passed_env
from speedbench.figures import LosslessFigures
from speedbench.hostcheck.cpu import cpu_info
from speedbench.metrics.lossless import lossless_check
from speedbench.oracle.in_sweep import (
    ORACLE_DIR,
    read_speedup_model,
    with_oracle,
    write_speedup_model,
)
from speedbench.oracle.predict import OracleLevel
from speedbench.provenance import GenerationProtocol, SweepProvenance
from speedbench.provision.models import engine_weights
from speedbench.records import read_parquet
from speedbench.report.html import write_sweep_report
from speedbench.report.plots import write_plots
from speedbench.run.best_k import recommendation_verdicts, with_best_k
from speedbench.run.context import sized_for
from speedbench.run.hooks import (
    DiskResume,
    GridPoint,
    Identity,
    PerCategory,
    SweepHooks,
    level_identity,
    stamp_identity,
)
from speedbench.run.interleave import EngineSlot, Residency, plan_residency, resident_engine
from speedbench.run.level import LevelResult, validate_items
from speedbench.run.plan import (
    check_concurrency,
    check_specs,
    config_identity,
    engine_config,
    first_per_category,
    load_settings,
    sampling_caveats,
    single_pass,
    sweep_prompts,
)
from speedbench.sweep_config import SweepConfig
from speedbench.sweep_summary import (
    ConfigFailure,
    SummaryRow,
    SweepSummary,
    break_even,
    load_key,
    speedup_key,
    summarize_sweep,
    with_speedup,
)
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings, WorkItem

log = logging.getLogger(__name__)


def _with_weights(spec: SpecConfig, draft: str | None) -> SpecConfig:
    """The spec as the engine loads it: the sweep's provisioned draft, or a head by path.

    A named head (an ``eagle_heads`` entry) that is a folder here goes to the engine by its
    absolute path, whatever directory the engine starts in; another name is a hub id.
    """
    if not spec.draft_model:
        return spec
    if not spec.variant:
        return spec.model_copy(update={"draft_model": draft})
    local = Path(spec.draft_model)
    return spec.model_copy(update={"draft_model": str(local.resolve())}) if local.is_dir() else spec


def run_sweep(
    config: SweepConfig,
    target: str,
    draft: str | None,
    items: Mapping[str, Sequence[WorkItem]],
    tokenizer: PromptTokenizer,
    hooks: SweepHooks | None = None,
) -> SweepSummary:
    """Run the grid of a :class:`SweepConfig` (the CLI's and the Prefect flow's entry).

    Args:
        config: The sweep form.
        target: The target's weights as the engine sees them (provisioned path or hub id).
        draft: The draft's weights, for methods that need one.
        items: Split name -> prompts (:func:`speedbench.run.plan.sweep_items`).
        tokenizer: The target's tokenizer.
        hooks: What the entry point adds; default :class:`DiskResume` unless ``config.force``.
    """
    weights_format = get_engine(config.engine.kind).weights_format
    target = engine_weights(target, weights_format)
    draft_source = draft  # the oracle's teacher-forced pass reads the provisioned weights
    draft = engine_weights(draft, weights_format) if draft else None
    engine, context = sized_for(
        engine_config(config, target), items, tokenizer, config.protocol.output_len, draft
    )
    if context is not None:
        print(f"context: {context.max_model_len:,} tokens, for prompts and answers to "
              f"{max(context.need_by_split.values()):,}")  # fmt: skip
        for split, need in context.beyond_draft.items():
            log.warning("%s: prompts and answers to %s tokens, beyond the %s the draft was "
                        "trained to", split, f"{need:,}", f"{context.draft_trained:,}")  # fmt: skip
    check_available(engine)
    passed_env(engine)  # a variable passed by name must be set before anything starts
    specs = [_with_weights(s, draft) for s in config.spec_configs()]
    check_specs(engine, specs)
    check_concurrency(engine, specs, config.load.batch_sizes)
    for caveat in sampling_caveats(
        engine, specs, config.protocol.temperature, config.protocol.seed
    ):
        log.warning(caveat)
    out = Path(config.output.out_dir) / config.name
    hooks = hooks or (SweepHooks() if config.output.force else DiskResume())
    summary = form_grid(config, engine, specs, items, hooks, tokenizer)
    if config.prompts.skip_placeholders or context is not None:  # what the numbers rest on
        update: dict[str, Any] = {"context": context}
        if config.prompts.skip_placeholders:  # fewer questions
            update["placeholders_skipped"] = sweep_prompts(config)[1]
        provenance = summary.provenance.model_copy(update=update)
        summary = summary.model_copy(update={"provenance": provenance})
        summary.write(out / "summary.json")
    if config.draft_cost and draft:
        summary = with_draft_cost(summary, config, engine, draft, items, tokenizer, out)
    if config.oracle:
        summary, baselines = oracle_baselines(summary, config, engine, items, tokenizer, out)
        summary, oracle = with_oracle(summary, config, engine, draft_source, baselines, out)
        if config.measure_best_k:
            summary = measure_best_k(
                summary, config, engine, specs, items, tokenizer, hooks, oracle
            )
        # The oracle's and the speedup model's plots beside the grid's.
        plots = [str(p) for p in write_plots(summary, out / "plots")]
        summary.plots = plots + [p for p in summary.plots if p not in plots]
        summary.write(out / "summary.json")
    for path in write_sweep_report(out):
        print(f"report: {path.resolve()}")
    return summary


def measure_best_k(
    summary: SweepSummary,
    config: SweepConfig,
    engine: EngineConfig,
    specs: Sequence[SpecConfig],
    items: Mapping[str, Sequence[WorkItem]],
    tokenizer: PromptTokenizer,
    hooks: SweepHooks,
    oracle: Sequence[OracleLevel],
) -> SweepSummary:
    """Measure the speedup model's best k where the grid did not; judge it against the grid's.

    The recommended levels are grid levels (same folders, identities, hooks: resumed and
    tracked like any); the speedup model gains their checks and the verdicts
    (:mod:`speedbench.run.best_k`).
    """
    out = Path(config.output.out_dir) / config.name
    model = read_speedup_model(out)
    if model is None:
        return summary
    config = single_pass(config)

    def measure(spec: SpecConfig, split: str, sizes: Sequence[int]) -> SweepSummary:
        return form_grid(
            config,
            engine,
            [spec],
            {split: items[split]},
            hooks,
            tokenizer,
            batch_sizes=sizes,
            baselines=[r for r in summary.levels if not r.is_speculative],
        )

    done, model = with_best_k(summary, model, oracle, specs, config.draft_lengths, measure)
    level_dir = lambda r: out / r.config / r.split / r.load  # noqa: E731
    verdicts = [
        v for k in config.draft_lengths for v in recommendation_verdicts(done, model, k, level_dir)
    ]
    model = model.model_copy(update={"recommendations": verdicts})
    write_speedup_model(model, out)
    done.plots = list(summary.plots)  # run_grid wrote its own; the sweep's are drawn after
    done.write(out / "summary.json")
    return done


def oracle_baselines(
    summary: SweepSummary,
    config: SweepConfig,
    engine: EngineConfig,
    items: Mapping[str, Sequence[WorkItem]],
    tokenizer: PromptTokenizer,
    out: Path,
) -> tuple[SweepSummary, list[tuple[SummaryRow, Path]]]:
    """The baseline levels the oracle replays (row and folder), measuring its own if asked.

    With ``oracle_per_category`` the oracle gets a no-SD level of its own at
    ``oracle_batch_size`` on that many prompts per category, in one more launch of the target
    (under ``<out>/oracle/baseline``, resumed from disk like any level); else it replays the
    sweep's closed-loop baseline levels.
    """
    if not config.oracle_per_category:
        rows = [r for r in summary.levels if not r.is_speculative and not r.open_loop]
        return summary, [(r, out / r.config / r.split / r.load) for r in rows]
    config = single_pass(config)
    size = config.oracle_batch_size or max(config.load.batch_sizes, default=1)
    count = config.oracle_per_category
    root = out / ORACLE_DIR / "baseline"
    print(f"measuring the oracle's baseline: bs {size}, {count} prompts per category")

    def identity(spec: SpecConfig, split: str, bs: int, rate: float | None) -> dict[str, Any]:
        ident = config_identity(config, engine, spec, split, bs, rate)
        return {**ident, "role": "oracle_baseline", "per_category": count}

    grid = run_grid(
        engine,
        [SpecConfig()],
        items,
        [size],
        root,
        settings=load_settings(config),
        tokenizer=tokenizer,
        hooks=SweepHooks() if config.output.force else DiskResume(),
        identity=identity,
        per_category=lambda bs, rate: count,
    )
    failed = [f.model_copy(update={"config": f"oracle baseline {f.config}"}) for f in grid.failures]
    done = summary.model_copy(update={"failures": [*summary.failures, *failed]})
    return done, [(r, root / r.config / r.split / r.load) for r in grid.levels]


def with_draft_cost(
    summary: SweepSummary,
    config: SweepConfig,
    engine: EngineConfig,
    draft: str,
    items: Mapping[str, Sequence[WorkItem]],
    tokenizer: PromptTokenizer,
    out: Path,
) -> SweepSummary:
    """Time the draft model alone at every batch size; add the break-even model to the summary.

    Its levels live under ``<out>/draft-alone`` (resumed from disk like any level) and in the
    summary's ``draft_alone`` rows, apart from the target's, so no table mixes the two models.
    """
    alone = engine.model_copy(update={"model": draft})
    config = single_pass(config)

    def identity(spec: SpecConfig, split: str, bs: int, rate: float | None) -> dict[str, Any]:
        ident = config_identity(config, alone, spec, split, bs, rate)
        return {**ident, "model": config.draft_model, "role": "draft_alone"}

    if not config.load.batch_sizes:
        return summary  # the break-even model compares closed-loop levels only
    print(f"timing the draft {config.draft_model} alone for the break-even model")
    drafts = run_grid(
        alone,
        [SpecConfig()],
        items,
        config.load.batch_sizes,
        out / "draft-alone",
        settings=load_settings(config),
        tokenizer=tokenizer,
        hooks=SweepHooks() if config.output.force else DiskResume(),
        identity=identity,
        per_category=config.prompts.per_category_at,
    )
    tpot = {speedup_key(r): r.tpot_p50_s for r in drafts.levels if r.tpot_p50_s}
    done = summary.model_copy(
        update={"draft_alone": drafts.levels, "break_even": break_even(summary.levels, tpot)}
    )
    failures = [*summary.failures, *(f.model_copy(update={"config": f"draft-alone {f.config}"})
                                     for f in drafts.failures)]  # fmt: skip
    done.failures = failures
    done.write(out / "summary.json")
    return done


def form_grid(
    config: SweepConfig,
    engine: EngineConfig,
    specs: Sequence[SpecConfig],
    items: Mapping[str, Sequence[WorkItem]],
    hooks: SweepHooks,
    tokenizer: PromptTokenizer | None = None,
    batch_sizes: Sequence[int] | None = None,
    baselines: Sequence[SummaryRow] = (),
) -> SweepSummary:
    """:func:`run_grid` as a sweep form asks for it: its load, identities, prompts per level.

    ``batch_sizes`` narrows the form's (a recommendation measured at some of them); open-loop
    rates are the form's only where its batch sizes are.
    """
    whole = batch_sizes is None
    return run_grid(
        engine,
        specs,
        items,
        config.load.batch_sizes if batch_sizes is None else batch_sizes,
        Path(config.output.out_dir) / config.name,
        settings=load_settings(config),
        tokenizer=tokenizer,
        hooks=hooks,
        identity=lambda spec, split, bs, rate: config_identity(
            config, engine, spec, split, bs, rate
        ),
        request_rates=config.load.request_rates if whole else (),
        rate_sweep=config.load.rate_sweep if whole else 0,
        per_category=config.prompts.per_category_at,
        baselines=baselines,
    )


def run_grid(
    engine: EngineConfig,
    specs: Sequence[SpecConfig],
    items: Mapping[str, Sequence[WorkItem]],
    batch_sizes: Sequence[int],
    out_dir: str | Path,
    *,
    settings: LoadSettings | None = None,
    tokenizer: PromptTokenizer | None = None,
    hooks: SweepHooks | None = None,
    identity: Identity | None = None,
    request_rates: Sequence[float] = (),
    rate_sweep: int = 0,
    per_category: PerCategory | None = None,
    baselines: Sequence[SummaryRow] = (),
) -> SweepSummary:
    """Measure every SD config on every split at every load point.

    Args:
        engine: The engine to launch (or attach to), once per SD config.
        specs: SD configurations; the no-SD baseline is moved first.
        items: Split name -> its prompts.
        batch_sizes: Closed-loop concurrency levels.
        out_dir: Output root (layout in the module docstring).
        settings: Load settings shared by every level (load point and split are set per level).
        tokenizer: Templates text prompts and validates token ids before anything starts.
        hooks: What the entry point adds (resume, tasks, tracking); default: nothing.
        identity: What defines a level, for resume and tracking; default: engine + settings.
        request_rates: Open-loop request rates (requests/s), measured after the batch sizes.
        rate_sweep: This many more rates per split, evenly spaced strictly between the
            baseline's request throughput at the smallest and the largest batch size
            (:func:`swept_rates`); they are known once the baseline's closed-loop levels are.
        per_category: Prompts per category at a load point (batch size, request rate), taken
            from the front of each category of ``items``; None (or a None answer): all items.
        baselines: No-SD rows measured before this grid (an earlier grid of the same sweep),
            so the levels it reports as they land carry their speedup.

    Returns:
        The sweep summary, also written to ``out_dir/summary.json``.
    """
    out = Path(out_dir)
    hooks = hooks or SweepHooks()
    base = settings or LoadSettings()
    identity = identity or level_identity(engine, base)
    if tokenizer is not None:
        for split_items in items.values():
            validate_items(split_items, tokenizer.vocab_size)
    ordered = sorted(specs, key=lambda s: s.is_speculative)  # stable: baseline first
    rows: list[SummaryRow] = []
    failures: list[ConfigFailure] = []
    provenance = SweepProvenance(
        engine=engine.kind,
        launcher=engine.launcher,
        dtype=engine.dtype,
        host_cpu=cpu_info(engine_env=engine_environment(engine)),
        protocol=GenerationProtocol(
            max_tokens=base.max_tokens,
            ignore_eos=base.ignore_eos,
            temperature=base.temperature,
            max_turns=max((i.num_turns for s in items.values() for i in s), default=1),
        ),
    )
    cap = base.max_concurrency or 0

    def point(spec: SpecConfig, split: str, bs: int, rate: float | None = None) -> GridPoint:
        where = out / spec.label / split / load_key(bs, rate)
        count = per_category(bs, rate) if per_category else None
        return GridPoint(spec, split, bs, where, identity(spec, split, bs, rate), rate, count)

    def rate_points(spec: SpecConfig) -> list[GridPoint] | None:
        """The spec's open-loop levels; None while the swept rates are not known yet."""
        points = []
        for split in items:
            rates = list(request_rates)
            if rate_sweep:
                swept = swept_rates(rows, split, rate_sweep)
                if swept is None:
                    return None
                rates = list(dict.fromkeys([*rates, *swept]))
            points += [point(spec, split, cap, rate) for rate in rates]
        return points

    if base.interleave != "off" and len(ordered) > 1 and not ordered[0].is_speculative:
        try:
            _interleaved_grid(
                engine, ordered, items, batch_sizes, point, base, tokenizer, hooks, rows,
                failures, out, provenance, baselines,
            )  # fmt: skip
        except KeyboardInterrupt:
            _finish(rows, failures, out, "killed", provenance)
            raise
        status = "failed" if failures else "finished"
        return _finish(rows, failures, out, status, provenance, plots=True)
    try:
        for spec in ordered:
            closed = [point(spec, split, bs) for split in items for bs in batch_sizes]
            todo = _not_resumed(spec, closed, hooks, rows, base, out)
            opened = rate_points(spec)
            if opened is not None:
                todo += _not_resumed(spec, opened, hooks, rows, base, out)
            later = None if opened is not None else (lambda spec=spec: rate_points(spec) or [])
            if todo or later is not None:
                failure = _measure_config(
                    engine, spec, todo, later, items, base, tokenizer, hooks, rows, out,
                    provenance, baselines,
                )  # fmt: skip
                if failure is not None:
                    failures.append(failure)
            _finish(rows, failures, out, "running", provenance)
    except KeyboardInterrupt:
        _finish(rows, failures, out, "killed", provenance)
        raise
    status = "failed" if failures else "finished"
    return _finish(rows, failures, out, status, provenance, plots=True)


def swept_rates(rows: Sequence[SummaryRow], split: str, count: int) -> list[float] | None:
    """``count`` request rates between the baseline's slowest and fastest closed-loop levels.

    As GuideLLM's sweep (synchronous and throughput first, constant rates in between): evenly
    spaced strictly between the baseline's request throughput at its smallest and at its
    largest batch size on ``split``; None until both are measured. Rates are rounded to
    3 significant digits, so folders and run names stay readable.
    """
    closed = {
        r.batch_size: r.request_throughput_rps
        for r in rows
        if not r.is_speculative and r.split == split and not r.open_loop
    }
    if len(closed) < 2:
        return None
    low, high = closed[min(closed)], closed[max(closed)]
    if not low or not high:
        return None
    low, high = sorted((low, high))
    step = (high - low) / (count + 1)
    return [float(f"{low + step * (i + 1):.3g}") for i in range(count)]


def _not_resumed(
    spec: SpecConfig,
    points: Sequence[GridPoint],
    hooks: SweepHooks,
    rows: list[SummaryRow],
    settings: LoadSettings,
    out: Path,
) -> list[GridPoint]:
    """The points still to measure; the rows of those measured before join ``rows``."""
    todo = []
    for p in points:
        kept = hooks.resumed(p)
        if kept is not None:
            rows.append(_row(spec, p, kept, settings, out))
        else:
            todo.append(p)
    return todo


def _measure_config(
    engine: EngineConfig,
    spec: SpecConfig,
    todo: Sequence[GridPoint],
    later: Callable[[], list[GridPoint]] | None,
    items: Mapping[str, Sequence[WorkItem]],
    settings: LoadSettings,
    tokenizer: PromptTokenizer | None,
    hooks: SweepHooks,
    rows: list[SummaryRow],
    out: Path,
    provenance: SweepProvenance,
    baselines: Sequence[SummaryRow] = (),
) -> ConfigFailure | None:
    """One engine launch: the config's pending levels in order; a failure ends the config.

    ``later`` gives more levels once ``todo`` is measured (the swept rates, which follow from
    the baseline's closed-loop levels); those measured before are kept, not re-measured.
    """
    log_path = out / spec.label / "engine.log"
    handle: OpenEngine | None = None
    pending = list(todo)
    measured: set[GridPoint] = set()
    try:
        handle = hooks.start_engine(engine, spec, log_path)
        provenance.engine_versions[spec.label] = hooks.engine_version(handle)
        while pending or later is not None:
            if not pending:
                assert later is not None
                pending = _not_resumed(spec, later(), hooks, rows, settings, out)
                later = None
                continue
            point = pending.pop(0)
            level = _measure_point(handle, point, items, settings, tokenizer, hooks)
            measured.add(point)
            row = _row(spec, point, level, settings, out)
            if not level.failed:
                rows.append(row)
            # The row's speedup, by the one formula, against the baselines measured so far.
            row = with_speedup(row, [*baselines, *rows])
            hooks.level_done(point, level, row)
            if level.failed:
                raise EngineError(level.failed)
    except EngineError as exc:
        log.error("config %s failed: %s", spec.label, exc)
        print(f"config {spec.label} failed: {exc}")
        for point in [*todo, *pending]:
            if point not in measured:
                hooks.level_failed(point, str(exc), log_path)
        return ConfigFailure(config=spec.label, error=str(exc))
    finally:
        if handle is not None:
            # Directly, not through a hook: this also runs while a Ctrl-C unwinds.
            handle.close()
    return None


def _interleaved_grid(
    engine: EngineConfig,
    specs: Sequence[SpecConfig],
    items: Mapping[str, Sequence[WorkItem]],
    batch_sizes: Sequence[int],
    point: Callable[[SpecConfig, str, int], GridPoint],
    settings: LoadSettings,
    tokenizer: PromptTokenizer | None,
    hooks: SweepHooks,
    rows: list[SummaryRow],
    failures: list[ConfigFailure],
    out: Path,
    provenance: SweepProvenance,
    baselines: Sequence[SummaryRow],
) -> None:
    """Every grid point's configs in alternating rounds (:mod:`speedbench.run.interleave`).

    ``resident``: every config's engine is launched once, up front, on its own port, and kept
    up for the whole grid; ``relaunch``: each block launches its config's engine. A config
    whose engine fails to start or dies is a :class:`ConfigFailure`, its levels not measured
    are reported to ``level_failed``, and the other configs go on. A grid point is resumed only
    when every config's level there is on disk.
    """
    resident_mode = settings.interleave == "resident"
    if engine.launcher == "external":
        raise EngineError(
            f"interleave {settings.interleave} launches one engine per SD config; an external "
            "server is one config's: set interleave: off"
        )
    by_label = {s.label: s for s in specs}
    if resident_mode:
        residency = plan_residency(engine, specs)
        print(f"interleave resident: {residency.describe()}")
    else:
        residency = Residency({s.label: resident_engine(engine, i, 1) for i, s in enumerate(specs)})
    engines = residency.engines
    log_path = {s.label: out / s.label / "engine.log" for s in specs}
    handles: dict[str, OpenEngine] = {}
    alive = [s.label for s in specs]

    def start(label: str) -> OpenEngine:
        if engines[label].port != engine.port:
            # Its planned port (the sweep's + its index) may have become a client socket's
            # source port since (both lie in the ephemeral range): picked free at its launch.
            engines[label] = engines[label].model_copy(update={"port": free_port()})
        handle = hooks.start_engine(engines[label], by_label[label], log_path[label])
        provenance.engine_versions[label] = hooks.engine_version(handle)
        return handle

    slot = EngineSlot(start) if residency.shared else None

    def fail(label: str, error: str, points: Sequence[GridPoint]) -> None:
        log.error("config %s failed: %s", label, error)
        print(f"config {label} failed: {error}")
        for p in points:
            hooks.level_failed(p, error, log_path[label])
        failures.append(ConfigFailure(config=label, error=error))
        alive.remove(label)

    grid = [(split, bs) for split in items for bs in batch_sizes]

    def pending(label: str, start: int) -> list[GridPoint]:
        return [point(by_label[label], split, bs) for split, bs in grid[start:]]

    try:
        for index, (split, bs) in enumerate(grid):
            points = {s.label: point(s, split, bs) for s in specs if s.label in alive}
            kept = {label: hooks.resumed(p) for label, p in points.items()}
            if all(level is not None for level in kept.values()):
                for label, level in kept.items():
                    assert level is not None
                    rows.append(_row(by_label[label], points[label], level, settings, out))
                continue
            if resident_mode:
                for label in [lb for lb in points if lb not in handles]:
                    if label in residency.shared:
                        continue
                    try:
                        handles[label] = start(label)
                    except EngineError as exc:
                        fail(label, str(exc), pending(label, index))
                        del points[label]
            if "none" not in points or len(points) < 2:
                for label in list(points):
                    fail(label, "no pair to interleave with: the baseline or every SD config "
                         "failed", pending(label, index))  # fmt: skip
                return
            for p in points.values():
                stamp_identity(p)
            levels = hooks.run_interleaved(
                {label: p.spec for label, p in points.items()},
                first_per_category(items[split], next(iter(points.values())).per_category),
                dataclasses.replace(settings, batch_size=max(bs, 1), split=split),
                tokenizer,
                {label: p.directory for label, p in points.items()},
                {label: engines[label] for label in points},
                {label: handles[label].running for label in points if label in handles}
                if resident_mode
                else None,
                {label: log_path[label] for label in points},
                slot,
            )
            unstarted = slot.failures if slot is not None else {}
            for label, error in list(unstarted.items()):
                del unstarted[label]
                if label not in levels:  # its engine never started at this point
                    fail(label, error, pending(label, index))
            for label in [s.label for s in specs if s.label in levels]:
                level, p = levels[label], points[label]
                row = _row(by_label[label], p, level, settings, out)
                if not level.failed:
                    rows.append(row)
                hooks.level_done(p, level, with_speedup(row, [*baselines, *rows]))
                if level.failed:
                    fail(label, level.failed, pending(label, index + 1))
                    if label in handles:
                        handles.pop(label).close()
    finally:
        for handle in handles.values():
            handle.close()
        if slot is not None:
            print(f"interleave resident: {slot.swaps} slot swaps")
            slot.close()


def _measure_point(
    handle: OpenEngine,
    point: GridPoint,
    items: Mapping[str, Sequence[WorkItem]],
    settings: LoadSettings,
    tokenizer: PromptTokenizer | None,
    hooks: SweepHooks,
) -> LevelResult:
    """Stamp the level's identity on disk, then measure it at its load point."""
    stamp_identity(point)
    level_settings = dataclasses.replace(
        settings, batch_size=max(point.batch_size, 1), split=point.split,
        request_rate=point.request_rate,
    )  # fmt: skip
    level_items = first_per_category(items[point.split], point.per_category)
    return hooks.run_level(handle.running, level_items, level_settings, tokenizer, point.directory)


def _row(
    spec: SpecConfig, point: GridPoint, level: LevelResult, settings: LoadSettings, out: Path
) -> SummaryRow:
    """A level's summary row, with its lossless check on greedy SD levels."""
    row = SummaryRow.of(
        spec.label, point.split, point.batch_size, level.metrics, point.request_rate
    )
    if spec.is_speculative and settings.temperature == 0:
        row.lossless = _lossless(level, out / "none" / point.split / point.load)
    return row


def _lossless(level: LevelResult, baseline_dir: Path) -> LosslessFigures | None:
    """The level's greedy outputs against the baseline's (None without a baseline on disk)."""
    base, mine = baseline_dir / "records.parquet", level.directory / "records.parquet"
    if not base.exists() or not mine.exists():
        return None
    check = lossless_check(read_parquet(mine), read_parquet(base))
    if check.compared and check.matched < check.compared:
        first = check.mismatches[0]
        log.warning(
            "%s %s bs%d: %d of %d outputs differ from the baseline (first: %s turn %d at "
            "token %d); expected below float32 (a bf16 verify step of k + 1 tokens rounds "
            "otherwise than a one-token decode), a bug at float32",
            level.label, level.split, level.batch_size, check.compared - check.matched,
            check.compared, first.prompt_id, first.turn, first.first_divergence,
        )  # fmt: skip
    return check


def _finish(
    rows: Sequence[SummaryRow],
    failures: Sequence[ConfigFailure],
    out: Path,
    status: str,
    provenance: SweepProvenance,
    plots: bool = False,
) -> SweepSummary:
    update = {"status": status, "provenance": provenance}
    summary = summarize_sweep(rows, failures).model_copy(update=update)
    if plots:
        summary.plots = [str(p) for p in write_plots(summary, out / "plots")]
    summary.write(out / "summary.json")
    return summary
