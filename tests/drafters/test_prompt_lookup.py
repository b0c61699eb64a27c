"""PromptLookup against a brute-force scan of the context."""

from __future__ import annotations

import numpy as np
import pytest
from reference import rank

from mdsd.drafters import PromptLookup


def brute_force(ctx: list[int], max_ngram: int, min_ngram: int, width: int, depth: int):
    n = len(ctx)
    for m in range(min(max_ngram, n - 1), min_ngram - 1, -1):
        ends = [p for p in range(m - 1, n - 1) if ctx[p - m + 1 : p + 1] == ctx[n - m :]]
        if ends:
            ends.reverse()  # most recent first
            rows = [tuple(ctx[p + 1 : p + 1 + depth]) for p in ends]
            return m, rank(rows, width, keys=[-p for p in ends])
    return 0, []


@pytest.mark.parametrize("seed", range(300))
def test_matches_a_brute_force_scan(seed):
    rng = np.random.default_rng(seed)
    ctx = rng.integers(0, int(rng.integers(1, 5)), size=int(rng.integers(0, 40))).tolist()
    max_ngram = int(rng.integers(1, 6))
    min_ngram = int(rng.integers(1, max_ngram + 1))
    width, depth = int(rng.integers(1, 5)), int(rng.integers(1, 6))
    source = PromptLookup(max_ngram=max_ngram, min_ngram=min_ngram)
    m, expected = brute_force(ctx, max_ngram, min_ngram, width, depth)
    got = source.propose(ctx, width, depth)
    assert [(c.tokens, c.score) for c in got] == expected
    assert source.match(ctx)[0] == m


def test_longest_match_wins_over_more_frequent_shorter_ones():
    ctx = [5, 1, 2, 7, 0, 2, 8, 0, 2, 8, 5, 1, 2]
    source = PromptLookup(max_ngram=3)
    assert source.match(ctx)[0] == 3
    assert [c.tokens for c in source.propose(ctx, 3, 2)] == [(7, 0)], "only (5, 1, 2) counts, not (2,)"
    assert [c.tokens for c in PromptLookup(max_ngram=1).propose(ctx, 3, 1)] == [(8,), (7,)]


def test_frequency_then_recency():
    ctx = [1, 4, 1, 3, 1, 4, 1, 6, 1]
    got = PromptLookup(max_ngram=1).propose(ctx, 3, 1)
    assert [(c.tokens, c.score) for c in got] == [((4,), 2.0), ((6,), 1.0), ((3,), 1.0)]


def test_edge_cases():
    source = PromptLookup()
    assert source.propose([], 2, 3) == [] and source.propose([7], 2, 3) == [], "nothing before"
    assert source.propose([1, 2, 3], 2, 3) == [], "no match"
    assert [c.tokens for c in source.propose([1, 2, 1], 2, 5)] == [(2, 1)], "cut at the context end"
    assert [c.tokens for c in source.propose([3, 3, 3, 3], 4, 4)] == [(3,)], "overlapping self-match"
    assert source.match([1, 2, 3])[0] == 0
    assert PromptLookup(max_ngram=3, min_ngram=3).propose([1, 2, 9, 2], 1, 1) == [], "min_ngram"
    source.observe([1, 2, 3])  # stateless
    assert source.propose(np.array([5, 6, 5], dtype=np.int32), 1, 1)[0].tokens == (6,)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="max_ngram"):
        PromptLookup(max_ngram=0)
    with pytest.raises(ValueError, match="min_ngram must be <= max_ngram"):
        PromptLookup(max_ngram=2, min_ngram=3)
    with pytest.raises(ValueError, match="width"):
        PromptLookup().propose([1, 1], 0, 1)
