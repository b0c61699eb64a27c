r"""The priority layout in plain float64: the optimal verifier's slow reference and its exact output law.

The optimal verifier for i.i.d. drafts (:mod:`mdsd.verifiers.optimal.layout`) gives each draft a depth drawn
uniformly from its token's pieces of the unit interval and selects the draft of least depth; the two-step rule
(:mod:`mdsd.verifiers.optimal.twostep`) then accepts it against p with the selection law F. Here:

* :func:`reference_select` — the selected draft for given uniforms, by a plain loop over the tokens
  (each draft's window top from the crossings of its curve with the earlier prefixes', then its depth):
  what the batched kernel must match exactly;
* :func:`stack_pieces` and :func:`least_depth_odds` — every token's pieces read off the layout's whole
  stack, and the exact chance that each draft of a tuple has the least depth (piecewise polynomials
  between the pieces' end points, integrated exactly), from which the output law given the drafts is

.. math:: r(y \mid \bar x) = \sum_i P(x_i \text{ least}) \Bigl[a_i\, \delta_{x_i}(y)
          + (1 - a_i)\, \mathrm{norm}\bigl((p - F)_+\bigr)(y)\Bigr], \qquad a_i = \min(1, p(x_i) / F(x_i)).
"""

from __future__ import annotations

import numpy as np
from numpy.polynomial import polynomial as poly

__all__ = ["reference_select", "stack_pieces", "least_depth_odds"]


def _sorted_law(p: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens by p/q descending and the optimal i.i.d. selection law F in that order (h_i from the tails)."""
    ratio = np.array([p[y] / q[y] if q[y] > 0 else (np.inf if p[y] > 0 else -np.inf) for y in range(p.size)])
    order = np.argsort(-ratio, kind="stable")
    ps, qs = p[order], q[order]
    tail_p = np.append(np.cumsum(ps[::-1])[::-1], 0.0)
    tail_q = np.append(np.cumsum(qs[::-1])[::-1], 0.0)
    h = tail_p - tail_q**k  # g(P_i) − p(P_i) from the tails, i = 0..n
    top = np.minimum.accumulate(h)
    bottom = np.minimum.accumulate(h[::-1])[::-1]
    return order, np.maximum(ps - (top[:-1] - top[1:]) + (bottom[1:] - bottom[:-1]), 0.0)


def _crossings(dq: np.ndarray, df: np.ndarray, tail: float, k: int) -> np.ndarray:
    """Remaining depths x at which a window of mass dq has value df, the remaining mass below the window
    being a = tail − x: (a + dq)^k − a^k = df. The left side is convex increasing in a >= 0, so Newton's
    method from the upper bound (df / (k dq))^(1/(k−1)) decreases monotonically to the root (vectors)."""
    a = (df / (k * dq)) ** (1.0 / (k - 1))
    for _ in range(100):
        f = (a + dq) ** k - a**k - df
        step = np.where(f > 0, f / (k * ((a + dq) ** (k - 1) - a ** (k - 1))), 0.0)
        if not np.any(step > 1e-17 * a):
            break
        a = np.maximum(a - step, 0.0)
    return np.where(dq**k >= df, tail, tail - a)


def reference_select(
    p: np.ndarray, q: np.ndarray, drafts: list[int], u: np.ndarray
) -> tuple[int, np.ndarray]:
    """(selected draft, F [n] in token order) for i.i.d. drafts [k] and their depth uniforms ``u`` [k]:
    each draft's depth from its token's pieces, the least depth selected (the last maximiser of the
    curves places a depth, as the kernel does)."""
    k = len(drafts)
    order, law = _sorted_law(p, q, k)
    f = np.zeros(p.size)
    f[order] = law
    if k == 1:
        return drafts[0], f
    qs = q[order]
    where = {int(y): i for i, y in enumerate(order)}
    depths = []
    for x, v in zip(drafts, u, strict=False):
        i = where[x]
        prefix_q = np.append(0.0, np.cumsum(qs[:i]))  # Q_j, j = 0..i
        dq = np.cumsum(qs[i::-1])[::-1]  # mass of tokens j..i
        df = np.cumsum(law[i::-1])[::-1]
        tail = qs[i + 1 :].sum()
        top = min(max(_crossings(dq, df, tail, k).max(), 0.0), tail)
        t = top + v * qs[i]
        score = (tail - t + dq) ** k - (tail - t) ** k - df
        j = int(np.flatnonzero(score == score.max())[-1])
        depths.append(t + prefix_q[j])
    return drafts[int(np.argmin(depths))], f


def stack_pieces(lay, pair) -> dict[int, list[tuple[float, float]]]:
    """Each token's pieces in depth, {token: [(a, b), ...]}, from row 0 of an
    :class:`~mdsd.verifiers.optimal.layout.IIDLayout` and its
    :class:`~mdsd.verifiers.optimal.layout.PairLayout`."""
    out = {}
    for i in range(lay.q_sorted.shape[-1]):
        qi = float(lay.q_sorted[0, i])
        if qi <= 0:
            continue
        first, last = int(pair.ptr[i]), int(pair.ptr[i + 1])
        starts = pair.piece_t[first:last].tolist() + [float(pair.tops[i]) + qi]
        shift = lay.prefix_q[0, pair.piece_j[first:last]].tolist()
        pieces = zip(starts, starts[1:], shift, strict=False)
        out[int(lay.order[0, i])] = [(a + d, b + d) for a, b, d in pieces]
    return out


def least_depth_odds(segments: list[list[tuple[float, float]]]) -> np.ndarray:
    """P(draft i has the least depth) [k] for depths uniform on each draft's pieces ``segments[i]``,
    exactly (piecewise polynomials between the breakpoints). A draft whose pieces have no length in
    float64 (q below the resolution of depths) sits at a point, as in the sampler.

    >>> least_depth_odds([[(0.0, 0.5)], [(0.5, 1.0)]]).tolist()  # the first always lies above
    [1.0, 0.0]
    """
    mass = [sum(b - a for a, b in segs) for segs in segments]

    def survive(i, o):  # P(depth_i > o), o a point
        if mass[i] == 0:
            return float(segments[i][0][0] > o)
        return 1.0 - sum(max(0.0, min(b, o) - a) for a, b in segments[i]) / mass[i]

    odds = np.zeros(len(segments))
    for i in (i for i in range(len(segments)) if mass[i] == 0):
        odds[i] = np.prod([survive(j, segments[i][0][0]) for j in range(len(segments)) if j != i])
    cuts = sorted({e for segs in segments for seg in segs for e in seg})
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        mid = 0.5 * (lo + hi)
        dens = [
            float(m > 0 and any(a <= mid <= b for a, b in segs)) / (m or 1.0)
            for segs, m in zip(segments, mass, strict=True)
        ]
        # P(depth_j > o) at o = lo + (hi − lo) x, x in [0, 1]: survive(j, lo) − (j's mass fraction on the
        # interval) x; constant for points. In x every coefficient is at most 1, whatever the masses.
        lines = [np.array([survive(j, lo), -dens[j] * (hi - lo)]) for j in range(len(segments))]
        for i, d in enumerate(dens):
            if d > 0:
                f = np.array([d * (hi - lo)])
                for j, line in enumerate(lines):
                    if j != i:
                        f = poly.polymul(f, line)
                odds[i] += poly.polyval(1.0, poly.polyint(f))
    return odds
