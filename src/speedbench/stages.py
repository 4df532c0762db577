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
from speedbench.oracle.predict import OracleK, OracleLevel
from speedbench.results import SummaryRow, SweepSummary

ACCEPTANCE_FILE = "acceptance.json"
PROVENANCE_FILE = "provenance.json"
THROUGHPUT_FILE = "throughput.json"
AR_CSV = "conditional_ar.csv"
ORACLE_FILE = "oracle.json"
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


def oracle_views(figures: OracleK) -> dict[str, dict[str, Any]]:
    """An oracle level's figures at one k, in the shape of :func:`acceptance_views`.

    So verify-reference judges predicted levels by the same rules as measured ones (exact where
    exactness is promised, else the paired test over per-question AL).
    """
    sb, stream = figures.views["speed_bench"], figures.views["stream"]
    category_of = {
        qid: cat
        for cat, views in figures.per_category.items()
        for qid in views["speed_bench"].per_unit
    }
    views = {
        "speed_bench": {
            "al_request_mean": sb.al_request_mean,
            "al_token_weighted": sb.al_token_weighted,
            "conditional_ar": sb.conditional_ar,
            "al_by_category": {
                c: v["speed_bench"].al_request_mean for c, v in figures.per_category.items()
            },
            "questions": {
                qid: {"category": category_of.get(qid, ""), "al": al}
                for qid, al in sorted(sb.per_unit.items())
            },
        },
        "stream": {
            "al_token_weighted": stream.al_token_weighted,
            "al_request_mean": stream.al_request_mean,
            "conditional_ar": stream.conditional_ar,
            "al_by_category": {
                c: v["stream"].al_token_weighted for c, v in figures.per_category.items()
            },
        },
    }
    return {name: {k: v for k, v in f.items() if v is not None} for name, f in views.items()}


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
            }
        )
    return out


def write_stage_metrics(
    summary: SweepSummary, out_dir: Path, oracle: list[OracleLevel] | None = None
) -> list[Path]:
    """acceptance.json, throughput.json, conditional_ar.csv and provenance.json of a stage.

    With ``oracle`` levels, their acceptance joins acceptance.json (one key per k) and their
    break-even figures go to oracle.json (``{}`` without them).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    prov = out_dir / PROVENANCE_FILE
    prov.write_text(json.dumps(summary.provenance, indent=2, sort_keys=True) + "\n")
    acc = out_dir / ACCEPTANCE_FILE
    acceptance = {**acceptance_metrics(summary), **oracle_acceptance(oracle or [])}
    acc.write_text(json.dumps(acceptance, indent=2, sort_keys=True) + "\n")
    thr = out_dir / THROUGHPUT_FILE
    thr.write_text(json.dumps(throughput_metrics(summary), indent=2, sort_keys=True) + "\n")
    lines = ["config,view,position,conditional_ar"]
    for key, views in acceptance.items():
        for view, figures in views.items():
            for j, ar in enumerate(figures.get("conditional_ar") or [], start=1):
                lines.append(f"{key},{view},{j},{ar}")
    csv = out_dir / AR_CSV
    csv.write_text("\n".join(lines) + "\n")
    # Written (empty) without oracle levels too: dvc.yaml declares it as the stage's metric.
    orc = out_dir / ORACLE_FILE
    orc.write_text(json.dumps(oracle_metrics(oracle or []), indent=2, sort_keys=True) + "\n")
    return [acc, thr, csv, prov, orc]


def _round(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 6)
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v) for v in x]
    return x
