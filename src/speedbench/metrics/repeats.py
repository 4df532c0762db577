"""A level measured several times: each repeat's headline figures and their spread.

AIPerf and GuideLLM report a benchmark run several times as a mean with a confidence interval
across runs; one run's bootstrap over requests cannot show what varies between runs (the
engine's scheduling, the arrival schedule, the host). Each repeat of a level sends the same
prompts in a fresh order (and, in an open loop, on a fresh schedule); this module takes the
records of all repeats, computes every repeat's figures alone with the same functions as the
level's, and gives each figure's mean with a Student-t interval over repeats (a t interval,
not a bootstrap: a handful of repeats is too few to resample).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from speedbench.figures import RepeatFigures, SpreadFigures
from speedbench.metrics.goodput import LatencyObjectives, goodput
from speedbench.metrics.latency import summarize_load
from speedbench.metrics.views import speed_bench_view
from speedbench.records import RequestRecord, measured

# The figures followed across repeats, by the names the level's other tables use.
REPEAT_FIGURES = (
    "output_throughput_tok_s",
    "request_throughput_rps",
    "per_user_tok_s",
    "ttft_p50_s",
    "tpot_p50_s",
    "e2e_p50_s",
    "goodput_rps",
    "al_speed_bench_request_mean",
)


def t_interval(values: Sequence[float | None], confidence: float = 0.95) -> SpreadFigures:
    """Mean of ``values`` (NaNs left out) with its Student-t interval.

    One value has a mean and no interval (NaN bounds); identical values have a zero-width one.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    arr = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if arr.size == 0:
        return SpreadFigures(mean=math.nan, low=math.nan, high=math.nan, count=0)
    mean = float(arr.mean())
    if arr.size == 1:
        return SpreadFigures(mean=mean, low=math.nan, high=math.nan, count=1)
    half = float(
        stats.t.ppf((1 + confidence) / 2, arr.size - 1) * arr.std(ddof=1) / math.sqrt(arr.size)
    )
    return SpreadFigures(mean=mean, low=mean - half, high=mean + half, count=int(arr.size))


def repeat_figures(
    records: Sequence[RequestRecord],
    k: int,
    objectives: LatencyObjectives | None = None,
    eos_id: int | None = None,
) -> dict[str, float | None]:
    """The headline figures of one repeat's records (warm-up requests left out)."""
    records = measured(records)
    load = summarize_load(records)
    figures: dict[str, float | None] = {
        "output_throughput_tok_s": load.output_throughput_tok_s,
        "request_throughput_rps": load.request_throughput_rps,
        "per_user_tok_s": load.per_user_tok_s,
        "ttft_p50_s": load.ttft_s.p50,
        "tpot_p50_s": load.tpot_s.p50,
        "e2e_p50_s": load.e2e_s.p50,
        "goodput_rps": math.nan,
        "al_speed_bench_request_mean": math.nan,
    }
    if objectives is not None and objectives.any_set:
        figures["goodput_rps"] = goodput(records, objectives, load.duration_s or 0.0).rate_rps
    if k > 0:
        view = speed_bench_view(records, k, eos_id)
        figures["al_speed_bench_request_mean"] = view.al_request_mean
    return figures


def across_repeats(
    records: Sequence[RequestRecord],
    k: int,
    objectives: LatencyObjectives | None = None,
    confidence: float = 0.95,
    eos_id: int | None = None,
) -> RepeatFigures | None:
    """Every repeat's figures and each figure's mean and interval (None for a single repeat)."""
    by_repeat: dict[int, list[RequestRecord]] = {}
    for r in measured(records):
        by_repeat.setdefault(r.repeat, []).append(r)
    if len(by_repeat) < 2:
        return None
    # Each repeat's figures carry its index, so repeats of two levels pair by round
    # (speedbench.metrics.paired) even where one level lost a repeat.
    per_repeat = [
        {"repeat": float(i), **repeat_figures(by_repeat[i], k, objectives, eos_id)}
        for i in sorted(by_repeat)
    ]
    spread = {
        name: t_interval([f[name] for f in per_repeat], confidence) for name in REPEAT_FIGURES
    }
    return RepeatFigures(
        count=len(per_repeat), confidence=confidence, per_repeat=per_repeat, spread=spread
    )
