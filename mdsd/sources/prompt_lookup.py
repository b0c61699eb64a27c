"""Prompt lookup: draft from earlier occurrences of the context's last n-gram in the context itself.

The prompt-lookup idea (Saxena 2023, "Prompt lookup decoding"; the prompt/self-output source of SSSD,
Marzollo et al., §3.1.1): text often repeats what is already in the prompt or in the output so far.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mdsd.sources.base import PAD, Continuation, Source, as_context, check_request, rank_continuations
from mdsd.sources.registry import register_source
from mdsd.validation import check_positive_ints

__all__ = ["PromptLookup"]


@register_source
class PromptLookup(Source):
    r"""Longest-match n-gram lookup in the context (prompt + output so far); stateless.

    With context :math:`x_0 \dots x_{L-1}`, the match length is the largest
    :math:`m \in [m_{\min}, \min(m_{\max}, L - 1)]` such that the suffix :math:`x_{L-m:L}` also
    occurs earlier, ending at some :math:`p < L - 1`:

    .. math::

        x_{p-m+1:p+1} = x_{L-m:L}, \qquad p \in \{m - 1, \dots, L - 2\}.

    Each such occurrence contributes the continuation :math:`x_{p+1 : \min(p+1+\text{depth}, L)}`
    (it may run into the matched suffix itself). Rows are ordered most recent first (p descending)
    and ranked by :func:`~mdsd.sources.rank_continuations`: first tokens by how many occurrences
    they follow (``score`` = that count), ties to the most recent occurrence; below each, the
    greedy most frequent chain, ties again to the most recent. Frequency first follows SSSD's
    occurrence-weighted trees; recency breaks ties as in prompt lookup decoding's latest match.
    No match of length :math:`\geq m_{\min}` gives no proposal. :meth:`propose_table` gives the same
    proposals for a batch of contexts as one tensor, on their device, without host synchronisation.

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
    key = "lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        check_positive_ints({"max_ngram": max_ngram, "min_ngram": min_ngram})
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

    def propose_table(
        self, tokens: torch.Tensor, lengths: torch.Tensor, width: int, depth: int
    ) -> torch.Tensor:
        r""":meth:`propose` for a batch of contexts at once, on their device, as the decoder's table.

        Row b's context is ``tokens[b, :lengths[b]]`` (entries past it never change the answer).
        Row b, slot i of the result holds the tokens of ``propose(context_b, width, depth)[i]``, -1
        where it ended and in slots past the proposals. The same rule, written for tensors: with
        :math:`n` the row's length, the candidates are the :math:`p \le n - 2` with
        :math:`x_p = x_{n-1}`; a candidate's match length is the number of leading
        :math:`j \in \{0, \dots, m_{\max} - 1\}` with :math:`p \ge j` and :math:`x_{p-j} = x_{n-1-j}`;
        the occurrences are the candidates of the largest length :math:`m`, none if
        :math:`m < m_{\min}`; occurrence p continues with :math:`C_{p,d} = x_{p+1+d}` for
        :math:`p + 1 + d < n`. The first tokens are the ``width`` values of :math:`C_{\cdot,0}`
        with the largest

        .. math::

            \text{key}(t) = c(t)\,(L + 1) + \max\{p : C_{p,0} = t\},

        :math:`c(t)` their number of occurrences (frequency, then recency, as :meth:`propose`); each
        chain goes on, at depth d, with the token of largest key among the occurrences that agree with
        it so far, and ends where none of them goes on.

        Every shape depends only on (B, L, width, depth): no host synchronisation, so it runs inside
        a CUDA graph or a ``torch.compile(fullgraph=True)`` step. Equal tokens are counted by a
        stable sort of each row (``[B, L]``, then ``[B, width, L]`` per depth), never by a table over
        the vocabulary; memory is :math:`O(B L (\text{width} + \text{depth}))`.

        Parameters
        ----------
        tokens : torch.Tensor
            ``[B, L]`` integer token ids (non-negative within each context).
        lengths : torch.Tensor
            ``[B]`` integer context lengths in ``[0, L]``, on the device of ``tokens``.
        width, depth : int
            Proposals per row and tokens per proposal, as for :meth:`propose`.

        Returns
        -------
        torch.Tensor
            ``[B, width, depth]`` int64 on the device of ``tokens``.

        Examples
        --------
        >>> source = PromptLookup(max_ngram=2)
        >>> tokens = torch.tensor([[1, 2, 3, 1, 2, 4, 1, 2], [5, 6, 5, 9, 9, 9, 9, 9]])
        >>> source.propose_table(tokens, torch.tensor([8, 3]), width=2, depth=2).tolist()
        [[[4, 1], [3, 1]], [[6, 5], [-1, -1]]]
        """
        check_request(width, depth)
        _check_batch(tokens, lengths)
        tokens = tokens.long()
        batch, size = tokens.shape
        if size < 2:  # no context has a token before its last one
            return tokens.new_full((batch, width, depth), PAD)
        n = lengths.long().clamp(0, size)[:, None]  # [B, 1]
        pos = torch.arange(size, device=tokens.device)  # [L] p

        # Match length at each candidate p: the leading j at which x[p-j] == x[n-1-j] (p <= n-2, p >= j).
        alive = pos <= n - 2  # [B, L]
        length = torch.zeros_like(tokens)  # [B, L]
        for j in range(self.max_ngram):
            suffix = tokens.gather(1, (n - 1 - j).clamp(min=0))  # [B, 1] x[n-1-j]
            alive = alive & (pos >= j) & (tokens[:, (pos - j).clamp(min=0)] == suffix)
            length = length + alive
        best = length.amax(dim=1, keepdim=True)  # [B, 1]
        occurs = (length == best) & (best >= self.min_ngram)  # [B, L] (best >= 1: candidates only)

        index = pos + 1 + torch.arange(depth, device=tokens.device)[:, None]  # [depth, L] p + 1 + d
        follow = torch.where(index < n[:, None], tokens[:, index.clamp(max=size - 1)], PAD)  # [B, depth, L] C

        k = min(width, size)  # a row has at most n - 1 < L distinct first tokens
        after = follow[:, 0]  # [B, L]
        key, token = _run_keys(torch.where(occurs, after, PAD))
        top, at = key.topk(k, dim=1)  # [B, k] keys are distinct, so the order is exact
        first = torch.where(top >= 0, token.gather(1, at), PAD)  # [B, k]
        columns = [first]
        agree = occurs[:, None, :] & (after[:, None, :] == first[:, :, None])  # [B, k, L]
        for d in range(1, depth):
            after = follow[:, d, None]  # [B, 1, L]
            key, token = _run_keys(torch.where(agree, after, PAD))  # [B, k, L]
            top, at = key.max(dim=2, keepdim=True)  # [B, k, 1]
            chosen = torch.where(top >= 0, token.gather(2, at), PAD)  # [B, k, 1]
            columns.append(chosen[:, :, 0])
            agree = agree & (after == chosen) & (chosen != PAD)
        table = torch.stack(columns, dim=2)  # [B, k, depth]
        if k < width:
            table = torch.cat([table, table.new_full((batch, width - k, depth), PAD)], dim=1)
        return table

    def observe(self, context: Sequence[int]) -> None:
        """Nothing to learn: the context is read afresh at every call."""

    def __repr__(self) -> str:
        return f"PromptLookup(max_ngram={self.max_ngram}, min_ngram={self.min_ngram})"


def _check_batch(tokens: object, lengths: object) -> None:
    """Refuse a ``tokens`` that is not ``[B, L]`` integer or ``lengths`` that is not ``[B]`` integer beside it
    (shapes, dtypes and devices only: the values are never read, so nothing waits for the device)."""
    for label, value, ndim in (("tokens", tokens, 2), ("lengths", lengths, 1)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{label} must be a torch.Tensor, got {type(value).__name__}")
        if value.ndim != ndim:
            raise ValueError(f"{label} must have {ndim} dimension(s), got shape {tuple(value.shape)}")
        if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
            raise ValueError(f"{label} must hold integers, got dtype {value.dtype}")
    if lengths.shape[0] != tokens.shape[0]:
        raise ValueError(
            f"lengths must have shape [{tokens.shape[0]}] (one per row of tokens), got {tuple(lengths.shape)}"
        )
    if lengths.device != tokens.device:
        raise ValueError(f"lengths must be on the device of tokens ({tokens.device}), got {lengths.device}")


def _run_keys(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Count equal values along the last dimension without a table over the vocabulary.

    ``keys`` is ``[..., L]``: the value at each position p, PAD where p does not count. Returns
    ``(key, token)`` in sorted order, ``[..., L]`` each: ``token`` the sorted values and, at the last
    element of each run of a value t, ``key = c(t) * (L + 1) + max p`` (its count, then its latest
    position), -1 elsewhere. Keys of different values differ, so max / topk pick exactly.
    """
    size = keys.shape[-1]
    token, order = keys.sort(dim=-1, stable=True)  # stable: within a run, p ascending
    index = torch.arange(size, device=keys.device)
    change = token[..., 1:] != token[..., :-1]  # [..., L-1]
    head = torch.nn.functional.pad(change, (1, 0), value=True)  # first of its run
    tail = torch.nn.functional.pad(change, (0, 1), value=True)  # last of its run: the latest p
    start = torch.where(head, index, 0).cummax(dim=-1).values  # the index of the run's first element
    key = (index + 1 - start) * (size + 1) + order
    return torch.where(tail & (token != PAD), key, -1), token
