"""Serve every speedbench flow as a deployment, for the Prefect UI and API.

Run from the project root against a Prefect server (see README, "Prefect UI")::

    .venv/bin/python -m flows.serve

The process registers the deployments and executes their runs; trigger them from the UI's
deployment form or with ``prefect deployment run 'sweep/sweep' --params '{...}'``.
"""

from __future__ import annotations

from prefect import serve

from flows.build_splits import build_splits
from flows.category_table import category_table
from flows.pool import pool_sweep
from flows.report import report
from flows.sweep import sweep


def main() -> None:
    """Register and serve the deployments until interrupted."""
    serve(
        sweep.to_deployment(
            name="sweep",
            description="SD methods x draft lengths x batch sizes x splits, tracked in MLflow.",
            tags=["speedbench"],
        ),
        pool_sweep.to_deployment(
            name="pool-sweep",
            description="The same sweep, its SD configurations in parallel on a work pool's "
            "engine hosts (python -m flows.pool deploy, then a worker per host).",
            tags=["speedbench"],
        ),
        build_splits.to_deployment(name="build_splits", tags=["speedbench"]),
        category_table.to_deployment(name="category_table", tags=["speedbench"]),
        report.to_deployment(name="report", tags=["speedbench"]),
    )


if __name__ == "__main__":
    main()
