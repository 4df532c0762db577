"""Build the qualitative split: per category, a diverse pick of real prompts.

Pipeline: read every registered source (bad rows reported, skipped or fatal by policy) -> drop
duplicate prompts -> draw a seeded pool per category, balanced across its sources -> embed the
pool (cached) -> pick ``k`` per category greedily for low mean pairwise cosine -> write the split
(Parquet, SPEED-Bench schema) and a diversity report that compares each pick with random picks.

Greedy picking is prefix-stable: the first ``k`` of a larger pick are exactly the pick of size
``k``, so a small quick subset is itself diversity-selected and nested in the full split.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from speedbench.config import StrictModel
from speedbench.data.diversity import greedy_diverse, mean_pairwise_cosine, random_pick_cosine
from speedbench.data.embed import DEFAULT_EMBEDDER, embed_texts
from speedbench.data.prompts import PromptRow
from speedbench.data.sources import CATEGORIES, SOURCES, SourceError, collect, get_source
from speedbench.data.sources.base import Category

SPLIT_COLUMNS = [
    "question_id",
    "category",
    "sub_category",
    "turns",
    "source",
    "src_id",
    "difficulty",
    "multiturn",
]


class QualitativeParams(StrictModel):
    """Knobs of the qualitative split (``qualitative:`` in params.yaml)."""

    categories: list[Category] = Field(
        default_factory=lambda: list(CATEGORIES), min_length=1, description="Categories to build."
    )
    k: int = Field(80, ge=1, description="Prompts picked per category (SPEED-Bench: 80).")
    pool_size: int = Field(
        400, ge=2, description="Candidates per category, balanced across sources, before picking."
    )
    seed: int = Field(0, description="Seed of the pool draw and of the random baseline.")
    embedder: str = Field(
        DEFAULT_EMBEDDER, description="sentence-transformers model name or path for embeddings."
    )
    sources: list[str] | None = Field(
        None, description="Registered sources to draw from; all of them when unset."
    )
    on_bad_row: Literal["skip", "fail"] = Field(
        "skip", description="A malformed source row is reported and skipped, or fails the build."
    )
    random_draws: int = Field(100, ge=1, description="Random picks averaged for the baseline.")

    @model_validator(mode="after")
    def _pool_holds_k(self) -> QualitativeParams:
        # Said before any source is downloaded: a pool smaller than k can never be picked from.
        if self.pool_size < self.k:
            raise ValueError(
                f"pool_size={self.pool_size} is fewer than k={self.k}: each category picks k "
                "prompts out of its pool"
            )
        return self


def allocate(sizes: dict[str, int], total: int) -> dict[str, int]:
    """Split ``total`` slots across sources as evenly as their sizes allow (water-filling).

    Small sources are taken whole; what they leave goes to the larger ones. Remainders go to
    sources in name order, so the split is deterministic.
    """
    quota = dict.fromkeys(sizes, 0)
    left = min(total, sum(sizes.values()))
    open_ = sorted(sizes, key=lambda s: (sizes[s], s))
    while left > 0 and open_:
        share, extra = divmod(left, len(open_))
        smallest = open_[0]
        if sizes[smallest] - quota[smallest] <= share:
            left -= sizes[smallest] - quota[smallest]
            quota[smallest] = sizes[smallest]
            open_.pop(0)
            continue
        for i, name in enumerate(sorted(open_)):
            quota[name] += share + (1 if i < extra else 0)
        left = 0
    return quota


def draw_pools(rows: list[PromptRow], params: QualitativeParams) -> dict[str, list[PromptRow]]:
    """The seeded, source-balanced candidate pool of each category."""
    by_cat: dict[str, dict[str, list[PromptRow]]] = {}
    for r in rows:
        by_cat.setdefault(r.category, {}).setdefault(r.source, []).append(r)
    pools: dict[str, list[PromptRow]] = {}
    for cat in params.categories:
        per_source = by_cat.get(cat, {})
        quota = allocate({s: len(v) for s, v in per_source.items()}, params.pool_size)
        pool = []
        for src in sorted(per_source):
            rng = random.Random(f"{params.seed}/{cat}/{src}")
            pool += rng.sample(per_source[src], quota[src])
        pools[cat] = pool
    return pools


def read_candidates(params: QualitativeParams, problems: list[str]) -> list[PromptRow]:
    """Valid rows of the chosen sources, without duplicate prompts (first source wins)."""
    names = params.sources if params.sources is not None else sorted(SOURCES)
    seen: set[str] = set()
    out = []
    for name in names:
        for row in collect(get_source(name), params.on_bad_row, problems):
            if row.category in params.categories and row.question_id not in seen:
                seen.add(row.question_id)
                out.append(row)
    return out


def embedding_text(row: PromptRow) -> str:
    """What is embedded for a prompt: all of its user turns."""
    return "\n\n".join(row.turns)


def build_qualitative(
    params: QualitativeParams, out_dir: str | Path, progress: bool = True
) -> dict[str, Any]:
    """Build the split into ``out_dir``; return the diversity report (also written as JSON).

    Raises:
        SourceError: A source is unknown, a bad row under ``on_bad_row="fail"``, or a category
            with fewer candidates than ``k``.
    """
    start = time.perf_counter()
    out_dir = Path(out_dir)
    problems: list[str] = []
    rows = read_candidates(params, problems)
    pools = draw_pools(rows, params)
    for cat, pool in pools.items():
        if len(pool) < params.k:
            raise SourceError(
                f"category {cat} has {len(pool)} candidates, fewer than k={params.k}; "
                "lower k or add a source"
            )
    flat = [r for cat in params.categories for r in pools[cat]]
    emb = embed_texts([embedding_text(r) for r in flat], params.embedder, progress=progress)
    picked: list[PromptRow] = []
    report_rows = []
    offset = 0
    for cat in params.categories:
        pool = pools[cat]
        cat_emb = emb[offset : offset + len(pool)]
        offset += len(pool)
        order = greedy_diverse(cat_emb, params.k)
        picked += [pool[i] for i in order]
        report_rows.append(
            {
                "category": cat,
                "pool": len(pool),
                "k": len(order),
                "greedy_cosine": round(mean_pairwise_cosine(cat_emb[order]), 4),
                "random_cosine": round(
                    random_pick_cosine(cat_emb, len(order), params.random_draws, params.seed), 4
                ),
                "pool_sources": dict(sorted(Counter(r.source for r in pool).items())),
                "picked_sources": dict(sorted(Counter(pool[i].source for i in order).items())),
            }
        )
    write_split(picked, out_dir / "qualitative.parquet")
    report = {
        "params": params.model_dump(),
        "rows": len(picked),
        "categories": report_rows,
        "skipped_rows": problems,
        "build_seconds": round(time.perf_counter() - start, 1),
    }
    # The file omits the build time so that a rebuild reproduces it byte for byte.
    stable = {k: v for k, v in report.items() if k != "build_seconds"}
    (out_dir / "diversity_report.json").write_text(json.dumps(stable, indent=2) + "\n")
    (out_dir / "diversity_metrics.json").write_text(
        json.dumps(dvc_metrics(report), indent=2) + "\n"
    )
    return report


def write_split(rows: list[PromptRow], path: Path) -> Path:
    """Write prompts as Parquet with the SPEED-Bench columns, in order."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame([r.model_dump() for r in rows], columns=SPLIT_COLUMNS)
    tmp = path.with_suffix(".parquet.tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(path)
    return path


def format_report(report: dict[str, Any]) -> str:
    """The diversity report as a console table."""
    lines = [
        f"{'category':14s} {'pool':>5s} {'k':>4s} {'greedy cos':>10s} {'random cos':>10s}  sources",
    ]
    for r in report["categories"]:
        mix = ", ".join(f"{s}:{n}" for s, n in r["picked_sources"].items())
        lines.append(
            f"{r['category']:14s} {r['pool']:5d} {r['k']:4d} {r['greedy_cosine']:10.4f} "
            f"{r['random_cosine']:10.4f}  {mix}"
        )
    lines.append(f"{report['rows']} rows, {len(report['skipped_rows'])} bad source rows skipped")
    return "\n".join(lines)


def dvc_metrics(report: dict[str, Any]) -> dict[str, Any]:
    """The flat per-category numbers of a report, for ``dvc metrics show``."""
    return {
        r["category"]: {"greedy_cosine": r["greedy_cosine"], "random_cosine": r["random_cosine"]}
        for r in report["categories"]
    }
