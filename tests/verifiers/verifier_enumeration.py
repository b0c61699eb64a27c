"""Exact output laws of the verifiers by enumeration over every draft tuple, and an independent layout.

:func:`output_law` walks every draft tuple x̄ of the law's exact joint (``law.joint(q)``) and sums the
verifier's exact output law given the drafts (``v.output_law``, written once beside each sampler in
mdsd.verifiers), in float64: the law of the emitted token Y, which must be p, and the acceptance
P(Y ∈ set(x̄)), which must equal the verifier's own closed form (``v.acceptance``). A degenerate q (fewer
positive tokens than the law needs) follows the degenerate rule: drafts = the top-k of q, output y ~ p,
accepted iff y is one of them.

:func:`_layout` builds the optimal i.i.d. verifier's layout one token at a time with Brent's method,
independently of mdsd.verifiers.optimal.layout's closed form, which tests/verifiers/optimal/test_layout.py
checks against it.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.optimize import brentq

from mdsd.laws import ranked


@functools.lru_cache(maxsize=64)
def _layout(pb: bytes, qb: bytes, k: int) -> tuple[np.ndarray, dict[int, list[tuple[float, float]]]]:
    """The optimal i.i.d. law F and every token's depth pieces, by placing the tokens one at a time.

    Depth o ∈ [0, 1]; an interval [a, b] of depths has value (1 − a)^k − (1 − b)^k (the chance that the
    least of k uniform depths falls in it). Tokens by p/q descending each take the window of the
    remaining depths, contiguous once earlier windows are cut out, with mass q(y) and value F(y).
    """
    p, q = np.frombuffer(pb), np.frombuffer(qb)
    free, pieces = [(0.0, 1.0)], {}
    ratio = np.array([p[y] / q[y] if q[y] > 0 else (np.inf if p[y] > 0 else -np.inf) for y in range(p.size)])
    order = np.argsort(-ratio, kind="stable")
    h = [p[order][i:].sum() - q[order][i:].sum() ** k for i in range(p.size + 1)]
    law = np.zeros(p.size)
    for i, y in enumerate(order):
        drop = min(h[: i + 1]) - min(h[: i + 2])
        rise = min(h[i + 1 :]) - min(h[i:])
        law[y] = max(p[y] - drop + rise, 0.0)
    if k == 1:  # one draft: nothing to order
        return law, pieces

    def window(c, m):  # the original pieces of compressed depths [c, c + m] of the free region
        out, at = [], 0.0
        for a, b in free:
            lo, hi = max(c, at), min(c + m, at + b - a)
            if hi > lo:
                out.append((a + lo - at, a + hi - at))
            at += b - a
        return out

    def value(segs):
        return sum((1 - a) ** k - (1 - b) ** k for a, b in segs)

    for y in order:
        if q[y] <= 0:
            continue
        room = max(sum(b - a for a, b in free) - q[y], 0.0)

        def gap(c, m=q[y], target=law[y]):  # decreasing in c
            return value(window(c, m)) - target

        c = 0.0 if gap(0.0) <= 0 else (room if gap(room) >= 0 else brentq(gap, 0.0, room, xtol=1e-16))
        pieces[int(y)] = window(c, q[y])
        if not pieces[int(y)]:  # q(y) below the float resolution of depths: a point
            at = next(
                (
                    a + c - sum(bb - aa for aa, bb in free[:i])
                    for i, (a, b) in enumerate(free)
                    if c <= sum(bb - aa for aa, bb in free[: i + 1])
                ),
                1.0,
            )
            pieces[int(y)] = [(at, at)]
            continue
        start, end = pieces[int(y)][0][0], pieces[int(y)][-1][1]  # the window's hull
        cut = [(a, min(b, start)) for a, b in free] + [(max(a, end), b) for a, b in free]
        free = sorted((a, b) for a, b in cut if b - a > 0)
    return law, pieces


def output_law(v, p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, float]:
    """(law of Y [n], P(Y ∈ set(x̄))) for verifier ``v`` on the pair (p, q), by exhaustive enumeration."""
    if np.count_nonzero(q) < v.law.min_support():  # degenerate: the deterministic top-k, y ~ p
        return p.copy(), float(p[ranked(q)[: v.k]].sum())
    law, accepted = np.zeros(p.size), 0.0
    for xs, weight in v.law.joint(q).items():
        out = v.output_law(p, q, xs)
        law += weight * out
        accepted += weight * out[sorted(set(xs))].sum()
    return law, accepted
