"""The depth-limited suffix array and its range search, against sorting and scanning by brute force."""

from __future__ import annotations

import numpy as np
import pytest

from mdsd.sources import suffix_array, suffix_range


def random_corpus(rng) -> np.ndarray:
    n = int(rng.integers(1, 60))
    tokens = rng.integers(0, int(rng.integers(1, 4)), size=n)
    tokens[rng.random(n) < 0.08] = -1  # document separators
    if n > 8 and rng.random() < 0.5:  # a long repeat, so that depth matters
        tokens[n // 2 : n // 2 + n // 4] = tokens[: n // 4]
    return tokens


@pytest.mark.parametrize("seed", range(200))
def test_order_is_python_tuple_order_then_position(seed):
    rng = np.random.default_rng(seed)
    tokens = random_corpus(rng)
    depth = int(rng.integers(1, 12))
    listed = tokens.tolist()
    expected = sorted(range(tokens.size), key=lambda i: (tuple(listed[i : i + depth]), i))
    assert suffix_array(tokens, depth).tolist() == expected


@pytest.mark.parametrize("seed", range(200))
def test_range_holds_exactly_the_occurrences_with_a_next_token(seed):
    rng = np.random.default_rng(seed)
    tokens = random_corpus(rng)
    m = int(rng.integers(1, 5))
    sa = suffix_array(tokens, m + 1)
    pattern = tuple(rng.integers(0, 3, size=m).tolist())
    listed = tokens.tolist()
    expected = {
        i for i in range(tokens.size - m) if tuple(listed[i : i + m]) == pattern and listed[i + m] >= 0
    }
    lo, hi = suffix_range(tokens, sa, pattern)
    assert set(sa[lo:hi].tolist()) == expected


def test_tiny_inputs():
    assert suffix_array(np.array([7]), 4).tolist() == [0]
    assert suffix_array(np.zeros(0, dtype=np.int64), 4).tolist() == []
    one = np.array([7])
    assert suffix_range(one, suffix_array(one, 4), (7,)) == (1, 1), "a match with no next token"
