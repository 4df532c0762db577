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
class ContainerSpec:
    """How to run one engine kind in a container.

    Attributes:
        image: Default image.
        entrypoint: Command before the adapter's server arguments.
        port: Port the server listens on inside the container.
        health_path: Endpoint that answers 200 once the server is ready.
    """

    image: str
    entrypoint: tuple[str, ...]
    port: int = 8000
    health_path: str = "/health"


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
    ContainerSpec(image="vllm/vllm-openai:v0.32.0", entrypoint=("vllm", "serve")),
)
