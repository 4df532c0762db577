"""Fixtures shared by the unit tests: the synthetic streaming server in its own process."""

from __future__ import annotations

import pytest

from speedbench.engines.local import free_port
from speedbench.synthetic import SyntheticOptions, serve_in_subprocess

# First prompt token id -> fault, as the fault tests send them.
FAULTS = {
    2: "http_500",
    3: "truncate",
    4: "drop",
    5: "http_429",
    6: "error_event",
    7: "bad_json",
    8: "http_429_always",
    9: "stall",
}


@pytest.fixture(scope="session")
def fault_server() -> str:
    """A synthetic server that answers prompts starting with a FAULTS id with that fault."""
    options = SyntheticOptions(k=3, interval_s=0.001, faults=FAULTS, stall_s=5.0)
    with serve_in_subprocess(options, free_port()) as url:
        yield url


@pytest.fixture(scope="session")
def paced_server() -> str:
    """A synthetic server sending one SD step every 10 ms per stream (k=3)."""
    with serve_in_subprocess(SyntheticOptions(k=3, interval_s=0.01), free_port()) as url:
        yield url
