"""Which draft length at which batch size: predicted speedup from step costs and the oracle.

The oracle (:mod:`speedbench.oracle.predict`) gives every request's greedy SD steps for every
k; :mod:`speedbench.oracle.steptime` gives what an engine iteration costs on this host. This
module puts them together the way the engine runs them: a closed loop of ``batch_size``
streams over the level's own requests, each new request's prompt prefilled in the iterations
it joins (in chunks where the engine caps an iteration's tokens), every iteration priced by
what it processes, the baseline (k = 0) and SD replayed alike.

An SD iteration costs:

- the target's verify pass: ``target.seconds(sequences, tokens)`` with ``1 + drafted``
  tokens per decoding request (a prompt-lookup step with no match drafts nothing);
- the drafter's passes (:func:`draft_passes`), each at the cost the drafter's passes were
  measured to have inside the engine (a :class:`~speedbench.oracle.steptime.StepCosts` fitted
  on measured SD levels, :mod:`speedbench.oracle.recommend`): a draft model's ``k`` passes
  (vLLM's draft-model proposer), the first over the verified tokens (its whole prompt after
  a prefill), the other ``k - 1`` over one token per request; prompt lookup's one n-gram
  search per iteration, which on a CPU is not free either.

Predicted speedup = the baseline's replayed time / SD's replayed time (both through the same
costs, so what the costs get wrong in common cancels).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from speedbench.oracle.steps import PredictedStream
from speedbench.oracle.steptime import StepCosts


@dataclasses.dataclass(frozen=True)
class ReplayRequest:
    """One request of a level, as the replay needs it.

    Attributes:
        prompt_tokens: Tokens prefilled when it joins.
        chunks: Tokens per step, the prefill's one first (a baseline: all ones).
        drafted: Tokens drafted at each step (0 for the prefill and for undrafted steps).
    """

    prompt_tokens: int
    chunks: tuple[int, ...]
    drafted: tuple[int, ...]

    @classmethod
    def baseline(cls, prompt_tokens: int, output_tokens: int) -> ReplayRequest:
        """The request without SD: one token a step."""
        return cls(prompt_tokens, (1,) * output_tokens, (0,) * output_tokens)

    @classmethod
    def of(cls, prompt_tokens: int, stream: PredictedStream, k: int) -> ReplayRequest:
        """The request under SD at draft length ``k`` from its predicted stream."""
        drafted = tuple(k if d else 0 for d in stream.drafted)
        return cls(prompt_tokens, tuple(stream.chunks), drafted)


def draft_passes(drafter: str, k: int) -> int:
    """The drafter's passes per iteration: a draft model's ``k``, prompt lookup's one search."""
    return k if drafter == "draft_model" else min(k, 1)


def iteration_seconds(
    target: StepCosts,
    draft: StepCosts | None,
    passes: int,
    prefills: Sequence[int],
    drafted: Sequence[int],
    context: float = 0.0,
) -> float:
    """One iteration: ``prefills`` the prompt tokens joining, ``drafted`` per verifying request.

    The target verifies ``1 + drafted`` tokens per request. The drafter then runs ``passes``
    passes (:func:`draft_passes`): a draft model's k, as vLLM's draft-model proposer does,
    the first over the same tokens as the target (the batch padded to ``k + 1`` per request,
    rejected ones included), the other ``k - 1`` over one token per request; prompt lookup's
    one search over every request (its costs have no per-token part); and once, the cost of
    the square of the verifying requests that SD iterations show beyond both
    (``per_verifying_sq_s``). ``context`` is what the target's attention reads
    (:attr:`~speedbench.oracle.steptime.Iteration.context`); the drafter's passes are priced
    without it (their fit has no context term).
    """
    sequences = len(prefills) + len(drafted)
    tokens = sum(prefills) + sum(1 + d for d in drafted)
    seconds = target.seconds(sequences, tokens, context)
    if draft is not None and passes > 0:
        seconds += draft.seconds(sequences, tokens)
        seconds += (passes - 1) * draft.seconds(sequences, sequences)
        seconds += draft.per_verifying_sq_s * len(drafted) ** 2
    return seconds


def replay_seconds(
    requests: Sequence[ReplayRequest],
    batch_size: int,
    target: StepCosts,
    draft: StepCosts | None = None,
    passes: int = 0,
    token_budget: int | None = None,
) -> float:
    """The wall time of a closed-loop level of ``requests`` at ``batch_size`` streams.

    Requests join in order as streams free up. Without ``token_budget`` a joining request is
    prefilled whole in the next iteration (its first token); with one (vLLM's
    ``max_num_batched_tokens``) the decoding requests' tokens come first and the prompts
    waiting fill what is left, oldest first, in chunks; a request's first token comes out of
    the iteration that ends its prefill. Then it takes one of its steps per iteration.
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, got {batch_size}")
    waiting = list(requests)
    # (request, steps done, prompt tokens still to prefill, tokens generated so far)
    running: list[tuple[ReplayRequest, int, int, int]] = []
    total = 0.0
    while waiting or running:
        while waiting and len(running) < batch_size:
            request = waiting.pop(0)
            running.append((request, 0, max(request.prompt_tokens, 1), 0))
        decoding = [(r, done, made) for r, done, left, made in running if not left]
        drafted = [r.drafted[done] for r, done, _ in decoding]
        # Each step reads the request's KV once: its prompt and what it has made.
        context = sum(max(r.prompt_tokens, 1) + made for r, done, made in decoding)
        room = token_budget - sum(1 + d for d in drafted) if token_budget is not None else None
        prefills: list[int] = []
        stepped = []
        for r, done, left, made in running:
            if left:
                take = left if room is None else max(min(left, room), 0)
                if room is not None:
                    room -= take
                if take:
                    prefills.append(take)
                left -= take
                if not left:  # the prefill's last chunk samples the first token
                    made, done = made + r.chunks[done], done + 1
            else:
                made, done = made + r.chunks[done], done + 1
            if done < len(r.chunks):
                stepped.append((r, done, left, made))
        total += iteration_seconds(target, draft, passes, prefills, drafted, context)
        running = stepped
    return total


def predicted_speedup(
    baseline: Sequence[ReplayRequest],
    speculative: Sequence[ReplayRequest],
    batch_size: int,
    target: StepCosts,
    draft: StepCosts | None,
    passes: int,
    token_budget: int | None = None,
) -> float:
    """Output throughput with SD over without, both replayed through the same costs."""
    base = replay_seconds(baseline, batch_size, target, token_budget=token_budget)
    sd = replay_seconds(speculative, batch_size, target, draft, passes, token_budget)
    return base / sd
