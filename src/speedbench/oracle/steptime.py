"""What one engine step costs on this host, read from a level's own records.

A serving engine advances every running request by one step per iteration: a decode step
(one token each), or with SD a verify step (``1 + drafted`` tokens each), and a request that
has just arrived has its prompt prefilled in the same iteration. Every request streams its
step's tokens when the iteration ends, so the chunk timestamps of all the requests of a level,
merged, fall into bursts: one burst per engine iteration. :func:`engine_iterations` recovers
them: how long each iteration took, how many sequences it ran and how many tokens the model
processed in it (a decoding request's 1, a prefilling request's whole prompt).

:func:`fit_step_costs` fits ``seconds = fixed + per_sequence * sequences + per_token *
tokens`` to those iterations by least squares (one outlier pass: a garbage-collection pause or
a client hiccup is no step). Decode iterations alone cannot tell a per-sequence cost from a
per-token one (each sequence processes one token); the prefill iterations, where one sequence
brings hundreds of tokens, can. That is what makes the fit able to price a verify step of
``16 x 4`` tokens from levels that never verified anything.

Pure functions over :class:`~speedbench.records.RequestRecord`; nothing here runs an engine.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Sequence

import numpy as np

from speedbench.records import RequestRecord

# A burst ends where the gap to the next chunk is over this share of the level's shortest
# steps (the 5th percentile of every request's gaps between its own chunks).
BURST_GAP_SHARE = 0.4
# Iterations whose residual is over this many robust standard deviations are refitted out.
OUTLIER_SIGMAS = 4.0


@dataclasses.dataclass(frozen=True)
class Iteration:
    """One engine iteration recovered from the stream.

    Attributes:
        seconds: From the previous iteration's outputs to this one's.
        sequences: Requests that got tokens in it (decoding or just prefilled).
        tokens: Tokens the target processed: ``1 + drafted`` per decoding request, the prompt
            per prefill.
        prefill_tokens: Of ``tokens``, the prompts of requests prefilled in it.
        decoding: Of ``sequences``, the requests that took a decode or verify step.
    """

    seconds: float
    sequences: int
    tokens: int
    prefill_tokens: int = 0
    decoding: int = 0


def _burst_gap(records: Sequence[RequestRecord]) -> float:
    gaps = [b - a for r in records for a, b in itertools.pairwise(r.chunk_times_s)]
    gaps = [g for g in gaps if g > 0]
    return BURST_GAP_SHARE * float(np.percentile(gaps, 5)) if gaps else 0.0


def engine_iterations(records: Iterable[RequestRecord], drafted: int = 0) -> list[Iteration]:
    """The engine iterations of one level, from its chunk timestamps.

    ``drafted`` is what every verify step drafted: 0 without SD, k for a draft model (which
    drafts k at every step); a drafter whose steps vary (prompt lookup) cannot be read so.
    The first burst of each repeat has no predecessor to time it from and is left out.
    """
    by_repeat: dict[int, list[RequestRecord]] = {}
    for r in records:
        by_repeat.setdefault(r.repeat, []).append(r)
    out: list[Iteration] = []
    for group in by_repeat.values():
        out += _iterations(group, drafted)
    return out


def _iterations(records: Sequence[RequestRecord], drafted: int) -> list[Iteration]:
    gap = _burst_gap(records)
    events = sorted(
        (t, i, j == 0)
        for i, r in enumerate(records)
        for j, t in enumerate(r.chunk_times_s)
    )  # fmt: skip
    bursts: list[list[tuple[float, int, bool]]] = []
    for event in events:
        if bursts and event[0] - bursts[-1][-1][0] <= gap:
            bursts[-1].append(event)
        else:
            bursts.append([event])
    out = []
    for before, burst in itertools.pairwise(bursts):
        seqs = {i for _, i, _ in burst}
        prefill = sum(max(records[i].prompt_tokens, 1) for _, i, first in burst if first)
        decoding = len({i for _, i, first in burst if not first})
        out.append(
            Iteration(
                seconds=burst[0][0] - before[0][0],
                sequences=len(seqs),
                tokens=decoding * (1 + drafted) + prefill,
                prefill_tokens=prefill,
                decoding=decoding,
            )
        )
    return out


def nonnegative_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient at least 0 (an active set over a few columns).

    Levels at one batch size leave a sequence's cost and a token's nearly collinear, and an
    unconstrained fit then trades them against each other: a throughput stage at bs 4 alone
    fitted -16 ms a sequence and +206 ms an iteration, which priced SD at 0.53x where it
    measured 0.90x. The most negative coefficient is held at 0 and the rest fitted again,
    until none is negative.
    """
    free = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while free:
        part = np.linalg.lstsq(x[:, free], y, rcond=None)[0]
        if (part >= 0).all():
            coef[free] = part
            break
        free.pop(int(np.argmin(part)))
    return coef


def robust_lstsq(
    x: np.ndarray, y: np.ndarray, keep_rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """Least squares, then again without residuals over ``OUTLIER_SIGMAS`` robust sigmas.

    The outliers are found by a plain fit (``keep_rows`` are never dropped); the fit on the
    rest keeps every coefficient, a cost,
    at 0 or above (:func:`nonnegative_lstsq`). Returns the coefficients, which rows were kept,
    and R² over those rows.
    """
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    resid = y - x @ coef
    scale = 1.4826 * float(np.median(np.abs(resid - np.median(resid))))
    keep = np.abs(resid) <= OUTLIER_SIGMAS * scale if scale > 0 else np.ones(len(y), bool)
    if keep_rows is not None:  # rows that stay whatever their residual
        keep |= keep_rows
    if keep.sum() < x.shape[1]:  # too few left to fit: keep every row
        keep = np.ones(len(y), bool)
    coef = nonnegative_lstsq(x[keep], y[keep])
    fitted = x[keep] @ coef
    total = float(np.sum((y[keep] - y[keep].mean()) ** 2))
    r2 = 1 - float(np.sum((y[keep] - fitted) ** 2)) / total if total > 0 else float("nan")
    return coef, keep, r2


@dataclasses.dataclass(frozen=True)
class StepCosts:
    """``seconds = fixed_s + per_sequence_s * sequences + per_token_s * tokens`` per iteration.

    Attributes:
        fixed_s: What every iteration costs (the engine's scheduling and the model's weights
            read once, whatever the batch).
        per_sequence_s: What each running sequence adds (sampling, output, attention set-up).
        per_token_s: What each processed token adds (the model's matmuls).
        iterations: How many iterations the fit rests on (outliers left out).
        outliers: How many were left out.
        r2: Share of the iterations' variance the fit explains.
        sources: The levels whose iterations it was fitted on.
    """

    fixed_s: float
    per_sequence_s: float
    per_token_s: float
    iterations: int = 0
    outliers: int = 0
    r2: float = float("nan")
    sources: tuple[str, ...] = ()

    def seconds(self, sequences: float, tokens: float) -> float:
        """One iteration of ``sequences`` requests processing ``tokens`` tokens in all."""
        return self.fixed_s + self.per_sequence_s * sequences + self.per_token_s * tokens

    def decode_s(self, sequences: float) -> float:
        """One decode iteration: every sequence processes one token."""
        return self.seconds(sequences, sequences)


def fit_step_costs(iterations: Sequence[Iteration], sources: Sequence[str] = ()) -> StepCosts:
    """Least squares over the iterations, then again without the outliers.

    Raises:
        ValueError: Fewer iterations than coefficients, or no prefill iteration to tell the
            cost of a token from that of a sequence.
    """
    if len(iterations) < 3:
        raise ValueError(f"{len(iterations)} engine iterations; the step-cost fit needs 3")
    if not any(it.prefill_tokens for it in iterations):
        raise ValueError("no prefill iteration: the cost of a token cannot be told from a step's")
    x = np.array([[1.0, it.sequences, it.tokens] for it in iterations])
    y = np.array([it.seconds for it in iterations])
    coef, keep, r2 = robust_lstsq(x, y)
    if not any(it.prefill_tokens for it, kept in zip(iterations, keep, strict=True) if kept):
        # Every prefill was trimmed as an outlier (long prompts prefilled in chunks over
        # several iterations look so): without one the cost of a token is not identified, so
        # the prefills stay and only the other outliers (pauses) go.
        prefills = np.array([bool(it.prefill_tokens) for it in iterations])
        coef, keep, r2 = robust_lstsq(x, y, keep_rows=prefills)
    return StepCosts(
        fixed_s=float(coef[0]),
        per_sequence_s=float(coef[1]),
        per_token_s=float(coef[2]),
        iterations=int(keep.sum()),
        outliers=int(len(y) - keep.sum()),
        r2=r2,
        sources=tuple(sources),
    )
