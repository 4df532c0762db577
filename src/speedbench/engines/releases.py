"""Which release of an engine a launch will run, known before it starts.

Engines rename flags and config keys between releases (SGLang 0.5.10 dropped the n-gram
match-window flags; TensorRT-LLM after 1.2 spells its draft-model decoding type
``Draft_Target``), so an adapter that builds a launch must know the release it drives:

- a container runs the release its image tag names (``lmsysorg/sglang:v0.5.23-cu129`` ->
  0.5.23, ``nvcr.io/nvidia/tensorrt-llm/release:1.2.0`` -> 1.2.0), the image being the
  config's or the engine's default;
- a local process runs the distribution installed beside the engine's interpreter, read from
  its package metadata (no engine import, so no CUDA and well under a second).

None means the release cannot be told (a tag such as ``latest``, no interpreter): an adapter
then refuses whatever differs by release, saying how to name it.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

from speedbench.config import EngineConfig

Release = tuple[int, ...]


def parse_release(text: str | None) -> Release | None:
    """``v0.5.23-cu129`` / ``1.3.0rc12`` / ``0.32.0`` -> (major, minor, patch); else None."""
    match = re.match(r"v?(\d+)\.(\d+)\.(\d+)", text or "")
    return tuple(int(g) for g in match.groups()) if match else None


def image_release(image: str | None) -> Release | None:
    """The release an image tag names (the part after the last ``:``)."""
    return parse_release((image or "").rpartition(":")[2])


@functools.lru_cache(maxsize=32)
def installed_release(python: str, distribution: str) -> Release | None:
    """The release of ``distribution`` installed in the environment of ``python``."""
    if not Path(python).exists():
        return None
    probe = "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))"
    try:
        proc = subprocess.run(
            [python, "-c", probe, distribution], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_release(proc.stdout.strip()) if proc.returncode == 0 else None


def engine_release(engine: EngineConfig, distribution: str) -> Release | None:
    """The release ``engine`` will run: its image's tag in Docker, else the installed one.

    None for an external server: someone else launched it, with whatever release they have.
    """
    if engine.launcher == "external":
        return None
    if engine.launcher == "docker":
        from speedbench.engines.containers import container_spec

        return image_release(engine.image or container_spec(engine.kind).image)
    from speedbench.engines.base import EngineError, engine_python

    try:
        python = engine_python(engine)
    except EngineError:
        return None
    return installed_release(python, distribution)


def release_name(release: Release | None) -> str:
    """``0.5.23``, or ``unknown``."""
    return ".".join(map(str, release)) if release else "unknown"
