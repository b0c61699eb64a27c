"""A depth-limited suffix array over token ids, built by prefix doubling in numpy.

REST (He et al., 2024) and SSSD (Marzollo et al., §3.1.2) index their datastore with a suffix array:
every n-gram's occurrences are then one contiguous run of it, found by binary search.
"""

from __future__ import annotations

import numpy as np

__all__ = ["suffix_array", "suffix_range"]


def _dense_ranks(keys: np.ndarray, order: np.ndarray) -> np.ndarray:
    # Rank 1, 2, ... of each position by `keys`, equal keys sharing a rank; `order` sorts `keys`.
    sorted_keys = keys[order]
    ranks = np.empty(keys.size, dtype=np.int64)
    ranks[order] = np.cumsum(np.concatenate(([1], sorted_keys[1:] != sorted_keys[:-1])))
    return ranks


def suffix_array(tokens: np.ndarray, depth: int) -> np.ndarray:
    r"""Start positions of the suffixes of ``tokens``, sorted by their first ``depth`` tokens.

    Suffix :math:`i` is :math:`s_i = (t_i, \dots, t_{\min(i + \text{depth}, n) - 1})`; the order is
    lexicographic with a proper prefix first (Python's tuple order) and equal keys by position:

    .. math::

        \text{sa} = \operatorname{argsort}_i \, (s_i, i).

    Prefix doubling: ranks by the first k tokens give ranks by the first k + j (j <= k) through a
    stable sort of the pairs (rank_k(i), rank_k(i + j)), with rank 0 past the end; j = k until the
    last round, which tops up exactly to ``depth``. O(n log n log depth) time, stops early when all
    ranks are distinct. Negative ids (document separators) sort before every token.

    >>> suffix_array(np.array([2, 1, 2, 1]), depth=8).tolist()
    [3, 1, 2, 0]
    >>> suffix_array(np.array([1, 1, 1]), depth=1).tolist()
    [0, 1, 2]
    """
    n = tokens.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(tokens, kind="stable")
    rank = _dense_ranks(tokens, order)
    k = 1
    while k < depth and rank.max() < n:
        j = min(k, depth - k)
        shifted = np.zeros(n, dtype=np.int64)
        shifted[: n - j] = rank[j:]
        keys = rank * (n + 1) + shifted  # < (n + 1)^2: exact in int64 for n < 3e9
        order = np.argsort(keys, kind="stable")
        rank = _dense_ranks(keys, order)
        k += j
    return order


def _bound(tokens, sa, key: tuple[int, ...], width: int, lo: int, hi: int, upper: bool) -> int:
    # First index in sa[lo:hi] whose suffix, cut to `width` tokens, is >= key (> key if `upper`).
    while lo < hi:
        mid = (lo + hi) // 2
        start = int(sa[mid])
        head = tuple(tokens[start : start + width].tolist())
        if head < key or (upper and head == key):
            lo = mid + 1
        else:
            hi = mid
    return lo


def suffix_range(
    tokens: np.ndarray, sa: np.ndarray, pattern: tuple[int, ...], lo: int = 0, hi: int | None = None
) -> tuple[int, int]:
    """``(lo, hi)``: the run of ``sa`` whose suffixes start with ``pattern`` AND continue with a
    non-negative token (so each has a next token that is not a separator or the end).

    Needs ``sa`` sorted on at least ``len(pattern) + 1`` tokens (:func:`suffix_array`); the search
    stays inside ``sa[lo:hi]``, which must contain that run (e.g. the run of ``pattern[0]``).

    >>> tokens = np.array([2, 1, 2, 1])
    >>> suffix_range(tokens, suffix_array(tokens, 8), (2, 1))
    (3, 4)
    """
    m = len(pattern)
    lo = _bound(tokens, sa, pattern + (0,), m + 1, lo, sa.size if hi is None else hi, upper=False)
    hi = _bound(tokens, sa, pattern, m, lo, sa.size if hi is None else hi, upper=True)
    return lo, hi
