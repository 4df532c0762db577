"""Training conversations for an EAGLE-3 head: held-out prompts and the target's own answers.

The prompts are the qualitative split's candidates that the split does *not* hold (the same
packaged sources, drawn per category with a seed), so a head is never trained on a question it
is measured on. Each prompt is chat-templated by speedbench's tokenizer, exactly as a
measurement sends it, and answered greedily by the target itself (EAGLE-3's self-distillation:
the head learns the target's text, not a dataset's), up to ``answer_len`` tokens or its EOS.

Answers come from the target in transformers with a KV cache, batched, and the same forward
passes give the features the head reads (no second pass over the answers); greedy is greedy
in any engine. They are cached by the prompts' token ids, so a second head reuses them.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from speedbench.data.prompts import PromptRow
from speedbench.eagle3.features import SequenceFeatures


def training_prompts(
    candidates: Sequence[PromptRow], exclude_ids: set[str], per_category: int, seed: int
) -> list[PromptRow]:
    """``per_category`` prompts of each category not in ``exclude_ids``, seeded, sources mixed.

    Raises:
        ValueError: A category has no candidate left outside the split.
    """
    by_cat: dict[str, list[PromptRow]] = defaultdict(list)
    for row in candidates:
        if row.question_id not in exclude_ids:
            by_cat[row.category].append(row)
    empty = sorted({r.category for r in candidates} - set(by_cat))
    if empty:
        raise ValueError(f"no candidate outside the split in categories {', '.join(empty)}")
    picked: list[PromptRow] = []
    for cat in sorted(by_cat):
        rows = sorted(by_cat[cat], key=lambda r: r.question_id)
        random.Random(f"{seed}/eagle3/{cat}").shuffle(rows)
        picked += rows[:per_category]
    return picked


def _answers_key(target: str, prompts: Sequence[Sequence[int]], answer_len: int,
                 aux_layers: Sequence[int]) -> str:  # fmt: skip
    h = hashlib.sha256(json.dumps([target, answer_len, list(aux_layers)]).encode())
    for p in prompts:
        h.update(json.dumps(list(p)).encode())
    return h.hexdigest()[:16]


def _cache_kwarg(body: Any) -> str:
    """The name transformers' decoder takes its KV cache by (``cache`` from 5.2x)."""
    import inspect

    params = inspect.signature(body.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _returned_cache(result: Any) -> Any:
    """The KV cache a decoder call returned (``cache`` from transformers 5.2x)."""
    # Not .get(): reading past_key_values where cache exists warns of its deprecation.
    return result["cache"] if "cache" in result else result.past_key_values  # noqa: SIM401


def _greedy_rows(head: Any, hidden: torch.Tensor) -> torch.Tensor:
    """The LM head's argmax at every position of ``[B, T, H]``, a row at a time (memory)."""
    return torch.stack([head(h).argmax(-1) for h in hidden])


def answer_with_features(
    model: Any,
    prompts: Sequence[Sequence[int]],
    answer_len: int,
    stop_ids: set[int],
    aux_layers: Sequence[int],
    *,
    batch_size: int = 32,
    show_progress: bool = True,
) -> list[SequenceFeatures]:
    """The target's greedy answer to each prompt, with its features, from the one generation.

    A greedy loop with a KV cache: the prefill gives the feature layers and the target's argmax
    at every prompt position, and each decode step those of the answer token it fed back, so
    no second pass is needed; under greedy decoding the argmax after an answer token is the
    next answer token. The answer's last token is never fed back: its row has no features and
    no label (-1). Prompts are batched by length with left padding and explicit positions, so
    every answer is its own unbatched one up to rounding; a batch stops when every answer has
    met a stop token or ``answer_len``.
    """
    body, head = model.get_decoder(), model.get_output_embeddings()
    cache_kw = _cache_kwarg(body)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[SequenceFeatures | None] = [None] * len(prompts)
    with (
        torch.inference_mode(),
        tqdm(total=len(prompts), unit="prompt", desc="target answers",
             disable=not show_progress) as bar,
    ):  # fmt: skip
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            width = max(len(prompts[i]) for i in batch)
            ids = torch.zeros((len(batch), width), dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):
                n = len(prompts[i])
                ids[row, width - n :] = torch.tensor(list(prompts[i]))
                mask[row, width - n :] = 1
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            res = body(input_ids=ids, attention_mask=mask, position_ids=positions,
                       use_cache=True, output_hidden_states=True)  # fmt: skip
            cache = _returned_cache(res)
            prompt_aux = torch.cat([res.hidden_states[layer] for layer in aux_layers], dim=-1)
            prompt_greedy = _greedy_rows(head, res.last_hidden_state)
            nxt = prompt_greedy[:, -1]
            answers: list[list[int]] = [[] for _ in batch]
            done = [False] * len(batch)
            answer_aux: list[torch.Tensor] = []
            for step in range(answer_len):
                for row, t in enumerate(nxt.tolist()):
                    if not done[row]:
                        answers[row].append(t)
                        done[row] = t in stop_ids or len(answers[row]) == answer_len
                if all(done) or step == answer_len - 1:
                    break
                mask = torch.cat([mask, torch.ones((len(batch), 1), dtype=mask.dtype)], dim=-1)
                res = body(input_ids=nxt[:, None], attention_mask=mask,
                           position_ids=positions[:, -1:] + step + 1, use_cache=True,
                           output_hidden_states=True, **{cache_kw: cache})  # fmt: skip
                cache = _returned_cache(res)
                answer_aux.append(
                    torch.cat([res.hidden_states[layer][:, -1] for layer in aux_layers], dim=-1)
                )
                nxt = head(res.last_hidden_state[:, -1]).argmax(-1)
            fed = torch.stack(answer_aux, dim=1) if answer_aux else prompt_aux[:, :0]
            for row, i in enumerate(batch):
                n, answer = len(prompts[i]), answers[row]
                total = n + len(answer)
                aux = torch.zeros((total, prompt_aux.shape[-1]), dtype=prompt_aux.dtype)
                aux[:n] = prompt_aux[row, width - n :]
                aux[n : total - 1] = fed[row, : len(answer) - 1]
                greedy = torch.full((total,), -1, dtype=torch.long)
                greedy[: n - 1] = prompt_greedy[row, width - n : width - 1]
                greedy[n - 1 : total - 1] = torch.tensor(answer)
                out[i] = SequenceFeatures(
                    token_ids=torch.tensor([*prompts[i], *answer]),
                    aux=aux,
                    greedy=greedy,
                    answer_start=n,
                )
            bar.update(len(batch))
    return [f for f in out if f is not None]


def cached_answers(
    cache_dir: Path,
    target_name: str,
    model: Any,
    prompts: Sequence[Sequence[int]],
    answer_len: int,
    stop_ids: set[int],
    aux_layers: Sequence[int],
    *,
    batch_size: int = 32,
    show_progress: bool = True,
) -> tuple[list[SequenceFeatures], float]:
    """Answers and features from the cache, else generated and cached; and their seconds."""
    key = _answers_key(target_name, prompts, answer_len, aux_layers)
    path = cache_dir / f"answers-{key}.pt"
    if path.exists():
        saved = torch.load(path, weights_only=True)
        return [SequenceFeatures(**row) for row in saved["rows"]], float(saved["seconds"])
    started = time.perf_counter()
    feats = answer_with_features(model, prompts, answer_len, stop_ids, aux_layers,
                                 batch_size=batch_size, show_progress=show_progress)  # fmt: skip
    seconds = time.perf_counter() - started
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    rows = [{"token_ids": f.token_ids, "aux": f.aux, "greedy": f.greedy,
             "answer_start": f.answer_start} for f in feats]  # fmt: skip
    torch.save({"rows": rows, "seconds": seconds}, tmp)
    tmp.replace(path)
    return feats, seconds
