"""SPECTRA-CORE's n-gram dictionaries, learnt online from the tokens the target accepts.

SPECTRA (Le, Do, Nguyen, 2025, "SPECTRA: Faster Large Language Model Inference with Optimized
Internal and External Speculation", §4.2.1 and Algorithm 1) keeps two dictionaries, updated from
every N-gram :math:`(c_0, \\dots, c_{N-1})` it learns (Algorithm 1, lines 38-40):

* forward :math:`S_{fwd}[c_j] \\mathrel{+}= (c_{j+1}, \\dots, c_{N-1})` for j = 0..N-2 (a token maps
  to a pool of sequences that followed it: many guesses, "quantity");
* backward :math:`S_{bwd}[(c_0, \\dots, c_j)] \\leftarrow c_{j+1}` (an n-gram maps to the ONE token
  that followed its latest occurrence: one guess built token by token, "quality").

SPECTRA learns its N-grams from a candidate pool that the target extends inside the verification
forward pass (Lookahead-style). mdsd's decoder does not run that pool, so :meth:`Dictionary.observe`
learns from the accepted text instead (every position once); :meth:`NGramTables.add` is the paper's
update for any N-gram the decoder can supply (e.g. the target's argmax chains at tree nodes).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mdsd.sources.base import Continuation, Source, as_context, check_request
from mdsd.sources.registry import register_source

__all__ = ["Dictionary", "NGramTables"]


class NGramTables:
    """The forward and backward dictionaries of SPECTRA-CORE (shareable between :class:`Dictionary` s).

    ``forward[x]`` is an ordered pool of at most ``capacity`` tails (tuples of 1..n-1 tokens), least
    recently used first; the pool stays prefix-free: a tail that is a prefix of a pooled one only
    refreshes it, and a tail that extends pooled ones replaces them (so the pool holds each distinct
    continuation once, at its longest). ``backward[(c_0..c_j)]`` is the latest token that followed
    that j+1-gram (j + 1 <= n - 1).
    """

    def __init__(self, n: int = 5, capacity: int = 16):
        for label, value, least in (("n", n, 2), ("capacity", capacity, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{label} must be an int >= {least}, got {value!r}")
        self.n, self.capacity = n, capacity
        self.forward: dict[int, dict[tuple[int, ...], None]] = {}
        self.backward: dict[tuple[int, ...], int] = {}

    def _pool(self, key: int, tail: tuple[int, ...]) -> None:
        pool = self.forward.setdefault(key, {})
        for entry in pool:
            if entry[: len(tail)] == tail:  # already known (at least as long): refresh it
                del pool[entry]
                pool[entry] = None
                return
        for entry in [e for e in pool if tail[: len(e)] == e]:
            del pool[entry]
        pool[tail] = None
        while len(pool) > self.capacity:
            del pool[next(iter(pool))]

    def add(self, ngram: Sequence[int]) -> None:
        """SPECTRA's update for one n-gram :math:`(c_0..c_{N-1})`, 2 <= N <= n (Algorithm 1, l. 38-40).

        >>> tables = NGramTables(n=3)
        >>> tables.add([1, 2, 3])
        >>> tables.forward, tables.backward
        ({1: {(2, 3): None}, 2: {(3,): None}}, {(1,): 2, (1, 2): 3})
        """
        c = tuple(int(t) for t in ngram)
        if not 2 <= len(c) <= self.n or min(c) < 0:
            raise ValueError(f"ngram must hold 2..{self.n} non-negative ids, got {c}")
        for j in range(len(c) - 1):
            self._pool(c[j], c[j + 1 :])
            self.backward[c[: j + 1]] = c[j + 1]

    def extend(self, window: Sequence[int]) -> None:
        """Learn the last token of ``window`` (its up to n - 1 predecessors before it): every suffix
        k-gram of the predecessors now maps to it (backward), and each predecessor's tail grows by it
        (forward). Over a whole text this equals :meth:`add` on every n-token window, without the
        n - 1 token lag of waiting for a window to fill."""
        w = tuple(int(t) for t in window[-self.n :])
        for j in range(len(w) - 1):
            self._pool(w[j], w[j + 1 :])
            self.backward[w[j:-1]] = w[-1]


@register_source
class Dictionary(Source):
    r"""SPECTRA-CORE's bi-directional search over :class:`NGramTables`, learnt from accepted text.

    Proposal for context :math:`x_0 \dots x_{L-1}` (SPECTRA Algorithm 1, lines 7-15):

    1. backward guess :math:`u`: for j = 0, 1, ... (at most min(depth, n) tokens), the token
       :math:`u_j = S_{bwd}[(x \oplus u_{<j})_{-k:}]` for the largest k in n-1..1 whose key is known;
       the guess stops at the first j with no known key. ``score`` = the k used for :math:`u_0`
       (how many context tokens its first token is conditioned on);
    2. forward guesses :math:`S_{fwd}[x_{L-1}]`, most recently used first, cut to ``depth``,
       skipping any whose first token is already proposed; ``score`` = 1.

    The backward guess comes first: it is conditioned on the longest context (the paper's "quality"
    guess); SPECTRA lists the forward pool first but verifies all guesses at once, so its order there
    only matters when the guess budget truncates. :meth:`observe` learns each new accepted token once
    per sequence (a context that does not extend the last one starts a new sequence; the tables are
    kept). :meth:`fork` gives another cursor over the same tables, e.g. one per batch row.

    Parameters
    ----------
    n : int
        SPECTRA's N: the longest n-gram learnt (keys up to n - 1 tokens).
    capacity : int
        Tails kept per forward key (least recently used evicted; our choice, SPECTRA states none).

    Examples
    --------
    >>> d = Dictionary(n=3)
    >>> d.observe([1, 2, 3, 1, 5, 6])
    >>> [(c.tokens, c.score) for c in d.propose([3, 1], width=3, depth=3)]
    [((5, 6), 2.0), ((2, 3), 1.0)]
    """

    name = "dictionary"
    key = "dictionary"

    def __init__(self, n: int = 5, capacity: int = 16, tables: NGramTables | None = None):
        self.tables = NGramTables(n, capacity) if tables is None else tables
        self._seen = np.zeros(0, dtype=np.int64)

    def fork(self) -> Dictionary:
        """A new cursor (nothing observed yet) sharing this dictionary's tables."""
        return Dictionary(tables=self.tables)

    def observe(self, context: Sequence[int]) -> None:
        """Learn the tokens of ``context`` not observed yet in this sequence (see the class doc)."""
        ctx = as_context(context)
        seen = self._seen
        start = seen.size if ctx.size >= seen.size and np.array_equal(ctx[: seen.size], seen) else 0
        n = self.tables.n
        for t in range(max(start, 1), ctx.size):
            self.tables.extend(ctx[max(0, t - n + 1) : t + 1].tolist())
        self._seen = ctx.copy()

    def _backward(self, ctx: np.ndarray, length: int) -> tuple[list[int], int]:
        table, n = self.tables.backward, self.tables.n
        seq = ctx[-(n - 1) :].tolist()
        guess: list[int] = []
        first_k = 0
        for _ in range(length):
            for k in range(min(n - 1, len(seq)), 0, -1):
                token = table.get(tuple(seq[-k:]))
                if token is not None:
                    break
            else:
                break
            first_k = first_k or k
            guess.append(token)
            seq.append(token)
        return guess, first_k

    def propose(self, context: Sequence[int], width: int, depth: int) -> list[Continuation]:
        """At most ``width`` continuations of ``context`` (see the class docstring), best first."""
        check_request(width, depth)
        ctx = as_context(context)
        if ctx.size == 0:
            return []
        out: list[Continuation] = []
        guess, first_k = self._backward(ctx, min(depth, self.tables.n))
        if guess:
            out.append(Continuation(tokens=tuple(guess), score=float(first_k)))
        used = {c.tokens[0] for c in out}
        for tail in reversed(self.tables.forward.get(int(ctx[-1]), {})):
            if len(out) == width:
                break
            if tail[0] not in used:
                out.append(Continuation(tokens=tail[:depth], score=1.0))
                used.add(tail[0])
        return out[:width]

    def __repr__(self) -> str:
        return f"Dictionary(n={self.tables.n}, capacity={self.tables.capacity})"
