"""Multi-process load generation: the batch size split over worker processes, each with its loop.

One asyncio loop on one core has a ceiling: past a few hundred streams it timestamps chunks late
and caps the throughput it reports. Here ``W`` forked workers each run ``N/W`` of the ``N`` slots
(the split sums to exactly ``N``, so the in-flight budget is exact) on their own uvloop loop.

- **Assignment** has no central dispatcher: a slot that is free takes the next prompt index from
  a counter in shared memory (one atomic increment), so no worker idles while another has a
  backlog.
- **Clocks**: every timestamp is ``time.perf_counter_ns`` (CLOCK_MONOTONIC), one clock for all
  processes of a host, so records of different workers are comparable.
- **Records** are written by each worker to its own JSON-lines part file as requests end, then
  merged by the parent. A worker that dies loses nothing it finished; each prompt it held is
  recorded as failed with kind ``client_died``, and prompts nobody sent are recorded the same
  way, so the record count always matches the prompts.
- **Self-measurement** samples of every worker are merged into the level's client report.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tqdm.auto import tqdm

from speedbench.client.loadgen import (
    LoadResult,
    drive,
    engine_gone,
    new_record,
    run_async,
    slot_counts,
)
from speedbench.client.selfmeasure import WorkerMonitor, client_report
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineAdapter
from speedbench.records import RecordSink, RequestRecord, read_jsonl
from speedbench.workload import LoadSettings, WorkItem

READY_TIMEOUT_S = 30.0  # how long the start waits for every worker to be ready to send


class SharedClaims:
    """Claims shared by forked workers: a prompt counter, a done counter and a stop flag."""

    def __init__(self, ctx: mp.context.BaseContext, total: int) -> None:
        self.total = total
        self.next = ctx.Value("q", 0)
        self.done = ctx.Value("q", 0, lock=False)
        self.stopped = ctx.Value("b", 0, lock=False)

    def claim(self) -> int | None:
        """The next prompt index, or None."""
        if self.stopped.value:
            return None
        with self.next.get_lock():
            index = self.next.value
            if index >= self.total:
                return None
            self.next.value = index + 1
        return int(index)

    def stop(self, reason: str) -> None:
        """Stop every worker from taking more prompts (the reason is in the records)."""
        self.stopped.value = 1

    def progress(self, requests: int) -> None:
        """Count finished requests; only the parent draws the bar."""
        self.done.value += requests  # one writer per increment is enough for a progress bar


def _worker(
    worker: int,
    slots: int,
    engine: EngineConfig,
    spec: SpecConfig,
    adapter: EngineAdapter,
    items: Sequence[WorkItem],
    settings: LoadSettings,
    tokenizer: object,
    claims: SharedClaims,
    ready: mp.synchronize.Barrier,
    parts: Path,
) -> None:
    # Ctrl-C goes to the whole foreground group; the parent decides, workers just finish.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    monitor = WorkerMonitor()
    with RecordSink(parts / f"worker{worker}.jsonl") as sink:
        # All workers start sending together: a worker scheduled late on a busy host would
        # otherwise leave the others holding only their share of the N streams for a while.
        with contextlib.suppress(threading.BrokenBarrierError):
            ready.wait(timeout=READY_TIMEOUT_S)
        run_async(
            drive(
                engine,
                spec,
                adapter,
                items,
                settings,
                tokenizer,  # type: ignore[arg-type]
                sink.write,
                claims,
                slots,
                monitor,
            )
        )
    monitor.save(parts / f"worker{worker}.npz")


def missing_records(
    items: Sequence[WorkItem],
    records: Sequence[RequestRecord],
    settings: LoadSettings,
    spec: SpecConfig,
    reason: str,
) -> list[RequestRecord]:
    """A ``client_died`` record for the next turn of every prompt that did not get to finish.

    A prompt is finished when all its turns are recorded or when a turn failed (later turns
    need its answer and are never sent).
    """
    by_prompt: dict[str, list[RequestRecord]] = {}
    for rec in records:
        by_prompt.setdefault(rec.prompt_id, []).append(rec)
    out = []
    for item in items:
        got = by_prompt.get(item.prompt_id, [])
        if len(got) >= item.num_turns or any(not r.ok for r in got):
            continue
        rec = new_record(item, len(got), settings, spec)
        rec.fail("client_died", reason)
        out.append(rec)
    return out


def run_multiprocess(
    engine: EngineConfig,
    spec: SpecConfig,
    adapter: EngineAdapter,
    items: Sequence[WorkItem],
    settings: LoadSettings,
    tokenizer: object,
    on_record: Callable[[RequestRecord], None] | None,
    workers: int,
    parts_dir: Path | None = None,
) -> LoadResult:
    """Drive one load level with ``workers`` processes; see the module docstring.

    The engine's counters are read by the caller (``run_load``) around this call.
    """
    # Forked children must not start tokenizer thread pools the parent already started.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    ctx = mp.get_context("fork")
    claims = SharedClaims(ctx, len(items))
    slots = slot_counts(settings.batch_size, workers)
    ready = ctx.Barrier(len(slots) + 1)
    with contextlib.ExitStack() as stack:
        if parts_dir is None:
            parts_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sb-parts-")))
        parts_dir.mkdir(parents=True, exist_ok=True)
        for old in parts_dir.glob("worker*"):
            old.unlink()
        procs = [
            ctx.Process(
                target=_worker,
                args=(w, n, engine, spec, adapter, items, settings, tokenizer, claims, ready),
                kwargs={"parts": parts_dir},
                name=f"speedbench-client-{w}",
                daemon=True,
            )
            for w, n in enumerate(slots)
        ]
        for proc in procs:
            proc.start()
        with contextlib.suppress(threading.BrokenBarrierError):  # a worker died before it
            ready.wait(timeout=READY_TIMEOUT_S)  # was ready: its prompts become client_died
        total = sum(it.num_turns for it in items)
        bar = tqdm(
            total=total,
            desc=f"{spec.label} bs={settings.batch_size} ({len(procs)} workers)",
            unit="req",
            disable=not settings.show_progress,
        )
        t0 = time.perf_counter()
        try:
            while any(p.is_alive() for p in procs):
                bar.update(claims.done.value - bar.n)
                time.sleep(0.2)
        except BaseException:
            for proc in procs:
                proc.kill()
            raise
        finally:
            bar.update(claims.done.value - bar.n)
            bar.close()
            for proc in procs:
                proc.join(timeout=10)
        duration = time.perf_counter() - t0
        records: list[RequestRecord] = []
        monitors = []
        for w in range(len(procs)):
            part = parts_dir / f"worker{w}.jsonl"
            if part.exists():
                records += read_jsonl(part)
            stats = parts_dir / f"worker{w}.npz"
            if stats.exists():
                monitors.append(WorkerMonitor.load(stats))
        died = [f"worker {w} exit code {p.exitcode}" for w, p in enumerate(procs) if p.exitcode]
    records.sort(key=lambda r: r.start_s)
    extras: dict[str, object] = {"client": client_report(monitors)}
    gone = next((r for r in records if engine_gone(r)), None)
    if gone is not None:
        extras["aborted"] = f"engine unreachable: {gone.error}"
    elif died:
        lost = missing_records(items, records, settings, spec, "client " + ", ".join(died))
        records += lost
        extras["client_died"] = died
    if on_record is not None:
        for rec in records:
            on_record(rec)
    return LoadResult(records, None, duration, extras)
