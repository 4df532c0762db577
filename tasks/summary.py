"""Tasks that close a sweep in MLflow: the per-category AL table and the plots on the parent run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE

from speedbench.results import CATEGORY_NAMESPACE
from speedbench.sweep_summary import SweepSummary
from tasks.tracking import Tracker

CATEGORY_FIGURE = "al_speed_bench_request_mean"
CATEGORY_TABLE_TITLE = "Category_AL (speed_bench view: mean AL over a category's questions)"


def category_table(tracker: Tracker, parent_id: str) -> pd.DataFrame:
    """SPEED-Bench's Category_AL per category (rows) x configuration (columns), child runs.

    The ``(all)`` row is its Average_AL. Both are the ``speed_bench`` view's request means,
    the figures SPEED-Bench publishes, never the stream view's token-weighted AL.
    """
    records = []
    suffix = f"/{CATEGORY_FIGURE}"
    for run in tracker.children(parent_id):
        if run.info.status != "FINISHED":
            continue
        p, m = run.data.params, run.data.metrics
        method = p.get("spec.method", "?")
        label = "none" if method == "none" else f"{method}-k{p.get('spec.num_speculative_tokens')}"
        rate = p.get("load.request_rate")
        load = f"rate{float(rate):g}" if rate else f"bs{p.get('batch_size')}"
        column = f"{label} {p.get('split')} {load}"
        for key, value in m.items():
            namespace, _, rest = key.partition("/")
            if namespace == CATEGORY_NAMESPACE and rest.endswith(suffix):
                records.append(
                    {"category": rest.removesuffix(suffix), "config": column, "al": value}
                )
        if CATEGORY_FIGURE in m:
            records.append({"category": "(all)", "config": column, "al": m[CATEGORY_FIGURE]})
    if not records:
        return pd.DataFrame()
    frame = pd.DataFrame(records)
    table = frame.pivot_table(index="category", columns="config", values="al", aggfunc="first")
    table.index.name = "category (speed_bench Category_AL)"
    return table


def print_table(table: pd.DataFrame, title: str) -> None:
    """A rich console table (how a sweep ends in the terminal and in Prefect's logs)."""
    from rich.console import Console
    from rich.table import Table

    out = Table(title=title)
    out.add_column(table.index.name or "")
    for col in table.columns:
        out.add_column(str(col), justify="right")
    for idx, row in table.iterrows():
        out.add_row(str(idx), *("-" if v != v else f"{v:.3f}" for v in row))
    Console(width=200).print(out)


@task(cache_policy=NO_CACHE)
def write_category_table(tracker: Tracker, parent_id: str, out_dir: Path) -> Path | None:
    """The sweep's Category_AL table (speed_bench view) as CSV, printed as a rich table."""
    table = category_table(tracker, parent_id)
    if table.empty:
        return None
    print_table(table, CATEGORY_TABLE_TITLE)
    path = out_dir / "al_by_category.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path)
    return path


@task(retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def close_sweep(
    tracker: Tracker,
    parent_id: str,
    summary: SweepSummary,
    files: list[Path],
    extra_metrics: dict[str, float] | None = None,
) -> None:
    """Put plots, tables and the oracle's figures on the parent run; FAILED if a config failed."""
    metrics: dict[str, float] = {
        "num_levels": len(summary.levels),
        "num_failures": len(summary.failures),
    }
    metrics |= extra_metrics or {}
    status = "FAILED" if summary.failures else "FINISHED"
    tracker.finish_parent(parent_id, metrics, files, status)
