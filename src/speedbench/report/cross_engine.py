"""One sweep's prompts through several engines: acceptance, throughput and speedup side by side.

The inputs are each engine's ``summary.json`` (the same SweepConfig run with ``engine`` set to
each) and, for the output agreement, each engine's baseline records. Nothing here measures, so
the tables can be rebuilt from any results folder (``benchmarks/cross_engine.py`` writes them).

The engines need not run the same arithmetic: llama.cpp serves the packaged GGUF files as they
are (Q4_K_M for the 1.5B target), vLLM the weights dequantised from them to float32. Where their
greedy outputs part, acceptance is measured on different text, which is a finding to state, not
an error to hide: :func:`agreement_table` says how often and how early they part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from speedbench.metrics.lossless import lossless_check
from speedbench.records import RequestRecord
from speedbench.sweep_summary import SummaryRow, SweepSummary


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _rows(summary: SweepSummary) -> list[SummaryRow]:
    return sorted(summary.levels, key=lambda r: (r.split, r.batch_size, r.is_speculative, r.config))


def _category_columns(summaries: Mapping[str, SweepSummary]) -> list[tuple[str, dict]]:
    """(column name, Category_AL by category) of every engine's SD levels."""
    return [
        (f"{engine} {r.config} {r.load}", r.category_al)
        for engine, summary in summaries.items()
        for r in _rows(summary)
        if r.is_speculative and r.category_al
    ]


def overall_table(summaries: Mapping[str, SweepSummary]) -> list[str]:
    """Markdown: every engine's levels, with AL in each view, output tok/s and speedup.

    Each level names its engine's drafting shape: SGLang's n-gram drafts a tree, TensorRT-LLM's
    shares one n-gram pool across requests, so the same method and k are not the same drafter.
    """
    lines = [
        "| engine | config | drafting | load | AL speed_bench (Average_AL) | AL stream "
        "| AL engine | AL counters | output tok/s | speedup | greedy outputs = baseline |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for engine, summary in summaries.items():
        for r in _rows(summary):
            lossless = (
                f"{r.lossless.matched}/{r.lossless.compared}" if r.lossless is not None else "-"
            )
            lines.append(
                f"| {engine} | {r.config} | {r.drafting_shape or '-'} | {r.load} "
                f"| {_fmt(r.average_al)} | {_fmt(r.figure('stream', 'al_token_weighted'))} "
                f"| {_fmt(r.figure('engine', 'al_token_weighted'))} "
                f"| {_fmt(r.figure('counters', 'al_token_weighted'))} "
                f"| {_fmt(r.output_throughput_tok_s, '.1f')} | {_fmt(r.speedup)} | {lossless} |"
            )
    return lines


def category_table(summaries: Mapping[str, SweepSummary]) -> list[str]:
    """Markdown: SPEED-Bench's Category_AL of every SD level, one column per engine and level."""
    columns = _category_columns(summaries)
    if not columns:
        return []
    cats = sorted({c for _, cells in columns for c in cells})
    lines = [
        "| category (speed_bench view: Category_AL) | " + " | ".join(h for h, _ in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for c in cats:
        lines.append(f"| {c} | " + " | ".join(_fmt(cells.get(c)) for _, cells in columns) + " |")
    return lines


def agreement_table(baselines: Mapping[str, Sequence[RequestRecord]]) -> list[str]:
    """Markdown: how often each engine's greedy baseline output equals the first engine's.

    The first engine is the reference; for every other one, the prompts compared, those whose
    output is the same token for token, and the first divergent position of each that is not.
    """
    if len(baselines) < 2:
        return []
    (ref_name, ref), *others = baselines.items()
    lines = [
        f"| engine | same greedy output as {ref_name} | first divergent token of the others |",
        "|---|---|---|",
    ]
    for name, records in others:
        check = lossless_check(records, ref)
        where = ", ".join(str(m.first_divergence) for m in check.mismatches) or "-"
        lines.append(f"| {name} | {check.matched}/{check.compared} | {where} |")
    return lines


def render(
    summaries: Mapping[str, SweepSummary],
    baselines: Mapping[str, Sequence[RequestRecord]],
    title: str,
    notes: Sequence[str] = (),
) -> str:
    """The cross-engine report as markdown."""
    parts = [f"# {title}", "", *notes, ""]
    parts += ["## Every level", "", *overall_table(summaries), ""]
    if table := category_table(summaries):
        parts += ["## AL per category", "", *table, ""]
    if table := agreement_table(baselines):
        parts += ["## Do the engines generate the same text?", "", *table, ""]
    return "\n".join(parts)


def plot_category_al(summaries: Mapping[str, SweepSummary], path: str | Path) -> Path | None:
    """Grouped bars: SPEED-Bench's Category_AL per category, one bar per engine's SD level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = _category_columns(summaries)
    if not columns:
        return None
    cats = sorted({c for _, cells in columns for c in cells})
    width = 0.8 / len(columns)
    fig, ax = plt.subplots(figsize=(max(8, len(cats) * 0.9), 4.5))
    for i, (name, cells) in enumerate(columns):
        xs = [j + i * width for j in range(len(cats))]
        ax.bar(xs, [cells.get(c, 0.0) or 0.0 for c in cats], width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cats))], cats, rotation=30, ha="right")
    ax.set_ylabel("AL (speed_bench view, Category_AL)")
    top = max((v or 0.0) for _, cells in columns for v in cells.values())
    ax.set_ylim(0, top * 1.2)  # room for the legend above the bars
    ax.set_title("Acceptance length per category, by engine")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
