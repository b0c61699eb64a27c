"""The dual's value without a full sort: bucket the tokens by p/q, sort only the buckets that can win.

The dual of :mod:`mdsd.otm.dual` maximises the gain g(A_j) = Q(set(x̄) ⊆ A_j) − p(A_j) over the prefixes
A_j of the tokens sorted by p/q. Group the tokens into buckets of log p/q (even widths, 8 tokens each
on average). At bucket edges the prefix sums are exact bucket totals; inside bucket b both
Q(set ⊆ A) and p(A) only grow, so for A_{b−} ⊆ A ⊆ A_{b+}

.. math:: g(A) \\le Q(\\mathrm{set}(\\bar x) \\subseteq A_{b+}) - p(A_{b-}).

Only buckets whose bound beats the best edge need their tokens sorted. For real-size vocabularies that
is a few thousand tokens, so the value costs a handful of linear passes instead of an O(n log n) sort.
Laws whose Q(set ⊆ A) is an exact function of prefix sums (i.i.d. drafts, two drafts without replacement:
:meth:`mdsd.laws.DraftLaw.prefix_statistics`). Checked against the full sort in the tests; the full sort
(:func:`mdsd.otm.dual.prefix_scan`) also gives the certificate.
"""

from __future__ import annotations

import numpy as np

from mdsd.laws import DraftLaw
from mdsd.otm.dual import log_ratio

_TOKENS_PER_BUCKET = 8  # average bucket size: few tokens to sort where the optimum lies


def _bucket(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """log p/q per token (inf where q = 0) and its bucket, buckets ordered by ratio: [n], [n], count.

    Buckets split the range of log p/q evenly, about ``_TOKENS_PER_BUCKET`` tokens each on average.
    """
    level = log_ratio(p, q)  # -inf for p = 0, inf for q = 0
    finite = np.isfinite(level)
    lo = float(np.min(level, where=finite, initial=np.inf))
    hi = float(np.max(level, where=finite, initial=-np.inf))
    lo, hi = (lo, hi) if lo <= hi else (0.0, 0.0)  # (no finite ratio at all)
    inner = max(1, level.size // _TOKENS_PER_BUCKET)
    width = max(hi - lo, 1e-300) / inner
    with np.errstate(invalid="ignore"):
        step = np.minimum(np.floor((level - lo) / width), inner - 1)  # monotone in the ratio
    count = inner + 2  # [ratio 0] + inner + [ratio inf]
    index = np.where(finite, step + 1, np.where(level < 0, 0, count - 1)).astype(np.int64)
    return level, index, count


def best_gains(p: np.ndarray, q: np.ndarray, laws: list[DraftLaw]) -> dict[DraftLaw, float]:
    """max_j [Q(set ⊆ A_j) − p(A_j)] for one row p, q [n] and each law in ``laws``; α* = 1 − the gain.

    Laws of dual kind "prefix" whose :meth:`~mdsd.laws.DraftLaw.prefix_statistics` are exact (Q from
    prefix sums: i.i.d. drafts, two drafts without replacement).

    >>> from mdsd.laws import IID
    >>> best_gains(np.array([1.0, 0.0]), np.array([0.5, 0.5]), [IID(2)])  # α* = 3/4
    {IID(k=2): 0.25}
    """
    level, index, count = _bucket(p, q)
    stats = {law: law.prefix_statistics(q) for law in laws}
    cache: dict[tuple, np.ndarray] = {}  # laws often share weight rows (every i.i.d. law's is q itself)

    def once(tag: str, w: np.ndarray, make) -> np.ndarray:
        key = (tag, w.__array_interface__["data"][0], w.shape, w.strides)
        if key not in cache:
            cache[key] = make(w)
        return cache[key]

    def edges(w: np.ndarray) -> np.ndarray:  # sums over the buckets before each of the count + 1 edges
        return once("edges", w, lambda w: np.concatenate([[0.0], np.cumsum(np.bincount(index, w, count))]))

    spent = edges(p)
    per_bucket = np.bincount(index, weights=q, minlength=count)
    left = np.concatenate([np.cumsum(per_bucket[::-1])[::-1], [0.0]])  # q(V∖A) from the tail
    edge_sums = {law: np.stack([edges(w) for w in st.weights]) for law, st in stats.items()}
    best, refine = {}, np.zeros(count, dtype=bool)
    for law, st in stats.items():
        gains = st.containment(edge_sums[law], left) - spent
        best[law] = float(gains.max())
        refine |= gains[1:] + spent[1:] - spent[:-1] > best[law]  # bound of each bucket beats it
    if not refine.any():
        return best
    chosen = np.flatnonzero(refine[index])
    chosen = chosen[np.argsort(level[chosen], kind="stable")]  # bucket by bucket, each sorted
    bucket = index[chosen]
    starts = np.flatnonzero(np.concatenate([[True], bucket[1:] != bucket[:-1]]))
    lengths = np.diff(np.append(starts, chosen.size))

    def within(w: np.ndarray) -> np.ndarray:  # prefix sums inside each bucket
        def make(w: np.ndarray) -> np.ndarray:
            run = np.cumsum(w[chosen])
            return edges(w)[bucket] + run - np.repeat(run[starts] - w[chosen][starts], lengths)

        return once("within", w, make)

    run_spent = within(p)
    # q(V∖A) from the tail, so that it stays accurate when small: the mass after each token inside its
    # bucket (a suffix sum that only ever holds mass outside A) plus the buckets after it.
    after = np.append(np.cumsum(q[chosen][::-1])[::-1], 0.0)  # after[i] = Σ of chosen tokens from i on
    next_start = np.repeat(np.append(starts[1:], chosen.size), lengths)
    run_left = left[bucket + 1] + after[1:] - after[next_start]
    for law, st in stats.items():
        run_sums = np.stack([within(w) for w in st.weights])
        gains = st.containment(run_sums, run_left) - run_spent
        best[law] = max(best[law], float(gains.max()))
    return best
