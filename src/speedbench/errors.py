"""How every entry point ends: one line on stderr and an exit code that means one thing.

The CLI, ``python -m flows.sweep`` and the DVC stages (``python -m flows.stage``) all end
through :func:`finish`, so a bad input, a failed configuration and a Ctrl-C look the same
whichever way a sweep was started:

- 0: done; 2: bad input (one line naming what is wrong); 3: some configuration failed (all
  results measured are on disk, the failures are listed); 130: interrupted (the engine was
  stopped, records so far are kept; run the same command again to resume).
- SIGTERM and SIGHUP (what ``timeout``, systemd, Slurm's scancel, Kubernetes and a closed
  terminal send) stop a run the way Ctrl-C does, and exit 128 + the signal's number (143,
  129): the engine process or container is stopped, the summary says ``killed`` and the
  MLflow run is KILLED. Further such signals during that clean-up are ignored, so it ends.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from speedbench.config import ConfigError
from speedbench.data.corpora import CorpusError
from speedbench.data.embed import EmbedderError
from speedbench.data.prompts import PromptSetError
from speedbench.data.sources import SourceError
from speedbench.data.throughput import ThroughputError
from speedbench.engines.base import EngineError
from speedbench.operations.stores import StoreError
from speedbench.provision.models import ProvisionError
from speedbench.provision.pypi import FetchError
from speedbench.results import StaleResults
from speedbench.run.level import HostBusyError
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


# Signals that end a run as Ctrl-C does.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """A stop signal, raised where the program is, so every Ctrl-C clean-up runs for it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[list[int]]:
    """While inside, SIGTERM and SIGHUP raise :class:`Terminated` (the first one only).

    Yields the list the received signal is appended to: a framework that catches the
    exception and raises a plain KeyboardInterrupt of its own cannot hide which it was.
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received  # signal handlers can only be set in the main thread
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        for sig in STOP_SIGNALS:  # let the clean-up run to its end
            signal.signal(sig, signal.SIG_IGN)
        raise Terminated(signum)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def finish(action: Callable[[], Any]) -> int:
    """Run ``action`` and turn its outcome into an exit code (see the module docstring).

    An action that returns an object with ``failures`` (a sweep summary) exits 3 when any
    configuration failed, after listing them.
    """
    with stop_signals_interrupt() as received:
        try:
            result = action()
        except EXPECTED_ERRORS as exc:
            print(f"speedbench: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except KeyboardInterrupt as exc:
            signum = exc.signum if isinstance(exc, Terminated) else (received or [0])[0]
            what = f"stopped by {signal.Signals(signum).name}" if signum else "interrupted"
            print(
                f"speedbench: {what}; the engine was stopped and records so far are kept; "
                "run the same command again to resume",
                file=sys.stderr,
            )
            return 128 + signum if signum else EXIT_INTERRUPTED
    failures = getattr(result, "failures", None) or []
    for failure in failures:
        print(f"FAILED {failure.config}: {failure.error}", file=sys.stderr)
    return EXIT_CONFIG_FAILED if failures else EXIT_OK
