"""A started engine server and what every launcher does with one: wait for health, warm up.

Launchers (local process, Docker container, external server) each produce a
:class:`RunningEngine`; the load generator and the sweep runner consume only this.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineAdapter, EngineError
from speedbench.hostcheck.cpu import openmp_binding_env


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log file, joined with ' | ' so an error message stays one line."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return "(no log)"
    keep = [ln.strip() for ln in text[-lines:] if ln.strip()]
    return " | ".join(keep) if keep else "(empty log)"


def check_port_free(host: str, port: int) -> None:
    """Raise EngineError if a live listener holds ``host:port``."""
    with socket.socket() as sock:
        # As servers do: connections of a server that just stopped (TIME_WAIT) do not block a
        # new one, only a live listener does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            raise EngineError(
                f"port {port} on {host} is in use; stop what holds it or set another port"
            ) from None


@dataclass
class RunningEngine:
    """A started, healthy engine."""

    engine: EngineConfig
    spec: SpecConfig
    adapter: EngineAdapter
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    poll: Callable[[], int | None] | None = None
    container_id: str | None = None

    def __post_init__(self) -> None:
        if self.poll is None and self.process is not None:
            self.poll = self.process.poll

    @property
    def base_url(self) -> str:
        """HTTP root of the server."""
        return self.engine.base_url

    def version(self) -> str:
        """The engine's reported version, as its adapter reads it (else unknown)."""
        return self.adapter.server_version(self.base_url)

    def exit_code(self) -> int | None:
        """The engine's exit code if it has stopped; None while it runs (or if unknown)."""
        return self.poll() if self.poll is not None else None


def wait_healthy(
    base_url: str,
    health_path: str,
    timeout_s: float,
    process: subprocess.Popen[bytes] | None,
    log_path: Path | None,
    poll: Callable[[], int | None] | None = None,
) -> None:
    """Poll the health endpoint until 200; raise EngineError if the engine exits or times out."""
    deadline = time.monotonic() + timeout_s
    poll = poll or (process.poll if process is not None else None)
    with httpx.Client(timeout=5.0) as client:
        while True:
            code = poll() if poll is not None else None
            if code is not None:
                time.sleep(0.5)  # let the last log lines land
                tail = log_tail(log_path) if log_path else ""
                raise EngineError(f"engine exited with code {code} before healthy: {tail}")
            try:
                if client.get(base_url + health_path).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                tail = f": {log_tail(log_path)}" if log_path else ""
                raise EngineError(f"engine not healthy at {base_url} after {timeout_s:.0f} s{tail}")
            time.sleep(1.0)


def warm_up(running: RunningEngine, prompt_ids: list[int] | None = None) -> None:
    """One short non-measured request, so first-request costs (lazy init) stay out of results.

    The default prompt's ids ("Hello, world!" in Qwen's vocabulary) are valid in any vocabulary
    of more than 10k tokens; pass ``prompt_ids`` for smaller ones.
    """
    body = running.adapter.request_body(
        running.engine, prompt_ids or [9707, 11, 1879, 0], 8, 0.0, 0, True
    )
    with httpx.Client(timeout=300.0) as client:
        resp = client.post(running.base_url + running.adapter.generate_path, json=body)
        if resp.status_code != 200:
            raise EngineError(f"warm-up request failed: HTTP {resp.status_code}: {resp.text[:200]}")


def server_environment(engine: EngineConfig, adapter: EngineAdapter) -> dict[str, str]:
    """What every launcher adds to the server's environment.

    Lowest precedence first: the core binding's OpenMP settings, the adapter's own needs, then
    the config's ``env``.
    """
    binding = openmp_binding_env(engine.cpu_ids) if engine.cpus else {}
    return {**binding, **adapter.server_env(engine), **engine.env, **passed_env(engine)}


def passed_env(engine: EngineConfig) -> dict[str, str]:
    """The variables the config passes by name, read from this process's environment now.

    Raises:
        EngineError: One of them is not set here (the engine would start without it).
    """
    missing = [name for name in engine.pass_env if name not in os.environ]
    if missing:
        raise EngineError(
            f"pass_env names {', '.join(missing)}, not set in speedbench's environment; "
            "export it before the sweep (its value is never stored)"
        )
    return {name: os.environ[name] for name in engine.pass_env}


def engine_environment(engine: EngineConfig) -> dict[str, str]:
    """The part of the server's environment the config or this process decides.

    A local server inherits this process's environment (so a variable exported in the shell
    reaches it), a container only gets what the launcher passes, and of an external server
    nothing is known.
    """
    inherited = dict(os.environ) if engine.launcher == "local" else {}
    return {**inherited, **engine.env}
