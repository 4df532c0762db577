"""Pareto fronts over batch sizes and speedup against a no-SD baseline."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LoadPoint:
    """One measured load level: x = per-user tokens/s, y = system tokens/s."""

    batch_size: int
    per_user_tok_s: float
    system_tok_s: float


def pareto_front(points: Sequence[LoadPoint]) -> list[LoadPoint]:
    """Points not dominated in (per-user speed, system throughput), both maximised.

    Returned sorted by per-user speed, descending, so system throughput rises along the list.
    """
    ordered = sorted(points, key=lambda p: (-p.per_user_tok_s, -p.system_tok_s))
    front: list[LoadPoint] = []
    best_y = float("-inf")
    for p in ordered:
        if p.system_tok_s > best_y:
            front.append(p)
            best_y = p.system_tok_s
    return front


def speedup(
    sd: Mapping[Hashable, float], baseline: Mapping[Hashable, float]
) -> dict[Hashable, float]:
    """SD value / baseline value for every key (e.g. (batch size, split)) present in both.

    Raises:
        ValueError: if an SD key has no baseline, since a speedup without one is undefined.
    """
    missing = [key for key in sd if key not in baseline]
    if missing:
        raise ValueError(f"no no-SD baseline for {missing}")
    return {key: sd[key] / baseline[key] for key in sd if baseline[key] > 0}
