"""Train an EAGLE-3 head on the target's own features, on the CPU.

The head learns the target's greedy token two positions ahead from the target's features and
the next token's embedding, unrolled over ``ttt_steps`` draft steps as inference runs them
(:meth:`speedbench.eagle3.head.Eagle3Head.unrolled`). Labels are the target's argmax, so what
is optimised is greedy acceptance. The embedding and the LM head are the target's and stay
frozen: a full-vocabulary head shares the target's LM head in vLLM and stores none; a pruned
head keeps the target's rows of its ``draft_vocab`` most frequent tokens (EAGLE-3's pruning,
counted over the training answers' target tokens) and maps them back with ``d2t``.

Each batch computes the loss on a seeded random share of its positions (``loss_fraction``): the
vocabulary projection dominates a CPU step, and a quarter of the positions still trains the
layer on every position's context. Held-out sequences report, per epoch, each draft step's
accuracy and the acceptance length of k-token chains (the chain oracle of
:mod:`speedbench.eagle3.chains`).
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from pydantic import Field
from torch.nn import functional as F
from tqdm import tqdm

from speedbench.config import StrictModel
from speedbench.eagle3.features import SequenceFeatures
from speedbench.eagle3.head import Eagle3Head, HeadShape, parameter_count


class TrainParams(StrictModel):
    """Hyper-parameters of one head's training (``eagle3.train`` in params)."""

    seed: int = Field(0, description="Seeds the head's initialisation, the split and the batches.")
    epochs: int = Field(4, ge=1, description="Passes over the training sequences.")
    lr: float = Field(1e-3, gt=0, description="Peak AdamW learning rate (cosine decay).")
    warmup_steps: int = Field(20, ge=0, description="Linear warm-up steps.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    ttt_steps: int = Field(3, ge=1, le=8, description="Draft steps unrolled per position.")
    step_weight_decay: float = Field(
        0.8, gt=0, le=1, description="Loss weight of draft step j is this to the power j."
    )
    tokens_per_batch: int = Field(2048, ge=64, description="Sequence tokens per batch.")
    loss_fraction: float = Field(
        0.25, gt=0, le=1, description="Share of positions whose loss each batch computes."
    )
    learn_prompts: bool = Field(
        True,
        description="Also learn the target's next token inside the prompts (the features are "
        "there from the prefill): more data; off: the answers only, as EAGLE-3 trains.",
    )
    held_out: float = Field(
        0.1, ge=0, lt=1, description="Share of sequences kept out of training, for the report."
    )
    init: Literal["target", "random"] = Field(
        "random",
        description="target: start as the identity on the target's top feature layer under its "
        "own final norm (Eagle3Head.init_from_target); random: Llama's normal(0, 0.02).",
    )
    intermediate_size: int | None = Field(
        None, ge=1, description="The head's MLP width (unset: the target's)."
    )


@dataclass
class EpochReport:
    """One epoch: its mean training loss and the held-out figures after it."""

    epoch: int
    loss: float
    seconds: float
    step_accuracy: list[float] = field(default_factory=list)
    chain_al: dict[int, float] = field(default_factory=dict)


@dataclass
class TrainResult:
    """A trained head and how it got there."""

    head: Eagle3Head
    kept_ids: list[int] | None
    reports: list[EpochReport]
    seconds: float
    train_sequences: int
    held_out_sequences: int
    train_tokens: int
    parameters: int


def draft_vocabulary(feats: Sequence[SequenceFeatures], size: int) -> list[int]:
    """The ``size`` target tokens most often greedy in the answers (ties: lower id), sorted."""
    counts: Counter[int] = Counter()
    for f in feats:
        counts.update(t for t in f.greedy[max(f.answer_start - 1, 0) :].tolist() if t >= 0)
    ranked = sorted(counts, key=lambda t: (-counts[t], t))[:size]
    if len(ranked) < size:
        # A vocabulary larger than what the answers use is filled with the lowest other ids
        # (the byte tokens and common pieces of BPE vocabularies come first).
        seen = set(ranked)
        for t in range(size * 2 + len(ranked)):
            if len(ranked) == size:
                break
            if t not in seen:
                ranked.append(t)
    return sorted(ranked)


def split_held_out(n: int, share: float, seed: int) -> tuple[list[int], list[int]]:
    """Indices of the training and held-out sequences (at least one held out when share > 0)."""
    order = list(range(n))
    random.Random(f"{seed}/held-out").shuffle(order)
    n_out = min(n - 1, max(1, round(n * share))) if share > 0 and n > 1 else 0
    return sorted(order[n_out:]), sorted(order[:n_out])


def batches(feats: Sequence[SequenceFeatures], idx: Sequence[int], budget: int, seed: int):
    """Groups of sequence indices of similar length, padded size within ``budget``, shuffled."""
    order = sorted(idx, key=lambda i: len(feats[i].token_ids), reverse=True)
    groups: list[list[int]] = []
    for i in order:
        if groups and (len(groups[-1]) + 1) * len(feats[groups[-1][0]].token_ids) <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    random.Random(seed).shuffle(groups)
    return groups


@dataclass
class Batch:
    """Padded tensors of a group of sequences for ``steps`` unrolled draft steps."""

    aux: torch.Tensor  # [B, T, n_aux * H]
    inputs: list[torch.Tensor]  # per step [B, T]: the token read at row i (i + 1 + j)
    labels: list[torch.Tensor]  # per step [B, T]: target greedy at i + 1 + j, -100 off
    positions: torch.Tensor  # [B, T]


def make_batch(
    feats: Sequence[SequenceFeatures],
    group: Sequence[int],
    steps: int,
    to_draft: torch.Tensor | None,
    learn_prompts: bool = False,
) -> Batch:
    """Inputs and labels of ``steps`` draft steps for every row of a group of sequences.

    Row i of step j reads the token at i + 1 + j and is labelled with the target's argmax there
    (the token at i + 2 + j of a greedy run), where that position lies in the answer (the
    argmax at answer_start - 1 predicts the answer's first token), or anywhere with
    ``learn_prompts``, and the sequence has it.
    ``to_draft`` maps target ids to draft ids (-1: not in the draft vocabulary, no label).
    """
    width = max(len(feats[i].token_ids) for i in group)
    n_aux = feats[group[0]].aux.shape[-1]
    aux = torch.zeros((len(group), width, n_aux), dtype=feats[group[0]].aux.dtype)
    inputs = [torch.zeros((len(group), width), dtype=torch.long) for _ in range(steps)]
    labels = [torch.full((len(group), width), -100, dtype=torch.long) for _ in range(steps)]
    for row, i in enumerate(group):
        f = feats[i]
        n = len(f.token_ids)
        aux[row, :n] = f.aux
        for j in range(steps):
            span = n - 1 - j  # rows 0 .. n - 2 - j have a token at i + 1 + j
            if span <= 0:
                continue
            inputs[j][row, :span] = f.token_ids[1 + j : 1 + j + span]
            lab = f.greedy[1 + j : 1 + j + span].clone()  # -1: the target's next is unknown
            if to_draft is not None:
                lab = torch.where(lab >= 0, to_draft[lab.clamp(min=0)], lab)
            if not learn_prompts:  # only rows whose label position is in the answer
                lab[: max(f.answer_start - 2 - j, 0)] = -100
            lab[lab < 0] = -100
            labels[j][row, :span] = lab
    positions = torch.arange(width)[None, :].expand(len(group), width)
    return Batch(aux, inputs, labels, positions)


def draft_logits(outputs: torch.Tensor, lm_head: torch.Tensor) -> torch.Tensor:
    """The head's logits over its vocabulary (``lm_head``: [V_draft, H])."""
    return outputs @ lm_head.T


def _lr_at(step: int, total: int, params: TrainParams) -> float:
    if step < params.warmup_steps:
        return params.lr * (step + 1) / params.warmup_steps
    span = max(total - params.warmup_steps, 1)
    return params.lr * 0.5 * (1 + math.cos(math.pi * (step - params.warmup_steps) / span))


def train_head(
    feats: Sequence[SequenceFeatures],
    shape: HeadShape,
    embed: torch.Tensor,
    lm_head: torch.Tensor,
    params: TrainParams,
    *,
    draft_vocab: int | None = None,
    final_norm: torch.Tensor | None = None,
    compute_dtype: torch.dtype = torch.float32,
    evaluate: Callable[[Eagle3Head, list[int]], tuple[list[float], dict[int, float]]] | None = None,
    show_progress: bool = True,
) -> TrainResult:
    """Train one head; ``draft_vocab`` prunes its vocabulary (None: the target's).

    ``final_norm`` is the target's final RMSNorm weight (``init: target`` starts from it).

    ``evaluate(head, held_out_indices)`` reports step accuracies and chain ALs after each
    epoch (none when unset or nothing is held out).

    Raises:
        ValueError: No sequence has an answer to learn from.
    """
    torch.manual_seed(params.seed)
    train_idx, held_idx = split_held_out(len(feats), params.held_out, params.seed)
    if not any(len(feats[i].token_ids) > feats[i].answer_start for i in train_idx):
        raise ValueError("no training sequence has answer tokens to learn from")
    kept_ids = None
    to_draft = None
    head_weight = lm_head
    if draft_vocab is not None and draft_vocab < shape.vocab_size:
        kept_ids = draft_vocabulary([feats[i] for i in train_idx], draft_vocab)
        to_draft = torch.full((shape.vocab_size,), -1, dtype=torch.long)
        to_draft[torch.tensor(kept_ids)] = torch.arange(len(kept_ids))
        head_weight = lm_head[torch.tensor(kept_ids)]
    head = Eagle3Head(shape)
    if params.init == "target":
        if final_norm is None:
            raise ValueError("init 'target' needs the target's final norm weight")
        head.init_from_target(params.seed, final_norm)
    else:
        head.init_weights(params.seed)
    head.to(compute_dtype)
    embed = embed.to(compute_dtype)
    head_weight = head_weight.to(compute_dtype)
    # Decoupled AdamW keeps float32 moments even for bf16 parameters only through a master
    # copy; the head is small, so it trains in float32 and computes in compute_dtype.
    head.float()
    optim = torch.optim.AdamW(head.parameters(), lr=params.lr, weight_decay=params.weight_decay)
    groups_per_epoch = len(batches(feats, train_idx, params.tokens_per_batch, 0))
    total = groups_per_epoch * params.epochs
    gen = torch.Generator().manual_seed(params.seed)
    reports: list[EpochReport] = []
    step = 0
    started = time.perf_counter()
    train_tokens = sum(len(feats[i].token_ids) for i in train_idx)
    weights = [params.step_weight_decay**j for j in range(params.ttt_steps)]
    for epoch in range(params.epochs):
        epoch_start = time.perf_counter()
        losses: list[float] = []
        groups = batches(feats, train_idx, params.tokens_per_batch, params.seed * 1000 + epoch)
        bar = tqdm(groups, desc=f"eagle3 epoch {epoch + 1}/{params.epochs}", unit="batch",
                   disable=not show_progress)  # fmt: skip
        for group in bar:
            batch = make_batch(feats, group, params.ttt_steps, to_draft, params.learn_prompts)
            for g in optim.param_groups:
                g["lr"] = _lr_at(step, total, params)
            with torch.autocast("cpu", dtype=compute_dtype, enabled=compute_dtype != torch.float32):
                outs = head.unrolled(
                    [embed[ids] for ids in batch.inputs], batch.aux.to(compute_dtype),
                    batch.positions,
                )  # fmt: skip
                loss = torch.zeros((), dtype=torch.float32)
                for j, out in enumerate(outs):
                    lab = batch.labels[j].reshape(-1)
                    rows = (lab >= 0).nonzero().squeeze(-1)
                    if rows.numel() == 0:
                        continue
                    take = max(1, round(rows.numel() * params.loss_fraction))
                    rows = rows[torch.randperm(rows.numel(), generator=gen)[:take]]
                    logits = draft_logits(out.reshape(-1, out.shape[-1])[rows], head_weight)
                    loss = loss + weights[j] * F.cross_entropy(logits.float(), lab[rows])
            optim.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
            optim.step()
            losses.append(float(loss.detach()))
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
            step += 1
        report = EpochReport(
            epoch=epoch + 1,
            loss=sum(losses) / max(len(losses), 1),
            seconds=time.perf_counter() - epoch_start,
        )
        if evaluate is not None and held_idx:
            report.step_accuracy, report.chain_al = evaluate(head, held_idx)
        reports.append(report)
    return TrainResult(
        head=head,
        kept_ids=kept_ids,
        reports=reports,
        seconds=time.perf_counter() - started,
        train_sequences=len(train_idx),
        held_out_sequences=len(held_idx),
        train_tokens=train_tokens,
        parameters=parameter_count(head),
    )


def head_state(result: TrainResult, dtype: torch.dtype) -> dict[str, Any]:
    """The trained weights in ``dtype``, keyed as the EAGLE-3 checkpoint keys them."""
    return {k: v.detach().to(dtype).contiguous() for k, v in result.head.state_dict().items()}
