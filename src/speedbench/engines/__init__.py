"""Engine adapters (one module per engine, registered by import) and launchers."""

# Importing the modules registers the adapters (llamacpp, sglang, trtllm, vllm) and launchers.
from speedbench.engines import docker, llamacpp, local, sglang, trtllm, vllm  # noqa: F401
from speedbench.engines.base import (
    ENGINES,
    EngineAdapter,
    EngineError,
    StreamEvent,
    UnsupportedSpecError,
    get_engine,
    register_engine,
)

__all__ = [
    "ENGINES",
    "EngineAdapter",
    "EngineError",
    "StreamEvent",
    "UnsupportedSpecError",
    "get_engine",
    "register_engine",
]
