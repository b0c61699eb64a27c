"""Slow float64 references: one plain loop per verifier, row by row and draft by draft.

Each ``reference_<name>(p, q, drafts, accept, residual)`` takes one row (numpy float64 p, q [V], drafts
[k], the row's uniforms ``accept`` [k] and ``residual``) and returns the emitted token. The batched
samplers must emit the same tokens when given the same :class:`~mdsd.verifiers.ops.Uniforms`
(:func:`reference_verify`). The references renormalise explicitly and never share code with the samplers.
A residual without mass is replaced by p; a degenerate row (q has fewer positive tokens than the law
needs, :mod:`mdsd.verifiers.base`) emits a draw of p with the residual uniform.
"""

from __future__ import annotations

import numpy as np
import torch

from mdsd.verifiers.kseq import GRID_BITS
from mdsd.verifiers.ops import Uniforms

__all__ = ["reference_verify", "REFERENCES", "draw_index"]


def draw_index(w: np.ndarray, u: float) -> int:
    """Reference inverse CDF: the first i with Σ_{j≤i} w_j > u Σ w (never a token of zero weight)."""
    c = np.cumsum(w)
    target = u * c[-1]
    for i in range(w.size):
        if c[i] > target and w[i] > 0:
            return i
    return int(np.flatnonzero(w > 0)[-1])


def _norm_or(w: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    return w / w.sum() if w.sum() > 0 else fallback


def reference_single(p, q, drafts, accept, residual):
    x = drafts[0]
    if accept[0] * q[x] < p[x]:
        return x
    return draw_index(_norm_or(np.maximum(p - q, 0.0), p), residual)


def reference_rrs(p, q, drafts, accept, residual):
    pi = p
    for i, x in enumerate(drafts):
        if accept[i] * q[x] < pi[x]:
            return x
        pi = _norm_or(np.maximum(pi - q, 0.0), p)
    return draw_index(pi, residual)


def reference_rrsw(p, q, drafts, accept, residual):
    pi, qi = p, q
    for i, x in enumerate(drafts):
        if accept[i] * qi[x] < pi[x]:
            return x
        pi = _norm_or(np.maximum(pi - qi, 0.0), p)
        qi = qi.copy()
        qi[x] = 0.0
        qi = _norm_or(qi, qi)
    return draw_index(pi, residual)


def _kseq_rho(p, q, k):
    def g(rho):
        b = np.minimum(p / rho, q).sum()
        return 1.0 - (1.0 - b) ** k - rho * b

    lo, hi = 1.0, float(k)
    if g(lo) <= 0:
        return lo
    for _ in range(GRID_BITS[torch.float64]):  # ρ on the grid 1 + (k − 1) j / 2^48
        mid = 0.5 * (lo + hi)
        if g(mid) <= 0:
            hi = mid
        else:
            lo = mid
    return hi


def reference_kseq(p, q, drafts, accept, residual):
    k = len(drafts)
    rho = _kseq_rho(p, q, k)
    for i, x in enumerate(drafts):
        if accept[i] * rho * q[x] < p[x]:
            return x
    b = np.minimum(p / rho, q).sum()
    gamma = (1.0 - (1.0 - b) ** k) / b if b > 0 else rho
    return draw_index(_norm_or(np.maximum(p - gamma * np.minimum(p / rho, q), 0.0), p), residual)


def reference_spechub(p, q, drafts, accept, residual):
    a = int(np.argmax(q))
    others = np.arange(q.size) != a
    pair = np.where(others, q[a] * q / q[others].sum(), 0.0)  # Q(a, j), 0 at the hub
    gain = np.where(others, np.maximum(p - q, 0.0), 0.0)  # (p_j − q_j)+, j ≠ a
    s_ia = np.maximum(q - p, 0.0)[others].sum()
    s_ai = np.maximum(pair - gain, 0.0)[others].sum()
    x1, x2 = drafts
    if x2 == a:  # pair (i, a)
        i = x1
        if accept[0] * q[i] < p[i]:
            return i
        if accept[1] * s_ia < max(p[a] - s_ai, 0.0):
            return a
    else:  # pair (a, i)
        i = x2
        if accept[0] * pair[i] < gain[i]:
            return i
        if accept[1] * s_ai < p[a]:
            return a
    w = np.maximum(gain - pair, 0.0)
    w[a] = max(max(p[a] - s_ai, 0.0) - s_ia, 0.0)
    return draw_index(_norm_or(w, p), residual)


def reference_greedy(p, q, drafts, accept, residual):
    top, x = list(drafts[:-1]), drafts[-1]
    qr = q.copy()
    qr[top] = 0.0
    qr = qr / qr.sum()  # q' = q restricted to V∖T
    if accept[-1] * qr[x] < p[x]:
        return x
    return draw_index(_norm_or(np.maximum(p - qr, 0.0), p), residual)


def reference_topk(p, q, drafts, accept, residual):
    return draw_index(p, residual)


def _optimal_law(p, q, k):
    """Tokens by p/q descending and the optimal i.i.d. selection law F in that order."""
    ratio = np.array([p[y] / q[y] if q[y] > 0 else (np.inf if p[y] > 0 else -np.inf) for y in range(p.size)])
    order = np.argsort(-ratio, kind="stable")
    ps, qs = p[order], q[order]
    tail_p = np.append(np.cumsum(ps[::-1])[::-1], 0.0)
    tail_q = np.append(np.cumsum(qs[::-1])[::-1], 0.0)
    h = tail_p - tail_q**k  # g(P_i) − p(P_i) from the tails, i = 0..n
    top = np.minimum.accumulate(h)
    bottom = np.minimum.accumulate(h[::-1])[::-1]
    return order, np.maximum(ps - (top[:-1] - top[1:]) + (bottom[1:] - bottom[:-1]), 0.0)


def _crossings(dq, df, tail, k):
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


def reference_optimal(p, q, drafts, accept, residual):
    """The i.i.d. priority layout: each draft's depth from its token's pieces, least depth selected."""
    k = len(drafts)
    order, law = _optimal_law(p, q, k)
    qs = q[order]
    where = {int(y): i for i, y in enumerate(order)}
    depths = []
    for x, u in zip(drafts if k > 1 else [], accept, strict=False):
        i = where[x]
        prefix_q = np.append(0.0, np.cumsum(qs[:i]))  # Q_j, j = 0..i
        dq = np.cumsum(qs[i::-1])[::-1]  # mass of tokens j..i
        df = np.cumsum(law[i::-1])[::-1]
        tail = qs[i + 1 :].sum()
        top = min(max(_crossings(dq, df, tail, k).max(), 0.0), tail)
        t = top + u * qs[i]
        score = (tail - t + dq) ** k - (tail - t) ** k - df
        j = int(np.flatnonzero(score == score.max())[-1])
        depths.append(t + prefix_q[j])
    chosen = drafts[int(np.argmin(depths))] if k > 1 else drafts[0]
    f = np.zeros(p.size)
    f[order] = law
    a = min(1.0, p[chosen] / f[chosen]) if f[chosen] > 0 else 1.0
    if residual < a:
        return chosen
    return draw_index(_norm_or(np.maximum(p - f, 0.0), p), (residual - a) / (1.0 - a))


REFERENCES = {
    "single": reference_single,
    "rrs": reference_rrs,
    "rrsw": reference_rrsw,
    "kseq": reference_kseq,
    "spechub": reference_spechub,
    "greedy": reference_greedy,
    "topk": reference_topk,
    "optimal": reference_optimal,
}


def reference_verify(name: str, p: object, q: object, drafts: object, uniforms: Uniforms) -> torch.Tensor:
    """Emitted tokens [B] of verifier ``name`` for rows p, q [B, V], drafts [B, k], row by row in float64.

    >>> from mdsd.verifiers import draw_uniforms
    >>> u = draw_uniforms((1,), 1, torch.Generator().manual_seed(0))
    >>> int(reference_verify("single", [[0.0, 1.0]], [[0.0, 1.0]], [[1]], u)[0])
    1
    """
    p = np.asarray(torch.as_tensor(p, dtype=torch.float64), dtype=np.float64)
    q = np.asarray(torch.as_tensor(q, dtype=torch.float64), dtype=np.float64)
    drafts = np.asarray(torch.as_tensor(drafts)).astype(int)
    accept = uniforms.accept.cpu().numpy()
    residual = uniforms.residual.cpu().numpy()
    rule = REFERENCES[name]
    from mdsd.verifiers import verifier

    need = verifier(name, drafts.shape[-1]).law.min_support()
    out = []
    for b in range(drafts.shape[0]):
        pb, qb = p[b] / p[b].sum(), q[b] / q[b].sum()
        if np.count_nonzero(qb) < need:  # degenerate row: y ~ p, accepted iff y is a draft
            out.append(draw_index(pb, residual[b]))
        else:
            out.append(rule(pb, qb, [int(x) for x in drafts[b]], accept[b], residual[b]))
    return torch.tensor(out, dtype=torch.long)
