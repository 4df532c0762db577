"""ChatRAG-Bench conversations and MMLU questions, from the nvidia-lm-eval wheel.

NVIDIA's packaged lm-evaluation-harness carries two real public data files: ChatRAG-Bench's
Doc2Dial part (3,939 turns of conversations about four US government sites, each with the
passage that grounds its answer, and the sites' 1,239 passages) and MMLU's chain-of-thought
exemplars (five real questions for each of the 57 subjects). The conversations feed the rag
category, their passages summarization, the questions stem, humanities and qa; the
conversations are also a throughput corpus (data/corpora.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

from speedbench.data.sources.base import RawRows, register_source
from speedbench.provision.pypi import packaged_file

WHEEL = ("nvidia-lm-eval", "26.3")
CHATRAG = "lm_eval/tasks/chatrag_bench/dataset/"
MMLU_COT = "lm_eval/tasks/mmlu/flan_cot_fewshot/_cot_prompts.json"
ORIGIN = f"{WHEEL[0]} {WHEEL[1]}: "


def _member(path: str) -> bytes:
    return packaged_file(WHEEL, re.escape(path) + "$")


def chatrag_passages() -> dict[str, list[str]]:
    """Site name (ssa, va, dmv, studentaid) -> its passages, in the file's order."""
    data: dict[str, list[str]] = json.loads(_member(CHATRAG + "documents.json"))
    return data


def chatrag_turns() -> list[dict[str, Any]]:
    """Every conversation turn: ``document``, ``messages`` so far, ``ground_truth_ctx``."""
    (turns,) = [
        json.loads(line)
        for line in _member(CHATRAG + "nvidia_dragon_multiturn_retrieved.jsonl")
        .decode("utf-8")
        .splitlines()
        if line.strip()
    ]
    rows: list[dict[str, Any]] = turns
    return rows


# Passages run to 13,000 characters; prompts are kept to this many so that a first-turn
# prompt stays under about a thousand tokens on a CPU host.
MAX_PROMPT_CHARS = 4000


@register_source("chatrag_doc2dial", ("rag",), ORIGIN + CHATRAG)
def chatrag_rows() -> RawRows:
    """A conversation's next answer, grounded in the passage the dataset marks for it."""
    passages = chatrag_passages()
    for i, turn in enumerate(chatrag_turns()):
        site, messages = turn.get("document"), turn.get("messages") or []
        ctx = turn.get("ground_truth_ctx")
        if site not in passages or not isinstance(ctx, int) or not messages:
            yield f"chatrag-{i}", {"category": "rag", "turns": []}  # reported as a bad row
            continue
        if len(passages[site][ctx]) > MAX_PROMPT_CHARS // 2:
            continue
        transcript = "\n".join(f"{m.get('role')}: {m.get('content')}" for m in messages)
        yield (
            f"chatrag-{site}-{i}",
            {
                "category": "rag",
                "sub_category": f"conversation_{site}",
                "turns": [
                    "You are the assistant of a government help site. Using only the passage "
                    "below, write the assistant's next reply in the conversation.\n\n"
                    f"Passage:\n{passages[site][ctx].strip()}\n\nConversation:\n{transcript}"
                ],
            },
        )


@register_source("chatrag_passages", ("summarization",), ORIGIN + CHATRAG + "documents.json")
def chatrag_passage_rows() -> RawRows:
    """Each help-site passage, to be summarized for a reader of the site."""
    for site, passages in chatrag_passages().items():
        for i, passage in enumerate(passages):
            if not 400 <= len(passage) <= MAX_PROMPT_CHARS:
                continue  # a heading or a navigation stub, or a page too long for the split
            yield (
                f"{site}-passage-{i}",
                {
                    "category": "summarization",
                    "sub_category": f"help_page_{site}",
                    "turns": [
                        "Summarize the following page of a government help site in a short "
                        f"paragraph for someone who has not read it.\n\n{passage.strip()}"
                    ],
                },
            )


# MMLU's STEM subjects (Hendrycks et al.'s grouping) and its medical ones go to stem; its
# general-knowledge and business subjects are factual QA; the rest (humanities, social sciences,
# law, ethics) lands in humanities.
STEM_SUBJECTS = frozenset(
    {
        "abstract_algebra",
        "anatomy",
        "astronomy",
        "clinical_knowledge",
        "college_biology",
        "college_chemistry",
        "college_computer_science",
        "college_mathematics",
        "college_medicine",
        "college_physics",
        "computer_security",
        "conceptual_physics",
        "electrical_engineering",
        "elementary_mathematics",
        "high_school_biology",
        "high_school_chemistry",
        "high_school_computer_science",
        "high_school_mathematics",
        "high_school_physics",
        "high_school_statistics",
        "machine_learning",
        "medical_genetics",
        "nutrition",
        "virology",
    }
)


QA_SUBJECTS = frozenset(
    {"global_facts", "miscellaneous", "management", "marketing", "professional_accounting"}
)


def mmlu_category(subject: str) -> str:
    """The qualitative category an MMLU subject's questions feed."""
    if subject in STEM_SUBJECTS:
        return "stem"
    return "qa" if subject in QA_SUBJECTS else "humanities"


def mmlu_questions() -> list[tuple[str, int, str]]:
    """``(subject, index, question with its options)`` for every exemplar."""
    prompts: dict[str, str] = json.loads(_member(MMLU_COT))
    out = []
    for subject, text in sorted(prompts.items()):
        for i, block in enumerate(text.split("\n\nQ: ")[1:]):
            question = block.split("\nA:")[0].strip()
            if question:
                out.append((subject, i, question))
    return out


@register_source("mmlu", ("stem", "humanities", "qa"), ORIGIN + MMLU_COT)
def mmlu_rows() -> RawRows:
    """Each question with its options, answered with the reasoning shown."""
    for subject, i, question in mmlu_questions():
        yield (
            f"{subject}-{i}",
            {
                "category": mmlu_category(subject),
                "sub_category": subject,
                "turns": [
                    "Answer the following multiple-choice question. Explain your reasoning, then "
                    f"give the letter of the answer.\n\n{question}"
                ],
            },
        )
