"""PromptLookup against a brute-force scan of the context."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from reference import rank

from mdsd.sources import PromptLookup


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


# ---- propose_table: the batched, on-device form of propose ----------------------------------------


def table_row_by_row(
    source: PromptLookup, tokens: torch.Tensor, lengths: torch.Tensor, width: int, depth: int
):
    """The decoder's [B, width, depth] table built from ``propose`` one row at a time (-1 padded)."""
    table = np.full((tokens.shape[0], width, depth), -1, dtype=np.int64)
    for b, (row, n) in enumerate(zip(tokens.tolist(), lengths.tolist(), strict=True)):
        for i, proposal in enumerate(source.propose(row[:n], width, depth)):
            table[b, i, : len(proposal.tokens)] = proposal.tokens
    return torch.from_numpy(table)


def random_row(rng: np.random.Generator, kind: int) -> list[int]:
    """A context meant to stress the ranking's ties (tiny alphabets), the edges and large token ids."""
    offset = int(rng.choice([0, 150_000]))
    size = int(rng.integers(0, 61))
    if kind == 0:  # all one token: every earlier position matches, chains run into the suffix
        return [offset + 3] * size
    if kind == 1:  # distinct tokens: no match
        return (offset + rng.permutation(size)).tolist()
    if kind == 2:  # nothing before the last token
        return [offset] * int(rng.integers(0, 2))
    if kind == 3:  # a noisy period: long matches, several of them
        period = rng.integers(0, 3, size=int(rng.integers(1, 5)))
        row = np.resize(period, size)
        noise = rng.random(size) < 0.1
        row[noise] = rng.integers(0, 3, size=int(noise.sum()))
        return (offset + row).tolist()
    return (offset + rng.integers(0, int(rng.integers(1, 6)), size=size)).tolist()


def padded(rng: np.random.Generator, rows: list[list[int]], extra: int) -> tuple[torch.Tensor, torch.Tensor]:
    """rows in a [B, L] buffer whose padding is garbage (random ids, often ones the rows hold)."""
    lengths = [len(row) for row in rows]
    size = max(lengths, default=0) + extra
    pool = sorted({t for row in rows for t in row} | {0, 1, 150_000})
    tokens = rng.choice(pool, size=(len(rows), size))
    for b, row in enumerate(rows):
        tokens[b, : len(row)] = row
    return torch.as_tensor(tokens, dtype=torch.int64), torch.tensor(lengths, dtype=torch.int64)


@pytest.mark.parametrize("seed", range(250))
def test_propose_table_equals_propose_row_by_row(seed):
    rng = np.random.default_rng(seed)
    rows = [random_row(rng, int(rng.integers(0, 8))) for _ in range(6)]
    tokens, lengths = padded(rng, rows, extra=int(rng.integers(0, 5)))
    max_ngram = int(rng.integers(1, 6))
    source = PromptLookup(max_ngram=max_ngram, min_ngram=int(rng.integers(1, max_ngram + 1)))
    width, depth = int(rng.integers(1, 7)), int(rng.integers(1, 8))
    expected = table_row_by_row(source, tokens, lengths, width, depth)
    assert torch.equal(source.propose_table(tokens, lengths, width, depth), expected)


ADVERSARIAL = [
    [],  # length 0
    [7],  # length 1
    [7, 7],  # the shortest match
    [4, 4, 4, 4, 4, 4],  # all one token
    [1, 2, 3, 4, 5],  # no match
    [1, 2, 1, 3, 1, 4, 1, 5, 1],  # four first tokens, each once: recency alone decides
    [5, 1, 2, 7, 0, 2, 8, 0, 2, 8, 5, 1, 2],  # the longest match wins over more frequent shorter ones
    [1, 4, 1, 3, 1, 4, 1, 6, 1],  # frequency, then recency
    [2, 9, 2, 9, 1, 2, 9, 2, 9, 1, 2, 9],  # chains that end at the context's end
    [150_000, 149_999, 150_000, 149_999, 150_000],  # large token ids
]


@pytest.mark.parametrize(("max_ngram", "min_ngram"), [(1, 1), (3, 1), (3, 3), (5, 4)])
@pytest.mark.parametrize(("width", "depth"), [(1, 1), (3, 4), (8, 12)])
def test_propose_table_on_the_edge_cases(max_ngram, min_ngram, width, depth):
    rng = np.random.default_rng(0)
    tokens, lengths = padded(rng, ADVERSARIAL, extra=2)
    source = PromptLookup(max_ngram=max_ngram, min_ngram=min_ngram)
    expected = table_row_by_row(source, tokens, lengths, width, depth)
    assert torch.equal(source.propose_table(tokens, lengths, width, depth), expected)


def test_propose_table_shape_dtype_and_device():
    source = PromptLookup()
    tokens = torch.tensor([[5, 6, 5, 0], [1, 1, 1, 1]], dtype=torch.int32)
    table = source.propose_table(tokens, torch.tensor([3, 4], dtype=torch.int32), width=3, depth=2)
    assert table.dtype == torch.int64 and table.device == tokens.device and table.shape == (2, 3, 2)
    assert table.tolist() == [[[6, 5], [-1, -1], [-1, -1]], [[1, -1], [-1, -1], [-1, -1]]]  # (1, 1, 1) once
    for size in (0, 1):  # no row can match
        empty = source.propose_table(torch.zeros(2, size, dtype=torch.int64), torch.full((2,), size), 2, 3)
        assert empty.shape == (2, 2, 3) and bool((empty == -1).all())
    no_rows = torch.zeros(0, 5, dtype=torch.int64)
    assert source.propose_table(no_rows, no_rows[:, 0], 2, 3).shape == (0, 2, 3)


def test_propose_table_traces_in_one_graph():
    """torch.compile(fullgraph=True) fails on any host synchronisation or data-dependent shape."""
    source = PromptLookup(max_ngram=2)
    rng = np.random.default_rng(1)
    tokens, lengths = padded(rng, ADVERSARIAL, extra=3)
    step = torch.compile(lambda t, n: source.propose_table(t, n, 3, 4), fullgraph=True, backend="aot_eager")
    assert torch.equal(step(tokens, lengths), table_row_by_row(source, tokens, lengths, 3, 4))


def test_propose_table_refuses_bad_shapes():
    source = PromptLookup()
    tokens, lengths = torch.zeros(2, 4, dtype=torch.int64), torch.tensor([4, 4])
    with pytest.raises(ValueError, match="tokens"):
        source.propose_table(tokens[0], lengths, 1, 1)
    with pytest.raises(ValueError, match="tokens"):
        source.propose_table(tokens.float(), lengths, 1, 1)
    with pytest.raises(ValueError, match="lengths"):
        source.propose_table(tokens, lengths[:1], 1, 1)
    with pytest.raises(ValueError, match="lengths"):
        source.propose_table(tokens, lengths[:, None], 1, 1)
    with pytest.raises(TypeError, match="tokens"):
        source.propose_table(tokens.tolist(), lengths, 1, 1)
    with pytest.raises(ValueError, match="width"):
        source.propose_table(tokens, lengths, 0, 1)
    with pytest.raises(ValueError, match="depth"):
        source.propose_table(tokens, lengths, 1, 0)
