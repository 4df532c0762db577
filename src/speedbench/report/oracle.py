"""The greedy acceptance oracle in the report: AL by k per category, best k, measured vs predicted.

Reads the oracle levels of a sweep folder (:func:`speedbench.oracle.run.read_oracle`) and
writes Markdown tables and one plot. Every AL names its view: Category_AL and Average_AL are
SPEED-Bench's (``speed_bench``); the break-even model uses the stream view's tokens per target
step.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from speedbench.oracle.predict import OracleLevel

ORACLE_NOTE = (
    "Predicted, not measured: the baseline's greedy answers replayed under each drafter "
    "(draft_model: one teacher-forced pass of the draft with transformers in the engine's "
    "dtype; ngram: vLLM's prompt lookup, n-grams 1-4), exact for a lossless engine "
    "(docs/oracle.md). Expected speedup = stream AL / (1 + f k c): f the fraction of steps "
    "that drafted, c the draft's cost per step in target steps (draft-alone TPOT over the "
    "target's at that batch size; 0 for ngram)."
)


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def al_by_k_table(level: OracleLevel) -> list[str]:
    """Category_AL (speed_bench view, 95 % interval) per category, one column per k."""
    ks = [f.k for f in level.by_k]
    cats = sorted({c for f in level.by_k for c in f.per_category})
    counts = {c: level.by_k[0].per_category[c].get("speed_bench") for c in cats}
    head = "| category (n) | " + " | ".join(f"k={k}" for k in ks) + " |"
    lines = [head, "|---|" + "---|" * len(ks)]
    for c in cats:
        n = view_0.count if (view_0 := counts[c]) is not None else 0
        cells = []
        for f in level.by_k:
            view = f.per_category.get(c, {}).get("speed_bench")
            if view is None:
                cells.append("-")
                continue
            ci = view.al_request_mean_ci
            interval = f" [{_fmt(ci.low)}, {_fmt(ci.high)}]" if ci and n > 1 else ""
            cells.append(f"{_fmt(view.al_request_mean)}{interval}")
        lines.append(f"| {c} ({n}) | " + " | ".join(cells) + " |")
    overall = [f.views.get("speed_bench") for f in level.by_k]
    stream = [f.views.get("stream") for f in level.by_k]
    average = [f"**{_fmt(v.al_request_mean if v else None)}**" for v in overall]
    lines.append("| **all** (Average_AL) | " + " | ".join(average) + " |")
    pooled = [_fmt(v.al_token_weighted if v else None) for v in stream]
    lines.append("| stream AL (token-weighted) | " + " | ".join(pooled) + " |")
    drafted = [_fmt(f.drafted_fraction, ".0%") for f in level.by_k]
    lines.append("| drafted steps | " + " | ".join(drafted) + " |")
    return lines


def best_k_table(levels: Sequence[OracleLevel]) -> list[str]:
    """Expected speedup per k and batch size (the best in bold), the measured one beside it."""
    rows = []
    for level in levels:
        sizes = sorted({e.batch_size for f in level.by_k for e in f.break_even})
        for bs in sizes:
            cells = []
            for f in level.by_k:
                even = f.expected_at(bs)
                if even is None:
                    cells.append("-")
                    continue
                text = _fmt(even.expected_speedup)
                if even.measured_speedup is not None:
                    text += f" (measured {_fmt(even.measured_speedup)})"
                cells.append(f"**{text}**" if level.best_k.get(bs) == f.k else text)
            best = level.best_k.get(bs)
            rows.append(
                f"| {level.drafter} | {bs} | " + " | ".join(cells) + f" | {_fmt(best, 'd')} |"
            )
    if not rows:
        return []
    ks = [f.k for f in levels[0].by_k]
    head = "| drafter | batch size | " + " | ".join(f"k={k}" for k in ks) + " | best k |"
    return [head, "|---|---|" + "---|" * (len(ks) + 1), *rows]


def check_table(levels: Sequence[OracleLevel]) -> list[str]:
    """Every measured SD level against the oracle's prediction for its k."""
    rows = []
    for level in levels:
        for f in level.by_k:
            for c in f.checks:
                first = c.mismatches[0] if c.mismatches else None
                where = "-"
                if first:
                    where = (
                        f"{first.prompt_id} turn {first.turn} step {first.step}: "
                        f"{first.predicted} predicted, {first.measured} measured"
                    )
                rows.append(
                    f"| {c.config} | bs{c.batch_size} | {c.compared} | {c.identical} | "
                    f"{c.output_differs} | {c.steps_differ} | {_fmt(c.predicted_al, '.3f')} | "
                    f"{_fmt(c.measured_al, '.3f')} | {where} |"
                )
    if not rows:
        return []
    head = (
        "| measured level | load | requests | identical steps | answer differs | "
        "steps differ | Average_AL predicted | measured | first differing step |"
    )
    return [head, "|---|---|---|---|---|---|---|---|---|", *rows]


CHECK_NOTE = (
    "identical steps: every chunk of the request as predicted. answer differs: the SD level's "
    "answer is not the baseline's (the engine was not lossless on it: expected below float32), "
    "so the prediction, made on the baseline's answer, cannot hold there; the difference in "
    "Average_AL is then the engine's own loss. steps differ: same answer, other steps (a "
    "merged stream chunk, or a drafter the oracle does not model exactly)."
)


def render_oracle(levels: Sequence[OracleLevel]) -> list[str]:
    """The report's oracle section (empty without oracle levels)."""
    if not levels:
        return []
    out = ["## Acceptance for every draft length: the greedy oracle", "", ORACLE_NOTE]
    for level in levels:
        cost = f"{level.seconds:.0f} s for {level.tokens:,} tokens"
        title = (
            f"### {level.drafter}: {level.split} bs{level.batch_size} baseline, "
            f"{level.questions} questions ({cost})"
        )
        out += ["", title, "", *al_by_k_table(level)]
    if table := best_k_table(levels):
        out += ["", "### Best k per batch size (break-even model)", "", *table]
    if table := check_table(levels):
        out += ["", "### Measured against predicted", "", *table, "", CHECK_NOTE]
    return out


def plot_oracle(levels: Sequence[OracleLevel], path: str | Path) -> Path | None:
    """Average_AL and Category_AL against k per drafter; expected speedup against k per bs."""
    if not levels:
        return None
    import matplotlib.pyplot as plt

    from speedbench.report.plots import _save

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    left, right = axes
    for level in levels:
        ks = [f.k for f in level.by_k]
        al = [f.views["speed_bench"].al_request_mean for f in level.by_k]
        (line,) = left.plot(ks, al, marker="o", lw=2, label=f"{level.drafter} (Average_AL)")
        for c in sorted(level.by_k[0].per_category):
            cat = [f.per_category[c]["speed_bench"].al_request_mean for f in level.by_k]
            left.plot(ks, cat, color=line.get_color(), lw=0.6, alpha=0.4)
        for bs in sorted({e.batch_size for f in level.by_k for e in f.break_even}):
            pts = [(f.k, e.expected_speedup) for f in level.by_k if (e := f.expected_at(bs))]
            right.plot(*zip(*pts, strict=True), marker="o", label=f"{level.drafter} bs{bs}")
            measured = [
                (f.k, e.measured_speedup)
                for f in level.by_k
                if (e := f.expected_at(bs)) and e.measured_speedup is not None
            ]
            if measured:
                right.scatter(*zip(*measured, strict=True), marker="x", s=60, color="k")
    left.set(
        xlabel="draft length k",
        ylabel="acceptance length (speed_bench view)",
        title="Predicted AL by k (thin: one line per category)",
    )
    right.axhline(1.0, color="grey", lw=0.8, ls="--")
    right.set(
        xlabel="draft length k",
        ylabel="expected speedup",
        title="Break-even model by batch size (x: measured)",
    )
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    return _save(fig, path)
