"""PNG plots of a measured summary: conditional AR by position, and the throughput Pareto curve.

Matplotlib runs headless (Agg). Each function takes the ``summary.json`` mapping that
:func:`speedbench.measure.build_summary` produces and writes one PNG.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def plot_conditional_ar(summary: dict[str, Any], path: str | Path) -> Path | None:
    """Conditional AR per draft position, one line per SD config and batch size (counters)."""
    rows = [r for r in summary["levels"] if r.get("conditional_ar_counters")]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        ar = r["conditional_ar_counters"]
        ax.plot(range(1, len(ar) + 1), ar, marker="o", label=f"{r['config']} bs={r['batch_size']}")
    ax.set_xlabel("draft position j")
    ax.set_ylabel("conditional AR_j")
    ax.set_ylim(0, 1.05)
    ax.set_xticks(range(1, max(len(r["conditional_ar_counters"]) for r in rows) + 1))
    ax.set_title("Conditional acceptance rate by position")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_pareto(summary: dict[str, Any], path: str | Path) -> Path | None:
    """System throughput against per-user speed over batch sizes, one curve per config."""
    curves: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in summary["levels"]:
        if r.get("per_user_tok_s") and r.get("output_throughput_tok_s"):
            curves[r["config"]].append(r)
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, rows in curves.items():
        rows.sort(key=lambda r: r["batch_size"])
        xs = [r["per_user_tok_s"] for r in rows]
        ys = [r["output_throughput_tok_s"] for r in rows]
        ax.plot(xs, ys, marker="o", label="no SD" if label == "none" else label)
        for r, x, y in zip(rows, xs, ys, strict=True):
            ax.annotate(f"bs{r['batch_size']}", (x, y), textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("per-user speed (tokens/s)")
    ax.set_ylabel("system throughput (tokens/s)")
    ax.set_title("Throughput vs per-user speed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def write_plots(summary: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """All plots of a summary into ``out_dir``; returns the files written."""
    out = Path(out_dir)
    made = [
        plot_conditional_ar(summary, out / "conditional_ar.png"),
        plot_pareto(summary, out / "pareto.png"),
    ]
    return [p for p in made if p is not None]


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
