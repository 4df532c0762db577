"""Interactive figures of the HTML report: hover, zoom and legend toggles, with no network.

Plotly draws them; its script is written into the page once (about 4.8 MB), so the page opens
offline from a mail attachment or an MLflow artifact. The PNG plots stay for MLflow and the
Markdown report. Three figures, where a reader wants to hover a value:

- **AL by category**: every SD level's Category_AL in SPEED-Bench's view; a cell's hover holds
  its 95 % bootstrap interval over questions and the question count;
- **AL by draft length**: the greedy oracle's predicted Average_AL and Category_AL against k,
  one line per category, per drafter;
- **speedup by draft length**: the speedup model's predicted speedup against k at every
  batch size, with the measured SD levels as points beside their curves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from speedbench.oracle.predict import OracleLevel
from speedbench.oracle.recommend import SpeedupModel
from speedbench.results import CategoryAL
from speedbench.sweep_summary import SweepSummary

PLOT_CONFIG = {"displaylogo": False, "responsive": True}


def _ci_text(value: float | None, ci: Any, n: int | None) -> str:
    if value is None:
        return "no value"
    low, high = getattr(ci, "low", None), getattr(ci, "high", None)
    text = f"AL {value:.3f}"
    if low is not None and high is not None and n and n > 1:
        text += f"<br>95% CI [{low:.2f}, {high:.2f}]"
    return text + (f"<br>n = {n} questions" if n else "")


def al_heatmap(summary: SweepSummary, title: str) -> Any | None:
    """Category_AL (speed_bench view) of every SD level: categories x levels."""
    import plotly.graph_objects as go

    rows = [r for r in summary.levels if r.is_speculative and r.category_al]
    if not rows:
        return None
    columns = [f"{r.config} {r.split} {r.load}" if summary.many_splits else f"{r.config} {r.load}"
               for r in rows]  # fmt: skip
    cats = sorted({c for r in rows for c in r.category_al})
    empty = CategoryAL()
    z, text = [], []
    for c in cats:
        figures = [
            r.views["speed_bench"].by_category.get(c, empty) if "speed_bench" in r.views else empty
            for r in rows
        ]
        z.append([f.al_request_mean for f in figures])
        text.append([_ci_text(f.al_request_mean, f.al_request_mean_ci, f.count) for f in figures])
    z.append([r.average_al for r in rows])
    text.append([_ci_text(r.average_al, None, None) for r in rows])
    fig = go.Figure(
        go.Heatmap(
            z=z, x=columns, y=[*cats, "all (Average_AL)"], text=text, colorscale="Viridis",
            hovertemplate="%{y} | %{x}<br>%{text}<extra></extra>", colorbar={"title": "AL"},
        )
    )  # fmt: skip
    fig.update_layout(title=title, height=max(320, 34 * (len(cats) + 3)), margin={"l": 160})
    return fig


def oracle_curves(levels: Sequence[OracleLevel]) -> Any | None:
    """The oracle's predicted AL against k: Average_AL and each category, one panel per level."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    levels = [lv for lv in levels if lv.by_k]
    if not levels:
        return None
    names = [f"{lv.drafter} ({lv.split} bs{lv.batch_size})" for lv in levels]
    fig = make_subplots(rows=1, cols=len(levels), subplot_titles=names, shared_yaxes=True)
    for col, level in enumerate(levels, start=1):
        ks = [f.k for f in level.by_k]
        cats = sorted(level.by_k[0].per_category)
        for c in cats:
            views = [f.per_category[c]["speed_bench"] for f in level.by_k]
            fig.add_trace(go.Scatter(
                x=ks, y=[v.al_request_mean for v in views], mode="lines+markers", name=c,
                legendgroup=c, showlegend=col == 1, line={"width": 1},
                text=[_ci_text(v.al_request_mean, v.al_request_mean_ci, v.count) for v in views],
                hovertemplate=f"{c}, k=%{{x}}<br>%{{text}}<extra></extra>",
            ), row=1, col=col)  # fmt: skip
        overall = [f.views["speed_bench"].al_request_mean for f in level.by_k]
        fig.add_trace(go.Scatter(
            x=ks, y=overall, mode="lines+markers", name="all (Average_AL)", legendgroup="all",
            showlegend=col == 1, line={"width": 4, "color": "black"},
            hovertemplate="all, k=%{x}<br>Average_AL %{y:.3f}<extra></extra>",
        ), row=1, col=col)  # fmt: skip
        fig.update_xaxes(title_text="draft length k", dtick=1, row=1, col=col)
    fig.update_yaxes(title_text="predicted AL (speed_bench view)", row=1, col=1)
    fig.update_layout(title="The greedy oracle: AL by draft length", height=460)
    return fig


def speedup_curves(model: SpeedupModel | None) -> Any | None:
    """Predicted speedup against k at each batch size; measured SD levels as points."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if model is None or not model.curves:
        return None
    drafters = sorted({c.drafter for c in model.curves})
    fig = make_subplots(rows=1, cols=len(drafters), subplot_titles=drafters, shared_yaxes=True)
    for col, drafter in enumerate(drafters, start=1):
        for curve in (c for c in model.curves if c.drafter == drafter):
            ks = sorted(curve.speedup)
            label = f"bs{curve.batch_size}"
            fig.add_trace(go.Scatter(
                x=ks, y=[curve.speedup[k] for k in ks], mode="lines+markers", name=label,
                legendgroup=label, showlegend=col == 1,
                hovertemplate=f"{drafter} {label}, k=%{{x}}: predicted %{{y:.3f}}x"
                f" (recommended k={curve.recommended_k})<extra></extra>",
            ), row=1, col=col)  # fmt: skip
            checks = [x for x in model.checks
                      if x.drafter == drafter and x.batch_size == curve.batch_size
                      and x.measured_speedup is not None]  # fmt: skip
            if checks:
                fig.add_trace(go.Scatter(
                    x=[x.k for x in checks], y=[x.measured_speedup for x in checks],
                    mode="markers", marker={"symbol": "x", "size": 11}, name=f"{label} measured",
                    legendgroup=label, showlegend=col == 1,
                    text=[f"predicted without it {x.predicted_speedup or float('nan'):.3f}x, "
                          f"error {(x.error or float('nan')) * 100:+.1f} %" for x in checks],
                    hovertemplate=f"{drafter} {label}, k=%{{x}}: measured %{{y:.3f}}x<br>"
                    "%{text}<extra></extra>",
                ), row=1, col=col)  # fmt: skip
        fig.update_xaxes(title_text="draft length k (0: SD off)", dtick=1, row=1, col=col)
    fig.update_yaxes(title_text="speedup over no SD", row=1, col=1)
    fig.update_layout(title="The speedup model: every k at every batch size", height=460)
    return fig


def figures_html(figures: Sequence[Any]) -> str:
    """The figures as HTML fragments, Plotly's script inlined with the first (no network)."""
    parts = []
    for i, fig in enumerate(f for f in figures if f is not None):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=i == 0, config=PLOT_CONFIG))
    return "\n".join(parts)
