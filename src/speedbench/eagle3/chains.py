"""What an EAGLE-3 head drafts at every step of a greedy run, from one teacher-forced pass.

In a greedy SD run a verification step that starts at answer position ``p`` finds the
drafter's KV cache filled from the target's features of every position before it, and drafts
a chain: step 0 reads the target's features at ``base + p - 2`` and the last emitted token
(``answer[p - 1]``); each later step reads its own previous output and draft. Wherever the
chain's earlier drafts were right, its inputs are exactly the answer's tokens, so the unrolled
head over prompt + baseline answer (:meth:`Eagle3Head.unrolled`, teacher-forced) gives every
chain's drafts for as long as they can be accepted. Whether step j of the chain at ``p``
matches ``answer[p + j]`` is then all a step replay needs
(:func:`speedbench.oracle.steps.chain_stream`), for every draft length up to the unrolled one.

This is the EAGLE-3 counterpart of the draft model's teacher-forced pass
(:mod:`speedbench.oracle.draft`): transformers' target and torch's head on the CPU, not the
engine's kernels; where they round otherwise the measured steps differ from the predicted ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from speedbench.eagle3.features import SequenceFeatures, TrainingSequence, extract
from speedbench.eagle3.head import Eagle3Head


def chain_drafts(
    head: Eagle3Head,
    embed: torch.Tensor,
    lm_head: torch.Tensor,
    kept_ids: Sequence[int] | None,
    feats: SequenceFeatures,
    steps: int,
) -> torch.Tensor:
    """``[steps, T]``: the target token id step j drafts at row i (-1 where there is none).

    Row i of step j exists where the sequence has the token it reads (i + 1 + j < T).
    """
    n = len(feats.token_ids)
    # The head computes in the target's dtype (its weights may be float32 masters).
    dtype = embed.dtype
    inputs = []
    for j in range(steps):
        ids = torch.zeros(n, dtype=torch.long)
        span = max(n - 1 - j, 0)
        ids[:span] = feats.token_ids[1 + j : 1 + j + span]
        inputs.append(embed[ids][None])
    with (
        torch.inference_mode(),
        torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32),
    ):
        outs = head.unrolled(inputs, feats.aux[None].to(dtype), torch.arange(n)[None])
        drafts = torch.stack([(o[0].to(lm_head.dtype) @ lm_head.T).argmax(-1) for o in outs])
    drafts = drafts.clone()  # out of inference mode: masked below
    if kept_ids is not None:
        drafts = torch.tensor(list(kept_ids), dtype=torch.long)[drafts]
    for j in range(steps):
        drafts[j, max(n - 1 - j, 0) :] = -1
    return drafts


def chain_matches(
    drafts: torch.Tensor, answer_start: int, answer: Sequence[int]
) -> list[list[bool]]:
    """Per answer position p, whether the chain starting there drafts ``answer[p + j]``.

    Position 0 (the prefill's token, never drafted) gets an empty chain. Steps past the
    answer's end are left out.
    """
    steps = drafts.shape[0]
    out: list[list[bool]] = [[]]
    for p in range(1, len(answer)):
        row = answer_start + p - 2
        chain = []
        for j in range(steps):
            if p + j >= len(answer) or row < 0:
                break
            chain.append(int(drafts[j, row]) == answer[p + j])
        out.append(chain)
    return out


def step_accuracy(chains: Sequence[Sequence[Sequence[bool]]], steps: int) -> list[float]:
    """Conditional accuracy of each draft step: right at j given steps before j were right."""
    right = [0] * steps
    tried = [0] * steps
    for request in chains:
        for chain in request:
            for j, ok in enumerate(chain[:steps]):
                tried[j] += 1
                right[j] += int(ok)
                if not ok:
                    break
    return [r / t if t else 0.0 for r, t in zip(right, tried, strict=True)]


class Eagle3Drafter:
    """A trained head beside its target, as the oracle replays it (``--drafter eagle3``)."""

    def __init__(self, target: Any, head: Eagle3Head, kept_ids: list[int] | None,
                 lm_head_rows: torch.Tensor | None) -> None:  # fmt: skip
        self.target = target
        self.head = head.eval()
        self.kept_ids = kept_ids
        self.embed = target.get_input_embeddings().weight.detach()
        self.lm_head = (
            lm_head_rows if lm_head_rows is not None
            else target.get_output_embeddings().weight.detach()
        )  # fmt: skip

    @classmethod
    def load(cls, head_dir: str, target_path: str, dtype: torch.dtype) -> Eagle3Drafter:
        """A saved head (:mod:`speedbench.eagle3.export`) and its target from local folders."""
        from speedbench.eagle3.export import load_head
        from speedbench.eagle3.features import load_target

        head, kept, rows = load_head(Path(head_dir))
        return cls(load_target(target_path, dtype), head, kept,
                   rows.to(dtype) if rows is not None else None)  # fmt: skip

    def chains(
        self,
        prompts: Sequence[Sequence[int]],
        answers: Sequence[Sequence[int]],
        steps: int,
        *,
        show_progress: bool = True,
    ) -> list[list[list[bool]]]:
        """Per request, per answer position, the chain's matches for ``steps`` draft steps."""
        seqs = [
            TrainingSequence(token_ids=[*p, *a], answer_start=len(p))
            for p, a in zip(prompts, answers, strict=True)
        ]
        feats = extract(self.target, seqs, self.head.shape.aux_layers, show_progress=show_progress)
        out = []
        for f, answer in zip(feats, answers, strict=True):
            drafts = chain_drafts(self.head, self.embed, self.lm_head, self.kept_ids, f, steps)
            out.append(chain_matches(drafts, f.answer_start, list(answer)))
        return out
