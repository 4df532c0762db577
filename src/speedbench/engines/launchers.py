"""The launcher protocol and its registry: how an engine's server comes to run somewhere.

A launcher turns an ``EngineConfig`` + ``SpecConfig`` into a healthy :class:`RunningEngine`
inside a context manager that always tears the server down. ``EngineConfig.launcher`` names one
(``local``, ``docker``, ``external``); a new way to run engines (a cluster scheduler, a cloud
API) is one module that calls :func:`register_launcher`, with no edit to the runner.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineError
from speedbench.engines.running import RunningEngine

Launch = Callable[[EngineConfig, SpecConfig, Path], AbstractContextManager[RunningEngine]]


@dataclass(frozen=True)
class Launcher:
    """A registered launcher.

    Attributes:
        kind: The ``EngineConfig.launcher`` value it serves.
        launch: Context manager yielding the healthy engine; tears it down on exit.
        check_available: Checks made before any launch (interpreter or image present, port
            free), raising EngineError with one line; a no-op where nothing can be checked.
        binds_cores_here: Whether the engine's core binding (``EngineConfig.cpus``) names
            this machine's cores, so the contention check watches those: not where the engine
            runs on another machine, or where speedbench did not start it.
    """

    kind: str
    launch: Launch
    check_available: Callable[[EngineConfig], None] = lambda engine: None
    binds_cores_here: Callable[[EngineConfig], bool] = lambda engine: True


LAUNCHERS: dict[str, Launcher] = {}


def register_launcher(launcher: Launcher) -> Launcher:
    """Register ``launcher`` under its kind."""
    if launcher.kind in LAUNCHERS:
        raise ValueError(f"launcher {launcher.kind!r} is already registered")
    LAUNCHERS[launcher.kind] = launcher
    return launcher


def get_launcher(kind: str) -> Launcher:
    """The launcher for ``kind``, with a one-line error naming the known ones."""
    # The package's __init__ (run before this module) registers the built-in launchers.
    if kind not in LAUNCHERS:
        raise EngineError(f"unknown launcher {kind!r}; available: {', '.join(sorted(LAUNCHERS))}")
    return LAUNCHERS[kind]


def check_available(engine: EngineConfig) -> None:
    """Before any launch: what the engine's launcher can check without starting it."""
    get_launcher(engine.launcher).check_available(engine)


@contextlib.contextmanager
def engine_session(
    engine: EngineConfig, spec: SpecConfig, log_path: Path
) -> Iterator[RunningEngine]:
    """Launch (or attach to) the engine for one SD configuration; always tear it down."""
    with get_launcher(engine.launcher).launch(engine, spec, log_path) as running:
        yield running


class OpenEngine:
    """An engine session opened by one call and closed by another (for orchestrators).

    ``engine_session`` is a context manager; Prefect tasks cannot share a ``with`` block, so this
    holds the session's exit stack until :meth:`close`, which is safe to call more than once.
    """

    def __init__(self, engine: EngineConfig, spec: SpecConfig, log_path: Path):
        self._stack = contextlib.ExitStack()
        try:
            self.running = self._stack.enter_context(engine_session(engine, spec, log_path))
        except BaseException:
            self._stack.close()
            raise

    def close(self) -> None:
        """Stop the engine (kill its process group, or remove its container)."""
        self._stack.close()
