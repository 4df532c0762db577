"""Acceptance metrics of speculative decoding, as pure functions.

Definitions (docs/architecture.md, following SPEED-Bench): each verification step ``s`` accepts
``a_s`` of the ``k`` drafted tokens and emits ``a_s + 1`` tokens.

* conditional AR_j = #(steps with a >= j) / #(steps with a >= j-1), j = 1..k
* joint AR_j = prod_{i<=j} conditional AR_i = P(a >= j)
* AL = 1 + sum_j joint AR_j = mean(a_s + 1)

Three sources feed the same :class:`Acceptance` result: explicit per-step counts, an engine's
counter deltas (vLLM's ``spec_decode`` counters), and a stream's chunk sizes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from speedbench.figures import SpecCounters


@dataclass(frozen=True)
class Acceptance:
    """Acceptance statistics over a set of verification steps.

    Attributes:
        k: Draft length.
        num_steps: Verification steps counted.
        conditional_ar: Conditional acceptance rate per position 1..k (NaN where undefined).
        joint_ar: P(a >= j) per position 1..k.
        al_token_weighted: Total emitted tokens / total steps, pooled over requests.
        al_request_mean: Mean over requests of each request's own AL (SPEED-Bench's Average_AL);
            NaN when per-request data is not available (counter source).
        histogram: ``histogram[a]`` = number of steps that accepted exactly ``a`` tokens.
    """

    k: int
    num_steps: int
    conditional_ar: list[float]
    joint_ar: list[float]
    al_token_weighted: float
    al_request_mean: float = float("nan")
    histogram: list[int] = field(default_factory=list)


def _rates_from_at_least(at_least: Sequence[float], k: int) -> tuple[list[float], list[float]]:
    """Conditional and joint AR from ``at_least[j]`` = #(steps with a >= j), j = 0..k."""
    total = at_least[0]
    joint = [at_least[j] / total if total else float("nan") for j in range(1, k + 1)]
    cond = [
        at_least[j] / at_least[j - 1] if at_least[j - 1] else float("nan") for j in range(1, k + 1)
    ]
    return cond, joint


def histogram_of_steps(steps: Iterable[int], k: int) -> list[int]:
    """Count steps by accepted length 0..k; raise on a count outside that range."""
    hist = [0] * (k + 1)
    for a in steps:
        if not 0 <= a <= k:
            raise ValueError(f"accepted count {a} outside 0..{k}")
        hist[a] += 1
    return hist


def acceptance_from_histogram(hist: Sequence[int], k: int | None = None) -> Acceptance:
    """Acceptance from a histogram of accepted lengths (``hist[a]`` steps accepted ``a``)."""
    k = len(hist) - 1 if k is None else k
    if len(hist) != k + 1:
        raise ValueError(f"histogram has {len(hist)} bins, expected k+1 = {k + 1}")
    counts = np.asarray(hist, dtype=np.int64)
    if (counts < 0).any():
        raise ValueError("histogram counts must be non-negative")
    # at_least[j] = #(a >= j): a reversed cumulative sum.
    at_least = counts[::-1].cumsum()[::-1].tolist()
    cond, joint = _rates_from_at_least(at_least, k)
    total = int(counts.sum())
    emitted = int((counts * (np.arange(k + 1) + 1)).sum())
    al = emitted / total if total else float("nan")
    return Acceptance(k, total, cond, joint, al, histogram=[int(c) for c in counts])


def acceptance_from_steps(per_request_steps: Sequence[Sequence[int]], k: int) -> Acceptance:
    """Acceptance from per-request lists of accepted counts ``a_s``.

    Requests with no verification step do not enter the per-request mean.
    """
    hist = [0] * (k + 1)
    request_als = []
    for steps in per_request_steps:
        h = histogram_of_steps(steps, k)
        hist = [x + y for x, y in zip(hist, h, strict=True)]
        if steps:
            request_als.append(sum(a + 1 for a in steps) / len(steps))
    pooled = acceptance_from_histogram(hist, k)
    mean_al = float(np.mean(request_als)) if request_als else float("nan")
    return Acceptance(
        k,
        pooled.num_steps,
        pooled.conditional_ar,
        pooled.joint_ar,
        pooled.al_token_weighted,
        mean_al,
        pooled.histogram,
    )


def acceptance_from_counters(delta: SpecCounters, k: int | None = None) -> Acceptance:
    """Acceptance from counter deltas over a run.

    joint AR_j = A_j / D, conditional AR_j = A_j / A_{j-1} (A_0 = D), AL = 1 + sum A_j / D.
    Per-request AL is not recoverable from counters and is NaN.
    """
    k = len(delta.accepted_per_pos) if k is None else k
    d = delta.num_drafts
    if not delta.accepted_per_pos and delta.num_accepted_tokens:
        # Engines that report totals only (TensorRT-LLM): AL is exact, per-position rates unknown.
        nan = [float("nan")] * k
        al = 1.0 + delta.num_accepted_tokens / d if d else float("nan")
        return Acceptance(k, round(d), nan, list(nan), al, histogram=[])
    per_pos = list(delta.accepted_per_pos)[:k] + [0.0] * max(0, k - len(delta.accepted_per_pos))
    at_least = [delta.num_drafts, *per_pos]
    cond, joint = _rates_from_at_least(at_least, k)
    al = 1.0 + sum(per_pos) / d if d else float("nan")
    # Histogram: #(a == j) = A_j - A_{j+1}; counters are exact integers in practice.
    hist = [round(at_least[j] - (at_least[j + 1] if j < k else 0)) for j in range(k + 1)]
    return Acceptance(k, round(d), cond, joint, al, histogram=hist)


def steps_from_chunks(chunk_sizes: Sequence[int], k: int) -> list[int]:
    """Accepted counts ``a_s`` from the token counts of a stream's chunks.

    The first non-empty chunk comes from prefill and is not a verification step. Empty chunks
    (a final chunk carrying only ``finish_reason``) are ignored. A chunk larger than k+1 tokens
    means the engine merged steps, which would silently bias AL, so it is an error.
    """
    sizes = [c for c in chunk_sizes if c > 0]
    steps = []
    for c in sizes[1:]:
        if c > k + 1:
            raise ValueError(f"chunk of {c} tokens exceeds k+1 = {k + 1}: steps were merged")
        steps.append(c - 1)
    return steps


def counters_from_steps(steps: Iterable[int], k: int) -> SpecCounters:
    """Counters an engine would report for these steps (for cross-checks and tests)."""
    hist = histogram_of_steps(steps, k)
    at_least = np.asarray(hist)[::-1].cumsum()[::-1]
    return SpecCounters(
        num_drafts=float(at_least[0]),
        num_draft_tokens=float(at_least[0] * k),
        num_accepted_tokens=float(sum(at_least[1:])),
        accepted_per_pos=tuple(float(x) for x in at_least[1:]),
    )
