"""Datastore against a brute-force scan of the corpus; save/load; building from texts."""

from __future__ import annotations

import numpy as np
import pytest
from reference import rank

from mdsd.sources import SEPARATOR, Datastore, encode_text


def brute_force(tokens: list[int], ctx: list[int], opts: dict, sort_depth: int, width: int, depth: int):
    n = len(tokens)
    for m in range(min(opts["max_ngram"], len(ctx)), opts["min_ngram"] - 1, -1):
        pattern = ctx[len(ctx) - m :]
        occ = [i for i in range(n - m) if tokens[i : i + m] == pattern and tokens[i + m] >= 0]
        if not occ:
            continue
        occ.sort(key=lambda i: (tuple(tokens[i : i + sort_depth]), i))  # suffix-array order
        r, s = len(occ), opts["max_samples"]
        if r > s:
            occ = [occ[(j * r) // s] for j in range(s)]
        rows = []
        for i in occ:
            cont = tokens[i + m : i + m + depth]
            rows.append(tuple(cont[: cont.index(SEPARATOR)] if SEPARATOR in cont else cont))
        return (m, r), rank(rows, width)
    return (0, 0), []


def random_case(seed: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 80))
    tokens = rng.integers(0, int(rng.integers(1, 4)), size=n)
    tokens[rng.random(n) < 0.05] = SEPARATOR
    if n > 10 and rng.random() < 0.5:
        tokens[n // 2 : n // 2 + n // 3] = tokens[: n // 3]
    max_ngram = int(rng.integers(1, 7))
    opts = {
        "max_ngram": max_ngram,
        "min_ngram": int(rng.integers(1, max_ngram + 1)),
        "max_samples": int(rng.integers(1, 6)) if rng.random() < 0.4 else 1000,
    }
    sort_depth = max_ngram + int(rng.integers(1, 4))
    ctx = rng.integers(0, 3, size=int(rng.integers(0, 10))).tolist()
    return tokens, opts, sort_depth, ctx, int(rng.integers(1, 5)), int(rng.integers(1, 6))


@pytest.mark.parametrize("seed", range(400))
def test_matches_a_brute_force_scan(seed):
    tokens, opts, sort_depth, ctx, width, depth = random_case(seed)
    store = Datastore.build(tokens, sort_depth=sort_depth, **opts)
    (m, r), expected = brute_force(tokens.tolist(), ctx, opts, sort_depth, width, depth)
    assert [(c.tokens, c.score) for c in store.propose(ctx, width, depth)] == expected
    assert store.match(ctx) == (m, r)


def test_separators_and_edges():
    store = Datastore.build([1, 2, 3, SEPARATOR, 1, 2, SEPARATOR, 1, 2, 4], max_ngram=3)
    got = store.propose([1, 2], width=5, depth=3)
    assert [(c.tokens, c.score) for c in got] == [((3,), 1.0), ((4,), 1.0)], "no crossing a separator"
    assert store.match([7, 1, 2]) == (2, 2)
    assert store.propose([], 2, 2) == [] and store.match([]) == (0, 0), "empty context"
    assert store.propose([9], 2, 2) == [] and store.propose([10**9], 2, 2) == [], "no match"
    assert store.propose([5, 5, 5, 5, 5, 1], 2, 1)[0].tokens == (2,), "context longer than any match"
    single = Datastore.build([7])
    assert single.propose([7], 3, 3) == [] and len(single) == 1, "corpus of length 1"
    wide = Datastore.build([1, 2, 1, 3, 1, 4])
    assert [c.tokens for c in wide.propose([1], 10, 4)] == [(2, 1, 3, 1), (3, 1, 4), (4,)]


def test_sampling_takes_regular_intervals_of_the_sorted_run():
    tokens = [0, 5] * 3 + [0, 6] * 5  # (0,) occurs 8 times with a next token, sorted 5,5,5,6,6,6,6,6
    store = Datastore.build(tokens, max_ngram=1, max_samples=4)  # picks sorted ranks 0, 2, 4, 6
    assert [(c.tokens, c.score) for c in store.propose([0], 2, 1)] == [((5,), 2.0), ((6,), 2.0)]
    store = Datastore.build(tokens, max_ngram=1, max_samples=3)  # ranks 0, 2, 5 (the first 3: 5, 5, 5)
    assert [(c.tokens, c.score) for c in store.propose([0], 2, 1)] == [((5,), 2.0), ((6,), 1.0)]


def test_save_and_load_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 5, size=500)
    tokens[::97] = SEPARATOR
    store = Datastore.build(tokens, sort_depth=8, max_ngram=5, info={"corpus": "random"})
    folder = store.save(tmp_path / "ds")
    loaded = Datastore.load(folder, max_ngram=5)
    assert isinstance(loaded.tokens.base, np.memmap) and isinstance(loaded.sa.base, np.memmap), "mapped"
    assert np.array_equal(loaded.tokens, store.tokens) and np.array_equal(loaded.sa, store.sa)
    assert loaded.info == {"corpus": "random"} and loaded.sort_depth == 8
    for seed in range(30):
        ctx = np.random.default_rng(seed).integers(0, 5, size=6)
        assert loaded.propose(ctx, 3, 4) == store.propose(ctx, 3, 4)
    assert Datastore.load(folder).max_ngram == 7, "default max_ngram: sort_depth - 1 (at most 16)"
    assert not isinstance(Datastore.load(folder, mmap=False).tokens.base, np.memmap)


def test_bad_inputs_are_refused(tmp_path):
    with pytest.raises(ValueError, match="max_ngram must be < sort_depth"):
        Datastore.build([1, 2], sort_depth=4, max_ngram=4)
    with pytest.raises(ValueError, match="token_ids"):
        Datastore.build([])
    with pytest.raises(ValueError, match="token_ids must be in"):
        Datastore.build([1, -2])
    with pytest.raises(ValueError, match="sort_depth"):
        Datastore.build([1, 2], sort_depth=1)
    with pytest.raises(ValueError, match="min_ngram must be <= max_ngram"):
        Datastore.build([1, 2], max_ngram=2, min_ngram=3)
    with pytest.raises(FileNotFoundError, match="no complete datastore"):
        Datastore.load(tmp_path)
    with pytest.raises(ValueError, match="documents must not be empty"):
        Datastore.from_documents([])


def test_documents_and_texts():
    store = Datastore.from_documents([[1, 2], [3]])
    assert store.tokens.tolist() == [1, 2, SEPARATOR, 3]


def test_chunked_encoding_equals_one_call():
    from tiny_gguf import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    text = "def add(a, b):\n    return a + b\n\n\n  \nclass X:\n\tpass\n" * 40 + "hello world\n\nthe end"
    whole = tokenizer.encode(text, add_special_tokens=False)
    for chunk in (1, 7, 100, 1 << 16):
        assert encode_text(text, tokenizer, chunk_chars=chunk) == whole
    store = Datastore.from_texts([text, "hello"], tokenizer)
    assert len(store) == len(whole) + 1 + len(tokenizer.encode("hello", add_special_tokens=False))
