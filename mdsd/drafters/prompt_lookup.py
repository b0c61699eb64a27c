"""Prompt lookup: draft from earlier occurrences of the context's last n-gram in the context itself.

The prompt-lookup idea (Saxena 2023, "Prompt lookup decoding"; the prompt/self-output source of SSSD,
Marzollo et al., §3.1.1): text often repeats what is already in the prompt or in the output so far.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mdsd.drafters.base import PAD, Continuation, as_context, check_request, rank_continuations

__all__ = ["PromptLookup"]


class PromptLookup:
    r"""Longest-match n-gram lookup in the context (prompt + output so far); stateless.

    With context :math:`x_0 \dots x_{L-1}`, the match length is the largest
    :math:`m \in [m_{\min}, \min(m_{\max}, L - 1)]` such that the suffix :math:`x_{L-m:L}` also
    occurs earlier, ending at some :math:`p < L - 1`:

    .. math::

        x_{p-m+1:p+1} = x_{L-m:L}, \qquad p \in \{m - 1, \dots, L - 2\}.

    Each such occurrence contributes the continuation :math:`x_{p+1 : \min(p+1+\text{depth}, L)}`
    (it may run into the matched suffix itself). Rows are ordered most recent first (p descending)
    and ranked by :func:`~mdsd.drafters.rank_continuations`: first tokens by how many occurrences
    they follow (``score`` = that count), ties to the most recent occurrence; below each, the
    greedy most frequent chain, ties again to the most recent. Frequency first follows SSSD's
    occurrence-weighted trees; recency breaks ties as in prompt lookup decoding's latest match.
    No match of length :math:`\geq m_{\min}` gives no proposal.

    Parameters
    ----------
    max_ngram, min_ngram : int
        Longest and shortest suffix length tried (``1 <= min_ngram <= max_ngram``).

    Examples
    --------
    >>> source = PromptLookup(max_ngram=2)
    >>> [c.tokens for c in source.propose([1, 2, 3, 1, 2, 4, 1, 2], width=2, depth=2)]
    [(4, 1), (3, 1)]
    """

    name = "prompt-lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        for label, value in (("max_ngram", max_ngram), ("min_ngram", min_ngram)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be a positive int, got {value!r}")
        if min_ngram > max_ngram:
            raise ValueError(f"min_ngram must be <= max_ngram, got {min_ngram} > {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def match(self, context: Sequence[int]) -> tuple[int, np.ndarray]:
        """``(m, ends)``: the match length and the end positions p of its earlier occurrences, most
        recent first (``(0, [])`` when there is none)."""
        return self._match(as_context(context))

    def _match(self, ctx: np.ndarray) -> tuple[int, np.ndarray]:
        n = ctx.size
        none = (0, np.zeros(0, dtype=np.int64))
        if n < 2:
            return none
        ends = np.flatnonzero(ctx[: n - 1] == ctx[n - 1])[::-1]  # candidate p, most recent first
        length = np.ones(ends.size, dtype=np.int64)  # matched length at each candidate, up to max_ngram
        alive = np.arange(ends.size)  # candidates still matching
        for k in range(1, self.max_ngram):
            p = ends[alive]
            alive = alive[(p >= k) & (ctx[np.maximum(p - k, 0)] == ctx[n - 1 - k])]
            if alive.size == 0:
                break
            length[alive] = k + 1
        best = int(length.max()) if ends.size else 0
        if best < self.min_ngram:
            return none
        return best, ends[length >= best]

    def propose(self, context: Sequence[int], width: int, depth: int) -> list[Continuation]:
        """At most ``width`` continuations of ``context`` (see the class docstring), best first."""
        check_request(width, depth)
        ctx = as_context(context)
        _, ends = self._match(ctx)
        if ends.size == 0:
            return []
        index = ends[:, None] + 1 + np.arange(depth)  # [R, depth] positions of the continuations
        rows = np.where(index < ctx.size, ctx[np.minimum(index, ctx.size - 1)], PAD)
        return rank_continuations(rows, width)

    def observe(self, context: Sequence[int]) -> None:
        """Nothing to learn: the context is read afresh at every call."""

    def __repr__(self) -> str:
        return f"PromptLookup(max_ngram={self.max_ngram}, min_ngram={self.min_ngram})"
