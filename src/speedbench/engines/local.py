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
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import EngineAdapter, EngineError, get_engine
from speedbench.secrets import redact_args

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_ENGINE_PYTHON = REPO_ROOT / ".venv-engine" / "bin" / "python"

# Module each engine's server runs as, per engine kind.
SERVER_MODULES = {
    "vllm": "vllm.entrypoints.openai.api_server",
    "sglang": "sglang.launch_server",
    "trtllm": "tensorrt_llm.commands.serve",
}


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


def engine_python(engine: EngineConfig) -> str:
    """The engine environment's interpreter: config, $SPEEDBENCH_ENGINE_PYTHON or .venv-engine."""
    python = (
        engine.python or os.environ.get("SPEEDBENCH_ENGINE_PYTHON") or str(DEFAULT_ENGINE_PYTHON)
    )
    if not Path(python).exists():
        raise EngineError(
            f"engine interpreter not found: {python} "
            "(run `make engine-env` or set EngineConfig.python)"
        )
    return python


def check_available(engine: EngineConfig) -> None:
    """Before any launch: the engine's interpreter or image exists and its port is free."""
    if engine.launcher == "external":
        return
    if engine.launcher == "local":
        engine_python(engine)
    else:
        from speedbench.engines.containers import container_spec
        from speedbench.engines.docker import docker_client, remote_host

        image = engine.image or container_spec(engine.kind).image
        client = docker_client(engine)
        try:
            client.images.get(image)
        except Exception:
            raise EngineError(
                f"image {image} is not on the Docker host; pull it there "
                "(or run containers/build.sh for speedbench/vllm-cpu)"
            ) from None
        finally:
            client.close()
        if remote_host(engine):
            return  # the port is on the remote host
    with socket.socket() as sock:
        # As servers do: connections of a server that just stopped (TIME_WAIT) do not block a
        # new one, only a live listener does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((engine.host, engine.port))
        except OSError:
            raise EngineError(
                f"port {engine.port} on {engine.host} is in use; stop what holds it "
                "or set another port"
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

    def __post_init__(self) -> None:
        if self.poll is None and self.process is not None:
            self.poll = self.process.poll

    @property
    def base_url(self) -> str:
        """HTTP root of the server."""
        return self.engine.base_url

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
    args = adapter.server_args(engine, spec)  # validates spec before anything starts
    cmd = [engine_python(engine), "-m", SERVER_MODULES[engine.kind], *args]
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **engine.env}
    with log_path.open("wb") as log:
        log.write(("$ " + " ".join(redact_args(cmd)) + "\n").encode())
        log.flush()
        process = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
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
