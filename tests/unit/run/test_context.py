"""The engine's context for the sweep's longest prompt (speedbench.run.context)."""

from __future__ import annotations

import json

import pytest

from speedbench.config import ConfigError, EngineConfig, SpecConfig
from speedbench.run import interleave
from speedbench.run.context import ModelContext, kv_gib, sized_for
from speedbench.workload import WorkItem

# Qwen2.5-Coder-1.5B and -0.5B's shapes (their config.json files).
TARGET = {"num_hidden_layers": 28, "hidden_size": 1536, "num_attention_heads": 12,
          "num_key_value_heads": 2, "max_position_embeddings": 32768}  # fmt: skip
DRAFT = {"num_hidden_layers": 24, "hidden_size": 896, "num_attention_heads": 14,
         "num_key_value_heads": 2, "max_position_embeddings": 32768}  # fmt: skip


def model(tmp_path, name, config):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


class CountingTokenizer:
    """Counts one token per character, and which texts it was asked to count."""

    def __init__(self):
        self.asked: list[str] = []

    def encode_turn(self, turns, answers=()):
        self.asked.append(turns[0])
        return list(range(len(turns[0]) + 30))


def ids(n: int, name: str = "p") -> WorkItem:
    return WorkItem(prompt_id=name, prompt_ids=tuple(range(n)))


def test_a_models_trained_context_and_kv_bytes_come_from_its_config(tmp_path):
    qwen = ModelContext.of(model(tmp_path, "t", TARGET), "float32")
    # K and V, 28 layers, 2 KV heads of 1536 / 12 = 128: 2 x 28 x 2 x 128 x 4 bytes.
    assert qwen == ModelContext(trained=32768, kv_bytes_per_token=57344)
    assert ModelContext.of(model(tmp_path, "d", DRAFT), "bfloat16").kv_bytes_per_token == 12288
    yarn = {**TARGET, "rope_scaling": {"type": "yarn", "factor": 4.0}}
    assert ModelContext.of(model(tmp_path, "y", yarn)).trained == 131072
    assert ModelContext.of("Qwen/Qwen2.5-Coder-1.5B-Instruct") == ModelContext(None, None)
    assert kv_gib(32768, qwen, ModelContext.of(model(tmp_path, "d32", DRAFT), "float32")) == 3


def test_long_prompts_raise_the_context_to_the_next_1024_and_the_kv_budget_with_it(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    target, draft = model(tmp_path, "t", TARGET), model(tmp_path, "d", DRAFT)
    engine = EngineConfig(model=target, dtype="float32", max_model_len=4096,
                          env={"VLLM_CPU_KVCACHE_SPACE": "2"})  # fmt: skip
    tok = CountingTokenizer()
    items = {"qualitative": [WorkItem(prompt_id="q", user_turns=("short",))],
             "throughput_8k": [ids(8100)],
             "throughput_32k": [ids(32600), ids(100, "s")]}  # fmt: skip
    sized, context = sized_for(engine, items, tok, 64, draft)
    assert tok.asked == []  # no text near the context: nothing tokenized
    assert sized.max_model_len == 32768  # 32,664 rounded up to 1024s
    # One 32k sequence of both: 32768 x (57344 + 24576) bytes = 2.5 GiB, so 3 of the 2.
    assert sized.env["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert context is not None
    assert context.need_by_split == {"throughput_8k": 8164, "throughput_32k": 32664}
    assert (context.target_trained, context.draft_trained) == (32768, 32768)
    assert context.beyond_draft == {}
    # The qualitative split alone fits the default context: the engine is kept as it is.
    short = {"qualitative": items["qualitative"]}
    assert sized_for(engine, short, tok, 64, draft) == (engine, None)
    # The host's own KV size is kept.
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    assert sized_for(engine, items, tok, 64, draft)[0].env["VLLM_CPU_KVCACHE_SPACE"] == "2"


def test_text_near_the_context_is_counted_in_tokens(tmp_path):
    engine = EngineConfig(model=model(tmp_path, "t", TARGET), max_model_len=4096)
    tok = CountingTokenizer()
    items = {"throughput_8k": [WorkItem(prompt_id="a", user_turns=("x" * 5000,)),
                               WorkItem(prompt_id="b", user_turns=("y" * 100,))]}  # fmt: skip
    sized, context = sized_for(engine, items, tok, 32)
    assert tok.asked == ["x" * 5000]
    assert context is not None and context.need_by_split == {"throughput_8k": 5062}
    assert sized.max_model_len == 5120


def test_a_prompt_beyond_the_targets_trained_context_is_refused_and_the_drafts_named(tmp_path):
    engine = EngineConfig(model=model(tmp_path, "t", TARGET), max_model_len=4096)
    with pytest.raises(ConfigError, match=r"^throughput_32k: .* need 32,800 tokens .* trained "
                       r"to 32,768"):  # fmt: skip
        sized_for(engine, {"throughput_32k": [ids(32768)]}, CountingTokenizer(), 32)
    short_draft = model(tmp_path, "d", {**DRAFT, "max_position_embeddings": 16384})
    _, context = sized_for(engine, {"throughput_16k": [ids(16000)],
                                    "throughput_32k": [ids(30000)]}, CountingTokenizer(), 32,
                           short_draft)  # fmt: skip
    assert context is not None and context.beyond_draft == {"throughput_32k": 30032}


def test_engines_up_together_keep_kv_for_one_whole_context_sequence_each(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.setattr(interleave, "available_gib", lambda: 100.0)
    target, draft = model(tmp_path, "t", TARGET), model(tmp_path, "d", DRAFT)
    specs = [SpecConfig(),
             SpecConfig(method="draft_model", num_speculative_tokens=3, draft_model=draft),
             SpecConfig(method="ngram", num_speculative_tokens=3)]  # fmt: skip
    engine = EngineConfig(model=target, dtype="float32", max_model_len=32768,
                          env={"VLLM_CPU_KVCACHE_SPACE": "4"})  # fmt: skip
    plan = interleave.plan_residency(engine, specs)
    # 4 GiB over three would be 1 each; a 32k sequence takes 1.75 GiB of the target's, 2.5
    # with the draft's.
    kv = {lb: e.env["VLLM_CPU_KVCACHE_SPACE"] for lb, e in plan.engines.items()}
    assert kv == {"none": "2", "draft_model-k3": "3", "ngram-k3": "2"}
