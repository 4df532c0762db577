"""One load level end to end: the engine's counters around it, in one process or several.

:func:`run_load` is what the runner calls per level. It reads the engine's SD counters before
and after, and drives the streams either in this process (:mod:`speedbench.client.loadgen`) or
in worker processes (:mod:`speedbench.client.multiproc`), which both build on the load
generator's request loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from speedbench.client.arrivals import arrival_gaps
from speedbench.client.loadgen import LoadResult, auto_workers, run_async, run_in_process
from speedbench.client.multiproc import run_multiprocess
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineAdapter, EngineError
from speedbench.figures import SpecCounters
from speedbench.records import RequestRecord
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings, WorkItem

# (base URL, engine kind) -> the metrics path that server answered on (an older release may
# serve an older spelling).
_SERVED_METRICS_PATH: dict[tuple[str, str], str] = {}


def scrape_metrics(engine: EngineConfig, adapter: EngineAdapter) -> str | None:
    """The engine's metrics (or server-info) text; None if the endpoint is unavailable.

    Where the adapter's path answers 404, its older spellings are tried in turn (SGLang's
    ``/server_info``, ``/get_server_info`` before 0.5.10); the one that answered is kept.
    """
    key = (engine.base_url, engine.kind)
    known = _SERVED_METRICS_PATH.get(key)
    paths = [known] if known else [adapter.metrics_path, *adapter.metrics_fallback_paths]
    for path in paths:
        try:
            resp = httpx.get(engine.base_url + path, timeout=30.0)
        except httpx.TransportError:
            return None
        if resp.status_code == 200:
            _SERVED_METRICS_PATH[key] = path
            return resp.text
        if resp.status_code != 404:
            return None
    return None


# How often a level reads the counters of an engine whose metrics endpoint empties on read
# (TensorRT-LLM keeps iteration stats in a bounded deque, so reading only at the end would lose
# every iteration past its length).
DRAIN_INTERVAL_S = 2.0


class DrainedCounters:
    """The sum of an engine's drain-on-read counters over every read made during a level."""

    def __init__(self, engine: EngineConfig, adapter: EngineAdapter) -> None:
        self.engine, self.adapter = engine, adapter
        self.total: SpecCounters | None = None
        self._lock = threading.Lock()

    def read(self) -> str | None:
        """One read of the endpoint, added to the total; the page (None if unavailable)."""
        text = scrape_metrics(self.engine, self.adapter)
        if text is not None:
            counters = self.adapter.parse_counters(text)
            with self._lock:
                self.total = counters if self.total is None else self.total + counters
        return text


@contextmanager
def draining(
    counters: DrainedCounters, interval_s: float = DRAIN_INTERVAL_S
) -> Iterator[DrainedCounters]:
    """Read ``counters`` every ``interval_s`` seconds in a thread while the block runs."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval_s):
            counters.read()

    thread = threading.Thread(target=loop, name="drain-counters", daemon=True)
    thread.start()
    try:
        yield counters
    finally:
        stop.set()
        thread.join()


def server_acceptance_length(adapter: EngineAdapter, metrics_text: str | None) -> float | None:
    """The engine's own running AL, for adapters whose server states one (SGLang)."""
    if metrics_text is None:
        return None
    try:
        return adapter.server_acceptance_length(metrics_text)
    except ValueError:  # a server-info page this adapter does not understand is no AL
        return None


def reset_prefix_cache(engine: EngineConfig, adapter: EngineAdapter, wait_s: float = 60.0) -> None:
    """Empty the engine's prefix cache (its reset endpoint), retrying while the engine is busy.

    vLLM answers 200 with ``success: false`` while a request still holds blocks; SGLang answers
    its ``reset_cache_busy_status`` (400) while requests are running or waiting, e.g. the abort
    of a request the client timed out. Both are retried for up to ``wait_s`` seconds.

    Raises:
        EngineError: The engine has no such endpoint (a server started without it), refused
            otherwise, or was still busy after ``wait_s``.
    """
    url = engine.base_url + str(adapter.reset_cache_path)
    deadline = time.monotonic() + wait_s
    attempt = 0
    while True:
        attempt += 1
        try:
            resp = httpx.post(url, timeout=30.0)
        except httpx.TransportError as exc:
            raise EngineError(f"prefix-cache reset at {url} failed: {exc}") from None
        if resp.status_code == 404:
            raise EngineError(
                f"the engine at {engine.base_url} has no {adapter.reset_cache_path} (vLLM serves "
                "it with VLLM_SERVER_DEV_MODE=1); set prefix_cache to keep or off"
            )
        busy = resp.status_code == adapter.reset_cache_busy_status
        if resp.status_code != 200 and not busy:
            raise EngineError(f"prefix-cache reset at {url}: HTTP {resp.status_code}")
        if not busy:
            body = (
                resp.json()
                if resp.headers.get("content-type", "").startswith("application/json")
                else {}
            )
            if body.get("success", True):
                return
        if time.monotonic() >= deadline:
            raise EngineError(
                f"prefix-cache reset at {url} still refused after {attempt} tries in "
                f"{wait_s:g} s (HTTP {resp.status_code}: the engine still has requests)"
            )
        time.sleep(min(0.2 * attempt, 2.0))


def prefix_cache_delta(
    adapter: EngineAdapter, before: str | None, after: str | None
) -> dict[str, float] | None:
    """Prefix-cache tokens queried and hit between two metrics pages (None: not reported)."""
    if before is None or after is None:
        return None
    then, now = adapter.parse_prefix_cache(before), adapter.parse_prefix_cache(after)
    if then is None or now is None:
        return None
    return {"query_tokens": now[0] - then[0], "hit_tokens": now[1] - then[1]}


def counter_delta(before: SpecCounters | None, after: SpecCounters | None) -> SpecCounters | None:
    """The cumulative SD counters over a run (drain-on-read engines: :class:`DrainedCounters`)."""
    if after is None or before is None:
        return None
    return after - before


def check_open_loop(settings: LoadSettings) -> None:
    """Refuse an open-loop level that cannot run, before anything is sent.

    Raises:
        ValueError: A bad rate, arrival process or cap, or more than one client process (the
            schedule is one clock's; one process sends well past a hundred requests/s).
    """
    assert settings.request_rate is not None
    arrival_gaps(0, settings.request_rate, settings.arrival, settings.burstiness)
    if settings.max_concurrency is not None and settings.max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {settings.max_concurrency}")
    if settings.workers > 1:
        raise ValueError(
            f"an open-loop level runs in one client process, got workers={settings.workers}"
        )


def run_load(
    engine: EngineConfig,
    spec: SpecConfig,
    adapter: EngineAdapter,
    items: Sequence[WorkItem],
    settings: LoadSettings,
    tokenizer: PromptTokenizer | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    parts_dir: Path | None = None,
) -> LoadResult:
    """Drive one load level, in this process or in worker processes (``settings.workers``).

    ``parts_dir`` keeps the workers' own record files (a temporary folder if None); a
    single-process run writes through ``on_record`` only.
    """
    if settings.batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {settings.batch_size}")
    if any(it.prompt_ids is None for it in items) and tokenizer is None:
        raise ValueError("text prompts need a tokenizer")
    if settings.open_loop:
        check_open_loop(settings)
        workers = 1
    else:
        workers = min(settings.workers or auto_workers(settings.batch_size), settings.batch_size)
    before_text = scrape_metrics(engine, adapter)  # drains what came before, where reads do
    before = adapter.parse_counters(before_text) if before_text is not None else None
    drained = DrainedCounters(engine, adapter)

    def drive() -> LoadResult:
        if workers == 1:
            return run_async(
                run_in_process(engine, spec, adapter, items, settings, tokenizer, on_record)
            )
        return run_multiprocess(
            engine, spec, adapter, items, settings, tokenizer, on_record, workers, parts_dir
        )

    if adapter.counters_reset_on_read:
        with draining(drained):
            result = drive()
        after_text = drained.read()
        result.counters = drained.total
    else:
        result = drive()
        after_text = scrape_metrics(engine, adapter)
        after = adapter.parse_counters(after_text) if after_text is not None else None
        result.counters = counter_delta(before, after)
    if (cache := prefix_cache_delta(adapter, before_text, after_text)) is not None:
        result.extras["prefix_cache"] = cache
    if (server_al := server_acceptance_length(adapter, after_text)) is not None:
        result.extras["server_al"] = server_al
    return result
