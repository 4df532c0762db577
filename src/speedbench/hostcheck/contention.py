"""Is anything else using the host's CPUs while a level is measured? Measured from /proc.

vLLM-CPU's OpenMP threads spin while they wait, so two engines, or an engine and a test suite,
on the same cores slow each other many times over, and nothing in a result would say so. Around
every level speedbench reads the CPU time of every process on the host (``/proc/<pid>/stat``)
and of the host as a whole (``/proc/stat``) and reports:

- the CPU time used by processes that are not this measurement's (the client and its workers,
  the engine's process group or container), as a fraction of the machine over the level;
  kernel threads are counted apart (they mostly do the measurement's own I/O). A process that
  starts and ends within the level (a test run, a type checker) is in neither snapshot: its
  time is in its parent's reaped-children time (``cutime``, ``cstime``; init's for a detached
  one), or, not yet waited for, in what the host's processes used in all (``/proc/stat`` user,
  nice and system) beyond everything named; both count as others' ("processes that ended
  during the level"), except the measurement's own ended workers;
- the processes that used the most of it, by name, and any other inference engine running;
- the 1-minute load average at the end.

A level where others used more than a threshold of the machine (or another engine ran) is
flagged, with a warning that names them. When the engine is bound to some cores
(``EngineConfig.cpus``), only processes allowed to run on those cores count, as a fraction of
those cores: an engine pinned next to another worker's engine on a shared host is not slowed by
it. Linux only; elsewhere nothing is measured and the report says so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from speedbench.figures import Competitor, HostFigures
from speedbench.hostcheck.cpu import allowed_cpus

PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Others may use this fraction of the machine (all its cores) before a level is flagged.
DEFAULT_THRESHOLD = 0.10
# Host-wide process time left unnamed below this share of the machine is accounting noise
# (tick rounding across hundreds of processes), not a process that came and went.
ENDED_MIN_SHARE = 0.02
ENDED = "processes that ended during the level"
# How an engine's server process shows in its command line: the server module or executable,
# or vLLM's renamed engine-core process. Not a bare "vllm": a test run of test_vllm_*.py is not one.
ENGINE_MARKERS = (
    b"vllm.entrypoints",
    b"vllm\0serve",
    b"VLLM::",
    b"sglang.launch_server",
    b"tensorrt_llm.commands.serve",
    b"trtllm-serve",
    b"llama-server",
)


@dataclass(frozen=True)
class ProcSample:
    """CPU seconds used so far by one process, and what it is."""

    pid: int
    name: str
    cpu_s: float
    ppid: int
    pgid: int
    # CPU seconds of its children that ended and were waited for (cutime + cstime).
    children_cpu_s: float = 0.0


@dataclass(frozen=True)
class HostSnapshot:
    """Every process's CPU time at one moment, and the host's busy time."""

    at: float
    procs: dict[int, ProcSample]
    busy_s: float
    # What processes used, host-wide: user, nice and system time (no irq, softirq or steal).
    process_s: float = 0.0


def _read_proc(pid: int) -> ProcSample | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # comm may hold spaces and parentheses: split at the last ')'.
    head, _, rest = stat.rpartition(")")
    name = head.partition("(")[2]
    fields = rest.split()
    # fields[0] is state; ppid, pgrp at 1, 2; utime, stime at 11, 12 (stat fields 14, 15);
    # cutime, cstime at 13, 14.
    cpu = (int(fields[11]) + int(fields[12])) / TICKS
    children = (int(fields[13]) + int(fields[14])) / TICKS
    return ProcSample(pid, name, cpu, int(fields[1]), int(fields[2]), children)


def snapshot() -> HostSnapshot:
    """Read every process's CPU time and the host's busy time."""
    procs = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (sample := _read_proc(int(entry.name))) is not None:
            procs[sample.pid] = sample
    busy = process = 0.0
    try:
        cpu = (PROC / "stat").read_text().splitlines()[0].split()[1:]
        values = [int(v) for v in cpu]
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
        busy = (sum(values[:8]) - idle) / TICKS  # guest time is already in user
        process = sum(values[:3]) / TICKS  # user, nice, system
    except (OSError, IndexError, ValueError):
        pass
    return HostSnapshot(time.monotonic(), procs, busy, process)


def is_kernel_thread(sample: ProcSample) -> bool:
    """Kernel threads: kthreadd (pid 2) and its children."""
    return sample.pid == 2 or sample.ppid == 2


def descendants(root: int, procs: dict[int, ProcSample]) -> set[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.add(pid)
        todo += children.get(pid, [])
    return out


def in_container(pid: int, container_id: str) -> bool:
    """Whether ``pid`` runs in the Docker container ``container_id`` (from its cgroup)."""
    try:
        return container_id in (PROC / str(pid) / "cgroup").read_text()
    except OSError:
        return False


def is_engine_cmdline(cmdline: bytes) -> bool:
    """Whether a /proc cmdline (NUL-separated) is an inference engine's server process."""
    return any(marker in cmdline for marker in ENGINE_MARKERS)


def shares_cores(pid: int, cores: frozenset[int] | None) -> bool:
    """Whether ``pid`` may run on any of ``cores`` (always, when cores are not given)."""
    if not cores:
        return True
    allowed = allowed_cpus(pid)
    return allowed is None or bool(allowed & cores)


def other_engines(
    procs: dict[int, ProcSample],
    ours: Callable[[int], bool],
    cores: frozenset[int] | None = None,
) -> list[str]:
    """Inference-engine processes on the host (on ``cores``) that are not this measurement's."""
    found = []
    for pid, p in procs.items():
        if ours(pid) or not shares_cores(pid, cores):
            continue
        try:
            cmd = (PROC / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue
        if is_engine_cmdline(cmd):
            found.append(f"{p.name} (pid {pid})")
    return sorted(found)


def contention_warning(
    others_fraction: float,
    cores: int,
    threshold: float,
    competitors: list[Competitor],
    engines: list[str],
) -> str:
    """One line naming what competed for the CPUs during a flagged level."""
    names = ", ".join(
        f"{c.name} ({f'pid {c.pid}, ' if c.pid else ''}{c.cpu_s:.1f} s)" for c in competitors[:5]
    )
    line = (
        f"host contention: other processes used {others_fraction:.0%} of the "
        f"{cores} cores during the level (threshold {threshold:.0%})"
    )
    if names:
        line += f": {names}"
    if engines:
        line += f"; other engines running: {', '.join(engines)}"
    return line + "; the numbers may be slowed by them"


def compare(
    before: HostSnapshot,
    after: HostSnapshot,
    ours: Callable[[int], bool],
    threshold: float = DEFAULT_THRESHOLD,
    cores: frozenset[int] | None = None,
    siblings: Callable[[int], bool] | None = None,
) -> HostFigures:
    """Who used the CPUs between two snapshots: this measurement's processes, or others.

    With ``cores`` (the engine's, when it is bound), others are the processes allowed on them,
    and the machine is those cores. ``siblings`` owns the other engines of the same sweep kept
    resident while this one is measured (an interleaved grid): their CPU time counts as
    others' and is also given apart (``sibling_cpu_s``), but they are not named as foreign
    engines.
    """
    others: dict[int, tuple[str, float]] = {}
    ours_s = kernel_s = named_s = ended_s = sibling_s = 0.0
    for pid, now in after.procs.items():
        then = before.procs.get(pid)
        same = then is not None and then.name == now.name
        used = max(now.cpu_s - (then.cpu_s if then is not None and same else 0.0), 0.0)
        # Children that ended and were waited for: ours (client workers) count as ours;
        # another process's, init's reaping of detached ones included, as others'.
        reaped = now.children_cpu_s - (then.children_cpu_s if then is not None and same else 0.0)
        reaped = max(reaped, 0.0)
        named_s += used + reaped
        if is_kernel_thread(now):
            # Kernel workers mostly do this measurement's own I/O (ext4, network): not others'.
            kernel_s += used
        elif ours(pid):
            ours_s += used + reaped
        elif shares_cores(pid, cores):
            if used > 0:
                others[pid] = (now.name, used)
                if siblings is not None and siblings(pid):
                    sibling_s += used
            ended_s += reaped
    competitors = sorted(
        (Competitor(name=name, pid=pid, cpu_s=cpu) for pid, (name, cpu) in others.items()),
        key=lambda c: -c.cpu_s,
    )
    wall = after.at - before.at
    if cores is None and after.process_s > before.process_s:
        # And what the host's processes used beyond all the time named: processes that ended
        # and were not waited for within the window.
        ended_s += max((after.process_s - before.process_s) - named_s, 0.0)
    if ended_s > ENDED_MIN_SHARE * wall * len(os.sched_getaffinity(0)):
        # Processes that started and ended between the snapshots (a test run, a compiler, a
        # type checker): in neither snapshot, they show as their parents' reaped time.
        competitors.append(Competitor(name=ENDED, pid=0, cpu_s=ended_s))
        competitors.sort(key=lambda c: -c.cpu_s)
    try:
        load: float | None = float((PROC / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        load = None
    machine = len(cores) if cores else len(os.sched_getaffinity(0))
    others_s = sum(c.cpu_s for c in competitors)
    others_fraction = others_s / (wall * machine) if wall > 0 else 0.0
    engines = other_engines(
        after.procs, ours if siblings is None else lambda p: ours(p) or siblings(p), cores
    )
    flagged = others_fraction > threshold or bool(engines)
    return HostFigures(
        wall_s=wall,
        cores=machine,
        others_cpu_s=others_s,
        others_fraction=others_fraction,
        ours_cpu_s=ours_s,
        host_busy_s=after.busy_s - before.busy_s,
        kernel_cpu_s=kernel_s,
        load_1m=load,
        # The ten that used the most: enough to name a culprit, short enough to store per level.
        competitors=competitors[:10],
        other_engines=engines,
        sibling_cpu_s=sibling_s if siblings is not None else None,
        threshold=threshold,
        flagged=flagged,
        warning=(
            contention_warning(others_fraction, machine, threshold, competitors, engines)
            if flagged
            else None
        ),
    )


def ownership(
    procs: dict[int, ProcSample],
    engine_pgid: int | None = None,
    container_id: str | None = None,
    client_root: int | None = None,
) -> Callable[[int], bool]:
    """A test of whether a pid belongs to this measurement.

    Ours: the client (this process and everything below it, workers included), the engine's
    process group (a local engine), and the processes of its container (a Docker engine).
    Processes that appear later are judged by the same rules.
    """
    mine = descendants(client_root or os.getpid(), procs)

    def ours(pid: int) -> bool:
        if pid in mine:
            return True
        sample = procs.get(pid) or _read_proc(pid)
        if sample is None:
            return False
        if engine_pgid is not None and sample.pgid == engine_pgid:
            return True
        if sample.ppid in mine:
            mine.add(pid)
            return True
        return container_id is not None and in_container(pid, container_id)

    return ours
