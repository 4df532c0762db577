"""A draft model's teacher-forced greedy predictions over prompt + baseline answer.

One forward pass of the draft per request gives, for every answer position, its argmax given
the prompt and the target's answer before that position: exactly what it proposes there in a
greedy SD run whose earlier proposals matched (:mod:`speedbench.oracle.steps`). Requests are
batched by length (right padding, so every real token keeps its own position) and the language
model head runs on the answer positions only, the one part of the vocabulary projection the
oracle needs.

The same logits give two more drafters for free (:mod:`speedbench.oracle.variants`): the
answer token's **rank** in the draft's distribution (a static tree keeping the top-b children
of a node accepts it where the rank is below b), and the argmax over a **pruned vocabulary**
(the draft restricted to the N most frequent tokens of a corpus, as EAGLE3-style drafters are):
a masked argmax, exact under greedy decoding.

This runs transformers on the CPU in the draft's engine dtype. It is the reference computation,
not the engine's kernels: where the engine rounds otherwise (bf16, quantised weights) the
measured steps differ from the predicted ones, and the difference is the engine's own loss.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

# Tokens per forward batch: long enough to keep two cores busy, short enough for a 24 GiB host.
TOKENS_PER_BATCH = 4096


@dataclass(frozen=True)
class DraftPass:
    """Per request and answer position, what the draft predicted there; and the pass's cost.

    Attributes:
        matches: Whether the draft's argmax equals the answer token.
        seconds: The pass's wall time.
        tokens: Tokens it processed (prompts and answers).
        ranks: The answer token's rank in the draft's distribution (0: its argmax; ties go to
            the lower token id, as argmax's do).
        pruned: Per kept-vocabulary size, whether the argmax over the kept tokens equals the
            answer token (never where the answer token is not kept).
    """

    matches: list[list[bool]]
    seconds: float
    tokens: int
    ranks: list[list[int]] = field(default_factory=list)
    pruned: dict[int, list[list[bool]]] = field(default_factory=dict)


def load_draft(path: str, dtype: str) -> Any:
    """The draft as a transformers causal LM, from a local folder, in ``dtype``."""
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(dtype)
    if torch_dtype is None:
        raise ValueError(f"the oracle runs the draft in float32 or bfloat16, not {dtype!r}")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, local_files_only=True)
    return model.eval()


def _batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Request indices grouped by length so a batch's padded size stays within ``budget``."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def answer_logits(
    model: Any,
    prompts: Sequence[Sequence[int]],
    answers: Sequence[Sequence[int]],
    *,
    tokens_per_batch: int = TOKENS_PER_BATCH,
    show_progress: bool = True,
    desc: str = "draft teacher-forced pass",
) -> Iterator[tuple[int, Any]]:
    """``(i, logits)`` for every request with an answer, teacher-forced.

    ``logits`` (float32) predict each answer token of request ``i`` from the prompt and the
    answer before it. Requests come in an order fixed by their lengths alone, so two models'
    passes over the same requests yield them in the same order (and can be zipped).

    Raises:
        ValueError: Prompts and answers differ in number, or a prompt is empty.
    """
    import torch

    if len(prompts) != len(answers):
        raise ValueError(f"{len(prompts)} prompts but {len(answers)} answers")
    lengths = [len(p) + len(a) for p, a in zip(prompts, answers, strict=True)]
    head = model.get_output_embeddings()
    body = model.get_decoder()
    todo = [b for b in _batches(lengths, tokens_per_batch) if lengths[b[0]]]
    # Inference mode is entered per batch and per request, never held across a yield: two
    # zipped passes would otherwise restore each other's modes out of order and leave the
    # caller's thread without autograd (it broke a later training run in the same process).
    with tqdm(total=sum(lengths), unit="tok", desc=desc, disable=not show_progress) as bar:
        for batch in todo:
            width = max(lengths[i] for i in batch)
            ids = torch.zeros((len(batch), width), dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):
                seq = [*prompts[i], *answers[i]]
                ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
                mask[row, : len(seq)] = 1
            with torch.inference_mode():
                hidden = body(input_ids=ids, attention_mask=mask).last_hidden_state
            for row, i in enumerate(batch):
                base, n = len(prompts[i]), len(answers[i])
                if n == 0:
                    continue
                # The logits at position t predict token t + 1; the first answer token is
                # predicted from the prompt's last position.
                first = base - 1
                if first < 0:
                    raise ValueError(
                        "a request with an empty prompt has no prediction for its first token"
                    )
                with torch.inference_mode():
                    logits = head(hidden[row, first : first + n]).float()
                yield i, logits
            bar.update(sum(lengths[i] for i in batch))


def teacher_forced_matches(
    model: Any,
    prompts: Sequence[Sequence[int]],
    answers: Sequence[Sequence[int]],
    *,
    kept: Mapping[int, Sequence[int]] | None = None,
    tokens_per_batch: int = TOKENS_PER_BATCH,
    show_progress: bool = True,
) -> DraftPass:
    """For each request, ``matches[i]``: the draft's argmax before answer token i equals it.

    ``matches[0]`` (the prefill's token, never drafted) is whether the draft would have picked
    the target's first token too; the step model ignores it. ``kept`` maps a pruned
    vocabulary's size to its token ids; the pass then also says where the argmax over each
    matched (``pruned``). The answer tokens' ranks come with every pass.
    """
    import torch

    masks = {n: torch.tensor(sorted(ids), dtype=torch.long) for n, ids in (kept or {}).items()}
    ranks: list[list[int]] = [[] for _ in prompts]
    pruned: dict[int, list[list[bool]]] = {n: [[] for _ in prompts] for n in masks}
    matches: list[list[bool]] = [[] for _ in prompts]
    started = time.perf_counter()
    passes = answer_logits(
        model, prompts, answers, tokens_per_batch=tokens_per_batch, show_progress=show_progress
    )
    for i, logits in passes:
        predicted = logits.argmax(dim=-1).tolist()
        matches[i] = [p == t for p, t in zip(predicted, answers[i], strict=True)]
        target = torch.tensor(answers[i], dtype=torch.long)
        ranks[i] = answer_ranks(logits, target).tolist()
        for size, ids in masks.items():
            best = ids[logits[:, ids].argmax(dim=-1)]
            pruned[size][i] = (best == target).tolist()
    seconds = time.perf_counter() - started
    tokens = sum(len(p) + len(a) for p, a in zip(prompts, answers, strict=True))
    return DraftPass(matches, seconds, tokens, ranks, pruned)


def answer_ranks(logits: Any, target: Any) -> Any:
    """Each row's rank of its target column: how many tokens argmax would pick before it.

    Higher logits, and equal ones at a lower id (argmax and top-k take the first of a tie).
    """
    import torch

    value = logits.gather(1, target[:, None])
    above = (logits > value).sum(dim=-1)
    ids = torch.arange(logits.shape[1])[None, :]
    tied_before = ((logits == value) & (ids < target[:, None])).sum(dim=-1)
    return above + tied_before
