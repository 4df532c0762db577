"""The engine's context for a sweep's longest prompt, and the models' trained context.

The CPU engines start with a 4,096-token context (``CPU_CONTEXT``), which the qualitative split
fits; the throughput buckets go to 32k tokens. Before any launch the sweep measures its longest
single-turn prompt plus its answer, raises the engine's ``max_model_len`` to the next multiple of
1,024 that holds it, and grows vLLM-CPU's KV budget to hold one such sequence of the target and
the draft. A prompt beyond the target's trained context (``max_position_embeddings`` times a
rope-scaling factor, from its ``config.json``) is refused with the figures; one beyond the
draft's is allowed and named (SD acceptance falls past the length a drafter was trained at).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speedbench.config import ConfigError, EngineConfig
from speedbench.provenance import SweepContext
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import WorkItem

CONTEXT_STEP = 1024
# The CPU KV budget (GiB) of a vLLM-CPU engine, divided by engines kept up together.
KV_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"
# A chat template's own tokens around a prompt's text, at most (Qwen2.5's: 30).
TEMPLATE_TOKENS = 256
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "half": 2}


@dataclass(frozen=True)
class ModelContext:
    """What a model's ``config.json`` says about its context and its KV cache."""

    trained: int | None  # tokens it was trained to (times a rope-scaling factor)
    kv_bytes_per_token: int | None  # K and V of every layer, in the config's dtype

    @classmethod
    def of(cls, model: str | None, dtype: str | None = None) -> ModelContext:
        """Read a local model folder's config (a hub id or no model: nothing known)."""
        path = Path(model) / "config.json" if model else None
        if path is None or not path.is_file():
            return cls(None, None)
        config: dict[str, Any] = json.loads(path.read_text())
        config = config.get("text_config", config)
        trained = config.get("max_position_embeddings")
        scaling = config.get("rope_scaling") or {}
        if trained is not None and isinstance(scaling, dict) and scaling.get("factor"):
            trained = int(trained * float(scaling["factor"]))
        heads = config.get("num_attention_heads")
        layers = config.get("num_hidden_layers")
        hidden = config.get("hidden_size")
        kv_heads = config.get("num_key_value_heads", heads)
        head_dim = config.get("head_dim") or (hidden // heads if hidden and heads else None)
        width = DTYPE_BYTES.get(dtype or str(config.get("torch_dtype", "float32")), 4)
        if not (layers and kv_heads and head_dim):
            return cls(trained, None)
        return cls(trained, 2 * layers * kv_heads * head_dim * width)


def longest_prompts(
    items: Mapping[str, Sequence[WorkItem]], tokenizer: PromptTokenizer, below: int
) -> dict[str, int]:
    """Each split's most tokens in one single-turn prompt, where some prompt reaches ``below``.

    Only text that may reach ``below`` is tokenized: a token holds one character or more.
    """
    longest: dict[str, int] = {}
    for split, split_items in items.items():
        for item in split_items:
            if item.prompt_ids is not None:
                size = len(item.prompt_ids)
            elif len(item.user_turns) == 1 and len(item.user_turns[0]) + TEMPLATE_TOKENS >= below:
                size = len(tokenizer.encode_turn(item.user_turns))
            else:
                continue
            if size >= below:
                longest[split] = max(longest.get(split, 0), size)
    return longest


def sized_for(
    engine: EngineConfig,
    items: Mapping[str, Sequence[WorkItem]],
    tokenizer: PromptTokenizer,
    output_len: int,
    draft: str | None = None,
) -> tuple[EngineConfig, SweepContext | None]:
    """The engine with a context (and a CPU KV budget) that holds the sweep's longest prompt.

    Returns the engine, and what was sized (None: every prompt fits the engine's context, or
    the engine has no context limit of speedbench's, as GPU engines keep the model's own).

    Raises:
        ConfigError: The longest prompt and its answer exceed the target's trained context.
    """
    if engine.max_model_len is None:
        return engine, None
    longest = longest_prompts(items, tokenizer, engine.max_model_len - output_len)
    need = {
        split: n + output_len
        for split, n in longest.items()
        if n + output_len > engine.max_model_len
    }
    if not need:
        return engine, None
    most = max(need.values())
    target = ModelContext.of(engine.model, engine.dtype)
    drafter = ModelContext.of(draft, engine.dtype)
    if target.trained is not None and most > target.trained:
        split = max(need, key=need.__getitem__)
        raise ConfigError(
            f"{split}: its longest prompt and answer need {most:,} tokens of context and the "
            f"target was trained to {target.trained:,} (max_position_embeddings times its rope "
            "scaling): add rope scaling (YaRN) to its config.json, or leave the split out"
        )
    size = math.ceil(most / CONTEXT_STEP) * CONTEXT_STEP
    if target.trained is not None:
        size = min(size, target.trained)
    update: dict[str, Any] = {"max_model_len": size}
    space = engine.env.get(KV_SPACE_ENV)
    gib = kv_gib(size, target, drafter)
    if space is not None and KV_SPACE_ENV not in os.environ and gib > float(space):
        update["env"] = {**engine.env, KV_SPACE_ENV: str(gib)}
    context = SweepContext(
        max_model_len=size, need_by_split=need, target_trained=target.trained,
        draft_trained=drafter.trained if draft else None,
    )  # fmt: skip
    return engine.model_copy(update=update), context


def kv_gib(tokens: int, *models: ModelContext) -> int:
    """Whole GiB of KV cache that hold one sequence of ``tokens`` in every model (at least 1)."""
    per_token = sum(m.kv_bytes_per_token or 0 for m in models)
    return max(1, math.ceil(tokens * per_token / 1024**3))
