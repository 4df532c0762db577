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
from flows.sync import synchronous

SWEEP_HELP = "SD methods x draft lengths x batch sizes x splits, tracked in MLflow."
POOL_HELP = (
    "The same sweep, its SD configurations in parallel on a work pool's engine hosts "
    "(python -m flows.pool deploy, then a worker per host)."
)


def main() -> None:
    """Register and serve the deployments until interrupted."""
    tags = ["speedbench"]
    deployments = [
        sweep.to_deployment(name="sweep", description=SWEEP_HELP, tags=tags),
        pool_sweep.to_deployment(name="pool-sweep", description=POOL_HELP, tags=tags),
        build_splits.to_deployment(name="build_splits", tags=tags),
        category_table.to_deployment(name="category_table", tags=tags),
        report.to_deployment(name="report", tags=tags),
    ]
    serve(*[synchronous(d) for d in deployments])


if __name__ == "__main__":
    main()
