"""Unit tests: pure logic, no servers, no forked workers (those live in tests/integration)."""

from __future__ import annotations

import pytest

from speedbench.hostcheck.cpu import ENGINE_CPUS_ENV


@pytest.fixture(autouse=True)
def unbound_engines(monkeypatch):
    """No engine core from the test run's host (tests/conftest.py): pure tests see no host."""
    monkeypatch.delenv(ENGINE_CPUS_ENV, raising=False)
