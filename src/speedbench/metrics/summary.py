"""Summaries of one measured load level: acceptance (every view), latency, throughput, CIs.

``views`` holds every named acceptance view (:mod:`speedbench.metrics.views`: ``speed_bench``,
``stream``, ``engine``, ``counters``), overall and per category. The fields below predate them
and stay for readers of earlier ``metrics.json`` files.

Two acceptance views are reported side by side because they answer different questions:

* ``acceptance_stream`` counts every decode step of a request, from its chunk sizes. A step
  where the drafter proposed nothing (an n-gram miss) counts as a = 0. Its AL is the tokens a
  target forward pass really yields, which is what bounds the speedup.
* ``acceptance_counters`` comes from the engine's counters and counts drafted steps only (the
  ``counters`` view; SPEED-Bench's own is the ``speed_bench`` view). The two coincide when
  every step drafts (draft models, EAGLE).

Engines that report neither per-step chunks nor per-position counters add two more:

* ``acceptance_engine_steps``: the engine's own verification-step count per request (SGLang's
  ``spec_verify_ct``). AL = (output tokens - 1) / steps, leaving out the prefill token as the
  stream view does; SGLang's own ``completion_tokens / spec_verify_ct`` counts it in.
* ``acceptance_server``: the server's own running AL (SGLang's ``avg_spec_accept_length``), read
  after the level, reported as the engine states it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from speedbench.metrics.acceptance import (
    Acceptance,
    SpecCounters,
    acceptance_from_counters,
    acceptance_from_steps,
    steps_from_chunks,
)
from speedbench.metrics.bootstrap import mean_ci, ratio_ci
from speedbench.metrics.goodput import LatencyObjectives, goodput
from speedbench.metrics.latency import summarize_load
from speedbench.metrics.repeats import across_repeats
from speedbench.metrics.views import all_views
from speedbench.records import RequestRecord, measured


def request_steps(records: Sequence[RequestRecord], k: int) -> tuple[list[list[int]], int]:
    """Per-request accepted counts from chunks of successful requests.

    Returns the step lists and the number of requests left out because a chunk was larger than
    k+1 (the engine merged steps, so its chunks no longer show steps).
    """
    steps, merged = [], 0
    for r in records:
        if not r.ok:
            continue
        try:
            steps.append(steps_from_chunks(r.chunk_tokens, k))
        except ValueError:
            merged += 1
    return steps, merged


def stream_acceptance(records: Sequence[RequestRecord], k: int) -> dict[str, object]:
    """Stream-derived acceptance with bootstrap CIs of both AL figures."""
    steps, merged = request_steps(records, k)
    acc: Acceptance = acceptance_from_steps(steps, k)
    nonempty = [s for s in steps if s]
    per_req_al = [float(np.mean(s) + 1) for s in nonempty]
    emitted = [float(sum(a + 1 for a in s)) for s in nonempty]
    counts = [float(len(s)) for s in nonempty]
    out = acc.as_dict()
    out["al_request_mean_ci"] = mean_ci(per_req_al).as_dict()
    out["al_token_weighted_ci"] = ratio_ci(emitted, counts).as_dict()
    out["requests_with_merged_chunks"] = merged
    return out


def engine_step_acceptance(records: Sequence[RequestRecord]) -> dict[str, object] | None:
    """AL from the engine's per-request verification-step counts (None if it reports none)."""
    pairs = [
        (r.output_tokens - 1, r.engine_steps)
        for r in records
        if r.ok and r.engine_steps and r.output_tokens > 0
    ]
    if not pairs:
        return None
    tokens = [float(t) for t, _ in pairs]
    steps = [float(n) for _, n in pairs]
    return {
        "al_token_weighted": sum(tokens) / sum(steps),
        "al_request_mean": float(np.mean([t / n for t, n in zip(tokens, steps, strict=True)])),
        "al_token_weighted_ci": ratio_ci(tokens, steps).as_dict(),
        "requests": len(pairs),
        "steps": int(sum(steps)),
    }


def summarize_level(
    records: Sequence[RequestRecord],
    counters: SpecCounters | None,
    k: int,
    server_al: float | None = None,
    objectives: LatencyObjectives | None = None,
    eos_id: int | None = None,
) -> dict[str, object]:
    """Everything about one load level, overall and per category.

    Warm-up requests are left out of every figure. ``server_al`` is the engine's own running AL
    where it states one (SGLang). With ``objectives``, the level's goodput is reported; with
    more than one repeat in the records, each repeat's figures and their spread. ``eos_id`` is
    the EOS the speed_bench view cuts from a turn's last step (None: the level ran with
    ``ignore_eos``, nothing is cut).
    """
    records = measured(records)
    load = summarize_load(records)
    overall: dict[str, object] = {"load": load.as_dict()}
    overall["errors_by_kind"] = dict(
        sorted(Counter(r.error_kind or "unknown" for r in records if not r.ok).items())
    )
    if k > 0:
        overall["acceptance_stream"] = stream_acceptance(records, k)
        if counters is not None and counters.num_drafts > 0:
            overall["acceptance_counters"] = acceptance_from_counters(counters, k).as_dict()
            overall["counters"] = counters.as_dict()
        if (engine_steps := engine_step_acceptance(records)) is not None:
            overall["acceptance_engine_steps"] = engine_steps
        if server_al is not None:
            overall["acceptance_server"] = {"al": server_al}
        views = all_views(records, counters, k, eos_id)
        overall["views"] = {n: v.as_dict() for n, v in views.items()}
    by_cat: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        by_cat[r.category].append(r)
    per_category: dict[str, object] = {}
    for cat in sorted(by_cat):
        entry: dict[str, object] = {"load": summarize_load(by_cat[cat]).as_dict()}
        if k > 0:
            entry["acceptance_stream"] = stream_acceptance(by_cat[cat], k)
            views = all_views(by_cat[cat], None, k, eos_id)  # counters are per level only
            entry["views"] = {n: v.as_dict() for n, v in views.items()}
        per_category[cat] = entry
    out: dict[str, object] = {"overall": overall, "per_category": per_category}
    if objectives is not None and objectives.any_set:
        good = goodput(records, objectives, load.duration_s)
        out["goodput"] = {
            "objectives": {n: getattr(objectives, n) for n in ("ttft_s", "tpot_s", "e2e_s")},
            "met": good.met,
            "total": good.total,
            "rate_rps": good.rate_rps,
            "fraction": good.fraction,
        }
    out["repeats"] = across_repeats(records, k, objectives, eos_id=eos_id)
    return out
