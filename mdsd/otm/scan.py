"""The dual's value without a full sort: bucket the tokens by p/q, sort only the buckets that can win.

The dual of :mod:`mdsd.otm.dual` maximises the gain g(A_j) = Q(set(x̄) ⊆ A_j) − p(A_j) over the prefixes
A_j of the tokens sorted by p/q. Group the tokens into buckets of log p/q (even widths, 8 tokens each
on average). At bucket edges the prefix sums are exact bucket totals; inside bucket b both
Q(set ⊆ A) and p(A) only grow, so for A_{b−} ⊆ A ⊆ A_{b+}

.. math:: g(A) \\le Q(\\mathrm{set}(\\bar x) \\subseteq A_{b+}) - p(A_{b-}).

Only buckets whose bound beats the best edge need their tokens sorted. For real-size vocabularies that
is a few thousand tokens, so the value costs a handful of linear passes instead of an O(n log n) sort.
IID and WithoutReplacement k <= 2 (whose Q depends on prefix sums only). Checked against the full
sort in the tests; the full sort (:func:`mdsd.otm.dual.prefix_dual`) also gives the certificate.
"""

from __future__ import annotations

import numpy as np

from mdsd.otm.dual import draw_odds

_TOKENS_PER_BUCKET = 8  # average bucket size: few tokens to sort where the optimum lies


def _bucket(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Ratio per token (inf where q = 0) and its bucket, buckets ordered by ratio: [n], [n], count.

    Buckets split the range of log p/q evenly, about ``_TOKENS_PER_BUCKET`` tokens each on average.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q > 0, p / q, np.inf)
        level = np.log2(ratio)  # -inf for p = 0, inf for q = 0
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
    return ratio, index, count


def _containment(name: str, k: int, inside: np.ndarray, left: np.ndarray, odds: np.ndarray) -> np.ndarray:
    """Q(set ⊆ A) from prefix sums: inside = q(A), left = q(V∖A), odds = Σ_{i∈A} q_i / (1 − q_i)."""
    if name == "iid" or k == 1:
        return np.minimum(inside, 1.0) ** k
    return np.clip(inside - left * odds, 0.0, 1.0)  # two draws without replacement


def best_gains(p: np.ndarray, q: np.ndarray, items: list[tuple[str, int]]) -> dict[tuple[str, int], float]:
    """max_j [Q(set ⊆ A_j) − p(A_j)] for one row p, q [n] and each (law name, k) in ``items``.

    Names: "iid" (any k) and "without_replacement" (k <= 2). α* = 1 − the gain.

    >>> best_gains(np.array([1.0, 0.0]), np.array([0.5, 0.5]), [("iid", 2)])  # α* = 3/4
    {('iid', 2): 0.25}
    """
    ratio, index, count = _bucket(p, q)
    paired = any(name != "iid" and k == 2 for name, k in items)  # only these need the odds and q(V∖A)
    odds_all = draw_odds(q) if paired else np.zeros_like(q)
    sums = [np.bincount(index, weights=w, minlength=count) for w in ((p, q, odds_all) if paired else (p, q))]
    spent, inside, *extra = (np.concatenate([[0.0], np.cumsum(s)]) for s in sums)  # at the count + 1 edges
    odds = extra[0] if paired else np.zeros(count + 1)
    left = np.concatenate([np.cumsum(sums[1][::-1])[::-1], [0.0]])
    best, refine = {}, np.zeros(count, dtype=bool)
    for name, k in items:
        gains = _containment(name, k, inside, left, odds) - spent
        best[(name, k)] = float(gains.max())
        refine |= gains[1:] + spent[1:] - spent[:-1] > best[(name, k)]  # bound of each bucket beats it
    if not refine.any():
        return best
    chosen = np.flatnonzero(refine[index])
    chosen = chosen[np.argsort(ratio[chosen], kind="stable")]  # bucket by bucket, each sorted
    bucket = index[chosen]
    starts = np.flatnonzero(np.concatenate([[True], bucket[1:] != bucket[:-1]]))

    def within(w: np.ndarray, edge: np.ndarray) -> np.ndarray:  # prefix sums inside each bucket
        run = np.cumsum(w[chosen])
        before = np.repeat(run[starts] - w[chosen][starts], np.diff(np.append(starts, chosen.size)))
        return edge[bucket] + run - before

    run_spent, run_inside = within(p, spent), within(q, inside)
    run_odds = within(odds_all, odds) if paired else np.zeros(chosen.size)
    # q(V∖A) from the tail, so that it stays accurate when small: the mass after each token inside its
    # bucket (a suffix sum that only ever holds mass outside A) plus the buckets after it.
    after = np.append(np.cumsum(q[chosen][::-1])[::-1], 0.0)  # after[i] = Σ of chosen tokens from i on
    next_start = np.repeat(np.append(starts[1:], chosen.size), np.diff(np.append(starts, chosen.size)))
    run_left = left[bucket + 1] + after[1:] - after[next_start]
    for name, k in items:
        gains = _containment(name, k, run_inside, run_left, run_odds) - run_spent
        best[(name, k)] = max(best[(name, k)], float(gains.max()))
    return best
