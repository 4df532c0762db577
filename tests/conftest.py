"""Suite-wide hooks: a wall-time table per test file at the end of every run (slowest first).

Time is counted per phase (setup, call, teardown) of each test, so module fixtures that start
engines are charged to the file that starts them.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

_SECONDS: dict[str, float] = defaultdict(float)
_COUNTS: dict[str, int] = defaultdict(int)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's duration to its file."""
    path = report.nodeid.split("::", 1)[0]
    _SECONDS[path] += report.duration
    if report.when == "call":
        _COUNTS[path] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the per-file table."""
    if not _SECONDS:
        return
    total = sum(_SECONDS.values())
    write = terminalreporter.write_line
    terminalreporter.section("wall time per test file (slowest first)")
    for path, seconds in sorted(_SECONDS.items(), key=lambda kv: -kv[1]):
        write(f"{seconds:8.1f} s {100 * seconds / total:5.1f} % {_COUNTS[path]:4d} tests  {path}")
    write(f"{total:8.1f} s total in tests")
