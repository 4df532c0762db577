"""Entry point of the DVC measure stages: run the ``sweep`` flow for one params section.

``python -m flows.stage measure_qualitative --params params.yaml`` runs the Prefect flow
(ephemeral server unless PREFECT_API_URL is set), logs every configuration to MLflow, and writes
the stage's DVC metrics next to its records. Exit codes as every entry point
(:mod:`speedbench.errors`): 0 ok, 2 bad input, 3 a config failed, 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from speedbench.config import load_params
from speedbench.errors import finish
from speedbench.oracle.in_sweep import read_oracle, read_speedup_model
from speedbench.pipeline.stages import STAGES, stage_sweep, write_stage_metrics
from speedbench.sweep_summary import SweepSummary


def main(argv: list[str] | None = None) -> int:
    """Run one measure stage."""
    parser = argparse.ArgumentParser(prog="python -m flows.stage", description=__doc__)
    parser.add_argument("stage", choices=STAGES)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--results", default="results", help="records, logs, plots (DVC out)")
    parser.add_argument("--metrics", default="results/metrics", help="DVC metrics (git-tracked)")
    parser.add_argument("--force", action="store_true", help="re-run finished configurations")
    args = parser.parse_args(argv)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")

    def run() -> SweepSummary:
        config = stage_sweep(load_params(args.params), args.stage, args.results)
        if args.force:
            config = config.with_fields(force=True)
        from flows.sweep import sweep

        summary = sweep(config)
        out = Path(config.output.out_dir) / config.name
        model = read_speedup_model(out)
        for path in write_stage_metrics(
            summary, Path(args.metrics) / config.name, read_oracle(out), model
        ):
            print(f"wrote {path}")
        print(f"MLflow: parent run {summary.parent_run_id} in {summary.tracking_uri}")
        return summary

    return finish(run)


if __name__ == "__main__":
    sys.exit(main())
