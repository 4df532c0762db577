"""Step costs from a sweep's measured levels: the target's, the draft's alone, the drafters' in SD.

The speedup model (:mod:`speedbench.oracle.recommend`) prices every k with what an engine
iteration costs on this host. :func:`calibrate` fits the target's (or the draft's, served alone)
on no-SD levels (:func:`speedbench.oracle.steptime.fit_step_costs`); :func:`fit_sd_passes` fits
what each drafter adds inside SD iterations (a draft model's ``k`` passes, prompt lookup's
search) on its SD levels, every drafter at once with one shared cost of verifying many streams.
Every fit names the levels it rests on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from speedbench.oracle.steptime import (
    SQ_SCALE,
    StepCosts,
    engine_iterations,
    fit_step_costs,
    r_squared,
    robust_lstsq,
)
from speedbench.records import RequestRecord, read_parquet


def calibrate(levels: Sequence[tuple[str, Path]], token_budget: int | None = None) -> StepCosts:
    """Step costs fitted on the iterations of no-SD levels (label, folder with records)."""
    iterations = []
    for _, folder in levels:
        iterations += engine_iterations(_ok(folder), token_budget=token_budget)
    return fit_step_costs(iterations, [label for label, _ in levels])


def _ok(folder: Path) -> list[RequestRecord]:
    return [r for r in read_parquet(folder / "records.parquet") if r.ok]


# A draft-model SD level to learn the drafter's pass costs from: (label, folder, k).
DraftLevel = tuple[str, Path, int]


# A drafter's SD iterations as rows of the joint fit: its own columns, the time to explain,
# the iteration's whole time (the scale of its error) and the requests it verified.
_Row = tuple[list[float], float, float, int]
# The shared column in hundreds of verifying requests squared, so its scale is like the rest.
VERIFYING_SQ_SCALE = 100.0


def _draft_rows(
    levels: Sequence[DraftLevel],
    target: StepCosts,
    alone: StepCosts | None,
    token_budget: int | None,
) -> tuple[list[_Row], bool]:
    """A draft model's iterations less the target's verify pass: ``k`` passes each.

    The first pass runs over the verified tokens, the other ``k - 1`` over one token per
    request (:func:`speedbench.oracle.speedup.iteration_seconds`). ``alone`` (the draft served
    alone) prices each pass's sequences and tokens where known, and only a pass's fixed cost
    is fitted: left free, the per-sequence cost took up what verifying many streams costs
    (1.38 ms a sequence a pass inside SD against 0.10 alone in the main job at ``bd44de0``),
    the cost :func:`fit_sd_passes` shares between drafters. Without ``alone`` the
    per-sequence cost (where the levels ran more than one batch size) and the tokens' are
    fitted too.
    """
    its = [
        (it, k) for _, folder, k in levels for it in engine_iterations(_ok(folder), k, token_budget)
    ]
    spread = len({it.sequences for it, _ in its}) > 1
    rows = []
    for it, k in its:
        passes_tokens = it.tokens + (k - 1) * it.sequences
        passes_squares = it.tokens**2 + (k - 1) * it.sequences**2
        rest = it.seconds - target.seconds(it.sequences, it.tokens, it.context)
        cols = [float(k)]
        if alone is not None:
            rest -= alone.per_token_s * passes_tokens + alone.per_token_sq_s * passes_squares
            rest -= alone.per_sequence_s * k * it.sequences
        else:
            cols += [k * float(it.sequences)] if spread else []
            cols += [float(passes_tokens), passes_squares / SQ_SCALE]
        rows.append((cols, rest, it.seconds, it.decoding))
    return rows, spread


def _search_rows(
    levels: Sequence[DraftLevel], target: StepCosts, token_budget: int | None
) -> tuple[list[_Row], bool]:
    """Prompt lookup's iterations less the target's verify pass: one search each.

    The drafted tokens are read from the engine's per-request counts
    (:func:`~speedbench.oracle.steptime.step_drafts`); the search is a fixed cost and one per
    sequence (the latter where the levels ran more than one batch size). vLLM runs it on the
    CPU after every step.
    """
    its = [
        it
        for _, folder, k in levels
        for it in engine_iterations(_ok(folder), k, token_budget)
        if it.decoding
    ]
    spread = len({it.sequences for it in its}) > 1
    rows = [
        ([1.0] + ([float(it.sequences)] if spread else []),
         it.seconds - target.seconds(it.sequences, it.tokens, it.context), it.seconds, it.decoding)
        for it in its
    ]  # fmt: skip
    return rows, spread


def fit_sd_passes(
    levels: Mapping[str, Sequence[DraftLevel]],
    target: StepCosts,
    alone: StepCosts | None,
    token_budget: int | None = None,
) -> dict[str, StepCosts]:
    """Every drafter's pass costs inside SD iterations, fitted on all their levels at once.

    Each drafter has its own costs (:func:`_draft_rows`, :func:`_search_rows`); one more
    cost is shared: the square of the requests verifying in the iteration
    (``per_verifying_sq_s``), fitted where the levels verified at three or more different
    batch sizes. Sharing it lets one drafter's level at a batch size teach what verifying
    that many streams costs when another drafter's level there is left out.

    Raises:
        ValueError: No level, or fewer iterations than coefficients.
    """
    blocks = {}
    for drafter, mine in levels.items():
        if not mine:
            continue
        if drafter == "draft_model":
            blocks[drafter] = _draft_rows(mine, target, alone, token_budget)
        else:
            blocks[drafter] = _search_rows(mine, target, token_budget)
    if not any(rows for rows, _ in blocks.values()):
        raise ValueError(f"no SD iteration of {', '.join(levels) or 'any drafter'} to fit on")
    verifying = {row[3] for rows, _ in blocks.values() for row in rows}
    shared = len(verifying) >= 3
    widths = {d: len(rows[0][0]) if rows else 0 for d, (rows, _) in blocks.items()}
    width = sum(widths.values()) + shared
    x, y, total, owner = [], [], [], []
    at = 0
    for drafter, (rows, _) in blocks.items():
        for cols, rest, seconds, decoding in rows:
            line = [0.0] * width
            line[at : at + widths[drafter]] = cols
            if shared:
                line[-1] = decoding**2 / VERIFYING_SQ_SCALE
            x.append(line)
            y.append(rest)
            total.append(seconds)
            owner.append(drafter)
        at += widths[drafter]
    if len(y) < width:
        raise ValueError(f"{len(y)} SD iterations; the drafters' fit needs {width}")
    xs, ys = np.array(x), np.array(y)
    coef, keep, _ = robust_lstsq(xs, ys, np.array(total))
    sq = float(coef[-1]) / VERIFYING_SQ_SCALE if shared else 0.0
    fits, at = {}, 0
    for drafter, (rows, spread) in blocks.items():
        mine = np.array([o == drafter for o in owner]) & keep
        own = coef[at : at + widths[drafter]]
        at += widths[drafter]
        r2 = r_squared(ys[mine], xs[mine] @ coef)
        sources = tuple(label for label, _, _ in levels[drafter])
        fixed, per_seq, tokens = float(own[0]), 0.0, (0.0, 0.0)
        if drafter == "draft_model" and alone is not None:
            per_seq, tokens = alone.per_sequence_s, (alone.per_token_s, alone.per_token_sq_s)
        elif drafter == "draft_model":
            per_seq = float(own[1]) if spread else 0.0
            tokens = (float(own[-2]), float(own[-1]) / SQ_SCALE)
        elif spread:
            per_seq = float(own[1])
        fits[drafter] = StepCosts(
            fixed_s=fixed,
            per_sequence_s=per_seq,
            per_token_s=tokens[0],
            per_token_sq_s=tokens[1],
            per_verifying_sq_s=sq,
            iterations=int(mine.sum()),
            outliers=len(rows) - int(mine.sum()),
            r2=r2,
            sources=sources,
        )
    return fits
