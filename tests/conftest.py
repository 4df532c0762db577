"""Suite-wide hooks: an engine core per parallel worker, slow files first, a time table.

``make test`` runs the suite in two passes: everything not marked ``alone`` on two pytest-xdist
workers (``--dist loadfile``, so a file's module fixtures start its engines once), then the
``alone`` tests (they measure the whole host) by themselves. Each worker owns one core for the
engines it starts (``SPEEDBENCH_ENGINE_CPUS``, which the engine config reads), so two engines
never share a core; a run without workers binds its engines to the last core.

Time is counted per phase (setup, call, teardown) of each test, so module fixtures that start
engines are charged to the file that starts them. With ``SPEEDBENCH_TEST_TIMINGS`` set, the
passes add to one file and the last prints the whole table.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

from speedbench.hostcheck.cpu import ENGINE_CPUS_ENV

_SECONDS: dict[str, float] = defaultdict(float)
_COUNTS: dict[str, int] = defaultdict(int)
TIMINGS_ENV = "SPEEDBENCH_TEST_TIMINGS"
# Seconds per file on the 2-core AVX2-only host (fresh-clone CI run); the order to start files
# in when this checkout has no timings of its own yet. Longest first balances the workers.
SECONDS_HINT = {
    "tests/integration/run/test_fault_tolerance.py": 400,
    "tests/integration/pipeline/test_reproduce.py": 360,
    "tests/integration/engines/test_vllm_qwen.py": 330,
    "tests/integration/engines/test_docker.py": 296,
    "tests/integration/flows/test_sweep_flow.py": 270,
    "tests/integration/engines/test_vllm_exact.py": 143,
    "tests/integration/run/test_sweep_failures.py": 87,
    "tests/integration/engines/test_launcher_failures.py": 26,
    "tests/integration/data/test_throughput_build.py": 22,
    "tests/integration/data/test_qualitative_build.py": 22,
}
CACHE_KEY = "speedbench/file_seconds"


def pytest_configure(config: pytest.Config) -> None:
    """Give each test process its own engine core: worker N the host's N-th, a lone run the last.

    The client then keeps off it (``speedbench.hostcheck.cpu.keep_off``). A core set by the
    caller wins.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker and getattr(config.option, "numprocesses", None):
        return  # the xdist controller starts no engine; its workers must not inherit a core
    cores = sorted(os.sched_getaffinity(0))
    index = int(worker[2:]) if worker else len(cores) - 1
    os.environ.setdefault(ENGINE_CPUS_ENV, str(cores[index % len(cores)]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slowest files first (by this checkout's last run, else the hint), tests in file order."""
    cache = getattr(config, "cache", None)  # absent under -p no:cacheprovider
    known = {**SECONDS_HINT, **(cache.get(CACHE_KEY, {}) if cache else {})}
    order = {
        path: i for i, path in enumerate(dict.fromkeys(i.nodeid.split("::")[0] for i in items))
    }
    items.sort(key=lambda i: (-known.get(path := i.nodeid.split("::")[0], 0.0), order[path]))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's duration to its file."""
    path = report.nodeid.split("::", 1)[0]
    _SECONDS[path] += report.duration
    if report.when == "call":
        _COUNTS[path] += 1


def _with_earlier_passes() -> tuple[dict[str, float], dict[str, int]]:
    seconds, counts = dict(_SECONDS), dict(_COUNTS)
    path = os.environ.get(TIMINGS_ENV)
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):
        return seconds, counts
    store = Path(path)
    earlier = json.loads(store.read_text()) if store.exists() else {"seconds": {}, "counts": {}}
    for name, value in earlier["seconds"].items():
        seconds[name] = seconds.get(name, 0.0) + value
    for name, value in earlier["counts"].items():
        counts[name] = counts.get(name, 0) + value
    store.write_text(json.dumps({"seconds": seconds, "counts": counts}))
    return seconds, counts


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the per-file table (of every pass so far), and keep it for the next run's order."""
    if not _SECONDS:
        return
    seconds, counts = _with_earlier_passes()
    cache = getattr(terminalreporter.config, "cache", None)
    if cache is not None:
        cache.set(CACHE_KEY, {**cache.get(CACHE_KEY, {}), **dict(_SECONDS)})
    total = sum(seconds.values())
    write = terminalreporter.write_line
    terminalreporter.section("wall time per test file (slowest first)")
    for path, spent in sorted(seconds.items(), key=lambda kv: -kv[1]):
        write(f"{spent:8.1f} s {100 * spent / total:5.1f} % {counts.get(path, 0):4d} tests  {path}")
    write(f"{total:8.1f} s total in tests (summed over parallel workers)")
