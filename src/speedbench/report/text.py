"""The main job's closing report: per-category AL and conditional AR, throughput and speedup.

It reads the measure stages' ``summary.json`` files only, so it can be re-run on any results
directory (a fresh run, the committed reference, a colleague's copy).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

STAGE_DIRS = ("qualitative", "throughput")


def load_summaries(results: Path) -> dict[str, dict[str, Any]]:
    """``summary.json`` of each measure stage present under ``results``."""
    out = {}
    for name in STAGE_DIRS:
        path = results / name / "summary.json"
        if path.exists():
            out[name] = json.loads(path.read_text())
    return out


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def category_table(summary: dict[str, Any]) -> list[str]:
    """Markdown table: AL per category for every SD config and batch size."""
    rows = [r for r in summary["levels"] if r.get("al_by_category")]
    if not rows:
        return []
    cats = sorted({c for r in rows for c in r["al_by_category"]})
    heads = [f"{r['config']} bs{r['batch_size']}" for r in rows]
    lines = ["| category | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    for c in cats:
        lines.append(
            f"| {c} | " + " | ".join(_fmt(r["al_by_category"].get(c)) for r in rows) + " |"
        )
    lines.append(
        "| **all** | " + " | ".join(f"**{_fmt(r.get('al_stream'))}**" for r in rows) + " |"
    )
    return lines


def ar_table(summary: dict[str, Any]) -> list[str]:
    """Markdown table: conditional AR per draft position (engine counters) per SD config."""
    rows = [r for r in summary["levels"] if r.get("conditional_ar_counters")]
    if not rows:
        return []
    k = max(len(r["conditional_ar_counters"]) for r in rows)
    lines = [
        "| config | bs | AL (counters) | " + " | ".join(f"AR_{j}" for j in range(1, k + 1)) + " |",
        "|---|---|---|" + "---|" * k,
    ]
    for r in rows:
        ars = " | ".join(_fmt(a, ".3f") for a in r["conditional_ar_counters"])
        lines.append(
            f"| {r['config']} | {r['batch_size']} | {_fmt(r.get('al_counters'))} | {ars} |"
        )
    return lines


def throughput_table(summary: dict[str, Any]) -> list[str]:
    """Markdown table: throughput, per-user speed and speedup by config, split and batch size."""
    lines = [
        "| config | split | bs | tok/s | per-user tok/s | speedup | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in summary["levels"]:
        lines.append(
            f"| {r['config']} | {r.get('split', '')} | {r['batch_size']} | "
            f"{_fmt(r['output_throughput_tok_s'])} | {_fmt(r['per_user_tok_s'])} | "
            f"{_fmt(r.get('speedup'), '.2f')} | {_fmt(r['error_rate'], '.0%')} |"
        )
    return lines


def overestimate(summary: dict[str, Any]) -> list[str]:
    """Random-token SD throughput over real-text SD throughput, per bucket and SD config."""
    by_key = {(r["config"], r.get("split", ""), r["batch_size"]): r for r in summary["levels"]}
    lines = []
    for (config, split, bs), row in sorted(by_key.items()):
        if config == "none" or split.endswith("_random"):
            continue
        rnd = by_key.get((config, f"{split}_random", bs))
        if rnd and row["output_throughput_tok_s"]:
            ratio = rnd["output_throughput_tok_s"] / row["output_throughput_tok_s"]
            lines.append(
                f"- {config} on {split} at bs {bs}: random tokens give {ratio:.2f}x the SD "
                f"throughput of real text (AL {_fmt(rnd.get('al_stream'))} vs "
                f"{_fmt(row.get('al_stream'))})"
            )
    return lines


def render(results: Path, mlflow_uri: str | None = None) -> str:
    """The whole report as Markdown."""
    summaries = load_summaries(results)
    out = ["# speedbench results", ""]
    qual = summaries.get("qualitative")
    if qual:
        out += ["## Acceptance length by category (qualitative split)", "", *category_table(qual)]
        out += ["", "## Conditional acceptance rate by position", "", *ar_table(qual)]
        out += ["", "## Throughput and speedup (qualitative split)", "", *throughput_table(qual)]
    thr = summaries.get("throughput")
    if thr:
        out += ["", "## Throughput split", "", *throughput_table(thr)]
        extra = overestimate(thr)
        if extra:
            out += ["", "Random-token control:", "", *extra]
    plots = sorted(str(p) for p in results.glob("*/plots/*.png"))
    out += ["", "## Where things are", ""]
    out += [f"- plot: `{p}`" for p in plots]
    if mlflow_uri:
        out.append(
            f"- MLflow store: `{mlflow_uri}` (UI: `scripts/ui.sh`, then http://127.0.0.1:5000)"
        )
    return "\n".join(out) + "\n"
