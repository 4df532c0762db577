"""The client measures itself: event-loop lag, chunk scheduling delay and CPU use, per worker.

A load generator that cannot keep up does not fail; it quietly stretches the inter-token
latencies and caps the throughput it reports. So every load level carries:

- **loop lag**: a probe sleeps 5 ms again and again and records how late it wakes. A chunk whose
  bytes arrive while the loop is busy waits about as long before it is read, so the lag bounds
  the scheduling delay on any server.
- **chunk delay**: where the server stamps each chunk with its send time (the synthetic
  calibration server does), the socket read time minus the send time, per chunk: the exact
  delay the client added, kernel included.
- **CPU**: each worker's user + system CPU time over the level's wall time. A worker near 100%
  is the bottleneck.

:func:`client_report` merges the workers and adds a warning when the client may have limited
the result.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from speedbench.figures import ClientFigures, DelayFigures

PROBE_INTERVAL_S = 0.005
# Above these the client, not the engine, may set the pace.
LAG_WARN_MS = 5.0
CPU_WARN = 0.9
# Runs shorter than this many probe intervals (0.5 s) are too short to judge.
MIN_PROBES = 100


@dataclass
class WorkerMonitor:
    """Samples of one worker process (or the single-process client)."""

    lag_ns: list[int] = field(default_factory=list)
    delays_ns: list[int] = field(default_factory=list)
    # Open loop only: how late each request was dispatched after it was due (not a slot wait).
    arrival_lag_ns: list[int] = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0
    _cpu0: float = 0.0
    _wall0: float = 0.0

    def start(self) -> None:
        """Mark the start of the measured work."""
        t = os.times()
        self._cpu0 = t.user + t.system
        self._wall0 = time.perf_counter()

    def stop(self) -> None:
        """Mark the end of the measured work."""
        t = os.times()
        self.cpu_s = t.user + t.system - self._cpu0
        self.wall_s = time.perf_counter() - self._wall0

    async def probe(self, stop: asyncio.Event) -> None:
        """Record how late each 5 ms sleep wakes up, until ``stop`` is set."""
        interval_ns = int(PROBE_INTERVAL_S * 1e9)
        while not stop.is_set():
            t0 = time.perf_counter_ns()
            await asyncio.sleep(PROBE_INTERVAL_S)
            self.lag_ns.append(max(0, time.perf_counter_ns() - t0 - interval_ns))

    def save(self, path: Path) -> None:
        """Write the samples for the parent process."""
        np.savez(
            path,
            lag_ns=np.asarray(self.lag_ns, dtype=np.int64),
            delays_ns=np.asarray(self.delays_ns, dtype=np.int64),
            cpu=np.asarray([self.cpu_s, self.wall_s]),
        )

    @classmethod
    def load(cls, path: Path) -> WorkerMonitor:
        """Read samples written by :meth:`save`."""
        with np.load(path) as data:
            cpu_s, wall_s = data["cpu"].tolist()
            return cls(
                lag_ns=data["lag_ns"].tolist(),
                delays_ns=data["delays_ns"].tolist(),
                cpu_s=cpu_s,
                wall_s=wall_s,
            )


def _ms_stats(samples_ns: list[int]) -> DelayFigures | None:
    if not samples_ns:
        return None
    arr = np.asarray(samples_ns, dtype=np.float64) / 1e6
    return DelayFigures(
        count=int(arr.size),
        p50_ms=float(np.percentile(arr, 50)),
        p99_ms=float(np.percentile(arr, 99)),
        max_ms=float(arr.max()),
    )


def client_report(monitors: list[WorkerMonitor]) -> ClientFigures:
    """Merged self-measurement of all workers, with a warning if the client may have limited it."""
    lag = _ms_stats([x for m in monitors for x in m.lag_ns])
    arrival = _ms_stats([x for m in monitors for x in m.arrival_lag_ns])
    cpu = [m.cpu_s / m.wall_s if m.wall_s > 0 else 0.0 for m in monitors]
    reasons = []
    if arrival and arrival.p99_ms > LAG_WARN_MS:
        reasons.append(f"requests were sent p99 {arrival.p99_ms:.1f} ms after they were due")
    if lag and lag.count >= MIN_PROBES and lag.p99_ms > LAG_WARN_MS:
        reasons.append(f"event-loop lag p99 {lag.p99_ms:.1f} ms > {LAG_WARN_MS:g} ms")
    if lag and lag.count >= MIN_PROBES and cpu and max(cpu) > CPU_WARN:
        reasons.append(f"a client worker used {max(cpu):.0%} of a core")
    warning = (
        "the client may have limited this result: " + "; ".join(reasons) + " (add workers)"
        if reasons
        else None
    )
    return ClientFigures(
        workers=len(monitors),
        loop_lag=lag,
        chunk_delay=_ms_stats([x for m in monitors for x in m.delays_ns]),
        cpu_fraction=[round(c, 3) for c in cpu],
        arrival_lag=arrival,
        warning=warning,
    )
