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

from speedbench.figures import GoodputFigures
from speedbench.metrics.latency import e2e_s, tpot_s, ttft_s
from speedbench.records import RequestRecord

# The objectives a level may set, by name.
OBJECTIVES = ("ttft_s", "tpot_s", "e2e_s")


@dataclass(frozen=True)
class LatencyObjectives:
    """Service-level objectives on one request, in seconds; None leaves one unchecked."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def __post_init__(self) -> None:
        for name in OBJECTIVES:
            bound = getattr(self, name)
            if bound is not None and not bound > 0:
                raise ValueError(f"latency objective {name} must be > 0 seconds, got {bound}")

    @property
    def any_set(self) -> bool:
        """Whether at least one objective is set."""
        return any(getattr(self, name) is not None for name in OBJECTIVES)


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
) -> GoodputFigures:
    """Goodput of a level: its records, the objectives, and the level's wall time.

    The rate is NaN over no time, the fraction NaN with no request.
    """
    met = sum(1 for r in records if meets(r, objectives))
    total = len(records)
    return GoodputFigures(
        objectives={name: getattr(objectives, name) for name in OBJECTIVES},
        met=met,
        total=total,
        rate_rps=met / duration_s if duration_s > 0 else math.nan,
        fraction=met / total if total else math.nan,
    )
