"""Candidate-prompt sources; importing this package registers all of them."""

from speedbench.data.sources import bigbench, champ, humaneval, mtbench  # noqa: F401
from speedbench.data.sources.base import (
    CATEGORIES,
    SOURCES,
    BadRowPolicy,
    Source,
    SourceError,
    collect,
    get_source,
)

__all__ = [
    "CATEGORIES",
    "SOURCES",
    "BadRowPolicy",
    "Source",
    "SourceError",
    "collect",
    "get_source",
]
