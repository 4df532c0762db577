"""Tasks that start and stop an engine for one SD configuration.

The handle (an :class:`~speedbench.engines.launchers.OpenEngine`) holds a live process, so
these tasks never cache or persist results. Starting is retried once: a slow host can miss the
health deadline on a cold start. Stopping is ``OpenEngine.close``, called directly by the sweep
runner, so it also runs while a Ctrl-C unwinds.
"""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.launchers import OpenEngine


@task(retries=1, retry_delay_seconds=5, cache_policy=NO_CACHE)
def start_engine(engine: EngineConfig, spec: SpecConfig, log_path: Path) -> OpenEngine:
    """Launch (or attach to) the engine, wait for health, warm it up."""
    return OpenEngine(engine, spec, log_path)
