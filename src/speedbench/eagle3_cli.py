"""``speedbench eagle3 train``: EAGLE-3 heads for the target, trained on this machine.

Argument parsing and printing live here, the work in :mod:`speedbench.eagle3.pipeline`;
:mod:`speedbench.cli` adds the subcommand to its own.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from speedbench.config import ConfigError, load_config, load_params
from speedbench.provision.models import resolve_dtype, resolve_model
from speedbench.provision.pypi import CACHE_ROOT


def _train(args: argparse.Namespace) -> None:
    import pandas as pd

    from speedbench.data.qualitative import QualitativeParams, read_candidates
    from speedbench.eagle3.pipeline import Eagle3Params, train_heads
    from speedbench.tokenize import PromptTokenizer

    raw = load_params(args.params)
    section: dict[str, Any] = dict(raw.get("eagle3") or {})
    if args.prompts_per_category is not None:
        section["prompts_per_category"] = args.prompts_per_category
    if args.epochs is not None:
        section["train"] = {**dict(section.get("train") or {}), "epochs": args.epochs}
    params = load_config(Eagle3Params, section)
    models = raw.get("models") or {}
    target = models.get("target")
    if not target:
        raise ConfigError(f"{args.params}: models.target is not set (the head's target)")
    dtype = resolve_dtype(models.get("dtype", "auto"))
    target_path = resolve_model(target, dtype=dtype)
    split = Path(args.split)
    if not split.exists():
        raise ConfigError(f"{split}: no such split (build it first: speedbench build-qualitative)")
    exclude = set(pd.read_parquet(split, columns=["question_id"])["question_id"].astype(str))
    qual = load_config(QualitativeParams, dict(raw.get("qualitative") or {}))
    problems: list[str] = []
    candidates = read_candidates(qual, problems)
    report = train_heads(
        params,
        target_name=target,
        target_path=target_path,
        dtype=dtype,
        candidates=candidates,
        exclude_ids=exclude,
        tokenizer=PromptTokenizer.from_pretrained(target_path),
        out_dir=Path(args.out),
        cache_dir=Path(args.cache) if args.cache else CACHE_ROOT / "eagle3",
        show_progress=not args.quiet,
    )
    print(json.dumps({n: {k: h[k] for k in ("parameters", "train_seconds", "held_out_chain_al")}
                      for n, h in report["heads"].items()}, indent=2))  # fmt: skip
    print(f"heads: {Path(args.out).resolve()}  ({report['seconds']:.0f} s)")


def add_eagle3_commands(sub: Any) -> None:
    """Add ``eagle3`` and its subcommands to the CLI's subparsers."""
    e = sub.add_parser("eagle3", help="EAGLE-3 heads for the target, trained on this machine")
    esub = e.add_subparsers(dest="eagle3_command", required=True)
    t = esub.add_parser(
        "train",
        help="train the heads of params.yaml's eagle3: section on the target's own answers",
        description="Draws training prompts from the qualitative sources outside --split, "
        "answers them with the target (greedy), extracts the target's features and trains "
        "every head of eagle3.heads; writes each as vLLM loads it and train.json.",
    )
    t.add_argument("--params", default="params.yaml", help="models: and eagle3: are read")
    t.add_argument("--split", default="data/qualitative/qualitative.parquet",
                   help="the measured split: its questions are never trained on")  # fmt: skip
    t.add_argument("--out", default="data/eagle3", help="where the heads and train.json go")
    t.add_argument("--cache", default=None, help="answers and features cache")
    t.add_argument("--prompts-per-category", type=int, default=None)
    t.add_argument("--epochs", type=int, default=None)
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.set_defaults(func=_train)
