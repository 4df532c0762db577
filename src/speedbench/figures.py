"""The figure types that both the metrics and the results files carry: one shape per concept.

The metrics layer computes an :class:`Interval` or a :class:`Distribution` and the typed
results (:mod:`speedbench.results`) store that same object; nothing converts one shape into
another in between. A figure that is undefined (no request, no drafted step) is NaN in memory
and ``null`` in JSON (:func:`speedbench.results.write_json`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

Figure = float | None
# Latency percentiles a Distribution reports.
PERCENTILES = (50, 90, 99)


class Result(BaseModel):
    """Base of every result model: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")


class Interval(Result):
    """A point estimate with a two-sided confidence interval (a bootstrap's, or Student's t)."""

    value: Figure
    low: Figure
    high: Figure
    # The interval's coverage; not written to results files (every stored one is 95 %).
    confidence: float = Field(default=0.95, exclude=True)

    @classmethod
    def undefined(cls, confidence: float = 0.95) -> Interval:
        """No estimate: every figure NaN."""
        return cls(value=math.nan, low=math.nan, high=math.nan, confidence=confidence)


class Distribution(Result):
    """Mean and percentiles of a sample, e.g. a latency over requests (NaN when empty)."""

    mean: Figure
    p50: Figure
    p90: Figure
    p99: Figure
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        """Summarise ``values``, ignoring NaNs."""
        arr = np.asarray([v for v in values if not np.isnan(v)], dtype=float)
        if arr.size == 0:
            nan = math.nan
            return cls(mean=nan, p50=nan, p90=nan, p99=nan, count=0)
        p = np.percentile(arr, PERCENTILES)
        return cls(
            mean=float(arr.mean()),
            p50=float(p[0]),
            p90=float(p[1]),
            p99=float(p[2]),
            count=int(arr.size),
        )
