"""One level: one SD configuration, one split, one load point, measured on a running engine.

A load point is a batch size (closed loop) or a request rate (open loop). A level's directory
(``OUT/<config>/<split>/bs<N>/`` or ``.../rate<R>/``) holds:

    records.jsonl    written per request as it finishes (crash-safe)
    records.parquet  consolidated at the end of the level
    metrics.json     the level's :class:`~speedbench.results.LevelMetrics`

The sweep runner (:mod:`speedbench.run.sweep`) calls :func:`measure_level` for every point of its
grid; this module knows nothing of grids, MLflow or Prefect.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speedbench.client.loadgen import LoadResult, engine_gone
from speedbench.client.measure import reset_prefix_cache, run_load
from speedbench.config import EngineConfig
from speedbench.engines.base import EngineError
from speedbench.engines.launchers import get_launcher
from speedbench.engines.running import RunningEngine, log_tail
from speedbench.figures import ClientFigures, HostFigures
from speedbench.hostcheck import contention
from speedbench.hostcheck.cpu import format_cpu_list, keep_off
from speedbench.metrics.goodput import LatencyObjectives
from speedbench.metrics.summary import summarize_level
from speedbench.records import RecordSink, RequestRecord, write_parquet
from speedbench.results import (
    LevelConfig,
    LevelMetrics,
    PrefixCacheFigures,
    StaleResults,
    finite,
    write_json,
)
from speedbench.secrets import redacted_engine
from speedbench.sweep_summary import load_key
from speedbench.tokenize import PromptTokenizer, check_token_ids
from speedbench.workload import LoadSettings, WorkItem

log = logging.getLogger(__name__)


def check_alive(running: RunningEngine, when: str) -> None:
    """Raise EngineError (quoting the log tail) if a local engine process has exited."""
    code = running.exit_code()
    if code is not None:
        tail = log_tail(running.log_path)
        raise EngineError(f"engine exited with code {code} {when}: {tail}")


@dataclass
class LevelResult:
    """Where one measured level's outputs are, and its metrics."""

    label: str
    batch_size: int
    metrics: LevelMetrics
    directory: Path
    split: str = ""
    request_rate: float | None = None

    @property
    def failed(self) -> str | None:
        """Why the engine failed during the level (None if it did not)."""
        return self.metrics.failed


def load_level(
    directory: Path, label: str, split: str, batch_size: int, request_rate: float | None = None
) -> LevelResult | None:
    """A level measured earlier, from its ``metrics.json``.

    None if it is not on disk, or was written in another results schema (said in one line: the
    level is then measured again rather than read under the wrong names).
    """
    path = directory / "metrics.json"
    if not path.exists():
        return None
    try:
        metrics = LevelMetrics.read(path)
    except StaleResults as exc:
        log.warning("%s", exc)
        return None
    return LevelResult(label, batch_size, metrics, directory, split, request_rate)


def validate_items(items: Sequence[WorkItem], vocab_size: int) -> None:
    """Fail before any request on pre-tokenized prompts with out-of-vocabulary ids."""
    for it in items:
        if it.prompt_ids is not None:
            try:
                check_token_ids(it.prompt_ids, vocab_size)
            except ValueError as exc:
                raise type(exc)(f"prompt {it.prompt_id}: {exc}") from None


def repeat_order(items: Sequence[WorkItem], seed: int | None, repeat: int) -> list[WorkItem]:
    """The prompts in the order repeat ``repeat`` sends them.

    Repeat 0 keeps the split's own order; each later one a fresh seeded permutation, so no two
    repeats measure the same queue.
    """
    if repeat == 0:
        return list(items)
    order = random.Random((seed or 0) * 1_000_003 + repeat).sample(range(len(items)), len(items))
    return [items[i] for i in order]


def warmup_items(items: Sequence[WorkItem], requests: int) -> list[WorkItem]:
    """The first prompts of the level (cycling if there are too few) that make ``requests``."""
    out: list[WorkItem] = []
    sent = 0
    while items and sent < requests:
        item = items[len(out) % len(items)]
        out.append(item)
        sent += item.num_turns
    return out


def merge_runs(runs: Sequence[LoadResult]) -> LoadResult:
    """One level's result from its repeats: all records, summed counters and cache traffic."""
    if len(runs) == 1:
        return runs[0]
    counters = None
    if all(r.counters is not None for r in runs):
        counters = runs[0].counters
        for run in runs[1:]:
            counters = counters + run.counters  # type: ignore[operator]
    extras: dict[str, object] = {}
    reports = [
        r.extras["client"] for r in runs if isinstance(r.extras.get("client"), ClientFigures)
    ]
    if reports:
        extras["client"] = reports[0].model_copy(
            update={
                "warning": next((rep.warning for rep in reports if rep.warning), None),
                "per_repeat": reports,
            }
        )
    caches = [r.extras.get("prefix_cache") for r in runs]
    if all(isinstance(c, dict) for c in caches):
        extras["prefix_cache"] = {
            key: sum(c[key] for c in caches)  # type: ignore[index]
            for key in ("query_tokens", "hit_tokens")
        }
    if "server_al" in runs[-1].extras:
        extras["server_al"] = runs[-1].extras["server_al"]
    if aborted := next((r.aborted for r in runs if r.aborted), None):
        extras["aborted"] = aborted
    records = [rec for run in runs for rec in run.records]
    return LoadResult(records, counters, sum(r.duration_s for r in runs), extras)


def measure_level(
    running: RunningEngine,
    items: Sequence[WorkItem],
    settings: LoadSettings,
    tokenizer: PromptTokenizer | None,
    directory: Path,
) -> LevelResult:
    """Run one load level, its warm-up first and then each repeat; records land as they arrive.

    The warm-up (``settings.warmup_requests``) runs at the level's own load shape, and its
    records are written marked ``warmup``; the engine's prefix cache, when reset, is reset
    after it and before every repeat, so no measured request finds its prompt cached by an
    earlier one. The level's records, metrics and client report are written even when the
    engine died during it; ``metrics.failed`` then says why (quoting the engine log), and the
    caller decides what a failed level means for the sweep.
    """
    level = LevelRun(running, items, settings, tokenizer, directory)
    try:
        for repeat in range(settings.repeats):
            if not level.measure_repeat(repeat):
                break
    except BaseException:
        level.abandon()
        raise
    return level.finish()


class LevelRun:
    """One level measured a repeat at a time, so other levels' repeats can run in between.

    :func:`measure_level` runs the repeats back to back; the interleaved grid
    (:mod:`speedbench.run.interleave`) alternates the repeats of a grid point's configs, each on
    its own resident engine, so drift of the host lands on the baseline and the SD levels
    alike. Records are written as they arrive; :meth:`finish` writes the level's Parquet and
    metrics. The host's contention is measured over the level's own repeats only (the worst
    repeat is kept), not over the other levels' turns in between; ``siblings`` are the other
    resident engines of the same sweep, whose CPU time counts as others' (an idle engine that
    spins would slow this one) but which are not reported as foreign engines.
    """

    def __init__(
        self,
        running: RunningEngine,
        items: Sequence[WorkItem],
        settings: LoadSettings,
        tokenizer: PromptTokenizer | None,
        directory: Path,
        siblings: Sequence[RunningEngine] = (),
    ):
        self.running, self.items, self.settings = running, items, settings
        self.tokenizer, self.directory, self.siblings = tokenizer, directory, siblings
        directory.mkdir(parents=True, exist_ok=True)
        jsonl = directory / "records.jsonl"
        jsonl.unlink(missing_ok=True)
        if settings.strict_host:
            refuse_busy_host(running, settings)
        self.cache_mode = running.adapter.prefix_cache_mode(running.engine)
        self.engine_cores = engine_cores_here(running.engine)
        allowed = frozenset(os.sched_getaffinity(0))
        self.client_cores = (allowed - self.engine_cores) or allowed  # as keep_off moves it
        self.runs: list[LoadResult] = []
        self.hosts: list[HostFigures] = []
        self.warm: list[RequestRecord] = []
        # Why the engine failed, judged when it did (relaunch: it is gone by the finish).
        self.failure: str | None = None
        self._sink = RecordSink(jsonl)
        if settings.warmup_requests:
            with keep_off(self.engine_cores):
                write = self._sink.write
                self.warm = warm_up(running, items, settings, tokenizer, write, directory)

    @property
    def stopped(self) -> str | None:
        """Why no more repeats are measured (the warm-up or a repeat lost the engine)."""
        if failed := warm_failed(self.warm):
            return failed
        return next((r.aborted for r in self.runs if r.aborted), None)

    def measure_repeat(self, repeat: int) -> bool:
        """Measure repeat ``repeat``; False when the level stops (its engine is gone)."""
        if self.stopped:
            return False
        running, settings = self.running, self.settings
        with keep_off(self.engine_cores) as self.client_cores:
            if self.cache_mode == "reset":
                reset_cache(running, settings)
            before = contention.snapshot()
            self.runs.append(
                run_load(
                    running.engine,
                    running.spec,
                    running.adapter,
                    repeat_order(self.items, settings.seed, repeat),
                    dataclasses.replace(settings, repeat=repeat),
                    self.tokenizer,
                    self._sink.write,
                    parts_dir=self.directory / "parts" / f"r{repeat}",
                )
            )
            after = contention.snapshot()
        procs = {**before.procs, **after.procs}
        ours = engine_ownership(running, procs)
        siblings = [engine_ownership(s, procs) for s in self.siblings]
        host = contention.compare(
            before, after, ours, settings.contention_threshold, self.engine_cores,
            siblings=lambda pid: any(sib(pid) for sib in siblings),
        )  # fmt: skip
        self.hosts.append(host)
        return not self.runs[-1].aborted

    def failure_now(self) -> str | None:
        """Why the level's engine failed, judged now (None: it did not)."""
        return engine_failure(self.running, self.settings, self.stopped) or None

    def finish(self, check_engine: bool = True) -> LevelResult:
        """Write the level's records and metrics; its result.

        ``check_engine`` judges the engine's health now; an engine launched for one block
        (``relaunch``) is stopped by then, and :attr:`failure` holds what was judged in time.
        """
        running, settings, directory = self.running, self.settings, self.directory
        self._sink.close()
        runs = self.runs
        aborted = {"aborted": warm_failed(self.warm)}
        result = merge_runs(runs) if runs else LoadResult([], None, 0.0, aborted)
        write_parquet([*self.warm, *result.records], directory / "records.parquet")
        objectives = LatencyObjectives(**settings.objectives) if settings.objectives else None
        # SPEED-Bench cuts its tokenizer's EOS from a turn's last step when the run stops at EOS.
        tokenizer = self.tokenizer
        eos_id = None if settings.ignore_eos or tokenizer is None else tokenizer.tok.eos_token_id
        summary = summarize_level(
            result.records,
            result.counters,
            running.spec.num_speculative_tokens,
            server_al=result.extras.get("server_al"),
            objectives=objectives,
            eos_id=eos_id,
        )
        host = worst_host(self.hosts, settings.contention_threshold)
        measured_level = LevelMetrics(
            **dict(summary),
            client=result.extras.get("client"),
            prefix_cache=PrefixCacheFigures(
                mode=self.cache_mode, **(result.extras.get("prefix_cache") or {})
            ),
            host=host.model_copy(
                update={
                    "engine_cpus": format_cpu_list(self.engine_cores)
                    if self.engine_cores
                    else None,
                    "client_cpus": format_cpu_list(self.client_cores),
                }
            ),
            failed=(
                engine_failure(running, settings, result.aborted) or None
                if check_engine
                else self.failure
            ),
            config=LevelConfig(
                engine=redacted_engine(running.engine),
                spec=running.spec,
                drafting_shape=running.adapter.drafting_shape(running.spec),
                eos_token_id=eos_id,
                questions=len(self.items),
                questions_on_fewer_turns=sum(item.on_fewer_turns for item in self.items),
                batch_size=settings.batch_size,
                max_tokens=settings.max_tokens,
                temperature=settings.temperature,
                split=settings.split,
                **load_shape(settings),
            ),
        )
        # Undefined figures are None from here on, as they read back from metrics.json.
        metrics = LevelMetrics.model_validate(finite(measured_level.model_dump()))
        write_json(directory / "metrics.json", metrics.model_dump(mode="json"))
        where = f"{running.spec.label} {settings.split} {level_load(settings)}"
        if host.flagged:
            log.warning("%s: %s", where, host.warning)
        if warning := metrics.client and metrics.client.warning:
            log.warning("%s: %s", where, warning)
        return LevelResult(
            running.spec.label,
            settings.batch_size,
            metrics,
            directory,
            split=settings.split,
            request_rate=settings.request_rate,
        )

    def abandon(self) -> None:
        """Close the records file of a level that will not be finished (its sweep stopped)."""
        self._sink.close()


def worst_host(hosts: Sequence[HostFigures], threshold: float) -> HostFigures:
    """The level's host figures: its most contended repeat (a quiet host when none ran)."""
    if not hosts:
        return HostFigures(
            wall_s=0.0, cores=len(os.sched_getaffinity(0)), others_cpu_s=0.0,
            others_fraction=0.0, ours_cpu_s=0.0, host_busy_s=0.0, load_1m=None,
            threshold=threshold, flagged=False,
        )  # fmt: skip
    if len(hosts) == 1:
        return hosts[0]
    worst = max(hosts, key=lambda h: (h.flagged, h.others_fraction))
    siblings = [h.sibling_cpu_s for h in hosts if h.sibling_cpu_s is not None]
    return worst.model_copy(
        update={
            "wall_s": sum(h.wall_s for h in hosts),
            "ours_cpu_s": sum(h.ours_cpu_s for h in hosts),
            "host_busy_s": sum(h.host_busy_s for h in hosts),
            "kernel_cpu_s": sum(h.kernel_cpu_s for h in hosts),
            "sibling_cpu_s": sum(siblings) if siblings else None,
        }
    )


def reset_cache(running: RunningEngine, settings: LoadSettings) -> None:
    """Empty the engine's prefix cache; a reset that fails because the engine died says so.

    Raises:
        EngineError: The engine exited (with its exit code and log tail), or refused the reset.
    """
    try:
        reset_prefix_cache(running.engine, running.adapter)
    except EngineError:
        check_alive(running, f"before measuring {settings.split} {level_load(settings)}")
        raise


def level_load(settings: LoadSettings) -> str:
    """The level's load point, as directories and log lines name it (``bs4``, ``rate0.5``)."""
    return load_key(settings.batch_size, settings.request_rate)


def load_shape(settings: LoadSettings) -> dict[str, Any]:
    """What the level's metrics record of its load beyond the batch size."""
    shape: dict[str, Any] = {
        "warmup_requests": settings.warmup_requests,
        "repeats": settings.repeats,
    }
    if settings.interleave != "off":
        shape["interleave"] = settings.interleave
    if settings.open_loop:
        shape.update(
            request_rate=settings.request_rate,
            arrival=settings.arrival,
            burstiness=settings.burstiness,
            max_concurrency=settings.max_concurrency,
        )
    if settings.objectives:
        shape["objectives"] = dict(settings.objectives)
    return shape


def warm_up(
    running: RunningEngine,
    items: Sequence[WorkItem],
    settings: LoadSettings,
    tokenizer: PromptTokenizer | None,
    on_record: Callable[[RequestRecord], None],
    directory: Path,
) -> list[RequestRecord]:
    """Send the level's warm-up requests at its own load shape; their records, marked."""
    warm = run_load(
        running.engine,
        running.spec,
        running.adapter,
        warmup_items(items, settings.warmup_requests),
        dataclasses.replace(settings, warmup=True, repeat=0),
        tokenizer,
        on_record,
        parts_dir=directory / "parts" / "warmup",
    )
    return warm.records


def warm_failed(warm: Sequence[RequestRecord]) -> str | None:
    """Why the level is not measured after its warm-up: the engine stopped answering it."""
    gone = next((r for r in warm if engine_gone(r)), None)
    return f"engine unreachable during the warm-up: {gone.error}" if gone is not None else None


class HostBusyError(RuntimeError):
    """``strict_host``: other processes are using the host, so a level is not measured."""


def engine_ownership(
    running: RunningEngine, procs: dict[int, contention.ProcSample]
) -> Callable[[int], bool]:
    """Which processes are this measurement's: the client, and the engine wherever it runs."""
    pgid = running.process.pid if running.process is not None else None
    external = None
    if running.engine.launcher == "external":  # a local server someone else started
        external = f"--port\0{running.engine.port}\0".encode()
    ours = contention.ownership(procs, engine_pgid=pgid, container_id=running.container_id)
    if external is None:
        return ours

    def ours_or_external(pid: int) -> bool:
        if ours(pid):
            return True
        try:
            return external in (contention.PROC / str(pid) / "cmdline").read_bytes()
        except OSError:
            return False

    return ours_or_external


def engine_cores_here(engine: EngineConfig) -> frozenset[int]:
    """The cores a bound engine owns on this host (empty: unbound, or on another machine)."""
    if not engine.cpus or not get_launcher(engine.launcher).binds_cores_here(engine):
        return frozenset()
    return frozenset(engine.cpu_ids)


def refuse_busy_host(running: RunningEngine, settings: LoadSettings, probe_s: float = 2.0) -> None:
    """Sample the host for ``probe_s`` before a level; raise HostBusyError if others use it."""
    before = contention.snapshot()
    time.sleep(probe_s)
    after = contention.snapshot()
    ours = engine_ownership(running, {**before.procs, **after.procs})
    probe = contention.compare(
        before, after, ours, settings.contention_threshold, engine_cores_here(running.engine)
    )
    if probe.flagged:
        raise HostBusyError(
            f"not measuring {running.spec.label} {settings.split} {level_load(settings)} "
            f"(strict_host): {probe.warning}"
        )


def engine_failure(running: RunningEngine, settings: LoadSettings, aborted: str | None) -> str:
    """Why the engine failed during a level ('' if it did not): it exited, or stopped answering."""
    load = (
        f"at {settings.request_rate:g} requests/s"
        if settings.open_loop
        else f"at batch size {settings.batch_size}"
    )
    when = f"while measuring {settings.split} {load}"
    try:
        check_alive(running, when)
    except EngineError as exc:
        return str(exc)
    if aborted:
        return f"{aborted} {when}: {log_tail(running.log_path)}"
    return ""
