"""Bootstrap confidence intervals over requests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from speedbench.figures import Interval


def bootstrap_ci(
    statistic: Callable[[np.ndarray], float],
    n_items: int,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap of ``statistic(indices)`` resampling ``n_items`` requests.

    ``statistic`` receives an index array (with repeats) into the caller's per-request data, so
    ratio statistics such as token-weighted AL resample numerator and denominator together.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_items == 0:
        return Interval.undefined(confidence)
    point = float(statistic(np.arange(n_items)))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n_items, size=(n_resamples, n_items))
    stats = np.array([statistic(idx) for idx in draws], dtype=float)
    stats = stats[~np.isnan(stats)]
    alpha = (1 - confidence) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha]) if stats.size else (np.nan, np.nan)
    return Interval(value=point, low=float(low), high=float(high), confidence=confidence)


def mean_ci(values: Sequence[float], **kwargs: object) -> Interval:
    """Bootstrap interval of the mean of per-request values."""
    arr = np.asarray(values, dtype=float)
    return bootstrap_ci(lambda idx: float(arr[idx].mean()), arr.size, **kwargs)  # type: ignore[arg-type]


def ratio_ci(
    numerators: Sequence[float], denominators: Sequence[float], **kwargs: object
) -> Interval:
    """Bootstrap interval of sum(numerators) / sum(denominators) over requests."""
    num = np.asarray(numerators, dtype=float)
    den = np.asarray(denominators, dtype=float)
    if num.shape != den.shape:
        raise ValueError("numerators and denominators differ in length")

    def stat(idx: np.ndarray) -> float:
        d = den[idx].sum()
        return float(num[idx].sum() / d) if d else float("nan")

    return bootstrap_ci(stat, num.size, **kwargs)  # type: ignore[arg-type]
