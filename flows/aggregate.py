"""The ``aggregate`` flow: a finished sweep's per-category AL table, from MLflow, as CSV."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from tasks.report import aggregate as aggregate_task
from tasks.tracking import Tracker


@flow(name="aggregate", log_prints=True)
def aggregate(
    parent_run_id: str,
    experiment: str = "speedbench",
    tracking_uri: str | None = None,
    out_dir: str = "results/aggregate",
) -> str | None:
    """Print and save the AL table (category x configuration) of sweep ``parent_run_id``."""
    tracker = Tracker(tracking_uri, experiment)
    path = aggregate_task(tracker, parent_run_id, Path(out_dir) / parent_run_id)
    return str(path) if path else None
