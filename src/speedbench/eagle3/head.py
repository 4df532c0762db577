"""An EAGLE-3 draft head in torch, computing what vLLM's ``Eagle3LlamaForCausalLM`` computes.

EAGLE-3 (Li et al., 2025) drafts from the target's own features: the hidden states of three of
its layers (low, middle, high; vLLM's default for a target of L layers is 2, L // 2 and L - 3,
each the input of that layer) are concatenated and projected by ``fc`` to one hidden state.
One Llama decoder layer then reads that state beside the embedding of the token that follows
it and predicts the token after that. Each further draft step feeds the layer's own output
(before its final norm) back in place of the target's features.

The layer is vLLM's, term for term (vLLM 0.32, ``model_executor/models/llama_eagle3.py``):
the embedding goes through ``input_layernorm``, the hidden state through ``hidden_norm`` while
the un-normed state is the residual; the two are concatenated (embedding first) into the
attention's 2H-wide input; ``post_attention_layernorm`` adds the residual; the MLP follows;
the final ``norm`` adds the residual again, and its normed output feeds the LM head while its
sum is the next step's hidden state. The target's embedding table is shared (never stored in
the head); the LM head is the target's, or its rows of a pruned draft vocabulary.

Training unrolls the draft steps the way inference runs them ("training-time test"): draft step
j of the chain that starts at position i sits at position i + j and attends to the step-0
entries of positions 0..i (what the drafter's KV cache holds after a verification) and to its
own chain's entries of steps 1..j. :meth:`Eagle3Head.unrolled` computes every chain of a
sequence at once: a causal block for step 0 and one diagonal term per later step.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class HeadShape:
    """The head's dimensions, most of them the target's.

    Attributes:
        hidden_size: The target's hidden size (the head works at the same width).
        intermediate_size: The head's MLP width.
        num_attention_heads: Query heads (the target's).
        num_key_value_heads: Key/value heads (the target's).
        rms_norm_eps: The target's RMSNorm epsilon.
        rope_theta: The target's rotary base.
        max_position_embeddings: The target's context.
        vocab_size: The target's vocabulary.
        draft_vocab_size: Rows of the head's LM head (``vocab_size``: the full vocabulary).
        aux_layers: Target layers whose inputs the head reads, ascending.
    """

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    vocab_size: int
    draft_vocab_size: int
    aux_layers: tuple[int, ...]

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden_size // self.num_attention_heads

    def as_dict(self) -> dict[str, Any]:
        """JSON-able fields."""
        out = asdict(self)
        out["aux_layers"] = list(self.aux_layers)
        return out


def default_aux_layers(num_layers: int) -> tuple[int, int, int]:
    """VLLM's default EAGLE-3 feature layers of a target with ``num_layers`` layers."""
    return (2, num_layers // 2, num_layers - 3)


def shape_for_target(
    target_config: Any, *, draft_vocab_size: int | None = None, intermediate_size: int | None = None
) -> HeadShape:
    """The head's shape for a transformers target config (Qwen2, Llama and kin)."""
    rope = getattr(target_config, "rope_parameters", None) or {}
    theta = rope.get("rope_theta") or getattr(target_config, "rope_theta", None) or 10000.0
    vocab = int(target_config.vocab_size)
    return HeadShape(
        hidden_size=int(target_config.hidden_size),
        intermediate_size=int(intermediate_size or target_config.intermediate_size),
        num_attention_heads=int(target_config.num_attention_heads),
        num_key_value_heads=int(target_config.num_key_value_heads),
        rms_norm_eps=float(target_config.rms_norm_eps),
        rope_theta=float(theta),
        max_position_embeddings=int(target_config.max_position_embeddings),
        vocab_size=vocab,
        draft_vocab_size=int(draft_vocab_size or vocab),
        aux_layers=default_aux_layers(int(target_config.num_hidden_layers)),
    )


class RMSNorm(nn.Module):
    """Root-mean-square norm in float32, as Llama's and vLLM's."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise the last dimension."""
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * x32).to(dtype)


def rotary(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, ...]:
    """Cos and sin of the neox-style rotary embedding at ``positions`` (any shape)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = positions.float()[..., None] * inv_freq
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos(), emb.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply the rotary embedding (x: [..., head_dim])."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


class Attention(nn.Module):
    """The layer's projections: queries, keys and values read the 2H-wide input."""

    def __init__(self, shape: HeadShape) -> None:
        super().__init__()
        h, d = shape.hidden_size, shape.head_dim
        kv = shape.num_key_value_heads * d
        self.q_proj = nn.Linear(2 * h, shape.num_attention_heads * d, bias=False)
        self.k_proj = nn.Linear(2 * h, kv, bias=False)
        self.v_proj = nn.Linear(2 * h, kv, bias=False)
        self.o_proj = nn.Linear(shape.num_attention_heads * d, h, bias=False)


class MLP(nn.Module):
    """Llama's gated MLP."""

    def __init__(self, shape: HeadShape) -> None:
        super().__init__()
        h, m = shape.hidden_size, shape.intermediate_size
        self.gate_proj = nn.Linear(h, m, bias=False)
        self.up_proj = nn.Linear(h, m, bias=False)
        self.down_proj = nn.Linear(m, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """down(silu(gate(x)) * up(x))."""
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """The one decoder layer (``midlayer`` in the checkpoint)."""

    def __init__(self, shape: HeadShape) -> None:
        super().__init__()
        h = shape.hidden_size
        self.input_layernorm = RMSNorm(h, shape.rms_norm_eps)
        self.hidden_norm = RMSNorm(h, shape.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(h, shape.rms_norm_eps)
        self.self_attn = Attention(shape)
        self.mlp = MLP(shape)


class Eagle3Head(nn.Module):
    """The trainable part of an EAGLE-3 drafter: ``fc``, one decoder layer and its final norm.

    Parameter names are the EAGLE-3 checkpoint's (``fc``, ``midlayer.*``, ``norm``), so
    :mod:`speedbench.eagle3.export` writes the state dict as vLLM loads it. The embedding and
    LM head are the target's and stay frozen; they are passed in, not owned.
    """

    def __init__(self, shape: HeadShape) -> None:
        super().__init__()
        self.shape = shape
        h = shape.hidden_size
        self.fc = nn.Linear(len(shape.aux_layers) * h, h, bias=False)
        self.midlayer = DecoderLayer(shape)
        self.norm = RMSNorm(h, shape.rms_norm_eps)

    def init_weights(self, seed: int, std: float = 0.02) -> None:
        """Llama's initialisation (normal(0, std) linears, unit norms), from ``seed``."""
        gen = torch.Generator().manual_seed(seed)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                with torch.no_grad():
                    module.weight.copy_(torch.randn(module.weight.shape, generator=gen) * std)

    def init_from_target(self, seed: int, final_norm: torch.Tensor, std: float = 0.02) -> None:
        """Start as the identity on the target's top feature layer, in its output space.

        ``fc`` passes the last feature layer through (its other inputs start at zero), the
        attention's and the MLP's output projections start at zero (so the layer adds nothing
        until it learns to), and the final norm is the target's own: the untrained head's
        logits are the target's top layer read through the target's LM head, a prediction in
        the right space from the first step, instead of noise through a frozen vocabulary.
        """
        self.init_weights(seed, std)
        h = self.shape.hidden_size
        with torch.no_grad():
            self.fc.weight.zero_()
            self.fc.weight[:, -h:] = torch.eye(h)
            self.midlayer.self_attn.o_proj.weight.zero_()
            self.midlayer.mlp.down_proj.weight.zero_()
            self.norm.weight.copy_(final_norm.float())

    def combine(self, aux: torch.Tensor) -> torch.Tensor:
        """The target's concatenated layer features -> the head's hidden state (``fc``)."""
        return self.fc(aux)

    def _qkv(
        self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """Queries, keys, values ([B, heads, T, d], rotated) and the residual of one step."""
        layer = self.midlayer
        residual = hidden
        x = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(hidden)], dim=-1)
        b, t, _ = x.shape
        d = self.shape.head_dim
        q = layer.self_attn.q_proj(x).view(b, t, -1, d).transpose(1, 2)
        k = layer.self_attn.k_proj(x).view(b, t, -1, d).transpose(1, 2)
        v = layer.self_attn.v_proj(x).view(b, t, -1, d).transpose(1, 2)
        cos, sin = rotary(positions, d, self.shape.rope_theta)
        cos, sin = cos[:, None], sin[:, None]
        return rotate(q, cos, sin), rotate(k, cos, sin), v, residual

    def _finish(self, attended: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """o_proj, the MLP and the final norm: (normed output, next step's hidden state)."""
        layer = self.midlayer
        b, _, t, _ = attended.shape
        h = layer.self_attn.o_proj(attended.transpose(1, 2).reshape(b, t, -1))
        residual = h + residual
        h = layer.mlp(layer.post_attention_layernorm(residual))
        prenorm = h + residual
        return self.norm(prenorm), prenorm

    def unrolled(
        self, embeds: list[torch.Tensor], aux: torch.Tensor, positions: torch.Tensor
    ) -> list[torch.Tensor]:
        """Normed outputs of draft steps 0..len(embeds)-1 for every chain of the batch.

        Args:
            embeds: Per step j, ``[B, T, H]``: the embedding of the token step j reads at
                chain i (in training, the sequence's token at i + 1 + j).
            aux: ``[B, T, n_aux * H]``: the target's features at each position.
            positions: ``[B, T]``: each row's position (step j of chain i sits at i + j).

        Returns:
            Per step, ``[B, T, H]`` outputs whose LM-head argmax is step j's draft at chain i.
        """
        groups = self.shape.num_attention_heads // self.shape.num_key_value_heads
        scale = 1.0 / math.sqrt(self.shape.head_dim)
        hidden = self.combine(aux)
        t = aux.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        outs: list[torch.Tensor] = []
        for step, emb in enumerate(embeds):
            q, k, v, residual = self._qkv(emb, hidden, positions + step)
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
            keys.append(k)
            values.append(v)
            # Step 0's block: causal over the step-0 entries. Later steps: the same block plus
            # one score per earlier step of the chain (the diagonal: same row, steps 1..j).
            block = (q @ keys[0].transpose(-1, -2)).float() * scale
            block = block.masked_fill(~causal, float("-inf"))
            diag = [(q * keys[m]).sum(-1, keepdim=True).float() * scale for m in range(1, step + 1)]
            probs = torch.cat([block, *diag], dim=-1).softmax(dim=-1).to(q.dtype)
            attended = probs[..., :t] @ values[0]
            for m in range(1, step + 1):
                attended = attended + probs[..., t + m - 1 : t + m] * values[m]
            normed, hidden = self._finish(attended, residual)
            outs.append(normed)
        return outs


def parameter_count(module: nn.Module) -> int:
    """Trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
