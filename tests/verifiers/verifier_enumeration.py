"""An exact enumerator of every verifier's output law, independent of the samplers in mdsd.verifiers.

For one pair (p, q) it walks every draft tuple x̄ of the law's exact joint (``law.joint(q)``) and every
accept/reject branch of the verifier, in float64, and returns the law of the emitted token Y and the
acceptance P(Y ∈ set(x̄)). The branch rules are written from MATH.md §3 directly, with explicit
renormalisations; K-SEQ's ρ* comes from Brent's method, not the package's grid search. A degenerate q
(fewer positive tokens than the law needs) follows the degenerate rule: drafts = the top-k of q, output
y ~ p, accepted iff y is one of them.
"""

from __future__ import annotations

import numpy as np
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


RULES = {
    "single": single,
    "rrs": rrs,
    "rrsw": rrsw,
    "kseq": kseq,
    "spechub": spechub,
    "greedy": greedy,
    "topk": topk,
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
