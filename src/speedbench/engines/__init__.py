"""Engine adapters (one module per engine, registered by import) and launchers."""

from speedbench.engines import sglang, trtllm, vllm  # noqa: F401  (register the adapters)
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
