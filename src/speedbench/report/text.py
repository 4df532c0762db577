"""The main job's closing report: per-category AL and conditional AR, throughput and speedup.

It reads the measure stages' ``summary.json`` files only, so it can be re-run on any results
directory (a fresh run, the committed reference, a colleague's copy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from speedbench.results import SummaryRow, SweepSummary

STAGE_DIRS = ("qualitative", "throughput")


def load_summaries(results: Path) -> dict[str, SweepSummary]:
    """``summary.json`` of each measure stage present under ``results``."""
    out = {}
    for name in STAGE_DIRS:
        path = results / name / "summary.json"
        if path.exists():
            out[name] = SweepSummary.read(path)
    return out


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def category_table(summary: SweepSummary) -> list[str]:
    """Markdown table: AL per category for every SD config and batch size."""
    rows = [r for r in summary.levels if r.al_by_category]
    if not rows:
        return []
    cats = sorted({c for r in rows for c in r.al_by_category})
    heads = [f"{r.config} bs{r.batch_size}" for r in rows]
    lines = ["| category | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    for c in cats:
        lines.append(f"| {c} | " + " | ".join(_fmt(r.al_by_category.get(c)) for r in rows) + " |")
    lines.append("| **all** | " + " | ".join(f"**{_fmt(r.al_stream)}**" for r in rows) + " |")
    return lines


def ar_table(summary: SweepSummary) -> list[str]:
    """Markdown table: conditional AR per draft position (engine counters) per SD config."""
    rows = [r for r in summary.levels if r.conditional_ar_counters]
    if not rows:
        return []
    k = max(len(r.conditional_ar_counters or []) for r in rows)
    lines = [
        "| config | bs | AL (counters) | " + " | ".join(f"AR_{j}" for j in range(1, k + 1)) + " |",
        "|---|---|---|" + "---|" * k,
    ]
    for r in rows:
        ars = " | ".join(_fmt(a, ".3f") for a in r.conditional_ar_counters or [])
        lines.append(f"| {r.config} | {r.batch_size} | {_fmt(r.al_counters)} | {ars} |")
    return lines


def throughput_table(summary: SweepSummary) -> list[str]:
    """Markdown table: throughput, per-user speed and speedup by config, split and batch size."""
    lines = [
        "| config | split | bs | tok/s | per-user tok/s | speedup | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in summary.levels:
        lines.append(
            f"| {r.config} | {r.split} | {r.batch_size} | "
            f"{_fmt(r.output_throughput_tok_s)} | {_fmt(r.per_user_tok_s)} | "
            f"{_fmt(r.speedup, '.2f')} | {_fmt(r.error_rate, '.0%')} |"
        )
    return lines


def overestimate(summary: SweepSummary) -> list[str]:
    """Random-token SD throughput over real-text SD throughput, per bucket and SD config."""
    by_key = {(r.config, r.split, r.batch_size): r for r in summary.levels}
    lines = []
    for (config, split, bs), row in sorted(by_key.items()):
        if not row.is_speculative or split.endswith("_random"):
            continue
        rnd = by_key.get((config, f"{split}_random", bs))
        if rnd and rnd.output_throughput_tok_s and row.output_throughput_tok_s:
            ratio = rnd.output_throughput_tok_s / row.output_throughput_tok_s
            lines.append(
                f"- {config} on {split} at bs {bs}: random tokens give {ratio:.2f}x the SD "
                f"throughput of real text (AL {_fmt(rnd.al_stream)} vs {_fmt(row.al_stream)})"
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


SUMMARY_COLUMNS = {
    "batch_size": "bs",
    "output_throughput_tok_s": "tok/s",
    "al_stream": "AL stream",
    "al_counters": "AL counters",
    "speedup": "speedup",
    "error_rate": "errors",
}


def format_summary(summary: SweepSummary) -> str:
    """A plain-text table of the measured levels, then AL by category (names never cut)."""
    rows = summary.levels
    config_w = max([len("config"), *(len(_row_name(r, summary)) for r in rows)])
    lines = [f"{'config':>{config_w}} " + " ".join(f"{h:>12}" for h in SUMMARY_COLUMNS.values())]
    for row in rows:
        cells = [_cell(getattr(row, key), 12) for key in SUMMARY_COLUMNS]
        lines.append(f"{_row_name(row, summary):>{config_w}} " + " ".join(cells))
    sd_rows = [r for r in rows if r.al_by_category]
    if sd_rows:
        cats = sorted({c for r in sd_rows for c in r.al_by_category})
        width = max(7, *(len(c) for c in cats))
        lines += ["", "AL (stream, token-weighted) by category"]
        lines.append(f"{'config':>{config_w}} {'bs':>4} " + " ".join(f"{c:>{width}}" for c in cats))
        for r in sd_rows:
            cells = " ".join(_cell(r.al_by_category.get(c), width) for c in cats)
            lines.append(f"{_row_name(r, summary):>{config_w}} {r.batch_size:>4} {cells}")
    return "\n".join(lines)


def _row_name(row: SummaryRow, summary: SweepSummary) -> str:
    return f"{row.config} [{row.split}]" if summary.many_splits else row.config


def _cell(value: Any, width: int) -> str:
    if isinstance(value, float):
        return f"{value:>{width}.3f}"
    return f"{'-' if value is None else value!s:>{width}}"
