"""The ``sweep`` flow: the sweep runner under Prefect, every level tracked in MLflow.

It only sequences tasks. Everything that can be checked without an engine is checked first
(parameters by Prefect against ``SweepConfig``, then split files, prompts and token ids); then
:func:`speedbench.run.sweep.run_sweep`, the same runner the CLI uses, walks the grid with
:class:`TrackedHooks`: engine starts and levels run as tasks, each level becomes an MLflow child
run as soon as it is measured, a level already finished in MLflow (and on disk) is kept, and the
sweep ends with tables and plots on the parent run.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from speedbench.config import EngineConfig, SpecConfig, load_params
from speedbench.engines.launchers import OpenEngine
from speedbench.engines.running import RunningEngine
from speedbench.hostcheck.cpu import ENGINE_CPUS_ENV
from speedbench.oracle.in_sweep import (
    oracle_paths,
    oracle_scalars,
    read_oracle,
    read_speedup_model,
    speedup_scalars,
)
from speedbench.pipeline.stages import stage_sweep
from speedbench.report.html import REPORT_FILES
from speedbench.run.hooks import GridPoint, SweepHooks, finished_on_disk, stamp_identity
from speedbench.run.level import LevelResult, validate_items
from speedbench.run.plan import dataset_revision, sweep_items
from speedbench.run.sweep import run_sweep
from speedbench.sweep_config import SweepConfig
from speedbench.sweep_summary import SummaryRow, SweepSummary
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings, WorkItem
from tasks.engine import start_engine
from tasks.level import LEVEL_ARTIFACTS, log_failure, log_level, run_grid_point, run_level
from tasks.models import provision_model
from tasks.summary import close_sweep, write_category_table
from tasks.tracking import Tracker


@task(cache_policy=NO_CACHE)
def prepare_prompts(config: SweepConfig, tokenizer: PromptTokenizer) -> dict[str, list[WorkItem]]:
    """Every split's prompts, loaded and validated against the target's vocabulary."""
    items = sweep_items(config)
    for split_items in items.values():
        validate_items(split_items, tokenizer.vocab_size)
    return items


# The form's default is the main job's qualitative stage, read from the project's params.yaml
# (one place for its grid), under its own name and output folder.
PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"
EMBEDDED_SWEEP = stage_sweep(load_params(PARAMS), "measure_qualitative").with_fields(
    name="embedded", out_dir="results/sweeps"
)


class TrackedHooks(SweepHooks):
    """The runner's steps as Prefect tasks, and every level as an MLflow child run."""

    def __init__(self, config: SweepConfig, tracker: Tracker, parent: str):
        self.config = config
        self.tracker = tracker
        self.parent = parent
        self.done = {} if config.output.force else tracker.completed()
        self.resumed_runs: list[str] = []
        self.version = "unknown"

    def resumed(self, point: GridPoint) -> LevelResult | None:
        """Kept when finished in MLflow with the same identity: from disk, else downloaded.

        A level measured on another host (a work-pool worker) has its records and metrics
        only in the tracking server's artifact store; they are fetched into the level's folder.
        """
        run_id = self.done.get(point.identity_hash)
        if run_id is None:
            return None
        kept = finished_on_disk(point)
        if kept is None and self.tracker.download(run_id, LEVEL_ARTIFACTS, point.directory):
            stamp_identity(point)
            kept = finished_on_disk(point)
        if kept is not None:
            print(f"skip {point.name}: completed in MLflow run {run_id}")
            self.resumed_runs.append(run_id)
        return kept

    def start_engine(self, engine: EngineConfig, spec: SpecConfig, log_path: Path) -> OpenEngine:
        """The ``start_engine`` task (retried once)."""
        return start_engine(engine, spec, log_path)

    def engine_version(self, handle: OpenEngine) -> str:
        """The engine's reported version, also logged with every level."""
        self.version = super().engine_version(handle)
        return self.version

    def run_level(
        self,
        running: RunningEngine,
        items: Sequence[WorkItem],
        settings: LoadSettings,
        tokenizer: PromptTokenizer | None,
        directory: Path,
    ) -> LevelResult:
        """The ``run_level`` task."""
        return run_level(running, list(items), settings, tokenizer, directory)

    def run_interleaved(self, *args: Any, **kwargs: Any) -> dict[str, LevelResult]:
        """The ``run_grid_point`` task: a grid point's configs in alternating rounds."""
        return run_grid_point(lambda: super(TrackedHooks, self).run_interleaved(*args, **kwargs))

    def level_done(self, point: GridPoint, level: LevelResult, row: SummaryRow) -> None:
        """A child run with the level's metrics (FAILED if the engine died during it)."""
        prompts = self.config.prompts
        revision = dataset_revision(
            point.split, prompts.data_dir, prompt_file=prompts.prompt_file,
            speed_bench_dir=prompts.speed_bench_dir,
        )  # fmt: skip
        extra = {
            "engine_version": self.version,
            "dataset_revision": revision,
            # Which host measured it: in a pool sweep, the worker's (its engine cores).
            "engine_host": f"{socket.gethostname()}:{os.environ.get(ENGINE_CPUS_ENV) or 'all'}",
        }
        log_path = point.directory.parents[1] / "engine.log"
        log_level(
            self.tracker,
            self.parent,
            level,
            point.identity,
            point.identity_hash,
            extra,
            row,
            log_path,
        )

    def level_failed(self, point: GridPoint, error: str, log_path: Path) -> None:
        """A FAILED child run carrying the error and the engine log."""
        log_failure(
            self.tracker,
            self.parent,
            point.name,
            point.identity,
            point.identity_hash,
            error,
            [log_path],
        )


def prepared(
    config: SweepConfig,
) -> tuple[str, PromptTokenizer, dict[str, list[WorkItem]], str | None]:
    """The target's weights and tokenizer, the checked prompts and the draft's weights."""
    target = provision_model(config.model, config.engine.dtype)
    tokenizer = PromptTokenizer.from_pretrained(
        provision_model(config.tokenizer, config.engine.dtype) if config.tokenizer else target
    )
    items = prepare_prompts(config, tokenizer)
    draft = provision_model(config.draft_model, config.engine.dtype) if config.draft_model else None
    return target, tokenizer, items, draft


@flow(name="sweep", log_prints=True)
def sweep(config: SweepConfig = EMBEDDED_SWEEP) -> SweepSummary:
    """Measure a grid of SD configurations on one target; returns the sweep summary."""
    target, tokenizer, items, draft = prepared(config)
    tracker = Tracker(config.output.tracking_uri, config.output.experiment)
    parent = tracker.start_parent(config.name, config.flat())
    hooks = TrackedHooks(config, tracker, parent)
    try:
        summary = run_sweep(config, target, draft, items, tokenizer, hooks)
    except KeyboardInterrupt:
        # Levels logged so far stay FINISHED and are kept when the sweep is run again.
        tracker.abort_parent(parent, "KILLED", "interrupted (Ctrl-C); run again to resume")
        raise
    except BaseException as exc:
        tracker.abort_parent(parent, "FAILED", f"{type(exc).__name__}: {exc}")
        raise
    if hooks.resumed_runs:
        tracker.set_tags(parent, {"speedbench.resumed_runs": ",".join(hooks.resumed_runs)})
    out = Path(config.output.out_dir) / config.name
    table = write_category_table(tracker, parent, out)
    oracle = read_oracle(out)
    files = [Path(p) for p in summary.plots] + [out / "summary.json"] + oracle_paths(out)
    files += [p for p in (out / name for name in REPORT_FILES) if p.exists()]
    close_sweep(
        tracker,
        parent,
        summary,
        files + ([table] if table else []),
        {**oracle_scalars(oracle), **speedup_scalars(read_speedup_model(out))},
    )
    return summary.model_copy(update={"parent_run_id": parent, "tracking_uri": tracker.uri})


def main(argv: list[str] | None = None) -> int:
    """``python -m flows.sweep --config sweep.yaml [--force]``: run a sweep from a config file.

    Exit codes (:mod:`speedbench.errors`): 0 ok, 2 bad input, 3 a configuration failed,
    130 interrupted (run it again to resume: finished levels are kept).
    """
    import argparse

    from speedbench.config import load_config, read_config_file
    from speedbench.errors import finish

    parser = argparse.ArgumentParser(prog="python -m flows.sweep", description=main.__doc__)
    parser.add_argument("--config", required=True, help="YAML or JSON with SweepConfig fields")
    parser.add_argument("--force", action="store_true", help="re-run finished configurations")
    args = parser.parse_args(argv)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")

    def run() -> SweepSummary:
        config = load_config(SweepConfig, read_config_file(args.config))
        if args.force:
            config = config.with_fields(force=True)
        return sweep(config)

    return finish(run)


if __name__ == "__main__":
    raise SystemExit(main())
