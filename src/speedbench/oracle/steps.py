"""Greedy SD steps predicted from a baseline answer, for every draft length at once.

Under greedy decoding SD is lossless: the target's output with SD is its output without it,
the baseline's answer ``y``. A verification step that starts at answer position ``p`` (the
token it is about to produce) drafts up to ``k`` tokens; it accepts the longest run of them
that equals ``y[p], y[p+1], ...`` and emits that run plus the target's own next token (the
correction, or the bonus token after a full run). The next step starts after it.

* A **draft model**'s proposal at ``p`` is its greedy continuation of the target's own prefix;
  as long as its proposals equal ``y`` its context *is* that prefix, so whether the step
  accepts position ``p + i`` is whether the draft's teacher-forced argmax at ``p + i`` equals
  ``y[p + i]`` (:func:`draft_model_stream`). One forward pass of the draft over prompt +
  answer gives those matches, hence the steps of every ``k``.
* **Prompt lookup** (vLLM's ``ngram`` method) proposes from the context alone (prompt and the
  answer so far), so its steps follow from the token ids (:func:`ngram_streams`,
  :func:`ngram_proposal`).

Both give a request's predicted stream: its chunk sizes with the prefill token first
(``[1, ...]``), as an engine that streams each step as one chunk sends them, and which steps
drafted anything. A step near the end is cut where the answer ends (the output cap or its
EOS), as the engine cuts it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PredictedStream:
    """One request's predicted greedy SD stream.

    Attributes:
        chunks: Tokens per step, the prefill's single token first; they sum to the answer.
        drafted: Per chunk, whether its step had a proposal (False for the prefill and for a
            prompt-lookup step that found no match: such a step emits one token).
        accepted: Per drafted step, in order, how many proposed tokens it accepted (what
            vLLM's per-request metrics report), before the answer's end cuts the step.
    """

    chunks: list[int]
    drafted: list[bool]
    accepted: list[int]


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"draft length k must be at least 1, got {k}")


def _walk(n: int, accepted_at: Callable[[int], tuple[int, bool]]) -> PredictedStream:
    """Steps over an answer of ``n`` tokens; ``accepted_at(p)`` = (accepted, drafted) at p."""
    if n == 0:
        return PredictedStream([], [], [])
    chunks, drafted, accepted, p = [1], [False], [], 1
    while p < n:
        run, had_proposal = accepted_at(p)
        step = min(run + 1, n - p)
        chunks.append(step)
        drafted.append(had_proposal)
        if had_proposal:
            accepted.append(run)
        p += step
    return PredictedStream(chunks, drafted, accepted)


def draft_model_stream(matches: Sequence[bool], k: int) -> PredictedStream:
    """The stream of a draft model whose teacher-forced argmax matched where ``matches`` says.

    Args:
        matches: One per answer position: whether the draft's argmax there, given the prompt
            and the answer before it, equals the answer's token. Position 0 is the prefill's
            token (never drafted); its entry is ignored.
        k: Draft length, at least 1. A draft model proposes ``k`` tokens at every step.
    """
    _check_k(k)
    n = len(matches)

    def accepted_at(p: int) -> tuple[int, bool]:
        run = 0
        while run < k and p + run < n and matches[p + run]:
            run += 1
        return run, True

    return _walk(n, accepted_at)


def chain_stream(chains: Sequence[Sequence[bool]], k: int) -> PredictedStream:
    """The stream of a drafter whose proposal depends on where its step starts (EAGLE).

    Args:
        chains: One per answer position p: whether the chain drafted at a step starting at p
            matches ``answer[p + j]`` at its step j (:mod:`speedbench.eagle3.chains`). Entry 0
            (the prefill's token) is ignored; a chain may be shorter than ``k`` only where the
            answer ends.
        k: Draft length, at least 1.
    """
    _check_k(k)
    n = len(chains)

    def accepted_at(p: int) -> tuple[int, bool]:
        chain = chains[p]
        run = 0
        while run < k and run < len(chain) and chain[run]:
            run += 1
        return run, True

    return _walk(n, accepted_at)


def tree_stream(ranks: Sequence[int], breadths: Sequence[int]) -> PredictedStream:
    """The stream of a static draft tree: at depth d every node keeps its top ``breadths[d]``.

    A full tree of the draft's top-b children contains the path of the answer's tokens to
    depth d exactly when each of them ranked below that depth's breadth in the draft's
    distribution along the answer (``ranks``, teacher-forced: on the accepted path the draft's
    context *is* the answer). The target's greedy verification accepts that path, the longest
    in the tree, then adds its own token. A chain of k is the tree ``[1] * k``.
    """
    if not breadths or min(breadths) < 1:
        raise ValueError(f"a tree needs a breadth of at least 1 at every depth, got {breadths}")
    n = len(ranks)

    def accepted_at(p: int) -> tuple[int, bool]:
        run = 0
        while run < len(breadths) and p + run < n and ranks[p + run] < breadths[run]:
            run += 1
        return run, True

    return _walk(n, accepted_at)


def ngram_proposal(
    context: Sequence[int] | np.ndarray,
    min_n: int,
    max_n: int,
    k: int,
    max_model_len: int | None = None,
) -> list[int]:
    """The proposal of vLLM's prompt lookup for ``context`` (prompt + answer so far).

    The longest n-gram, ``min_n <= n <= max_n``, that ends the context and occurs earlier in it
    (an occurrence may overlap the suffix but must be followed by at least one token); of its
    occurrences the earliest; the proposal is up to ``k`` tokens that follow it, cut at the
    context's end, and at ``max_model_len`` (vLLM's ``_find_longest_matched_ngram_and_propose_
    tokens`` in ``vllm/v1/spec_decode/ngram_proposer.py``, checked against it by
    tests/integration/oracle/test_oracle_vllm.py). Empty when nothing matches.
    """
    arr = np.asarray(context, dtype=np.int64)
    total = arr.shape[0]
    if max_model_len is not None:
        k = min(k, max_model_len - total)
    if total < min_n or k <= 0:
        return []
    for n in range(min(max_n, total - 1), max(min_n, 1) - 1, -1):
        span = total - n  # candidate starts 0..span-1: start + n <= total - 1
        hit = np.ones(span, dtype=bool)
        for j in range(n):
            hit &= arr[j : span + j] == arr[span + j]
        found = np.flatnonzero(hit)
        if found.size:
            follow = int(found[0]) + n
            return arr[follow : follow + k].tolist()
    return []


def ngram_streams(
    prompt: Sequence[int],
    answer: Sequence[int],
    ks: Sequence[int],
    min_n: int,
    max_n: int,
    max_model_len: int | None = None,
) -> dict[int, PredictedStream]:
    """The streams of vLLM's prompt lookup over ``prompt`` for the greedy ``answer``, per k.

    A proposal of ``k`` tokens is the first ``k`` of the longest one (the match does not depend
    on ``k``), so each answer position is looked up once for every draft length.
    """
    for k in ks:
        _check_k(k)
    if not 1 <= min_n <= max_n:
        raise ValueError(f"n-gram sizes need 1 <= min <= max, got {min_n}..{max_n}")
    context = np.asarray([*prompt, *answer], dtype=np.int64)
    base, n, widest = len(prompt), len(answer), max(ks)
    proposals: dict[int, list[int]] = {}

    def streams_for(k: int) -> PredictedStream:
        def accepted_at(p: int) -> tuple[int, bool]:
            if p not in proposals:
                proposals[p] = ngram_proposal(context[: base + p], min_n, max_n, widest,
                                              max_model_len)  # fmt: skip
            proposal = proposals[p][:k]
            run = 0
            while run < len(proposal) and p + run < n and proposal[run] == answer[p + run]:
                run += 1
            return run, bool(proposal)

        return _walk(n, accepted_at)

    return {k: streams_for(k) for k in ks}
