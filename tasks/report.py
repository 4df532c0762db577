"""Put the main job's report (report.md, report.html) on the MLflow parent runs of its stages.

``python -m tasks.report FILE ...`` is the DVC report stage's second command: the core writes
the report (``speedbench report``, no MLflow), this attaches it to the newest parent run of
each measure stage (``qualitative``, ``throughput``) in the project's store, so a reader who
opens a sweep in the MLflow UI finds its report beside its plots.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tasks.tracking import KIND_TAG, Tracker

STAGES = ("qualitative", "throughput")


def attach(files: list[Path], tracking_uri: str | None, experiment: str) -> list[str]:
    """Log ``files`` on the newest parent run of each stage; returns the run ids used."""
    tracker = Tracker(tracking_uri, experiment)
    used = []
    for stage in STAGES:
        runs = tracker.client.search_runs(
            [tracker.experiment_id],
            f"tags.`{KIND_TAG}` = 'sweep' and attributes.run_name = '{stage}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        if not runs:
            continue
        for path in files:
            if path.exists():
                tracker.client.log_artifact(runs[0].info.run_id, str(path))
        used.append(runs[0].info.run_id)
    return used


def main(argv: list[str] | None = None) -> int:
    """Entry point of the DVC report stage's MLflow step."""
    parser = argparse.ArgumentParser(prog="python -m tasks.report", description=__doc__)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--tracking-uri", default=None, help="default: the project's store")
    parser.add_argument("--experiment", default="speedbench")
    args = parser.parse_args(argv)
    used = attach(args.files, args.tracking_uri, args.experiment)
    print(f"report attached to {len(used)} MLflow parent run(s): {', '.join(used) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
