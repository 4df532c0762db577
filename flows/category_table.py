"""The ``category_table`` flow: a finished sweep's per-category AL table, from MLflow, as CSV."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from tasks.summary import write_category_table
from tasks.tracking import Tracker


@flow(name="category_table", log_prints=True)
def category_table(
    parent_run_id: str,
    experiment: str = "speedbench",
    tracking_uri: str | None = None,
    out_dir: str = "results/category_tables",
) -> str | None:
    """Print and save the AL table (category x configuration) of sweep ``parent_run_id``."""
    tracker = Tracker(tracking_uri, experiment)
    path = write_category_table(tracker, parent_run_id, Path(out_dir) / parent_run_id)
    return str(path) if path else None
