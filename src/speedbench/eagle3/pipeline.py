"""``speedbench eagle3 train``: prompts -> the target's answers -> features -> heads -> report.

One command trains every head of ``eagle3.heads`` (a full-vocabulary head and pruned ones) for
the target of ``models.target`` from the same answers and features, and writes each as vLLM
loads it (:mod:`speedbench.eagle3.export`) with a ``train.json`` report: the prompts and tokens
it learnt from, each phase's wall time, the head's size, the loss per epoch, and on held-out
conversations each draft step's accuracy and the chain oracle's acceptance length for
k = 1..``eval_max_k`` (SPEED-Bench's Average_AL rule: per conversation, tokens over steps with
the prefill's single token counted as a step; then the mean over conversations).
"""

from __future__ import annotations

import json
import logging
import platform
import time
from pathlib import Path
from typing import Any

import torch
from pydantic import Field

from speedbench.config import StrictModel
from speedbench.data.prompts import PromptRow
from speedbench.eagle3.chains import chain_drafts, chain_matches, step_accuracy
from speedbench.eagle3.data import cached_answers, training_prompts
from speedbench.eagle3.export import save_head
from speedbench.eagle3.features import SequenceFeatures, load_target
from speedbench.eagle3.head import Eagle3Head, shape_for_target
from speedbench.eagle3.train import TrainParams, TrainResult, train_head
from speedbench.oracle.steps import chain_stream

log = logging.getLogger(__name__)

TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


class HeadSpec(StrictModel):
    """One head to train."""

    name: str = Field(min_length=1, description="Folder name of the head under the output.")
    draft_vocab: int | None = Field(
        None, ge=2, description="Draft vocabulary size (EAGLE-3 pruning); unset: the target's."
    )


class Eagle3Params(StrictModel):
    """``eagle3:`` in params.yaml: the heads trained for the target and what they learn from."""

    prompts_per_category: int = Field(
        40, ge=1, description="Training prompts per category, none of them in the split."
    )
    answer_len: int = Field(96, ge=1, description="Tokens of the target's answer per prompt.")
    answer_batch_size: int = Field(32, ge=1, description="Prompts answered at once.")
    seed: int = Field(0, description="Seeds the prompt draw (training has its own seed).")
    heads: list[HeadSpec] = Field(
        default_factory=lambda: [HeadSpec(name="full"), HeadSpec(name="pruned-32k",
                                                                 draft_vocab=32768)],
        min_length=1,
        description="Heads to train from the same answers.",
    )  # fmt: skip
    train: TrainParams = Field(default_factory=TrainParams, description="Training knobs.")
    eval_max_k: int = Field(6, ge=1, le=8, description="Held-out chain AL for k = 1..this.")


def mean_al(chains: list[list[list[bool]]], k: int) -> float:
    """Average_AL (speed_bench rule) of the chain oracle's streams at ``k``."""
    per_question = []
    for request in chains:
        stream = chain_stream(request, k)
        if stream.chunks:
            per_question.append(sum(stream.chunks) / len(stream.chunks))
    return sum(per_question) / len(per_question) if per_question else 0.0


def held_out_figures(
    head: Eagle3Head,
    embed: torch.Tensor,
    lm_head: torch.Tensor,
    kept_ids: list[int] | None,
    feats: list[SequenceFeatures],
    max_k: int,
) -> tuple[list[float], dict[int, float]]:
    """Each draft step's conditional accuracy and the chain AL at k = 1..max_k."""
    head.eval()
    chains = []
    for f in feats:
        drafts = chain_drafts(head, embed, lm_head, kept_ids, f, max_k)
        chains.append(chain_matches(drafts, f.answer_start, f.token_ids[f.answer_start :].tolist()))
    head.train()
    return step_accuracy(chains, max_k), {k: round(mean_al(chains, k), 4) for k in
                                          range(1, max_k + 1)}  # fmt: skip


def train_heads(
    params: Eagle3Params,
    *,
    target_name: str,
    target_path: str,
    dtype: str,
    candidates: list[PromptRow],
    exclude_ids: set[str],
    tokenizer: Any,
    out_dir: Path,
    cache_dir: Path,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Train every head of ``params``; write them and ``train.json`` under ``out_dir``."""
    started = time.perf_counter()
    torch_dtype = TORCH_DTYPES[dtype]
    rows = training_prompts(candidates, exclude_ids, params.prompts_per_category, params.seed)
    prompts = [tokenizer.encode_turn(r.turns[:1]) for r in rows]
    model = load_target(target_path, torch_dtype)
    aux_layers = shape_for_target(model.config).aux_layers
    feats, answer_s = cached_answers(
        cache_dir, target_name, model, prompts, params.answer_len, set(tokenizer.stop_ids),
        aux_layers, batch_size=params.answer_batch_size, show_progress=show_progress,
    )  # fmt: skip
    embed = model.get_input_embeddings().weight.detach().clone()
    lm_head = model.get_output_embeddings().weight.detach().clone()
    final_norm = model.get_decoder().norm.weight.detach().clone()
    config = model.config
    del model
    report: dict[str, Any] = {
        "target": target_name,
        "dtype": dtype,
        "host": {"machine": platform.machine(), "processor": _cpu_model()},
        "prompts": len(rows),
        "prompts_per_category": params.prompts_per_category,
        "conversations": len(feats),
        "answer_tokens": sum(len(f.token_ids) - f.answer_start for f in feats),
        "sequence_tokens": sum(len(f.token_ids) for f in feats),
        "answers_and_features_seconds": round(answer_s, 1),
        "params": params.model_dump(),
        "heads": {},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    for spec in params.heads:
        shape = shape_for_target(
            config, draft_vocab_size=spec.draft_vocab,
            intermediate_size=params.train.intermediate_size,
        )  # fmt: skip

        result = train_head(
            feats, shape, embed, lm_head, params.train, draft_vocab=spec.draft_vocab,
            final_norm=final_norm, compute_dtype=torch_dtype, show_progress=show_progress,
        )  # fmt: skip
        figures = _final_figures(result, embed, lm_head, feats, params)
        record = _head_record(spec, result, figures, report)
        save_head(out_dir / spec.name, result.head, kept_ids=result.kept_ids, lm_head=lm_head,
                  dtype=torch_dtype, record=record)  # fmt: skip
        report["heads"][spec.name] = record
        log.info("eagle3 head %s: held-out chain AL %s", spec.name, figures[1])
    report["seconds"] = round(time.perf_counter() - started, 1)
    (out_dir / "train.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return report


def _final_figures(
    result: TrainResult,
    embed: torch.Tensor,
    lm_head: torch.Tensor,
    feats: list[SequenceFeatures],
    params: Eagle3Params,
) -> tuple[list[float], dict[int, float]]:
    from speedbench.eagle3.train import split_held_out

    _, held = split_held_out(len(feats), params.train.held_out, params.train.seed)
    if not held:
        return [], {}
    kept = result.kept_ids
    weight = lm_head if kept is None else lm_head[torch.tensor(kept)]
    return held_out_figures(result.head, embed, weight, kept, [feats[i] for i in held],
                            params.eval_max_k)  # fmt: skip


def _head_record(
    spec: HeadSpec,
    result: TrainResult,
    figures: tuple[list[float], dict[int, float]],
    report: dict[str, Any],
) -> dict[str, Any]:
    return {
        "name": spec.name,
        "target": report["target"],
        "draft_vocab": spec.draft_vocab,
        "parameters": result.parameters,
        "train_seconds": round(result.seconds, 1),
        "train_sequences": result.train_sequences,
        "held_out_sequences": result.held_out_sequences,
        "train_tokens": result.train_tokens,
        "epochs": [
            {"epoch": r.epoch, "loss": round(r.loss, 4), "seconds": round(r.seconds, 1)}
            for r in result.reports
        ],
        "held_out_step_accuracy": [round(a, 4) for a in figures[0]],
        "held_out_chain_al": {str(k): v for k, v in figures[1].items()},
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
