"""Open-loop arrival schedules: when each request of a rate-driven level is due.

A closed loop (``LoadSettings.batch_size`` streams, each refilled when it finishes) is
SPEED-Bench's batch-size axis. Serving teams also ask what a server does at a given arrival
rate, whatever it answers; vLLM's ``bench serve --request-rate --burstiness`` and GuideLLM's
Poisson profile draw the gaps between arrivals from a distribution, and so does this module:

- ``poisson``: exponential gaps with mean ``1 / rate`` (a Poisson process);
- ``gamma``: gamma gaps with shape ``burstiness`` and scale ``1 / (rate * burstiness)``, so the
  mean gap stays ``1 / rate`` while the coefficient of variation is ``1 / sqrt(burstiness)``:
  below 1 arrivals bunch up, above 1 they even out, and 1 is the Poisson process again (the
  parametrisation of vLLM's ``--burstiness``);
- ``constant``: every gap exactly ``1 / rate``.

The first request is due at 0: a level starts with work rather than with an idle gap. Offsets
are seeded, so a level sends at the same times in every run; each repeat of a level draws its own
schedule (the sweep's seed plus the repeat's index).
"""

from __future__ import annotations

import numpy as np

from speedbench.config import ArrivalProcess


class ArrivalError(ValueError):
    """An arrival schedule that cannot be drawn (a rate or burstiness out of range)."""


def arrival_gaps(
    n: int,
    rate: float,
    process: ArrivalProcess = "poisson",
    burstiness: float = 1.0,
    seed: int = 0,
) -> np.ndarray:
    """``n`` seconds between consecutive arrivals at ``rate`` requests/s.

    Args:
        n: How many gaps to draw.
        rate: Mean arrival rate in requests per second (> 0).
        process: The distribution of the gaps (see the module docstring).
        burstiness: Shape of the gamma gaps; 1 for Poisson. Only ``gamma`` reads it.
        seed: Seed of the generator.

    Returns:
        The gaps, as float64 seconds.

    Raises:
        ArrivalError: If ``rate``, ``burstiness`` or ``n`` is out of range.
    """
    if not rate > 0 or not np.isfinite(rate):
        raise ArrivalError(f"request rate must be a positive number of requests/s, got {rate}")
    if not burstiness > 0 or not np.isfinite(burstiness):
        raise ArrivalError(f"burstiness must be a positive number, got {burstiness}")
    if n < 0:
        raise ArrivalError(f"cannot draw {n} arrival gaps")
    rng = np.random.default_rng(seed)
    if process == "poisson":
        return rng.exponential(1.0 / rate, size=n)
    if process == "gamma":
        return rng.gamma(burstiness, 1.0 / (rate * burstiness), size=n)
    if process == "constant":
        return np.full(n, 1.0 / rate)
    raise ArrivalError(f"unknown arrival process {process!r}; known: poisson, gamma, constant")


def arrival_offsets(
    n: int,
    rate: float,
    process: ArrivalProcess = "poisson",
    burstiness: float = 1.0,
    seed: int = 0,
) -> list[float]:
    """Seconds from the level's start at which each of ``n`` requests is due (the first at 0).

    The gaps are :func:`arrival_gaps` with the same arguments; the offsets never decrease.
    """
    if n <= 0:
        return []
    gaps = arrival_gaps(n - 1, rate, process, burstiness, seed)
    return [0.0, *np.cumsum(gaps).tolist()]
