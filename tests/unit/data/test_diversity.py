"""Greedy diversity selection and pool allocation, on hand-made inputs with known answers."""

import math

import numpy as np
import pytest

from speedbench.data.diversity import greedy_diverse, mean_pairwise_cosine, random_pick_cosine
from speedbench.data.qualitative import allocate

R = 1 / math.sqrt(2)
# e1, e2, e3 are orthogonal; v sits between e1 and e2 (cosine 0.7071 to each, 0 to e3).
VECS = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [R, R, 0]], dtype=float)


def test_greedy_starts_at_lowest_mean_similarity_and_breaks_ties_by_index():
    # Mean similarity to the rest: e1 .2357, e2 .2357, e3 0, v .4714 -> start at e3 (2).
    # Then e1, e2 and v all sum to 0 against {e3}: the lowest index, e1 (0), wins; then e2 (0
    # against {e3, e1}) beats v (.7071); v comes last.
    assert greedy_diverse(VECS, 4) == [2, 0, 1, 3]


def test_greedy_is_prefix_stable_and_clamped():
    full = greedy_diverse(VECS, 4)
    for k in range(5):
        assert greedy_diverse(VECS, k) == full[:k]
    assert greedy_diverse(VECS, 10) == full
    assert greedy_diverse(VECS[:1], 3) == [0]
    assert greedy_diverse(np.zeros((0, 3)), 2) == []


def test_greedy_is_invariant_to_vector_scale():
    assert greedy_diverse(VECS * np.array([[3.0], [0.5], [7.0], [2.0]]), 4) == [2, 0, 1, 3]


def test_mean_pairwise_cosine_exact():
    assert mean_pairwise_cosine(VECS[:3]) == pytest.approx(0.0)
    # Pairs with v: (e1, v) and (e2, v) at .7071, four others at 0 -> 1.4142 / 6.
    assert mean_pairwise_cosine(VECS) == pytest.approx(2 * R / 6)
    assert math.isnan(mean_pairwise_cosine(VECS[:1]))


def test_random_pick_of_everything_equals_the_whole_set_and_is_seeded():
    assert random_pick_cosine(VECS, 4, draws=5, seed=1) == pytest.approx(2 * R / 6)
    rng = np.random.default_rng(7)
    emb = rng.normal(size=(40, 8))
    a = random_pick_cosine(emb, 5, draws=20, seed=3)
    assert a == random_pick_cosine(emb, 5, draws=20, seed=3)
    assert a != random_pick_cosine(emb, 5, draws=20, seed=4)


def test_greedy_beats_random_on_clustered_data():
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(5, 16))
    emb = np.concatenate([c + 0.1 * rng.normal(size=(30, 16)) for c in centers])
    pick = greedy_diverse(emb, 5)
    # One point per cluster: the picks' cluster labels are all different.
    assert sorted(i // 30 for i in pick) == [0, 1, 2, 3, 4]
    assert mean_pairwise_cosine(emb[pick]) < random_pick_cosine(emb, 5, draws=100, seed=0)


@pytest.mark.parametrize(
    ("sizes", "total", "expected"),
    [
        ({"a": 10, "b": 500, "c": 500}, 400, {"a": 10, "b": 195, "c": 195}),
        ({"a": 3, "b": 4}, 10, {"a": 3, "b": 4}),
        ({"a": 100, "b": 100, "c": 100}, 100, {"a": 34, "b": 33, "c": 33}),
        ({"x": 80, "y": 5, "z": 20}, 60, {"x": 35, "y": 5, "z": 20}),
        ({"a": 7}, 0, {"a": 0}),
    ],
)
def test_allocate_water_fills(sizes, total, expected):
    assert allocate(sizes, total) == expected
