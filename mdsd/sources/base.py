"""The draft-source protocol: what a training-free source proposes, and the ranking rule sources share.

A *source* proposes continuations of a context (prompt + output so far) without a draft model: text
it has seen (the context itself, a corpus, n-gram tables) says what may come next. In OTM terms each
proposed continuation is a deterministic draft: q is one-hot on its first token at the root and on
each next token down its chain (docs/mathematics.md §2, "deterministic top-k").

The decoder calls, once per decoding step and row,

* ``source.propose(context, width, depth)``: at most ``width`` :class:`Continuation` s, best first,
  with pairwise DISTINCT first tokens (the root's children), each 1..``depth`` tokens long;
* ``source.observe(context)``: after the step, with the full context, so stateful sources can learn.

and two optional members, which :class:`Source` declares with their defaults:

* ``source.fork()``: a source with per-sequence state (what it learnt from one row's context) returns a
  fresh copy, and the decoder gives each row its own; the default returns the source itself;
* ``source.propose_table(tokens, lengths, width, depth)``: a stateless source may offer the same proposals
  for a whole batch as one ``[B, width, depth]`` tensor (-1 where none) computed on the tokens' device
  without reading anything back (:meth:`mdsd.sources.PromptLookup.propose_table`). The decoder's fast path
  (:mod:`mdsd.tree.compiled`) then makes them inside its captured step, over a device buffer of each row's
  context, and calls neither ``propose`` nor ``observe``. The default is None (no table).

A source class registers its spec name (``key``) with :func:`mdsd.sources.register_source` and builds
itself from a spec (``from_spec``), so ``mdsd decode --source`` and the method specs find it.

Counting sources (:class:`~mdsd.sources.PromptLookup`, :class:`~mdsd.sources.Datastore`) turn the
continuations that followed earlier occurrences of a matched n-gram into proposals with
:func:`rank_continuations`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mdsd.validation import check_positive_ints

__all__ = ["Continuation", "Source", "rank_continuations", "as_context", "check_request", "has_table"]

PAD = -1  # marks "no token" in a [R, D] continuation matrix (the continuation ended earlier)


@dataclass(frozen=True)
class Continuation:
    """Tokens that may follow a context, and the source's confidence in them (for ranking)."""

    tokens: tuple[int, ...]  # 1..depth token ids
    score: float  # source-specific; larger is better; see each source's docstring


class Source:
    """A training-free draft source (see the module docstring for the contract): subclasses implement
    :meth:`propose`, and :meth:`observe` where they learn; :meth:`fork` and :attr:`propose_table` are
    optional. (The decoder also takes any object with ``propose`` and ``observe``.)"""

    name: str = "source"  # shown in results
    key: ClassVar[str] = ""  # its name in specs (mdsd decode --source KEY, methods TREE/VERIFIER+KEY)
    propose_table: ClassVar[Callable | None] = None  # a batch's proposals on the device (module docstring)

    def propose(self, context: Sequence[int], width: int, depth: int) -> list[Continuation]:
        """At most ``width`` continuations of ``context``, best first, distinct first tokens, each of 1 to
        ``depth`` tokens."""
        raise NotImplementedError

    def observe(self, context: Sequence[int]) -> None:  # noqa: B027 (a source that learns nothing)
        """Learn from a row's whole context after a step (nothing, by default)."""

    def fork(self) -> Source:
        """A copy for one row: fresh per-sequence state where the source has some (itself, by default)."""
        return self

    @classmethod
    def from_spec(cls, spec: str, datastore: str | os.PathLike = "") -> Source:  # noqa: ARG003
        """The source a spec ``key`` names (``datastore``: a datastore directory, for sources that read one).
        By default the class built without arguments; a class with options parses ``key:OPTIONS``."""
        if spec != cls.key:
            raise ValueError(f"source {spec!r}: {cls.key} takes no options")
        return cls()


def as_context(context: Sequence[int]) -> np.ndarray:
    """``context`` as a 1-D int64 array of non-negative token ids (``ValueError`` naming it otherwise).

    >>> as_context([3, 1, 2]).tolist()
    [3, 1, 2]
    """
    arr = np.asarray(context)
    if arr.ndim != 1:
        raise ValueError(f"context must be a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"context must hold integer token ids, got dtype {arr.dtype}")
    if arr.min() < 0:
        raise ValueError(f"context must hold non-negative token ids, got {int(arr.min())}")
    return arr.astype(np.int64, copy=False)


def has_table(source: object) -> bool:
    """Whether ``source`` offers ``propose_table`` (proposals for a whole batch on the device)."""
    return callable(getattr(source, "propose_table", None))


def check_request(width: int, depth: int) -> None:
    """Refuse a ``width`` or ``depth`` that is not a positive int."""
    check_positive_ints({"width": width, "depth": depth})


def _best(rows: list[list[int]], d: int, count: int) -> list[tuple[int, int]]:
    # The `count` most frequent tokens in column d (PAD ignored) with their counts; dicts keep first
    # insertion order and sorted() is stable, so ties go to the earliest row.
    counts: dict[int, int] = {}
    for row in rows:
        token = row[d]
        if token != PAD:
            counts[token] = counts.get(token, 0) + 1
    return sorted(counts.items(), key=lambda item: -item[1])[:count]


def rank_continuations(rows: np.ndarray, width: int) -> list[Continuation]:
    """Proposals from the continuations of a matched n-gram's occurrences, rows in preference order.

    ``rows`` is ``[R, D]``: row r holds the (up to D) tokens that followed occurrence r, padded with
    -1 where it ended early; the caller orders the rows so that earlier rows win ties. The rule:

    * first tokens: the ``width`` most frequent values of column 0, by count :math:`c(t)`
      (descending), ties broken by the earliest row holding them; ``score`` = :math:`c(t)`;
    * below each first token t, a greedy chain: among the rows that agree with the chain so far, the
      most frequent next token (same tie rule); the chain ends where none of them goes on.

    This is the most-frequent path of the weighted trie of continuations (SSSD, Marzollo et al.,
    §3.1: branch weights are occurrence counts), restricted to distinct first tokens.

    >>> rows = np.array([[5, 1], [7, 2], [5, 3], [5, 3]])
    >>> [(c.tokens, c.score) for c in rank_continuations(rows, width=3)]
    [((5, 3), 3.0), ((7, 2), 1.0)]
    """
    table = rows.tolist()  # plain lists: R and D are small, numpy per-call overhead is not
    out = []
    for first, count in _best(table, 0, width):
        chain = [first]
        keep = [row for row in table if row[0] == first]
        for d in range(1, rows.shape[1]):
            best = _best(keep, d, 1)
            if not best:
                break
            token = best[0][0]
            chain.append(token)
            keep = [row for row in keep if row[d] == token]
        out.append(Continuation(tokens=tuple(chain), score=float(count)))
    return out
