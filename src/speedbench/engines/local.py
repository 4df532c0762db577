"""Local-process launcher: run an engine's server as a child process on this machine.

The server runs in its own environment (its own interpreter, e.g. ``.venv-engine``) and in its
own process group, so teardown reaches every process it spawned. The launcher waits for the
health endpoint, fails fast with the tail of the engine log when the process dies, sends one
warm-up request, and always tears down: on success, on error and on KeyboardInterrupt.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineError, engine_python, get_engine
from speedbench.engines.launchers import Launcher, register_launcher
from speedbench.engines.running import (
    RunningEngine,
    check_port_free,
    free_port,
    log_tail,
    server_environment,
    wait_healthy,
    warm_up,
)
from speedbench.hostcheck.cpu import check_cpus_here
from speedbench.secrets import redact_args

__all__ = [
    "RunningEngine",
    "attach_external",
    "engine_python",
    "free_port",
    "launch_local",
    "log_tail",
]


def server_command(engine: EngineConfig) -> list[str]:
    """The program of a local launch: the engine's own command in its environment."""
    return get_engine(engine.kind).server_command(engine)


def terminate(process: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after ``grace_s``.

    The group is signalled even when the leader has already exited: vLLM's engine core runs as
    a child process, and when the API server dies it stays behind holding the model's memory.
    """
    if process.poll() is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    # Children that outlived the leader's clean exit.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def write_launch_files(files: dict[str, str], log_path: Path) -> Path:
    """Write the server's launch files into a folder beside its log; that folder.

    A local server reads them where they are, as a container reads them where the Docker
    launcher copied them, so the same options file goes to both.
    """
    folder = log_path.parent / f"{log_path.stem}.files"
    if files:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (folder / name).write_text(text)
    return folder.resolve()


@contextlib.contextmanager
def launch_local(
    engine: EngineConfig,
    spec: SpecConfig,
    log_path: str | Path,
    *,
    warmup: bool = True,
) -> Iterator[RunningEngine]:
    """Start the engine's server as a local process; yield it healthy; always tear it down."""
    adapter = get_engine(engine.kind)
    log_path = Path(log_path)
    files_dir = write_launch_files(adapter.launch_files(engine, spec), log_path)
    # validates spec before anything starts
    args = adapter.server_args(engine, spec, files_dir=str(files_dir))
    cmd = [*server_command(engine), *args]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cpus = engine.cpu_ids
    try:
        check_cpus_here(cpus)
    except ValueError as exc:
        raise EngineError(str(exc)) from None
    env = {**os.environ, **server_environment(engine, adapter)}
    if engine.model_cache:
        env["HF_HOME"] = engine.model_cache
    with log_path.open("wb") as log:
        log.write(("$ " + " ".join(redact_args(cmd)) + "\n").encode())
        if cpus:
            log.write(f"# bound to cpus {engine.cpus}\n".encode())
        log.flush()
        process = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    if cpus:
        # Set before the interpreter has started any thread or child (they inherit it).
        os.sched_setaffinity(process.pid, cpus)
    running = RunningEngine(engine, spec, adapter, log_path, process)
    try:
        wait_healthy(
            engine.base_url, adapter.health_path, engine.startup_timeout_s, process, log_path
        )
        if warmup:
            warm_up(running)
        yield running
    finally:
        terminate(process)


@contextlib.contextmanager
def attach_external(engine: EngineConfig, spec: SpecConfig) -> Iterator[RunningEngine]:
    """Use a server someone else started; only checks its health."""
    adapter = get_engine(engine.kind)
    wait_healthy(
        engine.base_url, adapter.health_path, min(engine.startup_timeout_s, 30), None, None
    )
    yield RunningEngine(engine, spec, adapter, Path(os.devnull))


def check_local(engine: EngineConfig) -> None:
    """The engine's port is free and its program (its command in its environment) exists."""
    check_port_free(engine.host, engine.port)
    server_command(engine)


register_launcher(
    Launcher("local", lambda e, s, log: launch_local(e, s, log), check_available=check_local)
)
register_launcher(
    Launcher(
        "external",
        lambda e, s, _log: attach_external(e, s),
        binds_cores_here=lambda engine: False,
    )
)
