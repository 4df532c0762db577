"""Goodput: the rate of requests that meet latency objectives, as a pure function of records.

DistServe's definition, as vLLM's ``bench serve --goodput`` applies it: a request counts when it
succeeded and each objective that is set holds for it (TTFT, TPOT and end-to-end latency, each
``<=`` its bound, per :mod:`speedbench.metrics.latency`); goodput is those requests divided by the
level's duration. An objective left unset (None) is not checked. A request with one output token
has no TPOT; it meets a TPOT objective vacuously, as vLLM's check does (its TPOT is 0 there).
Failed requests never meet an objective.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from speedbench.metrics.latency import e2e_s, tpot_s, ttft_s
from speedbench.records import RequestRecord


@dataclass(frozen=True)
class LatencyObjectives:
    """Service-level objectives on one request, in seconds; None leaves one unchecked."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s", "e2e_s"):
            bound = getattr(self, name)
            if bound is not None and not bound > 0:
                raise ValueError(f"latency objective {name} must be > 0 seconds, got {bound}")

    @property
    def any_set(self) -> bool:
        """Whether at least one objective is set."""
        return any(b is not None for b in (self.ttft_s, self.tpot_s, self.e2e_s))


@dataclass(frozen=True)
class Goodput:
    """Requests meeting every set objective, over a level."""

    met: int
    total: int
    duration_s: float

    @property
    def rate_rps(self) -> float:
        """Requests per second that met the objectives (NaN over no time)."""
        return self.met / self.duration_s if self.duration_s > 0 else math.nan

    @property
    def fraction(self) -> float:
        """Share of the level's requests that met them (NaN with no request)."""
        return self.met / self.total if self.total else math.nan


def meets(record: RequestRecord, objectives: LatencyObjectives) -> bool:
    """Whether ``record`` succeeded and meets every objective that is set."""
    if not record.ok:
        return False
    tpot = tpot_s(record)
    checks = (
        (objectives.ttft_s, ttft_s(record)),
        (objectives.tpot_s, 0.0 if math.isnan(tpot) else tpot),  # one token: no TPOT to miss
        (objectives.e2e_s, e2e_s(record)),
    )
    for bound, value in checks:
        if bound is not None and (math.isnan(value) or value > bound):
            return False
    return True


def goodput(
    records: Sequence[RequestRecord], objectives: LatencyObjectives, duration_s: float
) -> Goodput:
    """Goodput of a level: its records, the objectives, and the level's wall time."""
    met = sum(1 for r in records if meets(r, objectives))
    return Goodput(met=met, total=len(records), duration_s=duration_s)
