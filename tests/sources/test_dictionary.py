"""SPECTRA-style dictionaries: the paper's update, the online update, and the proposal rule."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from mdsd.sources import Dictionary, NGramTables


def reference_tables(seq: list[int], n: int):
    """Backward: each k-gram (k < n) -> the token after its latest occurrence. Forward: for each token,
    the maximal (under "is a prefix of") tails seq[p+1 : p+n] of its occurrences."""
    backward = {}
    for t in range(1, len(seq)):
        for k in range(1, min(n - 1, t) + 1):
            backward[tuple(seq[t - k : t])] = seq[t]
    tails: dict[int, set] = {}
    for p in range(len(seq) - 1):
        tails.setdefault(seq[p], set()).add(tuple(seq[p + 1 : p + n]))
    forward = {
        key: {t for t in group if not any(u != t and u[: len(t)] == t for u in group)}
        for key, group in tails.items()
    }
    return forward, backward


def reference_guess(ctx: list[int], backward: dict, n: int, length: int):
    seq, guess, first_k = list(ctx), [], 0
    while len(guess) < length:
        found = [k for k in range(1, n) if len(seq) >= k and tuple(seq[len(seq) - k :]) in backward]
        if not found:
            break
        first_k = first_k or max(found)
        guess.append(backward[tuple(seq[len(seq) - max(found) :])])
        seq.append(guess[-1])
    return tuple(guess), first_k


def test_add_is_the_paper_update():
    tables = NGramTables(n=4)
    tables.add([1, 2, 3, 4])
    assert tables.backward == {(1,): 2, (1, 2): 3, (1, 2, 3): 4}
    assert {k: list(v) for k, v in tables.forward.items()} == {1: [(2, 3, 4)], 2: [(3, 4)], 3: [(4,)]}
    tables.add([1, 2, 5])
    assert tables.backward[(1, 2)] == 5, "the latest occurrence wins"
    assert list(tables.forward[1]) == [(2, 3, 4), (2, 5)] and list(tables.forward[2]) == [(3, 4), (5,)]
    tables.add([1, 2])
    assert list(tables.forward[1]) == [(2, 5), (2, 3, 4)], "a known prefix refreshes the longest entry"
    with pytest.raises(ValueError, match="ngram must hold 2..4"):
        tables.add([1, 2, 3, 4, 5])


@pytest.mark.parametrize("seed", range(150))
def test_observe_learns_what_the_reference_says(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 6))
    seq = rng.integers(0, int(rng.integers(1, 5)), size=int(rng.integers(0, 40))).tolist()
    online = Dictionary(n=n, capacity=10_000)
    for t in range(0, len(seq) + 1, int(rng.integers(1, 5))):  # a few tokens per step
        online.observe(seq[:t])
    online.observe(seq)
    forward, backward = reference_tables(seq, n)
    assert online.tables.backward == backward
    assert {k: set(v) for k, v in online.tables.forward.items()} == forward
    windows = NGramTables(n=n, capacity=10_000)  # the paper's update on every window, same content
    for s in range(len(seq) - 1):
        windows.add(seq[s : s + n])
    assert windows.backward == backward
    assert {k: set(v) for k, v in windows.forward.items()} == forward


@pytest.mark.parametrize("seed", range(150))
def test_proposals_follow_the_rule(seed):
    rng = np.random.default_rng(seed)
    n, alphabet = int(rng.integers(2, 6)), int(rng.integers(1, 5))
    seq = rng.integers(0, alphabet, size=int(rng.integers(2, 40))).tolist()
    ctx = rng.integers(0, alphabet, size=int(rng.integers(0, 6))).tolist()
    width, depth = int(rng.integers(1, 5)), int(rng.integers(1, 7))
    source = Dictionary(n=n, capacity=10_000)
    source.observe(seq)
    got = source.propose(ctx, width, depth)
    if not ctx:
        assert got == []
        return
    forward, backward = reference_tables(seq, n)
    guess, first_k = reference_guess(ctx, backward, n, min(depth, n))
    firsts = [c.tokens[0] for c in got]
    assert len(firsts) == len(set(firsts)) <= width
    assert all(1 <= len(c.tokens) <= depth for c in got)
    rest = got
    if guess:
        assert (got[0].tokens, got[0].score) == (guess, float(first_k))
        rest = got[1:]
    pool = {t[:depth] for t in forward.get(ctx[-1], set())}
    assert all(c.tokens in pool and c.score == 1.0 for c in rest)
    expected_count = min(width, len({t[0] for t in pool} | set(guess[:1])))
    assert len(got) == expected_count, "every distinct first token is offered up to the width"


def test_forward_pool_is_most_recent_first_and_bounded():
    source = Dictionary(n=2, capacity=2)
    source.observe([1, 5, 1, 6, 1, 7, 1, 6])
    assert list(source.tables.forward[1]) == [(7,), (6,)], "(5,) evicted; (6,) refreshed last"
    got = source.propose([9, 1], width=3, depth=2)
    assert [c.tokens for c in got] == [(6, 1), (7,)], "backward guess (1 -> 6 -> 1) first, then the pool"
    assert got[0].score == 1.0


def test_sequences_and_forks():
    source = Dictionary(n=3)
    source.observe([1, 2, 3])
    before = copy.deepcopy(source.tables.__dict__)
    source.observe([1, 2, 3])
    assert source.tables.__dict__ == before, "re-observing the same context learns nothing"
    source.observe([4, 2, 9])  # not an extension: a new sequence, learnt from its start
    assert source.tables.backward[(4, 2)] == 9 and source.tables.backward[(1, 2)] == 3
    row = source.fork()
    assert row.tables is source.tables
    row.observe([8, 8])
    assert source.tables.backward[(8,)] == 8, "forks share the tables"
    assert source.propose([5], 2, 2) == [] and source.propose([], 2, 2) == []
    with pytest.raises(ValueError, match="capacity must be an int >= 1"):
        Dictionary(capacity=0)
    with pytest.raises(ValueError, match="n must be an int >= 2"):
        Dictionary(n=1)
