"""Engine adapters (one module per engine, registered by import) and launchers."""

from speedbench.engines import vllm  # noqa: F401  (registers the adapter)
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
