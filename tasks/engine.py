"""Tasks that start and stop an engine for one SD configuration.

The handle (an :class:`~speedbench.measure.OpenEngine`) holds a live process, so these tasks
never cache or persist results. Starting is retried once: a slow host can miss the health
deadline on a cold start; stopping is not, because it cannot half-succeed.
"""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from speedbench.config import EngineConfig, SpecConfig
from speedbench.measure import OpenEngine, check_alive


@task(retries=1, retry_delay_seconds=5, cache_policy=NO_CACHE)
def start_engine(engine: EngineConfig, spec: SpecConfig, log_path: Path) -> OpenEngine:
    """Launch (or attach to) the engine, wait for health, warm it up."""
    return OpenEngine(engine, spec, log_path)


@task(cache_policy=NO_CACHE)
def stop_engine(handle: OpenEngine) -> None:
    """Stop the engine's whole process group."""
    handle.close()


@task(cache_policy=NO_CACHE)
def assert_engine_alive(handle: OpenEngine, when: str) -> None:
    """Fail with the engine log tail if the engine process has exited."""
    check_alive(handle.running, when)


def engine_version(handle: OpenEngine) -> str:
    """The engine's reported version (vLLM and SGLang serve ``/version``), else ``unknown``."""
    import httpx

    try:
        resp = httpx.get(f"{handle.running.engine.base_url}/version", timeout=5)
        return str(resp.json().get("version", "unknown"))
    except (httpx.HTTPError, ValueError):
        return "unknown"
