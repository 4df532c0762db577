"""The registry of candidate-prompt sources behind the qualitative split.

A source is a function that yields ``(src_id, fields)`` pairs, where ``fields`` carries at least
``category`` and ``turns`` in the nvidia/SPEED-Bench schema. Adding a source is one module with a
``@register_source`` function; the split builder never changes. Every row is validated here, so a
broken row is reported with its source and row id, and either skipped or fatal by policy.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import ValidationError

from speedbench.config import format_validation_error
from speedbench.data.prompts import PromptRow

Category = Literal[
    "coding",
    "math",
    "humanities",
    "stem",
    "writing",
    "summarization",
    "roleplay",
    "rag",
    "multilingual",
    "reasoning",
    "qa",
]
CATEGORIES: tuple[Category, ...] = get_args(Category)
BadRowPolicy = Literal["skip", "fail"]
RawRows = Iterator[tuple[str, dict[str, Any]]]


class SourceError(ValueError):
    """A source is unknown, unavailable, or has a bad row under the ``fail`` policy."""


@dataclass(frozen=True)
class Source:
    """A named producer of candidate prompts for some categories."""

    name: str
    categories: tuple[str, ...]
    rows: Callable[[], RawRows]
    origin: str


SOURCES: dict[str, Source] = {}


def register_source(name: str, categories: tuple[str, ...], origin: str):
    """Decorator that registers a row generator as source ``name``.

    Args:
        name: Unique source name, also written to each row's ``source`` column.
        categories: The qualitative categories the source feeds.
        origin: Where the data comes from (package and file), for reports.
    """
    unknown = set(categories) - set(CATEGORIES)
    if unknown:
        raise ValueError(f"source {name}: unknown categories {sorted(unknown)}")

    def wrap(fn: Callable[[], RawRows]) -> Callable[[], RawRows]:
        if name in SOURCES:
            raise ValueError(f"source {name!r} registered twice")
        SOURCES[name] = Source(name, categories, fn, origin)
        return fn

    return wrap


def get_source(name: str) -> Source:
    """The registered source ``name``; an unknown name lists the known ones."""
    if name not in SOURCES:
        raise SourceError(f"unknown source {name!r}; known: {', '.join(sorted(SOURCES))}")
    return SOURCES[name]


def content_id(turns: list[str]) -> str:
    """A stable question id: a hash of the prompt text, so equal prompts share an id."""
    blob = json.dumps(turns, ensure_ascii=False, separators=(",", ":")).encode()
    return "q" + hashlib.sha256(blob).hexdigest()[:16]


def validate_row(source: Source, src_id: str, fields: dict[str, Any]) -> PromptRow:
    """One source row as a ``PromptRow`` with a content id; raises ``SourceError`` if bad."""
    where = f"source {source.name} row {src_id}"
    if not isinstance(fields, dict):
        raise SourceError(f"{where}: expected a mapping, got {type(fields).__name__}")
    raw = {
        "question_id": "pending",
        "source": source.name,
        "src_id": src_id,
        "multiturn": isinstance(fields.get("turns"), list) and len(fields["turns"]) > 1,
        **fields,
    }
    try:
        row = PromptRow.model_validate(raw)
    except ValidationError as exc:
        raise SourceError(f"{where}: {format_validation_error(PromptRow, exc)}") from None
    if row.category not in source.categories:
        raise SourceError(
            f"{where}: category {row.category!r} is not one the source declares "
            f"({', '.join(source.categories)})"
        )
    return row.model_copy(update={"question_id": content_id(row.turns)})


def collect(
    source: Source, on_bad_row: BadRowPolicy = "skip", problems: list[str] | None = None
) -> list[PromptRow]:
    """All valid rows of ``source``.

    Args:
        source: The source to read.
        on_bad_row: ``skip`` reports a bad row in ``problems`` and goes on; ``fail`` raises.
        problems: Receives one line per skipped row.
    """
    out = []
    for src_id, fields in source.rows():
        try:
            out.append(validate_row(source, src_id, fields))
        except SourceError as exc:
            if on_bad_row == "fail":
                raise
            if problems is not None:
                problems.append(str(exc))
    return out
