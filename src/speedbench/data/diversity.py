"""Diversity selection over sentence embeddings (SPEED-Bench's per-category picking rule).

Pure numpy, so the rule has exact unit tests. Embeddings are L2-normalised rows, so a dot product
is the cosine similarity.
"""

from __future__ import annotations

import numpy as np


def cosine_matrix(emb: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarity of the rows of ``emb`` (normalised here, zero rows kept 0)."""
    emb = np.asarray(emb, dtype=np.float64)
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    unit = np.divide(emb, norms, out=np.zeros_like(emb), where=norms > 0)
    return unit @ unit.T


def greedy_diverse(emb: np.ndarray, k: int) -> list[int]:
    """Pick ``k`` rows that keep the mean pairwise cosine similarity low.

    Start at the row with the lowest mean similarity to all others, then repeatedly add the row
    whose summed similarity to the chosen set is lowest. Ties go to the lowest index, so the
    result is deterministic.

    Args:
        emb: ``(n, d)`` embeddings.
        k: How many to pick; all ``n`` (in greedy order) when ``k >= n``.

    Returns:
        Row indices in the order they were picked.
    """
    n = len(emb)
    if k <= 0 or n == 0:
        return []
    sim = cosine_matrix(emb)
    if n == 1:
        return [0]
    mean_to_rest = (sim.sum(axis=1) - np.diag(sim)) / (n - 1)
    chosen = [int(np.argmin(mean_to_rest))]
    summed = sim[chosen[0]].copy()
    taken = np.zeros(n, dtype=bool)
    taken[chosen[0]] = True
    while len(chosen) < min(k, n):
        summed_free = np.where(taken, np.inf, summed)
        nxt = int(np.argmin(summed_free))
        chosen.append(nxt)
        taken[nxt] = True
        summed += sim[nxt]
    return chosen


def mean_pairwise_cosine(emb: np.ndarray) -> float:
    """Mean cosine similarity over all unordered pairs of distinct rows (nan below two rows)."""
    n = len(emb)
    if n < 2:
        return float("nan")
    sim = cosine_matrix(emb)
    return float((sim.sum() - np.trace(sim)) / (n * (n - 1)))


def random_pick_cosine(emb: np.ndarray, k: int, draws: int = 100, seed: int = 0) -> float:
    """Mean over ``draws`` seeded random picks of size ``k`` of their mean pairwise cosine."""
    n = len(emb)
    k = min(k, n)
    rng = np.random.default_rng(seed)
    sim = cosine_matrix(emb)
    vals = []
    for _ in range(draws):
        idx = rng.choice(n, size=k, replace=False)
        sub = sim[np.ix_(idx, idx)]
        vals.append((sub.sum() - np.trace(sub)) / (k * (k - 1)) if k > 1 else np.nan)
    return float(np.mean(vals))
