"""Load generator: token-ID requests in a closed or an open loop, one record per request.

Closed loop (the default, SPEED-Bench's batch-size axis): N slots each take the next
conversation from a shared claim counter and run its turns back to back, so exactly N requests
are in flight while work remains (the batch size). Open loop (``LoadSettings.request_rate``):
conversations arrive on a seeded schedule (:mod:`speedbench.client.arrivals`) whatever the
server answers, at most ``max_concurrency`` at once if set; each record carries when it was due
(``scheduled_s``), and its latencies count from then. Turn ``i+1`` of a multi-turn prompt is
templated with the model's own answer to turn ``i``. Each stream owns one keep-alive connection
of :mod:`speedbench.client.http`, whose chunk timestamps are socket read times.

Up to about 128 streams one process keeps up; beyond, :mod:`speedbench.client.multiproc` splits the
slots over worker processes (``LoadSettings.workers``, 0 = chosen from the cores and the batch
size). Either way every record goes to the durable sink as soon as its request ends, and the
client's own lag, delay and CPU use travel with the result (:mod:`speedbench.client.selfmeasure`).

A request never raises into the run (see :mod:`speedbench.client.request`). One fault stops the
run early: when the engine refuses connections it is gone, and the rest of the prompts are not
sent (``LoadResult.aborted`` says why).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import os
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from tqdm.auto import tqdm

from speedbench.client.arrivals import arrival_offsets
from speedbench.client.http import StreamConnection
from speedbench.client.request import RetryPolicy, encode_body, stream_one
from speedbench.client.selfmeasure import WorkerMonitor, client_report
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineAdapter
from speedbench.figures import SpecCounters
from speedbench.records import RequestRecord
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings, WorkItem

T = TypeVar("T")
# One process holds this many streams at an engine-like pace with a p99 chunk delay near 1 ms
# (benchmarks/client_overhead.py); more streams get more workers where there are cores.
STREAMS_PER_WORKER = 256


@dataclass
class LoadResult:
    """Records of a load level plus the engine's SD counter delta over it."""

    records: list[RequestRecord]
    counters: SpecCounters | None
    duration_s: float
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def aborted(self) -> str | None:
        """Why the run stopped before sending every prompt (None if it did not)."""
        reason = self.extras.get("aborted")
        return str(reason) if reason else None


def auto_workers(batch_size: int, cores: int | None = None) -> int:
    """Worker processes for ``batch_size`` streams: one per 256 streams, one core left free.

    The free core is for whatever else runs here (the engine, the parent process): a worker that
    waits for a core timestamps late, which is worse than one busier worker.
    """
    cores = cores or len(os.sched_getaffinity(0))
    return max(1, min(cores - 1, math.ceil(batch_size / STREAMS_PER_WORKER)))


def slot_counts(batch_size: int, workers: int) -> list[int]:
    """Split ``batch_size`` slots over ``workers`` as evenly as possible (sums exactly)."""
    base, extra = divmod(batch_size, workers)
    return [base + (1 if w < extra else 0) for w in range(workers) if base or w < extra]


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop where it is installed, else on asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


class Claims(Protocol):
    """Hands out prompt indices to slots; shared by the slots of every worker."""

    def claim(self) -> int | None:
        """The next prompt index, or None when all are taken or the run was stopped."""
        ...

    def stop(self, reason: str) -> None:
        """Stop handing out prompts."""
        ...

    def progress(self, requests: int) -> None:
        """Count finished requests (for the progress bar)."""
        ...


class LocalClaims:
    """Claims of a single-process run."""

    def __init__(self, total: int, bar: tqdm | None = None) -> None:
        self.total = total
        self.next = 0
        self.reason: str | None = None
        self.bar = bar

    def claim(self) -> int | None:
        """The next prompt index, or None."""
        if self.reason is not None or self.next >= self.total:
            return None
        self.next += 1
        return self.next - 1

    def stop(self, reason: str) -> None:
        """Stop handing out prompts."""
        self.reason = self.reason or reason

    def progress(self, requests: int) -> None:
        """Advance the progress bar."""
        if self.bar is not None:
            self.bar.update(requests)


def engine_gone(record: RequestRecord) -> bool:
    """Whether the record shows the engine refusing connections (it has exited)."""
    return record.error_kind == "connection" and (record.error or "").startswith("cannot connect")


def new_record(
    item: WorkItem, turn: int, settings: LoadSettings, spec: SpecConfig
) -> RequestRecord:
    """The empty record of one turn of ``item`` at this level."""
    run = "warmup" if settings.warmup else f"r{settings.repeat}"
    return RequestRecord(
        request_id=f"{item.prompt_id}/t{turn}/{run}",
        prompt_id=item.prompt_id,
        category=item.category,
        sub_category=item.sub_category,
        source=item.source,
        difficulty=item.difficulty,
        split=settings.split,
        turn=turn,
        config_label=spec.label,
        method=spec.method,
        k=spec.num_speculative_tokens,
        batch_size=settings.batch_size,
        repeat=settings.repeat,
        warmup=settings.warmup,
    )


async def drive(
    engine: EngineConfig,
    spec: SpecConfig,
    adapter: EngineAdapter,
    items: Sequence[WorkItem],
    settings: LoadSettings,
    tokenizer: PromptTokenizer | None,
    on_record: Callable[[RequestRecord], None] | None,
    claims: Claims,
    slots: int,
    monitor: WorkerMonitor,
) -> list[RequestRecord]:
    """Run ``slots`` closed-loop streams over the prompts ``claims`` hands out."""
    records: list[RequestRecord] = []
    retry = RetryPolicy(max_retries=settings.max_429_retries)

    async def slot() -> None:
        connection = StreamConnection(engine.base_url)
        try:
            while (index := claims.claim()) is not None:
                await run_item(items[index], connection)
        finally:
            connection.close()

    async def run_item(
        item: WorkItem, connection: StreamConnection, due_s: float | None = None
    ) -> None:
        answers: list[str] = []
        for turn in range(item.num_turns):
            rec = new_record(item, turn, settings, spec)
            if turn == 0:
                rec.scheduled_s = due_s  # later turns follow their answer, as a user's would
            if item.prompt_ids is not None:
                ids = list(item.prompt_ids)
            else:
                assert tokenizer is not None
                ids = tokenizer.encode_turn(item.user_turns[: turn + 1], answers)
            rec.prompt_tokens = len(ids)
            rec.prompt_token_ids = ids
            body = adapter.request_body(
                engine,
                ids,
                settings.max_tokens,
                settings.temperature,
                settings.seed,
                settings.ignore_eos,
            )
            await stream_one(
                connection,
                adapter.generate_path,
                encode_body(body),
                adapter,
                rec,
                settings.request_timeout_s,
                retry,
                monitor.delays_ns,
            )
            records.append(rec)
            if on_record is not None:
                on_record(rec)
            claims.progress(1)
            if engine_gone(rec):
                claims.stop(f"engine unreachable: {rec.error}")
            if not rec.ok:
                claims.progress(item.num_turns - turn - 1)
                return  # later turns need this turn's answer
            if tokenizer is not None and turn + 1 < item.num_turns:
                answers.append(tokenizer.answer_text(rec.output_token_ids))

    async def open_loop() -> None:
        assert settings.request_rate is not None
        due = arrival_offsets(
            len(items),
            settings.request_rate,
            settings.arrival,
            settings.burstiness,
            (settings.seed or 0) + settings.repeat,  # each repeat its own schedule
        )
        cap = asyncio.Semaphore(settings.max_concurrency) if settings.max_concurrency else None
        idle: list[StreamConnection] = []

        async def arrive(item: WorkItem, due_s: float) -> None:
            async with cap or contextlib.nullcontext():
                connection = idle.pop() if idle else StreamConnection(engine.base_url)
                try:
                    await run_item(item, connection, due_s)
                finally:
                    idle.append(connection)

        t0 = time.perf_counter()
        arrivals = []
        while (index := claims.claim()) is not None:
            # A loop, not one sleep: uvloop's timers count whole milliseconds and can wake a
            # fraction of one early, and a request must never go out before it is due.
            due_s = t0 + due[index]
            while (wait := due_s - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            monitor.arrival_lag_ns.append(int((time.perf_counter() - due_s) * 1e9))
            arrivals.append(asyncio.create_task(arrive(items[index], due_s)))
        try:
            await asyncio.gather(*arrivals)
        finally:
            for connection in idle:
                connection.close()

    stop = asyncio.Event()
    probe = asyncio.create_task(monitor.probe(stop))
    monitor.start()
    # Records hold no reference cycles, so reference counting frees them; the cyclic collector
    # would only add pauses of tens of milliseconds to chunk timestamps at high concurrency.
    collecting = gc.isenabled()
    gc.disable()
    try:
        if settings.open_loop:
            await open_loop()
        else:
            await asyncio.gather(*(slot() for _ in range(slots)))
    finally:
        if collecting:
            gc.enable()
        monitor.stop()
        stop.set()
        await probe
    return records


async def run_in_process(
    engine: EngineConfig,
    spec: SpecConfig,
    adapter: EngineAdapter,
    items: Sequence[WorkItem],
    settings: LoadSettings,
    tokenizer: PromptTokenizer | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
) -> LoadResult:
    """Drive ``items`` at ``settings.batch_size`` concurrent streams from this process."""
    total = sum(it.num_turns for it in items)
    load = (
        f"rate={settings.request_rate:g}/s" if settings.open_loop else f"bs={settings.batch_size}"
    )
    if settings.warmup:
        load += " warm-up"
    elif settings.repeats > 1:
        load += f" repeat {settings.repeat + 1}/{settings.repeats}"
    bar = tqdm(
        total=total,
        desc=f"{spec.label} {load}",
        unit="req",
        disable=not settings.show_progress,
    )
    claims = LocalClaims(len(items), bar)
    monitor = WorkerMonitor()
    try:
        records = await drive(
            engine,
            spec,
            adapter,
            items,
            settings,
            tokenizer,
            on_record,
            claims,
            settings.batch_size,
            monitor,
        )
    finally:
        bar.close()
    extras: dict[str, Any] = {"client": client_report([monitor])}
    if claims.reason:
        extras["aborted"] = claims.reason
    return LoadResult(records, None, monitor.wall_s, extras)
