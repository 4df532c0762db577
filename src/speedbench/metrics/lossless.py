"""The lossless check: greedy speculative decoding must not change a single output token.

With temperature 0, a target that verifies drafts emits exactly what it would emit alone. Each
SD request's output ids are compared with the no-SD baseline's for the same prompt, turn and
batch size. A mismatch is a finding with a known benign cause where the arithmetic depends on
the batch (bf16 kernels round differently depending on which requests share a step), and a bug
anywhere else.
"""

from __future__ import annotations

from collections.abc import Sequence

from speedbench.figures import LosslessFigures, OutputMismatch
from speedbench.records import RequestRecord


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (the shorter length if one is a prefix); None if equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def lossless_check(
    sd: Sequence[RequestRecord], baseline: Sequence[RequestRecord]
) -> LosslessFigures:
    """Compare every successful SD request with the successful baseline request of its turn.

    Warm-up requests are compared on neither side. Every repeat of an SD request is compared
    with the baseline's first successful one of the same prompt and turn: greedy decoding gives
    one answer, however often it is asked.
    """
    base: dict[tuple[str, int], RequestRecord] = {}
    for r in baseline:
        if r.ok and not r.warmup:
            base.setdefault((r.prompt_id, r.turn), r)
    compared, matched, mismatches = 0, 0, []
    for r in sd:
        other = base.get((r.prompt_id, r.turn))
        if not r.ok or r.warmup or other is None:
            continue
        compared += 1
        at = first_divergence(other.output_token_ids, r.output_token_ids)
        if at is None:
            matched += 1
        else:
            mismatches.append(
                OutputMismatch(
                    prompt_id=r.prompt_id,
                    turn=r.turn,
                    first_divergence=at,
                    baseline_tokens=len(other.output_token_ids),
                    sd_tokens=len(r.output_token_ids),
                )
            )
    mismatches.sort(key=lambda m: (m.prompt_id, m.turn))
    return LosslessFigures(
        compared=compared,
        matched=matched,
        match_rate=matched / compared if compared else None,
        mismatches=mismatches,
    )
