"""PNG plots of a sweep: AR, Pareto, AL heatmap, speedup, request rates, oracle, speedup model.

Conditional AR by draft position, the Pareto curve, the AL heatmap, speedup by batch size,
what request rates did (throughput, latency and goodput against the rate), AL and speedup
against input length, the oracle's AL by k and the speedup model's predicted curves with the
measured levels on them.

Matplotlib runs headless (Agg). Each function writes one PNG; :func:`write_plots` all of a
sweep's.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from speedbench.report.input_length import buckets_by_length, by_bucket, nominal_tokens

if TYPE_CHECKING:
    from collections.abc import Sequence

    from speedbench.oracle.predict import OracleLevel
    from speedbench.oracle.recommend import SpeedupModel
    from speedbench.sweep_summary import SummaryRow, SweepSummary


def _name(row: SummaryRow, many_splits: bool) -> str:
    label = "no SD" if not row.is_speculative else row.config
    return f"{label} [{row.split}]" if many_splits else label


def _curves(
    summary: SweepSummary, keep: Any, open_loop: bool = False
) -> dict[str, list[SummaryRow]]:
    """Levels that pass ``keep``, one curve per config (and split).

    A curve runs along the batch size (closed loop) or the request rate (``open_loop``).
    """
    curves: dict[str, list[SummaryRow]] = defaultdict(list)
    many = summary.many_splits
    for r in summary.levels:
        if r.open_loop == open_loop and keep(r):
            curves[_name(r, many)].append(r)
    for rows in curves.values():
        rows.sort(key=lambda r: (r.request_rate or 0.0) if open_loop else r.batch_size)
    return curves


def plot_conditional_ar(summary: SweepSummary, path: str | Path) -> Path | None:
    """Conditional AR per draft position, one line per SD config and batch size (counters view).

    The counters view (the engine's Prometheus counters, drafted steps only) is the one every
    engine with per-position counters has; the report's AR table has the speed_bench view's.
    """
    series = [(r, ar) for r in summary.levels if (ar := r.figure("counters", "conditional_ar"))]
    if not series:
        return None
    many = summary.many_splits
    fig, ax = plt.subplots(figsize=(6, 4))
    for r, ar in series:
        name = f"{_name(r, many)} {r.load}"
        ax.plot(range(1, len(ar) + 1), ar, marker="o", label=name)
    ax.set_xlabel("draft position j")
    ax.set_ylabel("conditional AR_j")
    ax.set_ylim(0, 1.05)
    ax.set_xticks(range(1, max(len(ar) for _, ar in series) + 1))
    ax.set_title("Conditional acceptance rate by position (counters view)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_pareto(summary: SweepSummary, path: str | Path) -> Path | None:
    """System throughput against per-user speed over batch sizes, one curve per config."""
    curves = _curves(summary, lambda r: r.per_user_tok_s and r.output_throughput_tok_s)
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, rows in curves.items():
        xs = [r.per_user_tok_s or 0.0 for r in rows]  # _curves kept rows where both are set
        ys = [r.output_throughput_tok_s or 0.0 for r in rows]
        ax.plot(xs, ys, marker="o", label=label)
        for r, x, y in zip(rows, xs, ys, strict=True):
            ax.annotate(f"bs{r.batch_size}", (x, y), textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("per-user speed (tokens/s)")
    ax.set_ylabel("system throughput (tokens/s)")
    ax.set_title("Throughput vs per-user speed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_al_heatmap(summary: SweepSummary, path: str | Path) -> Path | None:
    """Acceptance length per category (columns) for every SD configuration level (rows).

    Cells are SPEED-Bench's Category_AL (the ``speed_bench`` view, mean over questions).
    """
    rows = [r for r in summary.levels if r.category_al]
    if not rows:
        return None
    by_cat = [r.category_al for r in rows]
    many = summary.many_splits
    cats = sorted({c for cells in by_cat for c in cells})
    names = [
        f"{_name(r, many)} {r.load}" + (f" ({n})" if (n := r.questions_per_category) else "")
        for r in rows
    ]
    grid = [[cells.get(c) or float("nan") for c in cats] for cells in by_cat]
    fig, ax = plt.subplots(figsize=(max(7.0, 1.0 + 0.8 * len(cats)), 1.2 + 0.45 * len(rows)))
    im = ax.imshow(grid, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(cats)), cats, rotation=40, ha="right")
    ax.set_yticks(range(len(rows)), names)
    for i, line in enumerate(grid):
        for j, v in enumerate(line):
            if v == v:  # not NaN
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w", fontsize=8)
    fig.colorbar(im, ax=ax, label="acceptance length")
    fig.suptitle("Acceptance length by category (speed_bench view: Category_AL)")
    return _save(fig, path)


def plot_speedup(summary: SweepSummary, path: str | Path) -> Path | None:
    """Throughput speedup over no SD against batch size, one line per SD configuration."""
    curves = _curves(summary, lambda r: r.speedup is not None)
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, rows in curves.items():
        speedups = [r.speedup or 0.0 for r in rows]  # _curves kept rows with a speedup
        ax.plot([r.batch_size for r in rows], speedups, "o-", label=label)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size (concurrent streams)")
    ax.set_ylabel("speedup over no SD")
    ax.set_title("SD speedup by batch size")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_rates(summary: SweepSummary, path: str | Path) -> Path | None:
    """Open-loop levels against the offered request rate, one line per config.

    Panels: output throughput, median end-to-end latency and, where the sweep set latency
    objectives, goodput (with the offered rate as a dashed line: goodput can at best follow it).
    """
    curves = _curves(summary, lambda r: r.output_throughput_tok_s is not None, open_loop=True)
    if not curves:
        return None
    panels = [
        ("output_throughput_tok_s", "output throughput (tokens/s)"),
        ("e2e_p50_s", "median end-to-end latency (s)"),
    ]
    if any(r.goodput_rps is not None for rows in curves.values() for r in rows):
        panels.append(("goodput_rps", "goodput (requests/s meeting the SLOs)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for ax, (key, title) in zip(axes, panels, strict=True):
        for label, rows in curves.items():
            points = [
                (r.request_rate, getattr(r, key)) for r in rows if getattr(r, key) is not None
            ]
            if points:
                ax.plot(*zip(*points, strict=True), "o-", label=label)
        if key == "goodput_rps":
            top = max(r.request_rate or 0.0 for rows in curves.values() for r in rows)
            ax.plot([0, top], [0, top], color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel("request rate (requests/s)")
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Load: what the request rate does with and without SD")
    return _save(fig, path)


# Their file names in a sweep's plots folder.
ORACLE_PLOT = "oracle.png"
SPEEDUP_MODEL_PLOT = "speedup_model.png"
INPUT_LENGTH_PLOT = "input_length.png"


def plot_speedup_model(model: SpeedupModel | None, path: str | Path) -> Path | None:
    """Predicted speedup against k per batch size, one panel per drafter; x: measured."""
    if model is None or not model.curves:
        return None
    drafters = sorted({c.drafter for c in model.curves})
    fig, axes = plt.subplots(1, len(drafters), figsize=(5.5 * len(drafters), 4.2), squeeze=False)
    for ax, drafter in zip(axes[0], drafters, strict=True):
        for c in (c for c in model.curves if c.drafter == drafter):
            ks = sorted(c.speedup)
            (line,) = ax.plot(ks, [c.speedup[k] for k in ks], marker="o", label=f"bs{c.batch_size}")
            done = [
                x for x in model.checks if x.drafter == drafter and x.batch_size == c.batch_size
            ]
            for x in done:
                if x.measured_speedup is not None:
                    ax.scatter(
                        [x.k], [x.measured_speedup], marker="x", s=80, color=line.get_color()
                    )
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set(xlabel="draft length k (0: SD off)", ylabel="speedup over SD off",
               title=f"{drafter}: predicted (lines) and measured (x)")  # fmt: skip
        ax.legend(fontsize=8)
    return _save(fig, path)


def plot_oracle(levels: Sequence[OracleLevel], path: str | Path) -> Path | None:
    """Average_AL and Category_AL against k per drafter."""
    if not levels:
        return None
    fig, axes = plt.subplots(1, 1, figsize=(6.5, 4.2), squeeze=False)
    left = axes[0][0]
    for level in levels:
        ks = [f.k for f in level.by_k]
        al = [f.views["speed_bench"].al_request_mean for f in level.by_k]
        (line,) = left.plot(ks, al, marker="o", lw=2, label=f"{level.drafter} (Average_AL)")
        for c in sorted(level.by_k[0].per_category):
            cat = [f.per_category[c]["speed_bench"].al_request_mean for f in level.by_k]
            left.plot(ks, cat, color=line.get_color(), lw=0.6, alpha=0.4)
    left.set(
        xlabel="draft length k",
        ylabel="acceptance length (speed_bench view)",
        title="Predicted AL by k (thin: one line per category)",
    )
    left.legend(fontsize=8)
    return _save(fig, path)


def plot_by_input_length(summary: SweepSummary, path: str | Path) -> Path | None:
    """Average_AL (left) and speedup (right) against input length, one line per SD config.

    Random-token controls are dashed beside their config's real-text line. None under two
    buckets.
    """
    levels = {c: per for c, per in by_bucket(summary).items() if c != "none"}
    if not any(len(per) >= 2 for per in levels.values()):
        return None
    fig, (al_ax, sp_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for config, per_bucket in sorted(levels.items()):
        for random, style in ((False, "o-"), (True, "s--")):
            points = [
                (nominal_tokens(b), per_bucket[b][random])
                for b in buckets_by_length(per_bucket)
                if random in per_bucket[b]
            ]
            label = f"{config}{' (random tokens)' if random else ''}"
            al = [(x, r.average_al) for x, r in points if r.average_al is not None]
            sp = [(x, r.speedup) for x, r in points if r.speedup is not None]
            if al:
                al_ax.plot(*zip(*al, strict=True), style, label=label)
            if sp:
                sp_ax.plot(*zip(*sp, strict=True), style, label=label)
    for ax in (al_ax, sp_ax):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("input length (tokens)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    al_ax.set_ylabel("Average_AL (speed_bench view)")
    al_ax.set_title("Acceptance length by input length")
    sp_ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    sp_ax.set_ylabel("speedup over no SD")
    sp_ax.set_title("SD speedup by input length")
    return _save(fig, path)


def write_plots(summary: SweepSummary, out_dir: str | Path) -> list[Path]:
    """All plots of a sweep into ``out_dir`` (its folder's ``plots``); returns those written.

    The oracle's and the speedup model's are drawn from the files beside the summary, where
    the sweep made them.
    """
    from speedbench.oracle.in_sweep import read_oracle, read_speedup_model

    out = Path(out_dir)
    made = [
        plot_conditional_ar(summary, out / "conditional_ar.png"),
        plot_pareto(summary, out / "pareto.png"),
        plot_al_heatmap(summary, out / "al_heatmap.png"),
        plot_speedup(summary, out / "speedup.png"),
        plot_rates(summary, out / "rates.png"),
        plot_by_input_length(summary, out / INPUT_LENGTH_PLOT),
        plot_oracle(read_oracle(out.parent), out / ORACLE_PLOT),
        plot_speedup_model(read_speedup_model(out.parent), out / SPEEDUP_MODEL_PLOT),
    ]
    return [p for p in made if p is not None]


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")  # never cut a long label or title
    plt.close(fig)
    return path
