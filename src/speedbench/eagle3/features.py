"""The target's own features and greedy tokens over training sequences, for an EAGLE-3 head.

One teacher-forced pass of the target (transformers, on the CPU) over each sequence gives, per
position, the three feature layers the head reads (each layer's *input*, as vLLM collects
them: ``hidden_states[layer]`` in transformers' numbering, where entry 0 is the embedding
output) and the target's argmax, the token a greedy run emits next. The head is trained to
predict the argmax, never the text: greedy acceptance is agreement with the target.

Training takes its features from the generation of its answers
(:func:`speedbench.eagle3.data.answer_with_features`); this pass serves the chain oracle,
which replays answers an engine measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm

# Tokens per forward batch of the target: a few sequences at a time on a 24 GiB host (every
# layer's hidden states are held for the batch).
TOKENS_PER_BATCH = 2048


@dataclass(frozen=True)
class TrainingSequence:
    """One conversation the head learns from: token ids and where its answer starts."""

    token_ids: list[int]
    answer_start: int
    source: str = ""


@dataclass
class SequenceFeatures:
    """A sequence's features: tokens, the target's layer inputs and its greedy next tokens."""

    token_ids: torch.Tensor  # [T] long
    aux: torch.Tensor  # [T, n_aux * H] in the target's dtype
    greedy: torch.Tensor  # [T] long: the target's argmax after each position
    answer_start: int


def load_target(path: str, dtype: torch.dtype) -> Any:
    """The target as a transformers causal LM from a local folder."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    return model.eval()


def extract(
    model: Any,
    seqs: Sequence[TrainingSequence],
    aux_layers: Sequence[int],
    *,
    tokens_per_batch: int = TOKENS_PER_BATCH,
    show_progress: bool = True,
) -> list[SequenceFeatures]:
    """Teacher-force ``model`` over every sequence; features in the input order.

    Raises:
        ValueError: A feature layer is not a layer of the target, or a sequence is empty.
    """
    n_layers = int(model.config.num_hidden_layers)
    bad = [layer for layer in aux_layers if not 0 <= layer < n_layers]
    if bad:
        raise ValueError(f"feature layers {bad} are not layers of a {n_layers}-layer target")
    if any(not s.token_ids for s in seqs):
        raise ValueError("a training sequence has no tokens")
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i].token_ids), reverse=True)
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * len(seqs[batches[-1][0]].token_ids) <= (
            tokens_per_batch
        ):
            batches[-1].append(i)
        else:
            batches.append([i])
    out: list[SequenceFeatures | None] = [None] * len(seqs)
    total = sum(len(s.token_ids) for s in seqs)
    with (
        torch.inference_mode(),
        tqdm(total=total, unit="tok", desc="target features", disable=not show_progress) as bar,
    ):
        for batch in batches:
            width = len(seqs[batch[0]].token_ids)
            ids = torch.zeros((len(batch), width), dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):
                n = len(seqs[i].token_ids)
                ids[row, :n] = torch.tensor(seqs[i].token_ids)
                mask[row, :n] = 1
            result = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
            aux = torch.cat([result.hidden_states[layer] for layer in aux_layers], dim=-1)
            greedy = result.logits.argmax(dim=-1)
            for row, i in enumerate(batch):
                n = len(seqs[i].token_ids)
                out[i] = SequenceFeatures(
                    token_ids=ids[row, :n].clone(),
                    aux=aux[row, :n].clone(),
                    greedy=greedy[row, :n].clone(),
                    answer_start=seqs[i].answer_start,
                )
            bar.update(sum(len(seqs[i].token_ids) for i in batch))
    return [f for f in out if f is not None]
