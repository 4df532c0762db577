"""The ``report`` flow: the Markdown report of a results directory (what `make run` prints)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from speedbench.report.text import render


@task
def render_report(results_dir: str, out_file: str | None, mlflow_uri: str | None) -> str:
    """Render (and optionally save) the report of ``results_dir``."""
    text = render(Path(results_dir), mlflow_uri)
    if out_file:
        Path(out_file).parent.mkdir(parents=True, exist_ok=True)
        Path(out_file).write_text(text)
    return text


@flow(name="report", log_prints=True)
def report(
    results_dir: str = "results",
    out_file: str | None = "results/metrics/report.md",
    mlflow_uri: str | None = "mlflow/mlflow.db",
) -> str:
    """Per-category AL and AR, throughput and speedup, random-token control, plot locations."""
    text = render_report(results_dir, out_file, mlflow_uri)
    print(text)
    return text
