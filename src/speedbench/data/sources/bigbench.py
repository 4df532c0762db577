"""BIG-bench tasks, streamed out of the ``bigbench`` 1.0.0 sdist without installing it.

The sdist is 358 MB; the task files it carries are real public data (SQuAD, XSum, WikiLingua,
MLSUM, StrategyQA, TruthfulQA, ...). The archive is fetched once (sha256-pinned), every task file
any speedbench split needs is extracted in a single pass, and later builds read the extracted
files only. A raw BIG-bench input becomes a real instruction: the one its task implies.

Each task below is data (file, category, prompt builder) plus one registration, so adding a task
touches nothing else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from speedbench.data.sources.base import RawRows, register_source
from speedbench.provision.pypi import CACHE_ROOT, extract_tar_members, fetch_sdist

SDIST = ("bigbench", "1.0.0", "1bb398a5512c6d798cdebe0dfa0ac03f67f6033fa6b39c6ef71df978c7cbc5c2")
TASK_ROOT = "bigbench-1.0.0/bigbench/benchmark_tasks/"
EXTRACT_DIR = CACHE_ROOT / "bigbench"

# Every task file used anywhere in speedbench, extracted together so the archive is read once.
MEMBERS: tuple[str, ...] = (
    "gem/xsum/task.json",
    "gem/wikilingua_en/task.json",
    "gem/wikilingua_multilingual/task.json",
    "gem/mlsum_de/task.json",
    "gem/mlsum_es/task.json",
    "gem/common_gen/task.json",
    "squad_shifts/squaddev_v1.1.json",
    "squad_shifts/new_wiki_v1.0.json",
    "squad_shifts/nyt_v1.0.json",
    "strategyqa/task.json",
    "logical_deduction/three_objects/task.json",
    "logical_deduction/five_objects/task.json",
    "logical_deduction/seven_objects/task.json",
    "truthful_qa/questions.json",
    "misconceptions/task.json",
    "physics/task.json",
    "moral_permissibility/task.json",
    "topical_chat/task.json",
    "auto_debugging/task.json",
    "elementary_math_qa/question_only/task.json",
    "minute_mysteries_qa/freetext/task.json",
    "paragraph_segmentation/task.json",
)


def task_file(member: str) -> Path:
    """The extracted task file ``member`` (relative to benchmark_tasks/), fetching if needed."""
    if member not in MEMBERS:
        raise KeyError(f"{member} is not in bigbench.MEMBERS; add it there so it is extracted")
    path = EXTRACT_DIR / TASK_ROOT / member
    if not path.exists():
        archive = fetch_sdist(*SDIST)
        extract_tar_members(archive, [TASK_ROOT + m for m in MEMBERS], EXTRACT_DIR)
    return path


@cache
def load_task(member: str) -> dict[str, Any]:
    """The parsed JSON of a task file."""
    return json.loads(task_file(member).read_text(encoding="utf-8"))


Prompts = Iterator[tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class BigBenchTask:
    """One BIG-bench file turned into prompts of one category."""

    source: str
    members: tuple[str, ...]
    category: str
    build: Callable[[str, dict[str, Any]], Prompts]


def _examples(member: str, task: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    stem = member.removesuffix("/task.json")
    for i, ex in enumerate(task.get("examples", [])):
        # Some tasks put an id in "comment", others a free-text note; only an id-like one is used.
        comment = ex.get("comment") if isinstance(ex, dict) else None
        if isinstance(comment, str) and comment and " " not in comment:
            yield comment, ex
        else:
            yield f"{stem.split('/')[-1]}-{i}", ex


def _instruct(instruction: str, field: str = "input", sub: str = "") -> Callable[..., Prompts]:
    """A builder that puts ``instruction`` in front of each example's ``field``."""

    def build(member: str, task: dict[str, Any]) -> Prompts:
        for sid, ex in _examples(member, task):
            text = ex.get(field) if isinstance(ex, dict) else None
            turns = [instruction + text.strip()] if isinstance(text, str) else text
            yield sid, {"sub_category": sub or member.split("/")[-2], "turns": turns}

    return build


def _squad(member: str, task: dict[str, Any]) -> Prompts:
    """One question per paragraph, answered from that paragraph only."""
    sub = member.split("/")[-1].removesuffix(".json")
    for article in task.get("data", []):
        for para in article.get("paragraphs", []):
            qas = para.get("qas") or []
            if not qas:
                continue
            qa = qas[0]
            yield (
                str(qa.get("id")),
                {
                    "sub_category": sub,
                    "turns": [
                        "Answer the question using only the context below. Quote the supporting "
                        f"sentence.\n\nContext:\n{para.get('context')}\n\n"
                        f"Question: {qa.get('question')}"
                    ],
                },
            )


def _choices(member: str, task: dict[str, Any]) -> Prompts:
    """A multiple-choice example as a question with options and a request for reasoning."""
    prefix = task.get("task_prefix", "")
    for sid, ex in _examples(member, task):
        options = "\n".join(f"- {o}" for o in (ex.get("target_scores") or {}))
        yield (
            sid,
            {
                "sub_category": member.split("/")[-2],
                "turns": [
                    f"{prefix}{ex.get('input', '')}\n\nOptions:\n{options}\n\n"
                    "Which option is correct? Explain your reasoning before answering."
                ],
            },
        )


def _truthful_qa(member: str, task: dict[str, Any]) -> Prompts:
    for i, ex in enumerate(task.get("examples", [])):
        yield (
            f"truthful_qa-{i}",
            {
                "sub_category": str(ex.get("Category", "")).lower(),
                "turns": [ex.get("Question")],
            },
        )


def _common_gen(member: str, task: dict[str, Any]) -> Prompts:
    for sid, ex in _examples(member, task):
        words = ", ".join(str(ex.get("input", "")).split())
        yield (
            sid,
            {
                "sub_category": "creative_constraints",
                "turns": [
                    f"Write a short story of about 150 words that uses all of these words: {words}."
                ],
            },
        )


def _headline_article(member: str, task: dict[str, Any]) -> Prompts:
    """XSum's one-sentence summaries turned around: write the article they summarise."""
    for sid, ex in _examples(member, task):
        yield (
            sid + "-article",
            {
                "sub_category": "news_article",
                "turns": [
                    "Write a news article of about 250 words that this one-sentence summary could "
                    f"describe:\n\n{ex.get('target')}"
                ],
            },
        )


_LANG = re.compile(r"wiki_lingua_([a-z]+)_")


def _wikilingua_crosslingual(member: str, task: dict[str, Any]) -> Prompts:
    """Non-English how-to articles, to be summarised in English (the task's own target)."""
    for sid, ex in _examples(member, task):
        lang = _LANG.match(sid)
        if not lang or lang.group(1) == "english":
            continue
        yield (
            sid,
            {
                "sub_category": f"wikilingua_{lang.group(1)}",
                "turns": [
                    f"The following how-to text is in {lang.group(1).title()}. Summarize it in "
                    f"English as a short list of steps.\n\n{ex.get('input', '').strip()}"
                ],
            },
        )


_SPEAKER = re.compile(r'\s*(agent_[AB]): "')


def _topical_chat(member: str, task: dict[str, Any]) -> Prompts:
    """The longest context of each conversation; the model plays the next speaker."""
    longest: dict[str, str] = {}
    for sid, ex in _examples(member, task):
        text = ex.get("input", "")
        if len(text) > len(longest.get(sid, "")):
            longest[sid] = text
    for sid, text in sorted(longest.items()):
        lines = [ln.strip() for ln in re.split(r'(?<=")\s+(?=agent_[AB]: ")', text) if ln.strip()]
        if len(lines) < 2:
            continue
        last = _SPEAKER.match(lines[-1])
        nxt = "agent_A" if last and last.group(1) == "agent_B" else "agent_B"
        yield (
            sid,
            {
                "sub_category": "open_chat",
                "turns": [
                    "Below is a casual conversation between two people, agent_A and agent_B. Play "
                    f"{nxt} and write their next message in the same tone.\n\n" + "\n".join(lines)
                ],
            },
        )


TASKS: tuple[BigBenchTask, ...] = (
    BigBenchTask("bigbench/squad_wiki", ("squad_shifts/squaddev_v1.1.json",), "rag", _squad),
    BigBenchTask("bigbench/squad_new_wiki", ("squad_shifts/new_wiki_v1.0.json",), "rag", _squad),
    BigBenchTask("bigbench/squad_nyt", ("squad_shifts/nyt_v1.0.json",), "rag", _squad),
    BigBenchTask(
        "bigbench/xsum",
        ("gem/xsum/task.json",),
        "summarization",
        _instruct("Summarize the following news article in one sentence.\n\n", sub="news"),
    ),
    BigBenchTask(
        "bigbench/wikilingua_en",
        ("gem/wikilingua_en/task.json",),
        "summarization",
        _instruct(
            "Summarize the following how-to article as a short list of steps.\n\n", sub="howto"
        ),
    ),
    BigBenchTask(
        "bigbench/mlsum_de",
        ("gem/mlsum_de/task.json",),
        "multilingual",
        _instruct("Fasse den folgenden Nachrichtenartikel in zwei Sätzen zusammen.\n\n", sub="de"),
    ),
    BigBenchTask(
        "bigbench/mlsum_es",
        ("gem/mlsum_es/task.json",),
        "multilingual",
        _instruct("Resume en dos frases el siguiente artículo de noticias.\n\n", sub="es"),
    ),
    BigBenchTask(
        "bigbench/wikilingua_multilingual",
        ("gem/wikilingua_multilingual/task.json",),
        "multilingual",
        _wikilingua_crosslingual,
    ),
    BigBenchTask(
        "bigbench/strategyqa",
        ("strategyqa/task.json",),
        "reasoning",
        _instruct(
            "Answer the following yes/no question. Reason step by step, then answer.\n\n",
            sub="implicit_multi_hop",
        ),
    ),
    BigBenchTask(
        "bigbench/logical_deduction",
        tuple(f"logical_deduction/{n}_objects/task.json" for n in ("three", "five", "seven")),
        "reasoning",
        _choices,
    ),
    BigBenchTask("bigbench/truthful_qa", ("truthful_qa/questions.json",), "qa", _truthful_qa),
    BigBenchTask(
        "bigbench/misconceptions",
        ("misconceptions/task.json",),
        "qa",
        _instruct(
            "Is the following statement true or false? Explain briefly.\n\n", sub="misconceptions"
        ),
    ),
    BigBenchTask(
        "bigbench/physics",
        ("physics/task.json",),
        "stem",
        _instruct(
            "Solve the following physics problem step by step, stating each formula you use.\n\n",
            sub="physics",
        ),
    ),
    BigBenchTask(
        "bigbench/moral_permissibility",
        ("moral_permissibility/task.json",),
        "humanities",
        _instruct(
            "Consider the following scenario and discuss its ethics before giving your answer.\n\n",
            sub="ethics",
        ),
    ),
    BigBenchTask("bigbench/common_gen", ("gem/common_gen/task.json",), "writing", _common_gen),
    BigBenchTask("bigbench/xsum_article", ("gem/xsum/task.json",), "writing", _headline_article),
    BigBenchTask("bigbench/topical_chat", ("topical_chat/task.json",), "roleplay", _topical_chat),
    BigBenchTask(
        "bigbench/auto_debugging",
        ("auto_debugging/task.json",),
        "coding",
        _instruct("Answer the question about this program and explain why.\n\n", sub="debugging"),
    ),
    BigBenchTask(
        "bigbench/elementary_math_qa",
        ("elementary_math_qa/question_only/task.json",),
        "math",
        _instruct("Solve this word problem step by step.\n\n", sub="word_problem"),
    ),
)


def _rows_of(task: BigBenchTask) -> Callable[[], RawRows]:
    def rows() -> RawRows:
        for member in task.members:
            for sid, fields in task.build(member, load_task(member)):
                yield sid, {"category": task.category, **fields}

    return rows


for _task in TASKS:
    register_source(
        _task.source,
        (_task.category,),
        f"bigbench 1.0.0 sdist: {', '.join(_task.members)}",
    )(_rows_of(_task))
