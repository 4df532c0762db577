"""Training data, batches, vocabulary and the checkpoint layout of an EAGLE-3 head (tiny models)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from speedbench.data.prompts import PromptRow
from speedbench.eagle3.data import answer_with_features, training_prompts
from speedbench.eagle3.export import load_head, save_head
from speedbench.eagle3.features import SequenceFeatures, TrainingSequence, extract
from speedbench.eagle3.head import Eagle3Head, shape_for_target
from speedbench.eagle3.train import (
    TrainParams,
    draft_vocabulary,
    make_batch,
    split_held_out,
    train_head,
)


@pytest.fixture(scope="module")
def tiny_target():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=8,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        initializer_range=0.5, tie_word_embeddings=False,
    )  # fmt: skip
    return Qwen2ForCausalLM(config).eval()


def _row(qid: str, cat: str) -> PromptRow:
    return PromptRow(question_id=qid, category=cat, turns=[f"question {qid}"], source="s")


def test_training_prompts_leave_the_split_out_and_are_seeded():
    rows = [_row(f"{c}{i}", c) for c in ("coding", "math") for i in range(6)]
    picked = training_prompts(rows, {"coding0", "coding1", "math5"}, 3, seed=0)
    ids = [r.question_id for r in picked]
    assert len(ids) == 6 and not {"coding0", "coding1", "math5"} & set(ids)
    assert [r.category for r in picked] == ["coding"] * 3 + ["math"] * 3
    assert ids == [r.question_id for r in training_prompts(rows, {"coding0", "coding1", "math5"},
                                                           3, seed=0)]  # fmt: skip
    assert ids != [r.question_id for r in training_prompts(rows, set(), 3, seed=1)]
    with pytest.raises(ValueError, match="no candidate outside the split in categories math"):
        training_prompts(rows, {f"math{i}" for i in range(6)}, 3, seed=0)


def test_generation_features_are_the_teacher_forced_ones(tiny_target):
    """One generation gives what a second, teacher-forced pass over its answers would."""
    prompts = [[1, 2, 3, 4, 5], [7, 8, 9]]
    layers = (2, 4, 5)
    feats = answer_with_features(tiny_target, prompts, 6, {63}, layers, batch_size=2,
                                 show_progress=False)  # fmt: skip
    seqs = [TrainingSequence(f.token_ids.tolist(), f.answer_start) for f in feats]
    forced = extract(tiny_target, seqs, layers, show_progress=False)
    for f, g, prompt in zip(feats, forced, prompts, strict=True):
        assert f.answer_start == len(prompt)
        assert f.token_ids.tolist()[: len(prompt)] == prompt
        n = len(f.token_ids)
        torch.testing.assert_close(f.aux[: n - 1], g.aux[: n - 1], atol=1e-4, rtol=1e-3)
        # The target's argmax at every position but the last (after the prompt's last token
        # and each answer token: the next answer token).
        assert f.greedy[: n - 1].tolist() == g.greedy[: n - 1].tolist()
        assert f.greedy[len(prompt) - 1 : n - 1].tolist() == f.token_ids[len(prompt) :].tolist()
        assert f.greedy[n - 1] == -1 and (f.aux[n - 1] == 0).all()


def _feats(tokens, greedy, answer_start):
    n = len(tokens)
    return SequenceFeatures(torch.tensor(tokens), torch.arange(n * 6, dtype=torch.float32)
                            .reshape(n, 6), torch.tensor(greedy), answer_start)  # fmt: skip


def test_batch_rows_read_the_next_token_and_learn_the_answer_only():
    f = _feats([10, 11, 12, 13, 14, 15], [11, 12, 13, 14, 15, -1], answer_start=3)
    batch = make_batch([f], [0], steps=2, to_draft=None)
    # Step 0, row i reads token i + 1 and learns greedy[i + 1] where it predicts the answer.
    assert batch.inputs[0][0].tolist() == [11, 12, 13, 14, 15, 0]
    assert batch.labels[0][0].tolist() == [-100, 13, 14, 15, -100, -100]
    # Step 1 reads token i + 2 and learns greedy[i + 2].
    assert batch.inputs[1][0].tolist() == [12, 13, 14, 15, 0, 0]
    assert batch.labels[1][0].tolist() == [13, 14, 15, -100, -100, -100]
    pruned = make_batch([f], [0], steps=1, to_draft=torch.tensor([-1] * 13 + [0, 1, -1]))
    assert pruned.labels[0][0].tolist() == [-100, 0, 1, -100, -100, -100]
    # learn_prompts: the prompt's rows learn the target's argmax there too.
    everywhere = make_batch([f], [0], steps=1, to_draft=None, learn_prompts=True)
    assert everywhere.labels[0][0].tolist() == [12, 13, 14, 15, -100, -100]


def test_draft_vocabulary_counts_answer_tokens_most_frequent_first():
    feats = [_feats([1, 2, 3, 4], [5, 7, 7, 9], 1), _feats([1, 2], [8, 7], 1)]
    assert draft_vocabulary(feats, 2) == [5, 7]  # 7 three times, then 5, 8, 9 once: lowest id
    assert draft_vocabulary(feats, 6) == [0, 1, 5, 7, 8, 9]  # filled with the lowest other ids


def test_held_out_split_is_seeded_and_disjoint():
    train, held = split_held_out(20, 0.1, seed=3)
    assert len(held) == 2 and not set(train) & set(held) and len(train) + len(held) == 20
    assert split_held_out(20, 0.1, seed=3) == (train, held)
    assert split_held_out(5, 0.0, seed=3) == ([0, 1, 2, 3, 4], [])


def test_a_trained_head_learns_and_saves_in_vllms_layout(tiny_target, tmp_path):
    prompts = [[i, i + 1, i + 2] for i in range(1, 40, 3)]
    shape = shape_for_target(tiny_target.config, draft_vocab_size=16, intermediate_size=48)
    feats = answer_with_features(tiny_target, prompts, 12, set(), shape.aux_layers,
                                 batch_size=8, show_progress=False)  # fmt: skip
    embed = tiny_target.get_input_embeddings().weight.detach()
    lm_head = tiny_target.get_output_embeddings().weight.detach()
    params = TrainParams(epochs=8, lr=3e-3, warmup_steps=2, tokens_per_batch=64, held_out=0.0,
                         loss_fraction=1.0)  # fmt: skip
    result = train_head(feats, shape, embed, lm_head, params, draft_vocab=16, show_progress=False)
    losses = [r.loss for r in result.reports]
    assert losses[-1] < 0.7 * losses[0]
    out = save_head(tmp_path / "head", result.head, kept_ids=result.kept_ids, lm_head=lm_head,
                    dtype=torch.bfloat16, record={"seed": 0})  # fmt: skip
    assert (out / "model.safetensors").stat().st_mode & 0o044 == 0o044  # readable by an engine user
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["draft_vocab_size"] == 16 and config["vocab_size"] == 64
    assert config["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    tensors = load_file(str(out / "model.safetensors"))
    assert tensors["fc.weight"].shape == (32, 96)
    assert tensors["midlayer.self_attn.q_proj.weight"].shape == (32, 64)
    assert tensors["lm_head.weight"].shape == (16, 32) and "embed_tokens.weight" not in tensors
    kept = result.kept_ids
    assert (tensors["d2t"] + torch.arange(16)).tolist() == kept
    assert tensors["t2d"].sum() == 16 and tensors["t2d"][kept].all()
    head, kept_back, rows = load_head(out)
    assert kept_back == kept and isinstance(head, Eagle3Head)
    torch.testing.assert_close(rows, lm_head[kept].to(torch.bfloat16).float())


def test_a_full_vocabulary_head_stores_no_lm_head(tiny_target, tmp_path):
    shape = shape_for_target(tiny_target.config, intermediate_size=16)
    out = save_head(tmp_path / "full", Eagle3Head(shape), kept_ids=None, lm_head=None,
                    dtype=torch.float32, record={})  # fmt: skip
    stored = set(load_file(str(out / "model.safetensors")))
    assert stored == set(Eagle3Head(shape).state_dict())
    assert not {"lm_head.weight", "d2t", "t2d"} & stored
    with pytest.raises(ValueError, match="is not an EAGLE-3 head"):
        load_head(tmp_path)
