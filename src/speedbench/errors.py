"""How every entry point ends: one line on stderr and an exit code that means one thing.

The CLI, ``python -m flows.sweep`` and the DVC stages (``python -m flows.stage``) all end
through :func:`finish`, so a bad input, a failed configuration and a Ctrl-C look the same
whichever way a sweep was started:

- 0: done; 2: bad input (one line naming what is wrong); 3: some configuration failed (all
  results measured are on disk, the failures are listed); 130: interrupted (the engine was
  stopped, records so far are kept; run the same command again to resume).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from speedbench.config import ConfigError
from speedbench.data.corpora import CorpusError
from speedbench.data.embed import EmbedderError
from speedbench.data.prompts import PromptSetError
from speedbench.data.sources import SourceError
from speedbench.data.throughput import ThroughputError
from speedbench.engines.base import EngineError
from speedbench.provision.models import ProvisionError
from speedbench.provision.pypi import FetchError
from speedbench.results import StaleResults
from speedbench.run.level import HostBusyError
from speedbench.stores import StoreError
from speedbench.tokenize import TokenizationError

# Failures a user can cause and fix; anything else is a bug and keeps its traceback.
EXPECTED_ERRORS: tuple[type[Exception], ...] = (
    ConfigError,
    CorpusError,
    EmbedderError,
    EngineError,
    FetchError,
    HostBusyError,
    PromptSetError,
    ProvisionError,
    SourceError,
    StaleResults,
    StoreError,
    ThroughputError,
    TokenizationError,
)

EXIT_OK, EXIT_BAD_INPUT, EXIT_CONFIG_FAILED, EXIT_INTERRUPTED = 0, 2, 3, 130


def finish(action: Callable[[], Any]) -> int:
    """Run ``action`` and turn its outcome into an exit code (see the module docstring).

    An action that returns an object with ``failures`` (a sweep summary) exits 3 when any
    configuration failed, after listing them.
    """
    try:
        result = action()
    except EXPECTED_ERRORS as exc:
        print(f"speedbench: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(
            "speedbench: interrupted; the engine was stopped and records so far are kept; "
            "run the same command again to resume",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    failures = getattr(result, "failures", None) or []
    for failure in failures:
        print(f"FAILED {failure.config}: {failure.error}", file=sys.stderr)
    return EXIT_CONFIG_FAILED if failures else EXIT_OK
