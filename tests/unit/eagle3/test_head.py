"""The EAGLE-3 head: the unrolled pass equals drafting step by step with a KV cache."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

from speedbench.eagle3.chains import chain_drafts, chain_matches, step_accuracy
from speedbench.eagle3.features import SequenceFeatures
from speedbench.eagle3.head import Eagle3Head, HeadShape, default_aux_layers
from speedbench.oracle.steps import chain_stream

SHAPE = HeadShape(
    hidden_size=32,
    intermediate_size=48,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    max_position_embeddings=256,
    vocab_size=50,
    draft_vocab_size=50,
    aux_layers=(2, 4, 5),
)


def _head(seed: int = 0) -> Eagle3Head:
    head = Eagle3Head(SHAPE)
    head.init_weights(seed, std=0.2)
    return head.eval()


def _attend(head: Eagle3Head, q, keys, values):
    groups = SHAPE.num_attention_heads // SHAPE.num_key_value_heads
    k = torch.stack(keys, dim=-2).repeat_interleave(groups, dim=0)  # [heads, n, d]
    v = torch.stack(values, dim=-2).repeat_interleave(groups, dim=0)
    scores = (q[:, None, :] * k).sum(-1) / math.sqrt(SHAPE.head_dim)
    return (scores.softmax(-1)[..., None] * v).sum(-2)  # [heads, d]


def _step(head: Eagle3Head, emb, hidden, pos, cache_k, cache_v):
    """One token of vLLM's drafter: append its K/V to the cache, attend, return outputs."""
    q, k, v, residual = head._qkv(emb[None, None], hidden[None, None], torch.tensor([[pos]]))
    cache_k.append(k[0, :, 0])
    cache_v.append(v[0, :, 0])
    attended = _attend(head, q[0, :, 0], cache_k, cache_v)
    normed, prenorm = head._finish(attended[None, :, None], residual)
    return normed[0, 0], prenorm[0, 0]


def test_unrolled_pass_equals_drafting_step_by_step():
    """Every chain of the unrolled pass is what a KV-cached drafter computes at that chain."""
    torch.manual_seed(0)
    head = _head()
    n, steps = 7, 3
    aux = torch.randn(n, 3 * SHAPE.hidden_size)
    embeds = torch.randn(n + steps, SHAPE.hidden_size)
    unrolled = head.unrolled(
        [embeds[1 + j : 1 + j + n][None] for j in range(steps)], aux[None], torch.arange(n)[None]
    )
    for i in range(n):
        # The drafter's cache after a verification: step-0 entries of positions 0..i.
        cache_k: list[torch.Tensor] = []
        cache_v: list[torch.Tensor] = []
        hidden = None
        for p in range(i + 1):
            out, hidden = _step(head, embeds[p + 1], head.combine(aux[p]), p, cache_k, cache_v)
        torch.testing.assert_close(out, unrolled[0][0, i], atol=1e-5, rtol=1e-4)
        for j in range(1, steps):
            out, hidden = _step(head, embeds[i + 1 + j], hidden, i + j, cache_k, cache_v)
            torch.testing.assert_close(out, unrolled[j][0, i], atol=1e-5, rtol=1e-4)


def test_rms_norm_and_residuals_follow_vllm():
    """Step 0 by hand: normed embedding first, un-normed hidden state as the residual."""
    torch.manual_seed(1)
    head = _head(3)
    aux = torch.randn(1, 1, 3 * SHAPE.hidden_size)
    emb = torch.randn(1, 1, SHAPE.hidden_size)
    (out,) = head.unrolled([emb], aux, torch.zeros(1, 1, dtype=torch.long))
    layer = head.midlayer

    def rms(x, w):
        return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + SHAPE.rms_norm_eps)

    hidden = aux[0, 0] @ head.fc.weight.T
    x = torch.cat(
        [rms(emb[0, 0], layer.input_layernorm.weight), rms(hidden, layer.hidden_norm.weight)]
    )
    v = x @ layer.self_attn.v_proj.weight.T  # one position: attention returns its own value
    v = v.view(SHAPE.num_key_value_heads, -1).repeat_interleave(2, dim=0).reshape(-1)
    residual = v @ layer.self_attn.o_proj.weight.T + hidden
    h = rms(residual, layer.post_attention_layernorm.weight)
    mlp = layer.mlp
    h = (F.silu(h @ mlp.gate_proj.weight.T) * (h @ mlp.up_proj.weight.T)) @ mlp.down_proj.weight.T
    expected = rms(h + residual, head.norm.weight)
    torch.testing.assert_close(out[0, 0], expected, atol=1e-5, rtol=1e-4)


def test_a_head_started_from_the_target_reads_its_top_layer_through_its_final_norm():
    head = Eagle3Head(SHAPE)
    final_norm = torch.linspace(0.5, 1.5, SHAPE.hidden_size)
    head.init_from_target(0, final_norm)
    torch.manual_seed(4)
    aux = torch.randn(1, 3, 3 * SHAPE.hidden_size)
    embeds = [torch.randn(1, 3, SHAPE.hidden_size) for _ in range(2)]
    top = aux[..., -SHAPE.hidden_size :]
    expected = final_norm * top * torch.rsqrt(top.pow(2).mean(-1, keepdim=True) + 1e-6)
    step0, step1 = head.eval().unrolled(embeds, aux, torch.arange(3)[None])
    torch.testing.assert_close(step0, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(step1, expected, atol=1e-5, rtol=1e-4)  # its own output back


def test_default_aux_layers_are_vllms():
    assert default_aux_layers(28) == (2, 14, 25)
    assert default_aux_layers(24) == (2, 12, 21)


def _features(tokens: list[int], answer_start: int) -> SequenceFeatures:
    torch.manual_seed(2)
    n = len(tokens)
    return SequenceFeatures(
        token_ids=torch.tensor(tokens),
        aux=torch.randn(n, 3 * SHAPE.hidden_size),
        greedy=torch.tensor([*tokens[1:], 0]),
        answer_start=answer_start,
    )


def test_chain_drafts_map_pruned_ids_and_mark_missing_rows():
    head = _head()
    embed = torch.randn(SHAPE.vocab_size, SHAPE.hidden_size)
    feats = _features([1, 2, 3, 4, 5, 6], answer_start=3)
    kept = [0, 7, 11, 20, 42]
    lm_head = torch.randn(len(kept), SHAPE.hidden_size)
    drafts = chain_drafts(head, embed, lm_head, kept, feats, steps=3)
    assert drafts.shape == (3, 6)
    # Row i of step j reads the token at i + 1 + j: rows 5, 4.., 3.. have none.
    assert drafts[0, 5] == -1 and drafts[1, 4] == -1 and drafts[2, 3] == -1
    assert set(drafts[drafts >= 0].tolist()) <= set(kept)
    full = chain_drafts(head, embed, torch.randn(SHAPE.vocab_size, SHAPE.hidden_size), None,
                        feats, steps=2)  # fmt: skip
    assert full.shape == (2, 6) and full[0, 5] == -1 and full[1, 4] == -1
    assert ((full[0, :5] >= 0) & (full[0, :5] < SHAPE.vocab_size)).all()


def test_chain_matches_align_answer_positions():
    """The chain at answer position p is row answer_start + p - 2, step j checks answer[p + j]."""
    drafts = torch.full((2, 8), -1)
    answer_start, answer = 3, [10, 11, 12, 13, 14]
    # Row 2 (p = 1): step 0 drafts answer[1] right, step 1 drafts answer[2] wrong.
    drafts[0, 2], drafts[1, 2] = 11, 99
    # Row 3 (p = 2): both right.
    drafts[0, 3], drafts[1, 3] = 12, 13
    chains = chain_matches(drafts, answer_start, answer)
    assert chains[0] == []
    assert chains[1] == [True, False]
    assert chains[2] == [True, True]
    assert chains[4] == [False]  # the answer ends after one more token
    # k = 2: prefill 1; p = 1 accepts 1 (emits 2); p = 3 accepts 0 (emits 1); p = 4 emits 1.
    assert chain_stream(chains, 2).chunks == [1, 2, 1, 1]
    assert chain_stream(chains, 2).accepted == [1, 0, 0]
    assert step_accuracy([chains], 2) == pytest.approx([2 / 4, 1 / 2])
