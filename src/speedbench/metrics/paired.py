"""Speedups paired by round: SD over no-SD throughput, round by round, with a t interval.

A speedup is a ratio of two levels' throughputs. Measured minutes apart, the host's drift
between them lands in the ratio (on a 2-core VM the same level read 1.03x and 1.25x in two
runs). The interleaved grid (:mod:`speedbench.run.interleave`) measures the baseline and every
SD config at a grid point in alternating rounds, each round one repeat of each config in one
time window; this module turns those repeats into the speedup's figures:

- each round's ratio, ``SD throughput in round r / baseline throughput in round r``, paired by
  the repeat index both levels record;
- the speedup's interval: a Student-t interval over rounds of the log ratio, exponentiated
  (ratios multiply, so the log is where their spread is symmetric); its centre is the
  geometric mean of the rounds' ratios;
- the host's drift over the window: the baseline's range of per-round throughput over its
  mean, which is what a ratio of unpaired levels could have moved by.

Pure functions over numbers; the sweep summary (:mod:`speedbench.sweep_summary`) applies them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from speedbench.figures import Figure, SpreadFigures
from speedbench.metrics.repeats import t_interval


def round_throughputs(per_repeat: Sequence[Mapping[str, Figure]]) -> dict[int, float]:
    """Repeat index -> output throughput (tok/s) of each repeat that has one."""
    out: dict[int, float] = {}
    for position, figures in enumerate(per_repeat):
        value = figures.get("output_throughput_tok_s")
        index = figures.get("repeat")
        if value is None or not math.isfinite(value) or value <= 0:
            continue
        out[int(index) if index is not None else position] = float(value)
    return out


def paired_ratios(sd: Mapping[int, float], base: Mapping[int, float]) -> list[float]:
    """SD over baseline throughput in every round both measured, in round order."""
    return [sd[r] / base[r] for r in sorted(sd.keys() & base.keys())]


def paired_speedup(
    sd: Mapping[int, float], base: Mapping[int, float], confidence: float = 0.95
) -> SpreadFigures | None:
    """The rounds' geometric-mean speedup and its t interval (None with under two rounds)."""
    ratios = paired_ratios(sd, base)
    if len(ratios) < 2:
        return None
    logs = t_interval([math.log(r) for r in ratios], confidence)
    mean, low, high = (
        math.nan if v is None else math.exp(v) for v in (logs.mean, logs.low, logs.high)
    )
    return SpreadFigures(mean=mean, low=low, high=high, count=logs.count)


def drift(throughputs: Mapping[int, float]) -> Figure:
    """The range of per-round throughput over its mean (None with under two rounds)."""
    values = list(throughputs.values())
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / mean
