"""Summaries of one measured load level: acceptance (every view), latency, throughput, CIs.

Acceptance is reported only as named views (:mod:`speedbench.metrics.views`: ``speed_bench``,
``stream``, ``engine``, ``counters``, and ``server`` where the engine states its own running
AL), overall and per category, under ``views``; the engine's raw SD counter deltas sit beside
them under ``counters``. docs/acceptance-views.md gives every rule.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from speedbench.figures import CategoryFigures, LevelFigures, LevelSummary, SpecCounters
from speedbench.metrics.goodput import LatencyObjectives, goodput
from speedbench.metrics.latency import summarize_load
from speedbench.metrics.repeats import across_repeats
from speedbench.metrics.views import all_views, server_view
from speedbench.records import RequestRecord, measured


def summarize_level(
    records: Sequence[RequestRecord],
    counters: SpecCounters | None,
    k: int,
    server_al: float | None = None,
    objectives: LatencyObjectives | None = None,
    eos_id: int | None = None,
) -> LevelSummary:
    """Everything about one load level, overall and per category.

    Warm-up requests are left out of every figure. ``server_al`` is the engine's own running AL
    where it states one (SGLang). With ``objectives``, the level's goodput is reported; with
    more than one repeat in the records, each repeat's figures and their spread. ``eos_id`` is
    the EOS the speed_bench view cuts from a turn's last step (None: the level ran with
    ``ignore_eos``, nothing is cut).
    """
    records = measured(records)
    load = summarize_load(records)
    errors = Counter(r.error_kind or "unknown" for r in records if not r.ok)
    overall = LevelFigures(load=load, errors_by_kind=dict(sorted(errors.items())))
    if k > 0:
        if counters is not None and counters.num_drafts > 0:
            overall.counters = counters
        overall.views = dict(all_views(records, counters, k, eos_id))
        if server_al is not None:
            overall.views["server"] = server_view(server_al, k)
    by_cat: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        by_cat[r.category].append(r)
    per_category = {}
    for cat in sorted(by_cat):
        entry = CategoryFigures(load=summarize_load(by_cat[cat]))
        if k > 0:
            # Counters are the level's as a whole: no category has its own.
            entry.views = dict(all_views(by_cat[cat], None, k, eos_id))
        per_category[cat] = entry
    good = None
    if objectives is not None and objectives.any_set:
        good = goodput(records, objectives, load.duration_s or 0.0)
    return LevelSummary(
        overall=overall,
        per_category=per_category,
        goodput=good,
        repeats=across_repeats(records, k, objectives, eos_id=eos_id),
    )
