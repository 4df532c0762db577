"""Write and read an EAGLE-3 head in the checkpoint layout vLLM loads.

The layout is EAGLE-3's own (the one vLLM's ``Eagle3LlamaForCausalLM.load_weights`` reads,
vLLM 0.32 ``model_executor/models/llama_eagle3.py``): ``config.json`` a Llama config with
``architectures: ["LlamaForCausalLMEagle3"]``, ``num_hidden_layers: 1``, ``draft_vocab_size``
and the target's feature layers (``eagle_aux_hidden_state_layer_ids``), and one
``model.safetensors`` holding ``fc.weight``, ``midlayer.*`` and ``norm.weight``. A pruned head
adds ``lm_head.weight`` (its vocabulary's rows), ``d2t`` (draft id -> target id offset: vLLM
adds it to the draft id) and ``t2d`` (a mask over the target's vocabulary). A full-vocabulary
head stores no LM head and no embedding, and vLLM shares the target's (its
``_maybe_share_lm_head`` / ``_maybe_share_embeddings``).

``head.json`` beside them records how the head was made (speedbench's own: vLLM ignores it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from speedbench.eagle3.head import Eagle3Head, HeadShape
from speedbench.provision.models import make_world_readable

WEIGHTS_FILE = "model.safetensors"
RECORD_FILE = "head.json"


def draft_config(shape: HeadShape, dtype: str) -> dict[str, Any]:
    """The head's ``config.json``."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "head_dim": shape.head_dim,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": shape.rms_norm_eps,
        "rope_theta": shape.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": shape.rope_theta},
        "max_position_embeddings": shape.max_position_embeddings,
        "vocab_size": shape.vocab_size,
        "draft_vocab_size": shape.draft_vocab_size,
        "target_hidden_size": shape.hidden_size,
        "eagle_aux_hidden_state_layer_ids": list(shape.aux_layers),
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": list(shape.aux_layers),
            "use_aux_hidden_state": True,
        },
        "attention_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
    }


def save_head(
    out_dir: Path,
    head: Eagle3Head,
    *,
    kept_ids: Sequence[int] | None,
    lm_head: torch.Tensor | None,
    dtype: torch.dtype,
    record: dict[str, Any],
) -> Path:
    """Write the head into ``out_dir`` (replaced whole, never half-written); return it.

    ``lm_head`` is the target's LM head weight; only a pruned head (``kept_ids``) stores rows.
    """
    shape = head.shape
    tensors = {k: v.detach().to(dtype).contiguous() for k, v in head.state_dict().items()}
    if kept_ids is not None:
        if lm_head is None:
            raise ValueError("a pruned head needs the target's LM head to keep its rows of")
        ids = torch.tensor(list(kept_ids), dtype=torch.long)
        tensors["lm_head.weight"] = lm_head[ids].to(dtype).contiguous()
        tensors["d2t"] = ids - torch.arange(len(ids), dtype=torch.long)
        t2d = torch.zeros(shape.vocab_size, dtype=torch.bool)
        t2d[ids] = True
        tensors["t2d"] = t2d
    name = {torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float16: "float16"}[dtype]
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    if tmp.exists():
        for f in tmp.iterdir():
            f.unlink()
    tmp.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(tmp / WEIGHTS_FILE))
    (tmp / "config.json").write_text(json.dumps(draft_config(shape, name), indent=2) + "\n")
    (tmp / RECORD_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    make_world_readable(tmp)  # an engine in a container reads it as another user
    if out_dir.exists():
        for f in out_dir.iterdir():
            f.unlink()
        out_dir.rmdir()
    tmp.rename(out_dir)
    return out_dir


def load_head(path: Path) -> tuple[Eagle3Head, list[int] | None, torch.Tensor | None]:
    """A saved head (float32), its kept target ids (None: full vocabulary) and its LM head rows.

    Raises:
        ValueError: The folder is not an EAGLE-3 head written in this layout.
    """
    config_path = path / "config.json"
    weights_path = path / WEIGHTS_FILE
    if not config_path.exists() or not weights_path.exists():
        raise ValueError(f"{path} is not an EAGLE-3 head: it needs config.json and {WEIGHTS_FILE}")
    cfg = json.loads(config_path.read_text())
    if cfg.get("architectures") != ["LlamaForCausalLMEagle3"]:
        raise ValueError(f"{config_path}: architectures {cfg.get('architectures')} is not EAGLE-3")
    shape = HeadShape(
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_key_value_heads"],
        rms_norm_eps=cfg["rms_norm_eps"],
        rope_theta=cfg["rope_theta"],
        max_position_embeddings=cfg["max_position_embeddings"],
        vocab_size=cfg["vocab_size"],
        draft_vocab_size=cfg["draft_vocab_size"],
        aux_layers=tuple(cfg["eagle_aux_hidden_state_layer_ids"]),
    )
    tensors = load_file(str(weights_path))
    head = Eagle3Head(shape)
    own = {
        k: v.float() for k, v in tensors.items() if k.split(".")[0] in {"fc", "midlayer", "norm"}
    }
    head.load_state_dict(own)
    kept = None
    rows = None
    if "d2t" in tensors:
        d2t = tensors["d2t"].long()
        kept = (d2t + torch.arange(len(d2t))).tolist()
        rows = tensors["lm_head.weight"].float()
    return head, kept, rows
