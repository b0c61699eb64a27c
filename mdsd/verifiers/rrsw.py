"""Recursive rejection sampling with drafts without replacement (RRSw; SpecHub's baseline;
docs/mathematics.md §3)."""

from __future__ import annotations

import math

import numpy as np
import torch

from mdsd.laws import WithoutReplacement
from mdsd.sampling import block_size
from mdsd.verifiers.base import Rows, Verifier
from mdsd.verifiers.ops import mass_outside, take
from mdsd.verifiers.reference import draw_index, normalized, onehot, ratio
from mdsd.verifiers.registry import register

__all__ = ["RRSwVerifier", "ENUMERATION_LIMIT"]

ENUMERATION_LIMIT = 4_000_000  # k >= 3: exact enumeration while n * m (m - 1) ... (m - k + 2) <= this
SHARED_ROWS = 16  # one pair [V] verified for more draft tuples than this: sort the pair once (_SortedPart)


def _acceptance_k2(p: np.ndarray, q: np.ndarray) -> float:
    """k = 2 in O(n log n): α = Σ min(p, q) + Σ_x (q(x) − p(x))+ · f(1/(1 − q(x))), r = norm((p − q)+),

    f(c) = Σ_y min(r(y), c q(y)) = Σ_{r/q ≤ c} r + c Σ_{r/q > c} q: sort tokens by r/q, prefix sums of r,
    suffix sums of q, and one ``searchsorted`` for all x at once.
    """
    first = np.minimum(p, q).sum()
    r = np.maximum(p - q, 0.0)
    if r.sum() <= 0:
        return float(first)
    r = r / r.sum()
    on = (r > 0) & (q > 0)  # the other tokens add min(r, c q) = 0
    ratio, rs, qs = r[on] / q[on], r[on], q[on]
    order = np.argsort(ratio)
    ratio, rs, qs = ratio[order], rs[order], qs[order]
    r_prefix = np.concatenate([[0.0], np.cumsum(rs)])  # Σ of the first m
    q_suffix = np.concatenate([np.cumsum(qs[::-1])[::-1], [0.0]])  # Σ from m on
    # only drafts x with q(x) > p(x) are ever rejected; 1 − q(x) = Σ_{y≠x} q(y) as a prefix plus a
    # suffix sum: no cancellation when q(x) ≈ 1
    rejected = np.flatnonzero(q > p)
    before = np.concatenate([[0.0], np.cumsum(q)[:-1]])  # Σ_{y<x} q(y)
    after = np.concatenate([np.cumsum(q[::-1])[::-1][1:], [0.0]])  # Σ_{y>x} q(y)
    rest = before[rejected] + after[rejected]
    c = 1.0 / np.maximum(rest, np.finfo(float).tiny)
    m = np.searchsorted(ratio, c, side="right")
    f = r_prefix[m] + c * q_suffix[m]
    return float(first + ((q - p)[rejected] * f).sum())


def _acceptance_enumerated(p: np.ndarray, q: np.ndarray, k: int) -> float:
    """Exact acceptance by walking every rejection path, one level (draft) at a time, vectorised.

    A state is a rejection path (x_1..x_i rejected): its probability w, target p_i and draft q_i.
    Paths of zero probability are dropped.
    """
    w, ps, qs = np.ones(1), p[None, :], q[None, :]  # [M], [M, n], [M, n]
    accepted = 0.0
    for i in range(k):
        both = np.minimum(ps, qs)
        accepted += float(w @ both.sum(-1))
        if i == k - 1:
            break
        reject = w[:, None] * (qs - both)  # [M, n]: draw x from q_i and reject it
        r = np.maximum(ps - qs, 0.0)
        mass = r.sum(-1)
        reject[mass <= 0] = 0.0
        rows, xs = np.nonzero(reject > 0)
        if rows.size == 0:
            break
        w = reject[rows, xs]
        ps = r[rows] / mass[rows, None]
        qs = qs[rows].copy()
        qs[np.arange(rows.size), xs] = 0.0
        qs /= qs.sum(-1, keepdims=True)
    return accepted


def _enumeration_size(q: np.ndarray, k: int) -> int:
    """Entries the exact k >= 3 enumeration touches: n · m (m − 1) … (m − k + 2), m = support of q."""
    m = int(np.count_nonzero(q, axis=-1).max())
    return q.shape[-1] * math.prod(range(m - k + 2, m + 1))


@register
class RRSwVerifier(Verifier):
    r"""RRS for drafts drawn without replacement: after rejecting x_i, also remove x_i from the draft.

    p_1 = p, q_1 = q; accept x_i w.p. min(1, p_i(x_i)/q_i(x_i)); on rejection p_{i+1} = norm((p_i − q_i)+)
    and q_{i+1} = norm(q_i with x_i removed). If all are rejected, emit a draw of p_{k+1}. For k = 2

    .. math:: \alpha = \sum_x \min(p, q) + \sum_x q(x)\Bigl(1 - \min\bigl(1, \tfrac{p(x)}{q(x)}\bigr)\Bigr)
              \sum_y \min\Bigl(r(y), \frac{q(y)}{1 - q(x)}\Bigr), \quad r = \mathrm{norm}((p - q)_+)

    computed in O(n log n); for k ≥ 3 exact enumeration up to :data:`ENUMERATION_LIMIT` (else use
    :func:`mdsd.estimate_acceptance`). As for RRS the residual is 0 on every rejected draft.

    The sampler carries p_i in closed form: on a rejection path p_i ∝ (p − λ_i q)+ with
    λ_1 = 0, λ_{i+1} = λ_i + Z_i / (1 − q(x_1) − … − q(x_i)), Z_i = Σ (p − λ_i q)+, so each draft costs
    one O(V) reduction per row; the k − 1 masses 1 − q(x_1) − … − q(x_i) come from one exact sum over
    the tokens outside the drafts plus the drafts' own q (no cancellation). A residual without mass
    (reached only by rounding) is replaced by p.

    >>> from mdsd.verifiers import verifier
    >>> verifier("rrsw", 2).acceptance([0.5, 0.5, 0.0], [0.25, 0.25, 0.5])  # rejects 2, then accepts
    1.0
    """

    name = "rrsw"

    @classmethod
    def _law(cls, k):
        return WithoutReplacement(k)

    def _acceptance(self, p, q):
        if self.k == 1:
            return float(np.minimum(p, q).sum())
        if self.k == 2:
            return _acceptance_k2(p, q)
        reason = self.exact_obstacle(q)
        if reason is not None:
            raise ValueError(reason)
        return _acceptance_enumerated(p, q, self.k)

    def exact_obstacle(self, q, limit=None):
        if self.k <= 2:
            return None
        limit = ENUMERATION_LIMIT if limit is None else limit
        size = _enumeration_size(np.asarray(q), self.k)
        if size <= limit:
            return None
        return (
            f"exact RRSw acceptance for k={self.k} enumerates {size:.3g} > {limit:.0e} entries; "
            "estimate it with mdsd.estimate_acceptance(v, p, q, num_samples, seed)"
        )

    def _check_law_drafts(self, q, drafts, rows):
        same = (drafts.unsqueeze(-1) == drafts.unsqueeze(-2)).sum((-1, -2))
        if bool(((same > self.k) & rows).any()):
            raise ValueError("drafts without replacement must be distinct tokens")

    def _output_law(self, p, q, drafts):
        out, alive, pi, qi = np.zeros(p.size), 1.0, p, q
        for x in drafts:
            a = ratio(pi[x], qi[x])
            out += alive * a * onehot(p.size, x)
            alive *= 1 - a
            pi = normalized(np.maximum(pi - qi, 0.0), pi)
            qi = qi.copy()
            qi[x] = 0.0
            qi = normalized(qi, qi)
        return out + alive * pi

    def _reference(self, p, q, drafts, accept, residual):
        pi, qi = p, q
        for i, x in enumerate(drafts):
            if accept[i] * qi[x] < pi[x]:
                return x
            pi = normalized(np.maximum(pi - qi, 0.0), p)
            qi = qi.copy()
            qi[x] = 0.0
            qi = normalized(qi, qi)
        return draw_index(pi, residual)

    def _verify(self, rows: Rows):
        p, q, drafts, u = rows.p, rows.q, rows.drafts, rows.u
        px, qx = take(p, drafts).double(), take(q, drafts).double()  # [*B, K]
        shared = p.ndim == 1 and drafts.ndim > 1 and drafts[..., 0].numel() > SHARED_ROWS
        part = _SortedPart(p, q) if shared else _DensePart(p, q)
        # rest_i = 1 − q(x_1) − … − q(x_{i−1}) = Σ_{y ∉ x_1..x_{k−1}} q(y) + q(x_i) + … + q(x_{k−1})
        later = qx[..., : self.k - 1].flip(-1).cumsum(-1).flip(-1)  # [*B, K-1]
        outside = mass_outside(q, drafts[..., : self.k - 1], rows.q_masses).unsqueeze(-1)  # [*B, 1]
        rest = torch.cat([later + outside, outside], dim=-1)  # [*B, K]
        mass = torch.ones_like(rest[..., 0])  # Z_1 = Σ p
        accept = []
        for i in range(self.k):
            # U < p_i(x)/q_i(x) with p_i = w_i / Z_i, q_i(x) = q(x) / rest_i <= 1
            accept.append(u.accept[..., i] * (qx[..., i] / rest[..., i]) * mass < part.at(px, qx, i, drafts))
            part.step(mass, rest[..., i])  # λ += Z_i / rest_i
            if i < self.k - 1:
                mass = part.mass()
                empty = mass <= 0  # reached only by rounding: p_{i+1} = p, as in the reference
                part.reset(empty)
                mass = torch.where(empty, 1.0, mass)
        accept = torch.stack(accept, dim=-1)  # [*B, K]
        first = accept.to(torch.uint8).argmax(-1, keepdim=True)
        residual = part.draw(rows)  # a draw of p_{k+1} ∝ (p − λ_{k+1} q)+
        return drafts.gather(-1, first)[..., 0], accept.any(-1), residual


class _DensePart:
    """w_i = (p − λ_i q)+ for rows p, q [*B, V], one λ per row, O(V) per row and step.

    Updated as w_{i+1} = (w_i − Z_i q / rest_i)+, where q / rest_i <= 1 off the drafted tokens: λ itself
    (up to 1/rest, beyond float32's range for a near-one-hot q) is never formed, so no overflow and
    no ∞ · 0 even in float32.
    """

    def __init__(self, p, q):
        self.p, self.q, self.w = p, q, p  # w is p (not ours to modify) until the first step

    def at(self, px, qx, i, drafts):  # w_i(x_i) [*B] in float64
        return take(self.w, drafts[..., i : i + 1])[..., 0].double()

    def step(self, mass, rest):
        divisor = (-rest / mass).to(self.q.dtype).unsqueeze(-1)
        if self.w is self.p:
            self.w = torch.addcdiv(self.p, self.q, divisor).clamp_min_(0)
        else:
            self.w.addcdiv_(self.q, divisor).clamp_min_(0)

    def mass(self):
        return self.w.sum(-1).to(torch.float64)

    def reset(self, empty):  # w = p on the rows whose residual has no mass
        self.w.lerp_(self.p, empty.to(self.p.dtype).unsqueeze(-1))

    def draw(self, rows: Rows):
        return rows.draw(self.w)


class _SortedPart:
    """(p − λ q)+ for ONE pair p, q [V] and many λ (simulate): O(√V log V) per row instead of O(V).

    Tokens are cut into the ⌈√V⌉-long blocks of :func:`~mdsd.sampling.inverse_cdf`; inside each
    block they are sorted once by p/q, with prefix sums P, Q in that order. A block's mass at λ is
    P[m] − λ Q[m], m = #{p/q > λ} in the block (a ``searchsorted``). The draw inverts the CDF in token
    order like ``inverse_cdf``: the block from the block masses, then the token inside that block.
    """

    def __init__(self, p, q):
        self.p, self.q = p, q
        self.lam = torch.zeros((), dtype=torch.float64, device=p.device)
        n = p.shape[-1]
        self.size = size = block_size(n)
        pad = -n % size
        self.pb = torch.nn.functional.pad(p, (0, pad)).reshape(-1, size).double()  # [NB, size]
        self.qb = torch.nn.functional.pad(q, (0, pad)).reshape(-1, size).double()
        ratio = torch.where(self.qb > 0, self.pb / self.qb, torch.where(self.pb > 0, torch.inf, -torch.inf))
        order = torch.sort(ratio, dim=-1, descending=True, stable=True).indices
        self.neg_ratio = -ratio.gather(-1, order)  # ascending per block
        zero = torch.zeros(self.pb.shape[0], 1, dtype=torch.float64, device=p.device)
        self.pc = torch.cat([zero, self.pb.gather(-1, order).cumsum(-1)], dim=-1)  # [NB, size + 1]
        self.qc = torch.cat([zero, self.qb.gather(-1, order).cumsum(-1)], dim=-1)

    def _block_mass(self, lam):  # [N] -> [N, NB]
        neg = (-lam).unsqueeze(0).expand(self.pb.shape[0], -1).contiguous()  # [NB, N]
        m = torch.searchsorted(self.neg_ratio, neg, side="left")  # #{p/q > λ} per block
        return (self.pc.gather(-1, m) - lam * self.qc.gather(-1, m)).clamp_min(0).T

    def at(self, px, qx, i, drafts):  # (p(x_i) − λ q(x_i))+ [N]
        return (px[..., i] - self.lam * qx[..., i]).clamp_min(0)

    def step(self, mass, rest):
        self.lam = (self.lam + mass / rest).clamp_max(torch.finfo(torch.float64).max)

    def mass(self):
        return self._block_mass(self.lam).sum(-1)

    def reset(self, empty):
        self.lam = torch.where(empty, 0.0, self.lam)

    def draw(self, rows: Rows):
        lam, u = self.lam, rows.u.residual
        block_mass = self._block_mass(lam)  # [N, NB]
        block_cdf = block_mass.cumsum(-1)
        target = u * block_cdf[..., -1]
        last = (block_mass.shape[-1] - 1) - (block_mass > 0).flip(-1).to(torch.uint8).argmax(-1)
        j = torch.minimum(torch.searchsorted(block_cdf, target.unsqueeze(-1), right=True).squeeze(-1), last)
        before = torch.where(j > 0, block_cdf.gather(-1, (j - 1).clamp_min(0).unsqueeze(-1)).squeeze(-1), 0.0)
        w = (self.pb[j] - lam.unsqueeze(-1) * self.qb[j]).clamp_min(0)  # [N, size], in token order
        inner = torch.searchsorted(w.cumsum(-1), (target - before).unsqueeze(-1), right=True).squeeze(-1)
        inner = torch.minimum(inner, (w.shape[-1] - 1) - (w > 0).flip(-1).to(torch.uint8).argmax(-1))
        empty = block_cdf[..., -1] == 0  # Σ (p − λ q)+ = 0: a branch reached only by rounding
        if rows.degenerate is not None:
            empty = empty | rows.degenerate
        return torch.where(empty, rows.draw_p(), j * self.size + inner)
