"""The sweep runner: every SD configuration x split x batch size, one engine launch per config.

This is the one loop that measures a grid. The CLI (``speedbench sweep``), the Prefect flow
(``flows/sweep.py``) and the DVC stages all run it; they differ only in the
:class:`SweepHooks` they pass:

- the CLI's hooks resume from disk (:class:`DiskResume`);
- the flow's hooks run each step as a Prefect task and log every level to MLflow as it lands.

The runner owns what must be the same everywhere:

- the order (the no-SD baseline first, so speedups are known as SD levels land);
- the speedup formula (:func:`speedbench.results.with_speedup`);
- the failure path: an engine that fails to start or dies is a :class:`ConfigFailure`, the
  levels it did not reach are reported to ``level_failed``, and the next config runs;
- Ctrl-C: the engine is stopped, ``summary.json`` is written with status ``killed`` and the
  interrupt propagates (entry points exit 130).

Output layout under ``out_dir``::

    <config>/engine.log                 the engine's log
    <config>/<split>/bs<N>/...          one level (see :mod:`speedbench.level`)
    <config>/<split>/bs<N>/identity.json  what defines the level (the resume key)
    summary.json                        the SweepSummary, rewritten as each config ends
    plots/*.png                         conditional AR, Pareto, AL heatmap, speedup
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from speedbench.client.loadgen import LoadSettings, WorkItem
from speedbench.config import EngineConfig, SpecConfig, SweepConfig
from speedbench.engines.base import EngineError
from speedbench.engines.launchers import OpenEngine, check_available
from speedbench.engines.running import RunningEngine
from speedbench.host import cpu_info
from speedbench.level import LevelResult, load_level, measure_level, validate_items
from speedbench.metrics.lossless import lossless_check
from speedbench.plan import config_identity, engine_config, load_settings
from speedbench.records import read_parquet
from speedbench.report.plots import write_plots
from speedbench.results import (
    ConfigFailure,
    LosslessFigures,
    SummaryRow,
    SweepSummary,
    break_even,
    finite,
    speedup_key,
    summarize_sweep,
    with_speedup,
)
from speedbench.tokenize import PromptTokenizer

log = logging.getLogger(__name__)

IDENTITY_FILE = "identity.json"


@dataclasses.dataclass(frozen=True, eq=False)
class GridPoint:
    """One level of the grid: where its results go and what defines it."""

    spec: SpecConfig
    split: str
    batch_size: int
    directory: Path
    identity: dict[str, Any]

    @property
    def name(self) -> str:
        """``<config> <split> bs<N>``, as runs and log lines are named."""
        return f"{self.spec.label} {self.split} bs{self.batch_size}"

    @property
    def identity_hash(self) -> str:
        """A short stable hash of the identity (MLflow tag, resume key)."""
        return config_hash(self.identity)


def config_hash(identity: dict[str, Any]) -> str:
    """A short stable hash of a configuration identity."""
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class SweepHooks:
    """What an entry point adds to the runner. The defaults measure in-process, track nothing.

    Subclasses override the steps they wrap (the Prefect flow runs ``start_engine`` and
    ``run_level`` as tasks) and the events they record (``level_done`` and ``level_failed``
    log MLflow runs). ``resumed`` returns a level measured before to keep instead of
    re-measuring it.
    """

    def resumed(self, point: GridPoint) -> LevelResult | None:
        """A finished earlier measurement of ``point`` to keep (None: measure it)."""
        return None

    def start_engine(self, engine: EngineConfig, spec: SpecConfig, log_path: Path) -> OpenEngine:
        """Launch the engine for one SD config (healthy and warmed up)."""
        return OpenEngine(engine, spec, log_path)

    def run_level(
        self,
        running: RunningEngine,
        items: Sequence[WorkItem],
        settings: LoadSettings,
        tokenizer: PromptTokenizer | None,
        directory: Path,
    ) -> LevelResult:
        """Measure one level; its records are on disk as they arrive."""
        return measure_level(running, items, settings, tokenizer, directory)

    def engine_version(self, handle: OpenEngine) -> str:
        """The started engine's version, recorded with the sweep's provenance."""
        return handle.running.version()

    def level_done(self, point: GridPoint, level: LevelResult, row: SummaryRow) -> None:
        """A level was measured (``level.failed`` says whether the engine died during it)."""

    def level_failed(self, point: GridPoint, error: str, log_path: Path) -> None:
        """A level could not be measured because its config's engine failed."""


class DiskResume(SweepHooks):
    """Keep levels already on disk whose identity matches and whose engine did not fail."""

    def resumed(self, point: GridPoint) -> LevelResult | None:
        """The level on disk, if it was finished with the same identity."""
        kept = finished_on_disk(point)
        if kept is not None:
            print(f"skip {point.name}: measured earlier with the same settings ({kept.directory})")
        return kept


def finished_on_disk(point: GridPoint) -> LevelResult | None:
    """The level measured earlier at ``point``, if its identity matches and it did not fail."""
    stamp = point.directory / IDENTITY_FILE
    if not stamp.exists() or json.loads(stamp.read_text()).get("hash") != point.identity_hash:
        return None
    level = load_level(point.directory, point.spec.label, point.split, point.batch_size)
    return level if level is not None and not level.failed else None


def default_identity(
    engine: EngineConfig, settings: LoadSettings
) -> Callable[[SpecConfig, str, int], dict[str, Any]]:
    """An identity from the engine, the SD config, the split, the batch size and the settings."""

    def identity(spec: SpecConfig, split: str, batch_size: int) -> dict[str, Any]:
        return {
            "engine": engine.kind,
            "launcher": engine.launcher,
            "model": engine.model,
            "dtype": engine.dtype,
            "spec": spec.model_dump(),
            "split": split,
            "batch_size": batch_size,
            "output_len": settings.max_tokens,
            "temperature": settings.temperature,
            "seed": settings.seed,
        }

    return identity


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
        items: Split name -> prompts (:func:`speedbench.plan.sweep_items`).
        tokenizer: The target's tokenizer.
        hooks: What the entry point adds; default :class:`DiskResume` unless ``config.force``.
    """
    engine = engine_config(config, target)
    check_available(engine)
    specs = [
        s.model_copy(update={"draft_model": draft}) if s.draft_model else s
        for s in config.spec_configs()
    ]
    out = Path(config.out_dir) / config.name
    hooks = hooks or (SweepHooks() if config.force else DiskResume())
    summary = run_grid(
        engine,
        specs,
        items,
        config.batch_sizes,
        out,
        settings=load_settings(config),
        tokenizer=tokenizer,
        hooks=hooks,
        identity=lambda spec, split, bs: config_identity(config, engine, spec, split, bs),
    )
    if config.draft_cost and draft:
        summary = with_draft_cost(summary, config, engine, draft, items, tokenizer, out)
    return summary


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

    def identity(spec: SpecConfig, split: str, bs: int) -> dict[str, Any]:
        ident = config_identity(config, alone, spec, split, bs)
        return {**ident, "model": config.draft_model, "role": "draft_alone"}

    print(f"timing the draft {config.draft_model} alone for the break-even model")
    drafts = run_grid(
        alone,
        [SpecConfig()],
        items,
        config.batch_sizes,
        out / "draft-alone",
        settings=load_settings(config),
        tokenizer=tokenizer,
        hooks=SweepHooks() if config.force else DiskResume(),
        identity=identity,
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
    identity: Callable[[SpecConfig, str, int], dict[str, Any]] | None = None,
) -> SweepSummary:
    """Measure every SD config on every split at every batch size.

    Args:
        engine: The engine to launch (or attach to), once per SD config.
        specs: SD configurations; the no-SD baseline is moved first.
        items: Split name -> its prompts.
        batch_sizes: Concurrency levels.
        out_dir: Output root (layout in the module docstring).
        settings: Load settings shared by every level (batch size and split are set per level).
        tokenizer: Templates text prompts and validates token ids before anything starts.
        hooks: What the entry point adds (resume, tasks, tracking); default: nothing.
        identity: What defines a level, for resume and tracking; default: engine + settings.

    Returns:
        The sweep summary, also written to ``out_dir/summary.json``.
    """
    out = Path(out_dir)
    hooks = hooks or SweepHooks()
    base = settings or LoadSettings()
    identity = identity or default_identity(engine, base)
    if tokenizer is not None:
        for split_items in items.values():
            validate_items(split_items, tokenizer.vocab_size)
    ordered = sorted(specs, key=lambda s: s.is_speculative)  # stable: baseline first
    rows: list[SummaryRow] = []
    failures: list[ConfigFailure] = []
    provenance: dict[str, Any] = {
        "engine": engine.kind,
        "launcher": engine.launcher,
        "dtype": engine.dtype,
        "engine_versions": {},
        "host_cpu": cpu_info().as_dict(),
    }
    try:
        for spec in ordered:
            grid = [
                GridPoint(
                    spec, split, bs, out / spec.label / split / f"bs{bs}", identity(spec, split, bs)
                )
                for split in items
                for bs in batch_sizes
            ]
            todo = []
            for point in grid:
                kept = hooks.resumed(point)
                if kept is not None:
                    rows.append(_row(spec, point, kept, base, out))
                else:
                    todo.append(point)
            if todo:
                failure = _measure_config(
                    engine, spec, todo, items, base, tokenizer, hooks, rows, out, provenance
                )
                if failure is not None:
                    failures.append(failure)
            _finish(rows, failures, out, "running", provenance)
    except KeyboardInterrupt:
        _finish(rows, failures, out, "killed", provenance)
        raise
    status = "failed" if failures else "finished"
    return _finish(rows, failures, out, status, provenance, plots=True)


def _measure_config(
    engine: EngineConfig,
    spec: SpecConfig,
    todo: Sequence[GridPoint],
    items: Mapping[str, Sequence[WorkItem]],
    settings: LoadSettings,
    tokenizer: PromptTokenizer | None,
    hooks: SweepHooks,
    rows: list[SummaryRow],
    out: Path,
    provenance: dict[str, Any],
) -> ConfigFailure | None:
    """One engine launch: the config's pending levels in order; a failure ends the config."""
    log_path = out / spec.label / "engine.log"
    handle: OpenEngine | None = None
    measured: set[GridPoint] = set()
    try:
        handle = hooks.start_engine(engine, spec, log_path)
        provenance["engine_versions"][spec.label] = hooks.engine_version(handle)
        for point in todo:
            point.directory.mkdir(parents=True, exist_ok=True)
            stamp = {"hash": point.identity_hash, "identity": point.identity}
            (point.directory / IDENTITY_FILE).write_text(
                json.dumps(stamp, indent=2, sort_keys=True)
            )
            level_settings = dataclasses.replace(
                settings, batch_size=point.batch_size, split=point.split
            )
            level = hooks.run_level(
                handle.running, items[point.split], level_settings, tokenizer, point.directory
            )
            measured.add(point)
            row = SummaryRow.of(spec.label, point.split, point.batch_size, level.metrics)
            if spec.is_speculative and settings.temperature == 0:
                row.lossless = _lossless(
                    level, out / "none" / point.split / f"bs{point.batch_size}"
                )
            if not level.failed:
                rows.append(row)
            # The row's speedup, by the one formula, against the baselines measured so far.
            row = with_speedup(row, rows)
            hooks.level_done(point, level, row)
            if level.failed:
                raise EngineError(level.failed)
    except EngineError as exc:
        log.error("config %s failed: %s", spec.label, exc)
        print(f"config {spec.label} failed: {exc}")
        for point in todo:
            if point not in measured:
                hooks.level_failed(point, str(exc), log_path)
        return ConfigFailure(config=spec.label, error=str(exc))
    finally:
        if handle is not None:
            # Directly, not through a hook: this also runs while a Ctrl-C unwinds.
            handle.close()
    return None


def _row(
    spec: SpecConfig, point: GridPoint, level: LevelResult, settings: LoadSettings, out: Path
) -> SummaryRow:
    """A level's summary row, with its lossless check on greedy SD levels."""
    row = SummaryRow.of(spec.label, point.split, point.batch_size, level.metrics)
    if spec.is_speculative and settings.temperature == 0:
        row.lossless = _lossless(level, out / "none" / point.split / f"bs{point.batch_size}")
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
            "token %d); expected only where bf16 kernels round by batch (bs > 1), else a bug",
            level.label, level.split, level.batch_size, check.compared - check.matched,
            check.compared, first.prompt_id, first.turn, first.first_divergence,
        )  # fmt: skip
    return LosslessFigures.model_validate(finite(check.as_dict()))


def _finish(
    rows: Sequence[SummaryRow],
    failures: Sequence[ConfigFailure],
    out: Path,
    status: str,
    provenance: dict[str, Any],
    plots: bool = False,
) -> SweepSummary:
    update = {"status": status, "provenance": provenance}
    summary = summarize_sweep(rows, failures).model_copy(update=update)
    if plots:
        summary.plots = [str(p) for p in write_plots(summary, out / "plots")]
    summary.write(out / "summary.json")
    return summary
