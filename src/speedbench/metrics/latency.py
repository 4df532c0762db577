"""Latency and throughput of a set of request records, as pure functions.

Per request: TTFT = first chunk - arrival; ITL = gaps between consecutive chunks; TPOT =
(last chunk - first chunk) / (output tokens - 1); E2E = end - arrival. The arrival is when the
request was sent in a closed loop, and when it was due in an open loop (``scheduled_s``): there
a request that waited for a free slot under a concurrency cap waited as its user did, and the
arrival lag (sent - due) is the client's own delay, reported apart. Failed requests count only
in the error rate: a failure usually ends early, and letting it into the latency statistics
would flatter them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from speedbench.figures import Distribution, LoadFigures
from speedbench.records import RequestRecord

NAN = float("nan")


def arrival_s(r: RequestRecord) -> float:
    """When the request arrived: due (open loop) or sent (closed loop)."""
    return r.start_s if r.scheduled_s is None else r.scheduled_s


def arrival_lag_s(r: RequestRecord) -> float:
    """Sent minus due, for an open-loop request (NaN in a closed loop)."""
    return float("nan") if r.scheduled_s is None else r.start_s - r.scheduled_s


def ttft_s(r: RequestRecord) -> float:
    """Time to first token from the arrival (NaN with no chunk)."""
    return r.chunk_times_s[0] - arrival_s(r) if r.chunk_times_s else float("nan")


def e2e_s(r: RequestRecord) -> float:
    """End-to-end latency from the arrival."""
    return r.end_s - arrival_s(r)


def tpot_s(r: RequestRecord) -> float:
    """Time per output token after the first (NaN for fewer than 2 tokens)."""
    n = r.output_tokens
    if n < 2 or not r.chunk_times_s:
        return float("nan")
    return (r.chunk_times_s[-1] - r.chunk_times_s[0]) / (n - 1)


def itls_s(r: RequestRecord) -> list[float]:
    """Gaps between consecutive chunks (one chunk may hold several tokens under SD)."""
    t = r.chunk_times_s
    return [b - a for a, b in itertools.pairwise(t)]


def measured_duration_s(records: Sequence[RequestRecord]) -> float:
    """Wall time of a level: first arrival to last end, summed over its repeats.

    Each repeat is timed on its own, so the pause between two repeats (a prefix-cache reset, the
    next schedule's start) is no part of the level's time.
    """
    by_repeat: dict[int, list[RequestRecord]] = {}
    for r in records:
        by_repeat.setdefault(r.repeat, []).append(r)
    return sum(
        max(r.end_s for r in group) - min(map(arrival_s, group)) for group in by_repeat.values()
    )


def arrival_rate_rps(records: Sequence[RequestRecord]) -> float:
    """The rate requests were due at in an open loop: (due times - 1) over their span.

    Per repeat, summed like the level's time; NaN in a closed loop or with fewer than two due
    times. A few draws from a Poisson process can run well off its nominal rate, so the report
    shows this beside the rate asked for.
    """
    due: dict[int, list[float]] = {}
    for r in records:
        if r.scheduled_s is not None:
            due.setdefault(r.repeat, []).append(r.scheduled_s)
    gaps = sum(len(d) - 1 for d in due.values())
    span = sum(max(d) - min(d) for d in due.values())
    return gaps / span if gaps and span > 0 else float("nan")


def summarize_load(records: Sequence[RequestRecord]) -> LoadFigures:
    """Summarise a load level.

    Throughput is successful output tokens (and requests) over the wall time from the first
    arrival to the last end of all requests, failed ones included, since they occupied the run;
    with repeats, each repeat's wall time is summed (:func:`measured_duration_s`). Per-user
    speed is 1 / mean TPOT.
    """
    ok = [r for r in records if r.ok]
    n, failed = len(records), len(records) - len(ok)
    duration = measured_duration_s(records)
    tokens = sum(r.output_tokens for r in ok)
    tpot = Distribution.of([tpot_s(r) for r in ok])
    return LoadFigures(
        num_requests=n,
        num_failed=failed,
        error_rate=failed / n if n else float("nan"),
        output_tokens=tokens,
        duration_s=duration,
        output_throughput_tok_s=tokens / duration if duration > 0 else float("nan"),
        per_user_tok_s=1.0 / tpot.mean if tpot.count and tpot.mean and tpot.mean > 0 else NAN,
        request_throughput_rps=len(ok) / duration if duration > 0 else float("nan"),
        arrival_rate_rps=arrival_rate_rps(records),
        ttft_s=Distribution.of([ttft_s(r) for r in ok]),
        tpot_s=tpot,
        itl_s=Distribution.of([x for r in ok for x in itls_s(r)]),
        e2e_s=Distribution.of([e2e_s(r) for r in ok]),
    )
