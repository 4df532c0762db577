"""The DVC stages' file contract: params sections -> sweep configs, summaries -> metrics files.

``dvc.yaml`` stages call thin entry points (``speedbench`` for the core, ``python -m
flows.stage`` for the Prefect sweeps); what they read from params.yaml and what they write for
``dvc metrics`` / ``dvc plots`` is defined here, so the reference check and the report agree.

Acceptance at greedy decoding is deterministic at a fixed batch size, so ``acceptance.json`` is
compared exactly against the committed reference; throughput is hardware-dependent and lives in
``throughput.json``, compared by ratio only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from speedbench.config import ConfigError, SweepConfig, load_config
from speedbench.results import SummaryRow, SweepSummary

ACCEPTANCE_FILE = "acceptance.json"
PROVENANCE_FILE = "provenance.json"
THROUGHPUT_FILE = "throughput.json"
AR_CSV = "conditional_ar.csv"
STAGES = ("measure_qualitative", "measure_throughput")


def stage_sweep(params: dict[str, Any], stage: str, results_dir: str = "results") -> SweepConfig:
    """The sweep config of a measure stage: its params section plus the shared ``models``."""
    if stage not in params:
        raise ConfigError(f"params has no {stage!r} section; expected one of {', '.join(STAGES)}")
    models = params.get("models", {}) or {}
    section = dict(params[stage] or {})
    fields = {
        "name": stage.removeprefix("measure_"),
        "model": models.get("target", "qwen2.5-coder-1.5b-instruct"),
        "draft_model": models.get("draft"),
        "dtype": models.get("dtype", "auto"),
        "out_dir": results_dir,
        **section,
    }
    if not any(m in ("draft_model", "eagle", "eagle3") for m in fields.get("methods", [])):
        fields["draft_model"] = None
    return load_config(SweepConfig, fields)


def acceptance_views(row: SummaryRow) -> dict[str, dict[str, Any]]:
    """A level's acceptance figures grouped by the view that defines them (absent views left out).

    ``speed_bench.al_request_mean`` is SPEED-Bench's Average_AL and ``speed_bench.al_by_category``
    its Category_AL; ``stream.al_by_category`` is the stream view's token-weighted AL.
    """
    views = {
        "speed_bench": {
            "al_request_mean": row.al_speed_bench_request_mean,
            "al_token_weighted": row.al_speed_bench,
            "conditional_ar": row.conditional_ar_speed_bench,
            "al_by_category": row.al_speed_bench_by_category or None,
            # Per-question AL: what verify-reference's paired test compares run to run.
            "questions": {
                qid: {"category": row.category_of_question.get(qid, ""), "al": al}
                for qid, al in sorted(row.al_speed_bench_by_question.items())
            }
            or None,
        },
        "stream": {
            "al_token_weighted": row.al_stream,
            "al_request_mean": row.al_request_mean,
            "conditional_ar": row.conditional_ar,
            "al_by_category": row.al_by_category or None,
        },
        "engine": {
            "al_token_weighted": row.al_engine,
            "al_request_mean": row.al_engine_request_mean,
            "conditional_ar": row.conditional_ar_engine,
        },
        "counters": {
            "al_token_weighted": row.al_counters,
            "conditional_ar": row.conditional_ar_counters,
        },
    }
    out = {}
    for name, figures in views.items():
        present = {k: v for k, v in figures.items() if v is not None}
        if present:
            out[name] = present
    return out


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
    """Per config, split and load point: output throughput, per-user speed and speedup."""
    return {
        f"{r.config}/{r.split}/{r.load}": _round(
            {
                "output_tok_s": r.output_throughput_tok_s,
                "per_user_tok_s": r.per_user_tok_s,
                "speedup": r.speedup,
                "error_rate": r.error_rate,
            }
        )
        for r in summary.levels
    }


def write_stage_metrics(summary: SweepSummary, out_dir: Path) -> list[Path]:
    """acceptance.json, throughput.json, conditional_ar.csv and provenance.json of a stage."""
    out_dir.mkdir(parents=True, exist_ok=True)
    prov = out_dir / PROVENANCE_FILE
    prov.write_text(json.dumps(summary.provenance, indent=2, sort_keys=True) + "\n")
    acc = out_dir / ACCEPTANCE_FILE
    acc.write_text(json.dumps(acceptance_metrics(summary), indent=2, sort_keys=True) + "\n")
    thr = out_dir / THROUGHPUT_FILE
    thr.write_text(json.dumps(throughput_metrics(summary), indent=2, sort_keys=True) + "\n")
    lines = ["config,view,position,conditional_ar"]
    for key, views in acceptance_metrics(summary).items():
        for view, figures in views.items():
            for j, ar in enumerate(figures.get("conditional_ar") or [], start=1):
                lines.append(f"{key},{view},{j},{ar}")
    csv = out_dir / AR_CSV
    csv.write_text("\n".join(lines) + "\n")
    return [acc, thr, csv, prov]


def _round(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 6)
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v) for v in x]
    return x
