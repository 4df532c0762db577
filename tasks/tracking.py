"""MLflow tracking of sweeps: one parent run per sweep, one child run per measured configuration.

Only this module talks to MLflow, through an explicit ``MlflowClient`` (no global active run),
so concurrent flows cannot log into each other's runs. The default store is a SQLite file and an
artifact folder inside the project; a user's tracking URI overrides it. Secrets never reach a
param, tag or artifact: values of keys that look like credentials are redacted, and the engine's
environment is never logged at all.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from speedbench.secrets import redact

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STORE = PROJECT_ROOT / "mlflow"
CONFIG_HASH_TAG = "speedbench.config_hash"
KIND_TAG = "speedbench.kind"


def default_tracking_uri(store: Path = DEFAULT_STORE) -> str:
    """SQLite tracking store inside the project (created on first use)."""
    store.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{store.resolve() / 'mlflow.db'}"


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys (``spec.method``); lists stay values."""
    if not isinstance(data, dict):
        return {prefix.rstrip("."): data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(flatten(value, f"{prefix}{key}."))
    return out


class Tracker:
    """The MLflow side of one sweep."""

    def __init__(self, tracking_uri: str | None, experiment: str, store: Path = DEFAULT_STORE):
        # The form's URI, else MLflow's own variable (how pool workers learn the team's server).
        self.uri = (
            tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(store)
        )
        self.client = MlflowClient(self.uri)
        found = self.client.get_experiment_by_name(experiment)
        if found is not None:
            self.experiment_id = found.experiment_id
        else:
            # A SQLite store keeps its artifacts next to the database file; otherwise MLflow
            # would write them to ./mlruns in whatever directory the flow runs from.
            location = None
            if self.uri.startswith("sqlite:///"):
                db = Path(self.uri.removeprefix("sqlite:///"))  # absolute or cwd-relative
                location = (db.parent / "artifacts").resolve().as_uri()
            self.experiment_id = self.client.create_experiment(experiment, location)

    def start_parent(self, name: str, params: dict[str, Any]) -> str:
        """Open the sweep's parent run; return its id."""
        run = self.client.create_run(self.experiment_id, run_name=name, tags={KIND_TAG: "sweep"})
        self._log_params(run.info.run_id, params)
        return run.info.run_id

    def log_config(
        self,
        parent_id: str,
        name: str,
        identity: dict[str, Any],
        config_hash: str,
        metrics: dict[str, Any],
        series: dict[str, list[float]],
        artifacts: Iterable[Path] = (),
        extra_params: dict[str, Any] | None = None,
        status: str = "FINISHED",
        error: str | None = None,
        duration_s: float | None = None,
        tags: dict[str, str] | None = None,
    ) -> str:
        """One child run: params, scalar metrics, step-indexed series and artifacts.

        With ``duration_s`` the run's start is set that long before now, so MLflow shows how
        long the configuration was measured rather than how long logging took.
        """
        import time

        end_ms = int(time.time() * 1000)
        start_ms = end_ms - int(1000 * duration_s) if duration_s else None
        run_tags = {
            "mlflow.parentRunId": parent_id,
            CONFIG_HASH_TAG: config_hash,
            KIND_TAG: "config",
            **{k: v[:5000] for k, v in (tags or {}).items()},
        }
        if error:
            run_tags["speedbench.error"] = redact("error", error)[:5000]
        run = self.client.create_run(
            self.experiment_id, start_time=start_ms, run_name=name, tags=run_tags
        )
        run_id = run.info.run_id
        self._log_params(run_id, {**flatten(identity), **(extra_params or {})})
        stamp = 0
        batch = [
            Metric(k, float(v), stamp, 0)
            for k, v in metrics.items()
            if isinstance(v, int | float) and v == v
        ]
        for key, values in series.items():
            batch += [
                Metric(key, float(v), stamp, step)
                for step, v in enumerate(values, start=1)
                if v is not None
            ]
        for i in range(0, len(batch), 900):
            self.client.log_batch(run_id, metrics=batch[i : i + 900])
        for path in artifacts:
            if path.exists():
                self.client.log_artifact(run_id, str(path))
        self.client.set_terminated(run_id, status, end_time=end_ms if duration_s else None)
        return run_id

    def finish_parent(
        self,
        parent_id: str,
        metrics: dict[str, float],
        artifacts: Iterable[Path],
        status: str,
    ) -> None:
        """Log the sweep's plots and tables on the parent run and close it."""
        batch = [Metric(k, float(v), 0, 0) for k, v in metrics.items() if v == v]
        if batch:
            self.client.log_batch(parent_id, metrics=batch)
        for path in artifacts:
            if path.exists():
                self.client.log_artifact(parent_id, str(path))
        self.client.set_terminated(parent_id, status)

    def abort_parent(self, parent_id: str, status: str, reason: str) -> None:
        """Close a sweep that did not get to its end (KILLED on Ctrl-C, FAILED on a crash)."""
        self.set_tags(parent_id, {"speedbench.error": reason[:5000]})
        self.client.set_terminated(parent_id, status)

    def completed(self) -> dict[str, str]:
        """Config hash -> run id of every finished configuration run in the experiment."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.{KIND_TAG} = 'config' and attributes.status = 'FINISHED'",
            max_results=50000,
        )
        return {r.data.tags[CONFIG_HASH_TAG]: r.info.run_id for r in runs}

    def download(self, run_id: str, names: Iterable[str], directory: Path) -> bool:
        """Fetch a run's top-level artifacts into ``directory``; False if any is missing.

        How a level measured on another host (a pool worker) reaches this one: through the
        tracking server's artifact store, never as a path on the machine that measured it.
        """
        from mlflow.exceptions import MlflowException

        directory.mkdir(parents=True, exist_ok=True)
        for name in names:
            try:
                self.client.download_artifacts(run_id, name, str(directory))
            except (MlflowException, OSError):
                return False
            if not (directory / name).exists():
                return False
        return True

    def params(self, run_id: str) -> dict[str, str]:
        """The params of a run."""
        return dict(self.client.get_run(run_id).data.params)

    def children(self, parent_id: str) -> list[Any]:
        """Configuration runs of a sweep."""
        return self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'"
        )

    def _log_params(self, run_id: str, params: dict[str, Any]) -> None:
        items = [Param(k, redact(k, v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 90):
            self.client.log_batch(run_id, params=items[i : i + 90])

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        """Tags on a run (values redacted)."""
        self.client.log_batch(run_id, tags=[RunTag(k, redact(k, v)) for k, v in tags.items()])
