r"""Exact acceptance of the optimal verifier's fallback for drafts without replacement (k <= 3, any V).

**The fallback** (:class:`mdsd.verifiers.optimal.OptimalVerifier` beyond its flow size) turns the k drafts
without replacement into the first k draws of an i.i.d. stream whose distinct tokens, in order, are the
drafts, and runs the optimal i.i.d. rule (the priority layout, :mod:`mdsd.verifiers.layout`) on those
draws: select the draw of least depth, accept it w.p. min(1, p/F), else emit y ~ r = norm((p − F)+).

**Its acceptance.** The i.i.d. rule accepts Σ min(F, p) = α*_iid(k). A rejection needs a selected z with
F(z) > p(z) (the set R, ρ(z) = 1 − p(z)/F(z)), which lies in A*, and then every draw lies in A* (B* owns
the top q(B*) of the depths); r lives on B*, so the emitted y never equals a draw. It is accepted when it
equals one of the k − m drafts beyond the m distinct draws D, which are k − m draws without replacement
from V ∖ D (π_j(y | U): the chance that y is among j such draws from U):

.. math:: \alpha = \alpha^*_{iid}(k) + \sum_{D,\ |D| < k} P(\text{the draws have set } D, \text{reject})
          \sum_y r(y)\, \pi_{k - |D|}(y \mid V \setminus D).

With R_q = Σ_y r(y) q(y), s(a, b) = 1 − q(a) − q(b) and c(z) = 1 − q(z):

* k = 2: only D = {z}: α = α*_iid + R_q Σ_{z∈R} q(z)² ρ(z) / c(z).
* k = 3, D = {z} (three draws of z): q(z)³ ρ(z) Σ_y r(y) π_2(y | V∖z), with
  π_2(y | V∖z) = q(y)/c(z) · (1 + W(z) − q(y)/s(z, y)) and W(z) = Σ_{w≠z} q(w)/s(z, w).
* k = 3, D = {a, b}: the sequences with two draws of a and one of b (three orders) reject w.p.
  ρ(a) P(a selected) + ρ(b) P(b selected); b is selected when its depth lies above both a-depths. The
  pieces of the layout tile the depths, so over one piece π of b the a-length deeper than π, ℓ_a(π), is
  constant, and with L_π its length the ordered pairs give

  .. math:: 3 R_q \sum_{\pi} L_\pi \sum_{a \ne b(\pi)}
            \frac{\rho(a)\, q(a)^2 + (\rho(b) - \rho(a))\, \ell_a(\pi)^2}{s(a, b)}.

  The code uses e(a, b) = Σ_{y ∉ {a, b}} r(y) q(y) for R_q: equal in exact arithmetic, and e/s <= 1, so a
  piece that rounding puts a few 1e-16 out of place weighs no more than its length.

**Computing the pair sum in O(P (|H| + n_terms)).** P is the number of pieces (at most 2V), R may hold
most of the vocabulary. A *sweep* gives Σ_a c(a) ℓ_a(π)² at every piece π for a coefficient vector c
in one pass from the deepest piece up. Pairs with a token of q > ``heavy`` (the set H, at most 1/heavy
tokens) are summed one heavy token at a time; for the others 1/s(a, b) = Σ_n q(a)^n / c(b)^{n+1}, whose
ratio q(a)/c(b) <= heavy/(1 − heavy), so a fixed number of sweeps reaches float64 rounding. W(z) and the
y-sum of the k = 3 singles are expanded the same way. 1 − q(a) − q(b) is summed from the other entries
where a or b is among the three largest, so it never cancels.

Checked against exact enumeration of the fallback's output law (drafts, repeats and verifier
randomness) in the tests, with the heavy set empty, partial and the whole vocabulary.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mdsd.verifiers.layout import iid_layout, pair_layout

__all__ = ["fallback_acceptance", "HEAVY"]

HEAVY = 0.1  # tokens of more draft mass are summed pair by pair; the series ratio is <= 1/9 below it
_TAIL = 1e-18  # the series stops when its remaining terms are below this (times a bound of order 1)
_MAX_TERMS = 2_000


class _Rest:
    """Σ_{v ∉ {z, w}} q(v) of a nonnegative vector q without cancellation: the three largest entries are
    added one by one to the sum of the others, from which a difference only removes entries no larger
    than what remains."""

    def __init__(self, q: np.ndarray) -> None:
        self.q = q
        self.top = np.argsort(-q, kind="stable")[: min(3, q.size)]
        self.in_top = np.zeros(q.size, dtype=bool)
        self.in_top[self.top] = True
        self.base = float(q[~self.in_top].sum())
        self.total = self.base + float(q[self.top].sum())

    def _high(self, *left_out: np.ndarray) -> np.ndarray:
        high = np.zeros(np.broadcast_shapes(*(np.shape(x) for x in left_out)))
        for t in self.top:
            high = high + np.where(np.logical_or.reduce([x == t for x in left_out]), 0.0, self.q[t])
        return high

    def one(self, z: np.ndarray) -> np.ndarray:
        """Σ_{v ≠ z} q(v) for token indices z [m]."""
        return (self.base - np.where(self.in_top[z], 0.0, self.q[z])) + self._high(z)

    def two(self, z: int, w: np.ndarray) -> np.ndarray:
        """Σ_{v ∉ {z, w}} q(v) for one token z and tokens w [m] (w ≠ z)."""
        q, top = self.q, self.in_top
        low = self.base - (0.0 if top[z] else q[z]) - np.where(top[w], 0.0, q[w])
        return low + self._high(np.full(np.shape(w), z), w)


class _Pieces:
    """The layout's pieces in depth order: token (sorted position), length, and the token's own length
    deeper than the piece; :meth:`sweep` gives Σ_a c(a) ℓ_a(π)² at every piece π."""

    def __init__(self, lay) -> None:
        pair = pair_layout(lay)
        qs = lay.q_sorted[0].numpy()
        ptr, start_t = pair.ptr.numpy(), pair.piece_t.numpy()
        counts = np.diff(ptr)
        token = np.repeat(np.arange(qs.size), counts)
        end_t = np.empty_like(start_t)
        end_t[:-1] = start_t[1:]
        owners = np.flatnonzero(counts)
        end_t[ptr[owners + 1] - 1] = pair.tops.numpy()[owners] + qs[owners]
        length = np.maximum(end_t - start_t, 0.0)
        total = np.bincount(token, weights=length, minlength=qs.size)
        # each token's pieces hold exactly its mass (the sampler draws a fraction u of q along them); a
        # token whose pieces have no width in float64 sits at the start of its first piece
        length *= np.where(total > 0, qs / np.where(total > 0, total, 1.0), 0.0)[token]
        point = owners[total[owners] <= 0]
        length[ptr[point]] = qs[point]
        depth = start_t + lay.prefix_q[0].numpy()[pair.piece_j.numpy()]
        # own length deeper than each piece, summed within the token (at most a few pieces each)
        order = np.lexsort((-depth, token))  # by token, deepest piece first
        grouped, grouped_length = token[order], length[order]
        starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
        rank = np.arange(grouped.size) - np.repeat(starts, np.diff(np.r_[starts, grouped.size]))
        below = np.zeros(grouped.size)
        for level in range(1, int(rank.max(initial=0)) + 1):
            at = np.flatnonzero(rank == level)
            below[at] = below[at - 1] + grouped_length[at - 1]
        deeper = np.empty_like(length)
        deeper[order] = below
        down = np.argsort(depth, kind="stable")
        self.token, self.length, self.deeper = token[down], length[down], deeper[down]

    def sweep(self, c: np.ndarray) -> np.ndarray:
        """Σ_a c(a) ℓ_a(π)² at each piece π (depth order), ℓ_a(π) = a's length deeper than π."""
        rise = c[self.token] * self.length * (2.0 * self.deeper + self.length)
        inclusive = np.cumsum(rise[::-1])[::-1]
        return np.concatenate([inclusive[1:], [0.0]])


def _terms(q_light: np.ndarray) -> int:
    """Series terms for Σ_n q(a)^n / c(b)^{n+1} over light a, b: ratio^n / (1 − ratio) < _TAIL."""
    if q_light.size == 0:
        return 1
    top = float(q_light.max())
    ratio = top / (1.0 - top)  # q(a) / c(b), at most this (a = b included: its term is taken out exactly)
    if ratio <= 0.0:
        return 1
    return min(_MAX_TERMS, max(1, math.ceil(math.log(_TAIL * (1.0 - ratio)) / math.log(ratio))))


def fallback_acceptance(p: np.ndarray, q: np.ndarray, k: int, heavy: float = HEAVY) -> float:
    """Exact acceptance of the without-replacement fallback (module docstring) for k = 1, 2, 3.

    ``p``, ``q`` are distributions [V] (float64, q with at least k tokens); ``heavy`` (in [0, 0.45]) only
    moves work between the exact pair sums and the series, not the value.

    >>> round(fallback_acceptance(np.array([0.0, 0.5, 0.5]), np.array([0.8, 0.1, 0.1]), 2), 12)
    0.68
    """
    if k not in (1, 2, 3):
        raise ValueError(f"k must be 1, 2 or 3 for the fallback's exact acceptance, got {k}")
    if not 0.0 <= heavy <= 0.45:
        raise ValueError(f"heavy must lie in [0, 0.45], got {heavy}")
    lay = iid_layout(torch.from_numpy(p)[None], torch.from_numpy(q)[None], k)
    order = lay.order[0].numpy()
    ps, qs, law = p[order], q[order], lay.f_sorted[0].numpy()
    base = float(np.minimum(law, ps).sum())
    excess = np.maximum(ps - law, 0.0)
    over = law > ps
    if k == 1 or excess.sum() <= 0.0 or not over.any():
        return base
    rho = np.where(over, 1.0 - ps / np.where(over, law, 1.0), 0.0)
    r = excess / excess.sum()
    rest, reach = _Rest(qs), _Rest(r * qs)  # sums of q and of r q leaving entries out; R_q = reach.total
    bad = np.flatnonzero(over)
    if k == 2:
        return base + reach.total * float((qs[bad] ** 2 * rho[bad] / rest.one(bad)).sum())
    pairs = 3.0 * _pairs(lay, qs, rho, rest, reach, heavy)
    return base + _singles(qs, rho, r, rest, reach, bad, heavy) + pairs


def _singles(qs, rho, r, rest: _Rest, reach: _Rest, bad: np.ndarray, heavy: float) -> float:
    """Σ_{z∈R} q(z)³ ρ(z) Σ_y r(y) π_2(y | V∖z), k = 3, with c(z) Σ_y r(y) π_2(y | V∖z) =
    Σ_{y≠z} r(y) q(y) (1 + Σ_{w∉{y,z}} t_z(w)) and t_z(w) = q(w)/s(z, w)."""
    heavy_set = np.flatnonzero(qs > heavy)
    light = np.ones(qs.size, dtype=bool)
    light[heavy_set] = False
    out = np.zeros(bad.size)  # c(z) Σ_y r(y) π_2(y | V∖z)
    direct = qs[bad] > heavy
    for i in np.flatnonzero(direct):  # heavy z: every y and w directly
        z = bad[i]
        others = np.delete(np.arange(qs.size), z)
        t = qs[others] / rest.two(z, others)
        out[i] = float((r[others] * qs[others] * (1.0 + _Rest(t).one(np.arange(t.size)))).sum())
    soft = np.flatnonzero(~direct)
    z = bad[soft]
    rq = reach.q
    for w in heavy_set:  # light z, heavy w: Σ_{y≠w} r(y) q(y) t_z(w)
        out[soft] += (qs[w] / rest.two(int(w), z)) * float(reach.one(np.array([w]))[0])
    # light w and y: 1/s(z, w) = Σ_n q(z)^n / c(w)^{n+1}; Σ_y r q (1 + L(z)) − Σ_{y light} r q t_z(y)
    c = 1.0 - qs[light]
    moment_w, moment_y = qs[light] / c, rq[light] * qs[light] / c  # n = 0
    poly_w, poly_y, power = np.zeros(z.size), np.zeros(z.size), np.ones(z.size)
    for _ in range(_terms(qs[light])):
        poly_w += power * moment_w.sum()
        poly_y += power * moment_y.sum()
        power = power * qs[z]
        moment_w, moment_y = moment_w / c, moment_y / c
    qz = qs[z]
    light_w = poly_w - qz / (1.0 - 2.0 * qz)  # the series' w = z term left out
    light_y = poly_y - rq[z] * qz / (1.0 - 2.0 * qz)
    out[soft] += reach.total * (1.0 + light_w) - light_y
    return float((qs[bad] ** 3 * rho[bad] * out / rest.one(bad)).sum())


def _pairs(lay, qs, rho, rest: _Rest, reach: _Rest, heavy: float) -> float:
    """Σ_π L_π Σ_{a ≠ b(π)} [ρ(a) q(a)² + (ρ(b) − ρ(a)) ℓ_a(π)²] e(a, b) / s(a, b), k = 3, where
    e(a, b) = Σ_{y ∉ {a, b}} r(y) q(y) (``reach`` sums r q leaving entries out); e = R_q in exact
    arithmetic, and e / s <= 1 keeps a piece misplaced by rounding from weighing more than its length."""
    pieces = _Pieces(lay)
    b, length = pieces.token, pieces.length
    heavy_set = np.flatnonzero(qs > heavy)
    light = np.ones(qs.size, dtype=bool)
    light[heavy_set] = False
    everyone = np.arange(qs.size)
    total = 0.0
    for h in heavy_set:
        w = np.zeros(qs.size)  # e(a, h) / s(a, h) over a ≠ h
        others = everyone != h
        w[others] = reach.two(int(h), everyone[others]) / rest.two(int(h), everyone[others])
        at = b == h  # b = h heavy, every a ≠ h
        constant = float((w * rho * qs**2).sum())
        total += float((length[at] * (constant + pieces.sweep(w * (rho[h] - rho))[at])).sum())
        at = light[b]  # a = h heavy, b light
        own = np.zeros(qs.size)
        own[h] = 1.0
        deep = pieces.sweep(own)[at]
        bb = b[at]
        total += float((length[at] * w[bb] * (rho[h] * qs[h] ** 2 + (rho[bb] - rho[h]) * deep)).sum())
    # a, b light: 1/s(a, b) = Σ_n q(a)^n / c(b)^{n+1}, e(a, b) = Σ r q − r q(b) − r q(a)
    at = light[b]
    bb, weight = b[at], length[at] / (1.0 - qs[b[at]])
    rq = reach.q
    spare = reach.total - rq[bb]
    power = np.where(light, 1.0, 0.0)  # q(a)^n on light a
    for _ in range(_terms(qs[light])):
        inner = np.zeros(bb.size)
        for coef, scale in ((power, spare), (power * rq, -1.0)):
            constant = float((coef * rho * qs**2).sum()) - coef[bb] * rho[bb] * qs[bb] ** 2
            inner += scale * (constant + rho[bb] * pieces.sweep(coef)[at] - pieces.sweep(coef * rho)[at])
        total += float((weight * inner).sum())
        power = power * qs
        weight = weight / (1.0 - qs[bb])
    return total
