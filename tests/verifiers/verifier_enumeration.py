"""An exact enumerator of every verifier's output law, independent of the samplers in mdsd.verifiers.

For one pair (p, q) it walks every draft tuple x̄ of the law's exact joint (``law.joint(q)``) and every
accept/reject branch of the verifier, in float64, and returns the law of the emitted token Y and the
acceptance P(Y ∈ set(x̄)). The branch rules are written from MATH.md §3 directly, with explicit
renormalisations; K-SEQ's ρ* comes from Brent's method, not the package's grid search. A degenerate q
(fewer positive tokens than the law needs) follows the degenerate rule: drafts = the top-k of q, output
y ~ p, accepted iff y is one of them.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.polynomial import polynomial as poly
from scipy.optimize import brentq

from mdsd.laws import ranked


def _norm(w: np.ndarray) -> np.ndarray:
    s = w.sum()
    return w / s if s > 0 else np.zeros_like(w)


def _delta(n: int, y: int) -> np.ndarray:
    e = np.zeros(n)
    e[y] = 1.0
    return e


def single(p, q, xs):
    (x,) = xs
    a = min(1.0, p[x] / q[x])
    return a * _delta(p.size, x) + (1 - a) * _norm(np.maximum(p - q, 0))


def rrs(p, q, xs):
    out, alive, pi = np.zeros(p.size), 1.0, p.copy()
    for x in xs:
        a = min(1.0, pi[x] / q[x])
        out += alive * a * _delta(p.size, x)
        alive *= 1 - a
        pi = _norm(np.maximum(pi - q, 0))
    return out + alive * pi


def rrsw(p, q, xs):
    out, alive, pi, qi = np.zeros(p.size), 1.0, p.copy(), q.copy()
    for x in xs:
        a = min(1.0, pi[x] / qi[x])
        out += alive * a * _delta(p.size, x)
        alive *= 1 - a
        pi = _norm(np.maximum(pi - qi, 0))
        qi = qi.copy()
        qi[x] = 0.0
        qi = _norm(qi)
    return out + alive * pi


def kseq_rho(p, q, k):
    def g(rho):
        b = np.minimum(p / rho, q).sum()
        return 1 - (1 - b) ** k - rho * b

    if k == 1 or g(1.0) <= 0:
        return 1.0
    if g(float(k)) >= 0:  # only by rounding (β tiny): every ρ is a root to working precision
        return float(k)
    return brentq(g, 1.0, float(k), xtol=1e-15, rtol=4 * np.finfo(float).eps)


def kseq(p, q, xs):
    k = len(xs)
    rho = kseq_rho(p, q, k)
    beta = np.minimum(p / rho, q).sum()
    gamma = (1 - (1 - beta) ** k) / beta if beta > 0 else rho
    out, alive = np.zeros(p.size), 1.0
    for x in xs:
        a = min(1.0, p[x] / (rho * q[x]))
        out += alive * a * _delta(p.size, x)
        alive *= 1 - a
    return out + alive * _norm(np.maximum(p - gamma * np.minimum(p / rho, q), 0))


def spechub(p, q, xs):
    n = p.size
    a = int(ranked(q)[0])
    qa = q[a]
    rest = np.delete(q, a).sum()  # 1 − q_a
    pair = np.array([qa * q[j] / rest if j != a else 0.0 for j in range(n)])  # Q(a, j)
    plus = np.array([max(p[j] - q[j], 0.0) if j != a else 0.0 for j in range(n)])
    s_ia = sum(max(q[j] - p[j], 0.0) for j in range(n) if j != a)
    s_ai = sum(max(pair[j] - plus[j], 0.0) for j in range(n) if j != a)
    if xs[1] == a:  # (i, a)
        i = xs[0]
        a1 = min(1.0, p[i] / q[i])
        a2 = min(1.0, max(p[a] - s_ai, 0.0) / s_ia) if s_ia > 0 else 1.0
    else:  # (a, i)
        assert xs[0] == a
        i = xs[1]
        a1 = min(1.0, plus[i] / pair[i])
        a2 = min(1.0, p[a] / s_ai) if s_ai > 0 else 1.0
    resid = np.maximum(plus - pair, 0.0)
    resid[a] = max(max(p[a] - s_ai, 0.0) - s_ia, 0.0)
    return a1 * _delta(n, i) + (1 - a1) * (a2 * _delta(n, a) + (1 - a2) * _norm(resid))


def greedy(p, q, xs):
    top, x = list(xs[:-1]), xs[-1]
    qr = q.copy()
    qr[top] = 0.0
    qr = _norm(qr)
    a = min(1.0, p[x] / qr[x])
    return a * _delta(p.size, x) + (1 - a) * _norm(np.maximum(p - qr, 0))


def topk(p, q, xs):
    return p.copy()


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


def _least_depth_odds(segments: list[list[tuple[float, float]]]) -> np.ndarray:
    """P(draft i has the least depth) for depths uniform on each draft's pieces, exactly (piecewise
    polynomials between the breakpoints). A draft whose pieces have no length in float64 (q below the
    resolution of depths) sits at a point, as in the sampler."""
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


def optimal(p, q, xs):
    k = len(xs)
    law, pieces = _layout(p.tobytes(), q.tobytes(), k)
    odds = _least_depth_odds([pieces[x] for x in xs]) if k > 1 else np.ones(1)
    resid = _norm(np.maximum(p - law, 0))
    out = np.zeros(p.size)
    for x, w in zip(xs, odds, strict=True):
        a = min(1.0, p[x] / law[x]) if law[x] > 0 else 1.0
        out += w * (a * _delta(p.size, x) + (1 - a) * resid)
    return out


RULES = {
    "single": single,
    "rrs": rrs,
    "rrsw": rrsw,
    "kseq": kseq,
    "spechub": spechub,
    "greedy": greedy,
    "topk": topk,
    "optimal": optimal,
}


def output_law(v, p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, float]:
    """(law of Y [n], P(Y ∈ set(x̄))) for verifier ``v`` on the pair (p, q), by exhaustive enumeration."""
    if np.count_nonzero(q) < v.law.min_support():  # degenerate: the deterministic top-k, y ~ p
        return p.copy(), float(p[ranked(q)[: v.k]].sum())
    rule = RULES[v.name]
    law, accepted = np.zeros(p.size), 0.0
    for xs, weight in v.law.joint(q).items():
        out = rule(p, q, xs)
        law += weight * out
        accepted += weight * out[sorted(set(xs))].sum()
    return law, accepted
