"""WritingBench requests and tau2-bench customer scenarios, from the inspect-evals wheel.

WritingBench holds 1,000 real writing requests over six domains, 555 in English and 445 in
Chinese, many with reference material pasted in; the English ones feed writing, the Chinese
ones multilingual. tau2-bench's airline, retail and banking tasks each describe a customer (who
they are, why they call, what they will and will not accept): the model plays that customer,
which is the roleplay category's task.
"""

from __future__ import annotations

import json
import re
from typing import Any

from speedbench.data.sources.base import RawRows, register_source
from speedbench.provision.pypi import packaged_file

WHEEL = ("inspect-evals", "0.28.0")
WRITINGBENCH = "inspect_evals/writingbench/benchmark_all.jsonl"
TAU2_DOMAINS = ("airline", "retail", "banking_knowledge")
ORIGIN = f"{WHEEL[0]} {WHEEL[1]}: "
# Requests with long pasted material run to 10,000 characters; a prompt stays a few hundred
# to a thousand tokens on a CPU host by taking the requests up to this length.
MAX_REQUEST_CHARS = 3000
_HAN = re.compile(r"[\u4e00-\u9fff]")


def _member(path: str) -> bytes:
    return packaged_file(WHEEL, re.escape(path) + "$")


def writingbench_requests() -> list[dict[str, Any]]:
    """Every request: index, domain1, domain2, query."""
    return [json.loads(x) for x in _member(WRITINGBENCH).decode("utf-8").splitlines() if x.strip()]


def is_chinese(text: str) -> bool:
    """More than 20 Han characters: WritingBench's Chinese half."""
    return len(_HAN.findall(text)) > 20


def _writing_rows(chinese: bool) -> RawRows:
    for r in writingbench_requests():
        query = r.get("query")
        if isinstance(query, str) and (
            len(query) > MAX_REQUEST_CHARS or is_chinese(query) != chinese
        ):
            continue
        domain = re.sub(r"\W+", "_", str(r.get("domain2", "")).lower()).strip("_")
        yield (
            f"writingbench-{r.get('index')}",
            {
                "category": "multilingual" if chinese else "writing",
                "sub_category": f"zh_{domain}" if chinese else domain,
                "turns": [query] if isinstance(query, str) else query,
            },
        )


@register_source("writingbench_en", ("writing",), ORIGIN + WRITINGBENCH)
def writingbench_english_rows() -> RawRows:
    """The English requests up to MAX_REQUEST_CHARS."""
    yield from _writing_rows(chinese=False)


@register_source("writingbench_zh", ("multilingual",), ORIGIN + WRITINGBENCH)
def writingbench_chinese_rows() -> RawRows:
    """The Chinese requests up to MAX_REQUEST_CHARS."""
    yield from _writing_rows(chinese=True)


def _scenario(task: dict[str, Any]) -> str | None:
    instructions = (task.get("user_scenario") or {}).get("instructions") or {}
    if isinstance(instructions, str):  # the banking tasks write the scenario as one text
        return instructions.strip() or None
    if not isinstance(instructions, dict):
        return None
    parts = [
        instructions.get(key)
        for key in ("known_info", "reason_for_call", "task_instructions", "unknown_info")
    ]
    text = "\n\n".join(p.strip() for p in parts if isinstance(p, str) and p.strip())
    return text or None


@register_source(
    "tau2_customers",
    ("roleplay",),
    ORIGIN + "inspect_evals/tau2/data/domains/{airline,retail,banking_knowledge}/tasks.json",
)
def tau2_rows() -> RawRows:
    """The model opens a support call as the customer its task describes."""
    for domain in TAU2_DOMAINS:
        tasks = json.loads(_member(f"inspect_evals/tau2/data/domains/{domain}/tasks.json"))
        for task in tasks:
            scenario = _scenario(task)
            yield (
                f"tau2-{domain}-{task.get('id')}",
                {
                    "category": "roleplay",
                    "sub_category": f"customer_{domain.split('_')[0]}",
                    "turns": [
                        f"Play the customer described below, calling a {domain.split('_')[0]} "
                        "company's support line. Stay in character: say only what this customer "
                        "would say, in their voice. Open the call with your first message to the "
                        f"agent.\n\n{scenario}"
                    ]
                    if scenario
                    else [],
                },
            )
