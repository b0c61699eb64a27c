"""Tiny autoregressive models given as explicit conditional tables: prefix -> next-token distribution.

A :class:`SequenceModel` on the vocabulary {0..n-1} holds p(· | u) for every prefix u of length at most
``depth`` (or one vector for every prefix: a context-free model). The sequence-level optimum
(:mod:`mdsd.sequence.optimum`), the exact tokens per step of every verifier and the whole-decode
enumerations all read their conditionals from here. ``toy_sequence_pair`` draws a (target, draft)
pair with SpecHub's recipe (:func:`mdsd.toy_pair`) at every prefix; :mod:`mdsd.hf.sequence` reads the
same tables off two real causal LMs. See docs/mathematics.md §7.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from mdsd.toy import toy_pair
from mdsd.validation import as_probabilities, check_k

__all__ = ["SequenceModel", "toy_sequence_pair", "prefixes"]


def prefixes(n: int, depth: int) -> Iterable[tuple[int, ...]]:
    """Every string over {0..n-1} of length 0..depth, shortest first, then lexicographic.

    >>> list(prefixes(2, 1))
    [(), (0,), (1,)]
    """
    for length in range(depth + 1):
        yield from itertools.product(range(n), repeat=length)


@dataclass(frozen=True, eq=False)
class SequenceModel:
    """An autoregressive model on {0..n-1}: the next-token law p(· | u) for every prefix u.

    Build one with :meth:`from_table`, :meth:`context_free` or :func:`toy_sequence_pair`.

    Attributes
    ----------
    n : int
        Vocabulary size.
    depth : int or None
        Conditionals exist for every prefix of length <= ``depth``; None for a context-free model (any
        prefix).

    Examples
    --------
    >>> m = SequenceModel.context_free([0.25, 0.75])
    >>> m((1, 0, 1)).tolist(), m.prob((1, 1))
    ([0.25, 0.75], 0.5625)
    """

    n: int
    depth: int | None
    _table: Mapping[tuple[int, ...], np.ndarray] = field(repr=False)

    @classmethod
    def from_table(cls, table: Mapping[Iterable[int], object]) -> SequenceModel:
        """A model from {prefix: next-token distribution [n]}, holding EVERY prefix up to its longest one.

        Each distribution is validated (finite, non-negative, sums to 1) and stored as float64.
        """
        if not isinstance(table, Mapping) or not table:
            raise ValueError("table must be a non-empty mapping {prefix tuple: distribution [n]}")
        rows: dict[tuple[int, ...], np.ndarray] = {}
        for prefix, dist in table.items():
            key = tuple(prefix)
            if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in key):
                raise ValueError(f"table key {prefix!r} must be a tuple of integer tokens")
            row = as_probabilities(dist, f"table[{key}]")
            if row.ndim != 1:
                raise ValueError(f"table[{key}] must be one vector [n], got shape {row.shape}")
            rows[tuple(int(t) for t in key)] = row
        n = {row.size for row in rows.values()}
        if len(n) != 1:
            raise ValueError(f"every distribution of table must have the same size n; got sizes {sorted(n)}")
        n = n.pop()
        depth = max(len(u) for u in rows)
        missing = [u for u in prefixes(n, depth) if u not in rows]
        if missing:
            raise ValueError(
                f"table must hold every prefix of length <= {depth} over {n} tokens; missing {missing[:3]}"
            )
        extra = [u for u in rows if any(t < 0 or t >= n for t in u)]
        if extra:
            raise ValueError(f"table key {extra[0]} holds a token outside [0, {n})")
        return cls(n, depth, rows)

    @classmethod
    def context_free(cls, dist: object) -> SequenceModel:
        """The model with one next-token law for every prefix (i.i.d. tokens)."""
        row = as_probabilities(dist, "dist")
        if row.ndim != 1:
            raise ValueError(f"dist must be one vector [n], got shape {row.shape}")
        return cls(row.size, None, {(): row})

    @property
    def is_context_free(self) -> bool:
        return self.depth is None

    def __call__(self, prefix: Iterable[int]) -> np.ndarray:
        """p(· | prefix) as a float64 vector [n] (do not modify it)."""
        if self.depth is None:
            return self._table[()]
        key = tuple(prefix)
        try:
            return self._table[key]
        except KeyError:
            raise ValueError(
                f"prefix {key} is not in the model (prefixes of length <= {self.depth} over {self.n} tokens)"
            ) from None

    def prob(self, string: Iterable[int], context: Iterable[int] = ()) -> float:
        """P(string | context) = Π_i p(string_i | context, string_<i)."""
        u, out = tuple(context), 1.0
        for t in string:
            out *= float(self(u)[t])
            u = (*u, t)
        return out

    def covers(self, length: int) -> bool:
        """Whether every prefix of ``length`` tokens has a conditional."""
        return self.depth is None or length <= self.depth


def toy_sequence_pair(
    n: int,
    depth: int,
    temperature: float,
    similarity: float,
    generator: torch.Generator | None = None,
    *,
    context_free: bool = False,
) -> tuple[SequenceModel, SequenceModel]:
    r"""A random (target, draft) pair of tiny sequence models on ``n`` tokens.

    At every prefix u of length <= ``depth`` (shortest first, then lexicographic) two logit vectors are
    drawn and mixed as in :func:`mdsd.toy_pair` (SpecHub, Appendix D):

    .. math:: a_u, b_u \sim U(0, 1)^n, \quad p(\cdot \mid u) = \mathrm{softmax}(a_u / T), \quad
              q(\cdot \mid u) = \mathrm{softmax}\bigl((s\, a_u + (1 - s)\, b_u) / T\bigr).

    With ``context_free=True`` one pair (p, q) is drawn and used at every prefix (any depth).
    A drafted tree of depth L needs target conditionals at prefixes of length <= L (the bonus token)
    and draft conditionals at length <= L - 1: a pair of ``depth`` L serves trees of depth <= L.

    >>> target, draft = toy_sequence_pair(3, 2, 0.5, 1.0, torch.Generator().manual_seed(0))
    >>> bool(np.array_equal(target((0, 2)), draft((0, 2)))), target.depth
    (True, 2)
    """
    n = check_k(n, "n")
    depth = check_k(depth, "depth", minimum=0)
    keys = [()] if context_free else list(prefixes(n, depth))
    # one toy pair per prefix (mdsd.toy_pair checks temperature, similarity and the generator)
    p, q = (x.numpy() for x in toy_pair(n, temperature, similarity, generator, batch=len(keys)))
    if context_free:
        return SequenceModel(n, None, {(): p[0]}), SequenceModel(n, None, {(): q[0]})
    return (
        SequenceModel(n, depth, dict(zip(keys, p, strict=True))),
        SequenceModel(n, depth, dict(zip(keys, q, strict=True))),
    )


def check_pair(target: object, draft: object, depth: int, context: tuple[int, ...] = ()) -> None:
    """Raise unless ``target`` and ``draft`` are SequenceModels on one vocabulary covering a step of
    ``depth`` drafted tokens after ``context`` (target to length |context| + depth, draft one less)."""
    for name, model in (("target", target), ("draft", draft)):
        if not isinstance(model, SequenceModel):
            raise TypeError(f"{name} must be an mdsd.SequenceModel, got {type(model).__name__}")
    if target.n != draft.n:
        raise ValueError(f"target and draft must share one vocabulary; got n = {target.n} and {draft.n}")
    if any(not isinstance(t, (int, np.integer)) or not 0 <= t < target.n for t in context):
        raise ValueError(f"context must hold tokens in [0, {target.n}); got {context!r}")
    if not target.covers(len(context) + depth):
        raise ValueError(
            f"target covers prefixes of length <= {target.depth}; a step of depth {depth} after a context "
            f"of {len(context)} tokens needs {len(context) + depth}"
        )
    if depth > 0 and not draft.covers(len(context) + depth - 1):
        raise ValueError(
            f"draft covers prefixes of length <= {draft.depth}; a step of depth {depth} after a context "
            f"of {len(context)} tokens needs {len(context) + depth - 1}"
        )
