"""Container specs: which image runs an engine, how it is started, where it is healthy.

One spec per engine kind, registered like the adapters. The launcher (``engines/docker.py``)
combines a spec with the adapter's server arguments, so adding an engine's container is one
``register_container`` call next to its adapter.

Default images are the engines' public serving images for GPU hosts; ``EngineConfig.image``
overrides them (``speedbench/vllm-cpu:0.32.0`` is the CPU image ``containers/build.sh`` builds).
"""

from __future__ import annotations

from dataclasses import dataclass

from speedbench.engines.base import EngineError


@dataclass(frozen=True)
class HostSettings:
    """What the engine's own ``docker run`` line asks of the host, besides GPUs.

    Attributes:
        ipc: IPC namespace: ``host`` (the host's shared memory, what PyTorch's worker
            processes and NCCL use) or ``private`` (the container's own /dev/shm).
        shm_size: /dev/shm size where the namespace is private (ignored under ``host``).
        ulimits: name -> limit (soft and hard; -1 unlimited), e.g. ``memlock``.
        source: Where the setting comes from: the engine's documented run line.
    """

    ipc: str = "private"
    shm_size: str = "2g"
    ulimits: tuple[tuple[str, int], ...] = ()
    source: str = ""


@dataclass(frozen=True)
class ContainerSpec:
    """How to run one engine kind in a container.

    Attributes:
        image: Default image.
        entrypoint: Command before the adapter's server arguments.
        port: Port the server listens on inside the container.
        health_path: Endpoint that answers 200 once the server is ready.
        gpu_host: The host settings of its GPU run line.
        cpu_host: Those of its CPU run line, where it has one (else ``gpu_host``).
    """

    image: str
    entrypoint: tuple[str, ...]
    port: int = 8000
    health_path: str = "/health"
    gpu_host: HostSettings = HostSettings()
    cpu_host: HostSettings | None = None

    def host(self, gpus: bool) -> HostSettings:
        """The settings of the run line for a host with GPUs or without."""
        return self.gpu_host if gpus or self.cpu_host is None else self.cpu_host


CONTAINERS: dict[str, ContainerSpec] = {}


def register_container(kind: str, spec: ContainerSpec) -> None:
    """Register the container spec of engine ``kind``."""
    if kind in CONTAINERS:
        raise ValueError(f"container spec for {kind!r} is already registered")
    CONTAINERS[kind] = spec


def container_spec(kind: str) -> ContainerSpec:
    """The spec of ``kind``, with a one-line error naming the known ones."""
    import speedbench.engines  # noqa: F401  (registers the built-in engines)

    if kind not in CONTAINERS:
        raise EngineError(f"no container spec for engine {kind!r}; have {sorted(CONTAINERS)}")
    return CONTAINERS[kind]


# The public vLLM OpenAI server image (GPU); `vllm serve` is its own entrypoint and the local
# launcher's command.
register_container(
    "vllm",
    ContainerSpec(
        image="vllm/vllm-openai:v0.32.0",
        entrypoint=("vllm", "serve"),
        gpu_host=HostSettings(
            ipc="host", source="vLLM docs, Using Docker: docker run --gpus all --ipc=host"
        ),
        cpu_host=HostSettings(
            shm_size="4g", source="vLLM docs, CPU installation: docker run --shm-size=4g"
        ),
    ),
)
