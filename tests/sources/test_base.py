"""The shared ranking rule and the request checks, against a plain-Python reference; sources by name."""

from __future__ import annotations

import numpy as np
import pytest
from reference import rank

from mdsd.sources import (
    Continuation,
    Datastore,
    Dictionary,
    Priority,
    PromptLookup,
    Source,
    make_source,
    rank_continuations,
)
from mdsd.sources.base import PAD, as_context, check_request


def as_pairs(proposals: list[Continuation]):
    return [(c.tokens, c.score) for c in proposals]


@pytest.mark.parametrize("seed", range(200))
def test_ranking_matches_the_reference_on_random_rows(seed):
    rng = np.random.default_rng(seed)
    r, d = int(rng.integers(1, 12)), int(rng.integers(1, 5))
    rows = rng.integers(0, int(rng.integers(1, 4)), size=(r, d))
    lengths = rng.integers(1, d + 1, size=r)
    rows[np.arange(d)[None, :] >= lengths[:, None]] = PAD
    width = int(rng.integers(1, 5))
    tuples = [tuple(int(t) for t in row if t != PAD) for row in rows]
    got = as_pairs(rank_continuations(rows, width))
    assert got == rank(tuples, width, keys=list(range(r))), "ties go to the earliest row"
    firsts = [tokens[0] for tokens, _ in got]
    assert len(set(firsts)) == len(firsts) == min(width, len({t[0] for t in tuples}))
    assert all(1 <= len(tokens) <= d for tokens, _ in got)
    assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)


def test_ranking_edge_cases():
    one = np.array([[4, PAD, PAD]])
    assert as_pairs(rank_continuations(one, 5)) == [((4,), 1.0)], "width beyond the continuations"
    tie = np.array([[9, 1], [2, 1], [2, 3], [9, 3]])
    assert as_pairs(rank_continuations(tie, 1)) == [((9, 1), 2.0)], "equal counts: earliest row wins"
    assert rank_continuations(np.zeros((0, 2), dtype=np.int64), 3) == []


def test_every_source_follows_the_protocol():
    store = Datastore.build([1, 2, 3])
    for source in (PromptLookup(), store, Dictionary()):
        assert isinstance(source, Source) and isinstance(source.name, str)


def test_requests_are_validated():
    with pytest.raises(ValueError, match="width must be a positive int"):
        check_request(0, 1)
    with pytest.raises(ValueError, match="depth must be a positive int"):
        check_request(1, True)
    with pytest.raises(ValueError, match="non-negative"):
        as_context([1, -2])
    with pytest.raises(ValueError, match="1-D"):
        as_context([[1, 2]])
    with pytest.raises(ValueError, match="integer"):
        as_context([1.5])
    assert as_context([]).size == 0 and as_context(np.array([3], dtype=np.uint16)).tolist() == [3]


def test_priority_fills_the_width_in_source_order():
    first = PromptLookup(max_ngram=1)
    second = Datastore.build([3, 8, 3, 9, 3, 9, 3, 4])
    both = Priority([first, second])
    ctx = [3, 4, 5, 3]  # the context says 4 follows 3; the corpus says 9, 8, 4
    assert as_pairs(both.propose(ctx, 3, 1)) == [((4,), 1.0), ((9,), 2.0), ((8,), 1.0)]
    assert as_pairs(both.propose(ctx, 1, 1)) == [((4,), 1.0)]
    assert both.name == "prompt-lookup+datastore" and isinstance(both, Source)
    learner = Dictionary(n=2)
    Priority([learner]).observe([1, 2])
    assert learner.tables.backward == {(1,): 2}, "observe reaches every source"
    with pytest.raises(ValueError, match="sources must not be empty"):
        Priority([])


def test_make_source_builds_each_named_source_fresh(tmp_path):
    folder = Datastore.build([1, 2, 5, 1, 2, 6]).save(tmp_path / "ds")
    assert isinstance(make_source("lookup"), PromptLookup) and isinstance(
        make_source("dictionary"), Dictionary
    )
    both = make_source("lookup,datastore", folder)
    assert isinstance(both, Priority) and [type(s) for s in both.sources] == [PromptLookup, Datastore]
    assert [c.tokens for c in both.propose([1, 2, 7, 1, 2], width=3, depth=1)] == [(7,), (5,), (6,)]
    assert make_source("dictionary") is not make_source("dictionary")  # a learning source is never shared
    for spec, says in (
        ("", "must name one of"),
        ("lookup,web", "'web' must be one of"),
        ("datastore", "needs"),
    ):
        with pytest.raises(ValueError, match=says):
            make_source(spec)
