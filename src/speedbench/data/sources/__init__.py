"""Candidate-prompt sources; importing this package registers all of them."""

from speedbench.data.sources import (  # noqa: F401
    champ,
    humaneval,
    ifbench,
    inspect_evals,
    lm_eval,
    long_context,
    mmath,
    mtbench,
)
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
