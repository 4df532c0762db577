"""Docker launcher: run an engine's server in a container, here or on a GPU host.

Given an ``EngineConfig`` (``launcher: docker``) and a ``SpecConfig``, the launcher connects to a
Docker daemon (``engine.docker_host``, else ``DOCKER_HOST``, else the local socket; ``ssh://``
reaches a remote GPU host through the system ssh client), creates the engine's container and
waits for its health endpoint.

- **Command**: the container spec's entrypoint plus the adapter's server arguments, with the
  model paths as the container sees them: model directories are mounted read-only at
  ``/models/target`` and ``/models/draft`` (on a remote host, absolute paths are directories
  on that host); hub ids are passed through. Launch files (TensorRT-LLM's options YAML) are
  copied into the container under ``/speedbench``, so they reach a remote host too.
- **Remote hosts**: the port is published on the Docker host at ``engine.host``, which is also
  where the client connects: set it to the GPU host's address (or tunnel the port).
- **GPUs**: ``engine.gpus`` becomes a device request in the create call (``all``, a count, or
  ``device=0,1``). A host without the NVIDIA runtime refuses it with a one-line error.
- **Isolation**: the container runs as the image's unprivileged user with all capabilities
  dropped and no privilege escalation; its port is published on ``engine.host`` (127.0.0.1
  unless the user chooses an address).
- **Secrets**: ``engine.env`` (e.g. ``HF_TOKEN``) goes into the container's environment only; it
  is never logged, and the logged command line is redacted.
- **Logs** stream to the log file from the moment the container starts until it stops.
- **Teardown**: the container is stopped (SIGTERM, SIGKILL after ``STOP_GRACE_S``), its log
  drained, and removed, on success, on error and on Ctrl-C;
  every container carries the ``speedbench`` label, so leftovers of a killed client can be
  found with ``docker ps -a --filter label=speedbench``.
"""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines.base import LAUNCH_FILES_DIR, EngineError, get_engine
from speedbench.engines.containers import HostSettings, container_spec
from speedbench.engines.launchers import Launcher, register_launcher
from speedbench.engines.running import (
    RunningEngine,
    check_port_free,
    server_environment,
    wait_healthy,
    warm_up,
)
from speedbench.secrets import redact_args

STOP_GRACE_S = 10  # SIGTERM, then SIGKILL after this many seconds, as `docker stop` does

LABEL = "speedbench"
TARGET_MOUNT = "/models/target"
DRAFT_MOUNT = "/models/draft"
# Where a sweep's shared Hugging Face cache (model_cache) is mounted, as HF_HOME.
CACHE_MOUNT = "/speedbench-cache/huggingface"
FILES_MOUNT = LAUNCH_FILES_DIR  # where launch files are copied into the container
REMOTE_SCHEMES = ("ssh://", "tcp://", "http://", "https://")


def remote_host(engine: EngineConfig) -> str | None:
    """The Docker host's URL when the daemon is on another machine (None for a local socket)."""
    host = engine.docker_host or os.environ.get("DOCKER_HOST") or ""
    return host if host.startswith(REMOTE_SCHEMES) else None


def docker_client(engine: EngineConfig) -> Any:
    """A client of the engine's Docker daemon, with a one-line error when there is none.

    ``ssh://`` hosts go through the system ``ssh`` client (docker SDK ``use_ssh_client``), so
    the user's ``~/.ssh/config``, agent and jump hosts apply as they do for the docker CLI.
    """
    import docker

    where = engine.docker_host or os.environ.get("DOCKER_HOST") or ""
    ssh = where.startswith("ssh://")
    try:
        if engine.docker_host:
            client = docker.DockerClient(
                base_url=engine.docker_host, timeout=120, use_ssh_client=ssh
            )
        else:
            client = docker.from_env(timeout=120, use_ssh_client=ssh)
        client.ping()
    except docker.errors.DockerException as exc:
        detail = " ".join(str(exc).split())
        raise EngineError(f"no Docker daemon at {where or 'the local socket'}: {detail}") from None
    return client


def device_requests(gpus: str | None) -> list[Any]:
    """Docker device requests for ``gpus`` (``all``, a count, or ``device=ID[,ID]``)."""
    if not gpus:
        return []
    from docker.types import DeviceRequest

    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if gpus.startswith("device="):
        ids = gpus.removeprefix("device=").split(",")
        return [DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]
    return [DeviceRequest(count=int(gpus), capabilities=[["gpu"]])]


def _mounted(
    path: str | None, mount: str, volumes: dict[str, dict[str, str]], remote: bool
) -> str | None:
    """``path`` as the container sees it: a model directory is mounted read-only.

    On a local daemon a directory that exists here is mounted. On a remote daemon the files are
    on that host, so an absolute path is taken as a directory there; anything else is a hub id.
    A single-file model (a ``.gguf``) is seen through its folder, mounted the same way.
    """
    if not path:
        return path
    folder, file_name = path, None
    if path.endswith(".gguf") and (remote or Path(path).is_file()):
        file_name = PurePosixPath(path).name
        folder = str(PurePosixPath(path).parent if remote else Path(path).resolve().parent)
    if remote:
        host_dir = folder if folder.startswith("/") else None
    else:
        host_dir = str(Path(folder).resolve()) if Path(folder).is_dir() else None
    if host_dir is None:
        return path
    # A folder already mounted (the draft beside the target, or the same file) is reused:
    # Docker takes one bind per host folder.
    mount = volumes.setdefault(host_dir, {"bind": mount, "mode": "ro"})["bind"]
    return f"{mount}/{file_name}" if file_name else mount


def container_view(
    engine: EngineConfig, spec: SpecConfig
) -> tuple[EngineConfig, SpecConfig, dict[str, dict[str, str]]]:
    """The engine and SD config as the container sees them, and the mounts that make it so.

    Model folders are the container's (``/models/target``, ``/models/draft``), and so is the
    address the server binds. Everything the engine reads inside the container (its argv,
    its launch files, the model name its requests must carry) is built from these, never
    from the host's paths.
    """
    remote = remote_host(engine) is not None
    volumes: dict[str, dict[str, str]] = {}
    inside = engine.model_copy(
        update={
            "model": _mounted(engine.model, TARGET_MOUNT, volumes, remote),
            "tokenizer": None,
            "host": "0.0.0.0",  # inside the container; the published port picks the address
            "port": container_spec(engine.kind).port,
        }
    )
    inside_spec = spec.model_copy(
        update={"draft_model": _mounted(spec.draft_model, DRAFT_MOUNT, volumes, remote)}
    )
    if engine.model_cache:
        # On the engine's host (the daemon creates it if missing); written by every container.
        folder = engine.model_cache if remote else str(Path(engine.model_cache).resolve())
        volumes[folder] = {"bind": CACHE_MOUNT, "mode": "rw"}
    return inside, inside_spec, volumes


def host_settings(engine: EngineConfig) -> HostSettings:
    """The engine's run-line settings (GPU or CPU), with the config's overrides."""
    own = container_spec(engine.kind).host(gpus=bool(engine.gpus))
    ulimits = tuple(sorted(engine.ulimits.items())) if engine.ulimits is not None else None
    return HostSettings(
        ipc=engine.ipc or own.ipc,
        shm_size=engine.shm_size or own.shm_size,
        ulimits=own.ulimits if ulimits is None else ulimits,
        source=own.source,
    )


def host_options(settings: HostSettings) -> dict[str, Any]:
    """The ``containers.create`` keywords of host settings."""
    from docker.types import Ulimit

    options: dict[str, Any] = {"ipc_mode": settings.ipc}
    if settings.ipc != "host":  # the host's /dev/shm has its own size
        options["shm_size"] = settings.shm_size
    if settings.ulimits:
        options["ulimits"] = [Ulimit(name=n, soft=v, hard=v) for n, v in settings.ulimits]
    return options


def host_flags(settings: HostSettings) -> list[str]:
    """The same settings as ``docker run`` flags (for plans and logs)."""
    flags = [f"--ipc={settings.ipc}"]
    if settings.ipc != "host":
        flags.append(f"--shm-size={settings.shm_size}")
    return flags + [f"--ulimit {n}={v}" for n, v in settings.ulimits]


def container_options(engine: EngineConfig, spec: SpecConfig) -> dict[str, Any]:
    """Everything of the ``containers.create`` call for this engine and SD configuration."""
    adapter = get_engine(engine.kind)
    image_spec = container_spec(engine.kind)
    inside, inside_spec, volumes = container_view(engine, spec)
    command = adapter.server_args(inside, inside_spec, files_dir=LAUNCH_FILES_DIR)
    binding: dict[str, Any] = {}
    if engine.cpus:
        # The cpuset confines the container; inside it the OpenMP threads still need binding.
        binding = {"cpuset_cpus": engine.cpus}
    return {
        **binding,
        "image": engine.image or image_spec.image,
        "entrypoint": list(image_spec.entrypoint),
        "command": command,
        "environment": {
            **server_environment(engine, adapter),
            **({"HF_HOME": CACHE_MOUNT} if engine.model_cache else {}),
        },
        "ports": {f"{image_spec.port}/tcp": (engine.host, engine.port)},
        "volumes": volumes,
        "device_requests": device_requests(engine.gpus),
        **host_options(host_settings(engine)),
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "labels": {LABEL: "1", f"{LABEL}.config": spec.label},
        "name": f"{LABEL}-{engine.kind}-{spec.label}-{uuid.uuid4().hex[:8]}",
        "detach": True,
    }


def launch_files_archive(files: dict[str, str]) -> bytes:
    """A tar of the adapter's launch files under ``FILES_MOUNT``, readable by any user.

    They are copied into the created container (``put_archive``) rather than bind-mounted, so
    they reach a remote Docker host too.
    """
    buffer = io.BytesIO()
    root = FILES_MOUNT.strip("/")
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        folder = tarfile.TarInfo(root)
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(folder)
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class _LogPump:
    """Copies the container's output into the engine log while it runs.

    It attaches only after ``start``: dockerd answers a follow request on a container that is
    not running yet with an empty, finished stream, which left CI with a log of just the
    command line. ``drain`` waits for the stream to end, which it does when the container stops.
    """

    def __init__(self, container: Any, log_path: Path) -> None:
        self._container = container
        self._log_path = log_path
        self._thread = threading.Thread(
            target=self._pump, name=f"logs-{container.name}", daemon=True
        )
        self._thread.start()

    def _pump(self) -> None:
        with self._log_path.open("ab") as log, contextlib.suppress(Exception):
            for chunk in self._container.logs(stream=True, follow=True):
                log.write(chunk)
                log.flush()

    def drain(self, timeout_s: float = 5.0) -> None:
        self._thread.join(timeout_s)


def _exit_code(container: Any, pump: _LogPump) -> int | None:
    """The container's exit code once it has stopped (None while it runs or is gone).

    On exit the log pump is drained first, so whoever reads the log tail next sees its end.
    """
    try:
        container.reload()
    except Exception:  # removed under us: treat as exited
        return -1
    if container.status in ("exited", "dead"):
        pump.drain()
        return int(container.attrs.get("State", {}).get("ExitCode", -1))
    return None


@contextlib.contextmanager
def launch_docker(
    engine: EngineConfig, spec: SpecConfig, log_path: str | Path, *, warmup: bool = True
) -> Iterator[RunningEngine]:
    """Start the engine's container; yield it healthy; always remove it."""
    import docker

    adapter = get_engine(engine.kind)
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_bytes(b"")
    inside, inside_spec, _ = container_view(engine, spec)
    files = adapter.launch_files(inside, inside_spec)
    if files:  # kept next to the log, as a record of what the engine was started with
        files_dir = log_path.parent / "engine-files"
        files_dir.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (files_dir / name).write_text(text)
    options = container_options(engine, spec)
    client = docker_client(engine)
    container = None
    pump = None
    try:
        try:
            container = client.containers.create(**options)
        except docker.errors.ImageNotFound:
            raise EngineError(
                f"image {options['image']} is not on the Docker host; pull it there "
                "(or run containers/build.sh for speedbench/vllm-cpu)"
            ) from None
        if files:
            container.put_archive("/", launch_files_archive(files))
        bound = ["--cpuset-cpus", options["cpuset_cpus"]] if "cpuset_cpus" in options else []
        flags = host_flags(host_settings(engine))
        header = "$ docker run " + " ".join(
            redact_args([*bound, *flags, options["image"], *options["entrypoint"],
                         *options["command"]])
        )  # fmt: skip
        log_path.write_text(header + "\n")
        try:
            container.start()
        except docker.errors.APIError as exc:
            detail = " ".join(str(exc.explanation or exc).split())
            if options["device_requests"]:
                raise EngineError(
                    f"cannot start {options['image']} with GPUs ({engine.gpus}): {detail}; this "
                    "Docker host has no usable NVIDIA runtime (set docker_host to a GPU host, "
                    "or unset gpus)"
                ) from None
            raise EngineError(f"cannot start {options['image']}: {detail}") from None
        pump = _LogPump(container, log_path)
        # Requests go to the host's published port and name the model as the server loaded it.
        requests_to = engine.model_copy(update={"model": inside.model})
        running = RunningEngine(requests_to, spec, adapter, log_path, container_id=container.id)
        running.poll = lambda: _exit_code(container, pump)
        wait_healthy(
            engine.base_url,
            adapter.health_path,
            engine.startup_timeout_s,
            None,
            log_path,
            poll=running.poll,
        )
        if warmup:
            warm_up(running)
        yield running
    finally:
        if container is None:
            # A Ctrl-C can land after the daemon created the container and before its id came
            # back; the name is ours alone, so find it by that.
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                container = client.containers.get(options["name"])
        if container is not None:
            # Stop before removing, so the pump sees the stream end and the log keeps its tail;
            # the removal runs even if a second Ctrl-C cuts the stop short.
            try:
                with contextlib.suppress(docker.errors.APIError):
                    container.stop(timeout=STOP_GRACE_S)
                if pump is not None:
                    pump.drain()
            finally:
                with contextlib.suppress(docker.errors.NotFound):
                    container.remove(force=True)
        client.close()


# The oldest NVIDIA driver each CUDA major release runs on (NVIDIA's CUDA toolkit release notes,
# "CUDA Toolkit and Minimum Required Driver Version", Linux x86_64).
MIN_DRIVER_FOR_CUDA = {11: (450, 80), 12: (525, 60), 13: (580, 65)}


def image_cuda_version(image_attrs: dict[str, Any]) -> tuple[int, int] | None:
    """The CUDA version an image is built on, from its ``CUDA_VERSION`` environment variable."""
    for item in (image_attrs.get("Config") or {}).get("Env") or []:
        name, _, value = item.partition("=")
        if name == "CUDA_VERSION" and value:
            major, _, rest = value.partition(".")
            return int(major), int(rest.partition(".")[0] or 0)
    return None


def check_gpu_answer(gpus: str, cuda: tuple[int, int] | None, nvidia_smi: str) -> None:
    """Compare ``nvidia-smi --query-gpu=driver_version`` run in the image with what is asked.

    Raises:
        EngineError: Fewer GPUs than ``gpus`` asks for, or a driver older than the image's CUDA
            needs.
    """
    drivers = [line.strip() for line in nvidia_smi.splitlines() if line.strip()]
    if not drivers:
        raise EngineError("nvidia-smi in the engine image saw no GPU on the Docker host")
    wanted = (
        len(gpus.removeprefix("device=").split(","))
        if gpus.startswith("device=")
        else (0 if gpus == "all" else int(gpus))
    )
    if wanted > len(drivers):
        raise EngineError(f"gpus={gpus} asks for {wanted} GPUs; the Docker host has {len(drivers)}")
    if cuda is not None and cuda[0] in MIN_DRIVER_FOR_CUDA:
        have = tuple(int(x) for x in drivers[0].split(".")[:2])
        need = MIN_DRIVER_FOR_CUDA[cuda[0]]
        if have < need:
            raise EngineError(
                f"the image is built on CUDA {cuda[0]}.{cuda[1]}, which needs NVIDIA driver "
                f">= {need[0]}.{need[1]}; the Docker host has {drivers[0]}"
            )


def check_gpus(client: Any, engine: EngineConfig, image: str) -> None:
    """The Docker host can give the image the GPUs asked for, with a new enough driver.

    Runs ``nvidia-smi`` in a throwaway container of the engine's image with the same device
    request, so what is checked is what the engine will see.

    Raises:
        EngineError: No NVIDIA runtime on the host, too few GPUs, or too old a driver.
    """
    assert engine.gpus
    runtimes = sorted((client.info().get("Runtimes") or {}).keys())
    if "nvidia" not in runtimes:
        raise EngineError(
            f"gpus={engine.gpus} asked, but the Docker host has no NVIDIA runtime (runtimes: "
            f"{', '.join(runtimes) or 'none'}); install the NVIDIA Container Toolkit there"
        )
    cuda = image_cuda_version(client.images.get(image).attrs)
    try:
        out = client.containers.run(
            image,
            entrypoint=["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            device_requests=device_requests(engine.gpus),
            remove=True,
        )
    except Exception as exc:
        detail = " ".join(str(exc).split())[:300]
        raise EngineError(f"nvidia-smi in {image} failed on the Docker host: {detail}") from None
    check_gpu_answer(engine.gpus, cuda, out.decode(errors="replace"))


def check_docker(engine: EngineConfig) -> None:
    """The image is on the Docker host, it sees the GPUs asked for, and the port is free."""
    image = engine.image or container_spec(engine.kind).image
    client = docker_client(engine)
    try:
        try:
            client.images.get(image)
        except Exception:
            raise EngineError(
                f"image {image} is not on the Docker host; pull it there "
                "(or run containers/build.sh for speedbench/vllm-cpu)"
            ) from None
        left = [c.name for c in client.containers.list(all=True, filters={"label": LABEL})]
        if left:
            raise EngineError(
                f"the Docker host still has {len(left)} speedbench container(s) from an earlier "
                f"sweep ({', '.join(sorted(left))}), which may hold its GPUs and ports; if no "
                f"other sweep runs there, remove them: docker rm -f {' '.join(sorted(left))}"
            )
        if engine.gpus:
            check_gpus(client, engine, image)
    finally:
        client.close()
    if not remote_host(engine):  # a remote host's port is checked there, by the daemon
        check_port_free(engine.host, engine.port)


register_launcher(
    Launcher(
        "docker",
        lambda e, s, log: launch_docker(e, s, log),
        check_available=check_docker,
        binds_cores_here=lambda engine: remote_host(engine) is None,
    )
)
