"""K-SEQ (SpecTr, Sun et al. 2023): i.i.d. drafts, each accepted with probability min(1, p/(ρ* q))."""

from __future__ import annotations

import functools

import numpy as np
import torch

from mdsd.laws import IID
from mdsd.verifiers.base import Rows, Verifier
from mdsd.verifiers.ops import take
from mdsd.verifiers.reference import draw_index, normalized, onehot, ratio
from mdsd.verifiers.registry import register

__all__ = ["KSeqVerifier", "kseq_rho", "GRID_BITS", "stage_bits"]

# ρ lies on a grid of 2^bits steps over [1, k]: a step of (k − 1) 2^-bits, about the input's precision
GRID_BITS = {torch.float32: 24, torch.float64: 48}
# Off the CPU the histograms are sums by atomic adds. Most tokens lie outside the bracket (all but a few
# once it is narrow), and adding them all to the two bins beyond its ends serialises the adds on two
# addresses per row: they are spread over SPREAD bins on each side instead, summed afterwards.
SPREAD = 256


def stage_bits(n: int) -> int:
    """Grid bits one pass over a vocabulary of n resolves: a histogram of 2^b bins, b in {4, 8, 12}
    (divisors of both grids), with 2^b <= 4 n so the histogram costs less than the pass."""
    return 12 if n >= 1024 else 8 if n >= 64 else 4


def _gather_lanes(mass: torch.Tensor, lanes: int) -> torch.Tensor:
    """A row's histogram [R, M + 2] from its spread layout [R, M + 2 lanes]: the lanes of each side summed."""
    if not lanes:
        return mass
    below, inside, above = mass[:, :lanes], mass[:, lanes:-lanes], mass[:, -lanes:]
    return torch.cat([below.sum(-1, keepdim=True), inside, above.sum(-1, keepdim=True)], dim=-1)


def kseq_rho(
    p: torch.Tensor, q: torch.Tensor, k: int, spread: bool | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""ρ, β(ρ), p_acc(ρ) for rows of p, q [..., V] (float64 results [...]).

    β(ρ) = Σ min(p/ρ, q), p_acc(ρ) = 1 − (1 − β)^k, and g(ρ) = p_acc(ρ) − ρ β(ρ) decreases from
    g(1) ≥ 0 to g(k) ≤ 0. ρ is the smallest point of the grid ρ_j = 1 + (k − 1) j / 2^b
    (b = :data:`GRID_BITS` of p's dtype) with g(ρ_j) ≤ 0, which is what b halvings of [1, k] return.
    So g(ρ) ≤ 0, γ = p_acc/β ≤ ρ, the residual p − γ min(p/ρ, q) is non-negative and the scheme is
    exactly lossless for the returned ρ, within (k − 1) 2^-b of the root ρ*.

    The search takes b / :func:`stage_bits` passes over the vocabulary and no branch on the data:
    with r = p/q, h(ρ) = ρ β(ρ) = Σ_{r < ρ} p + ρ Σ_{r ≥ ρ} q, so one histogram of (p, q) over
    M = 2^12 bins of r inside the current bracket (fewer for small V) gives h, hence g, at all M + 1
    bin edges at once; the first edge with g ≤ 0 and the one before it are the next bracket. Two
    passes for float32 input, four for float64. ``spread`` (default: off the CPU) adds the tokens
    outside the bracket over :data:`SPREAD` bins on each side (a different order of the same sums).

    >>> rho, beta, pacc = kseq_rho(torch.tensor([0.5, 0.5]), torch.tensor([0.5, 0.5]), 2)
    >>> float(rho), float(pacc)
    (1.0, 1.0)
    """
    shape, n = p.shape[:-1], p.shape[-1]
    bits = stage_bits(n)
    stages, bins = GRID_BITS[p.dtype] // bits, 1 << bits
    pr, qr = p.reshape(-1, n), q.reshape(-1, n)  # [R, V]
    rows = pr.shape[0]
    ratio = (pr / qr).nan_to_num_(nan=0.0)  # q = 0: p > 0 lands above k (finite), p = 0 adds nothing
    p64, q64 = pr.reshape(-1).to(torch.float64), qr.reshape(-1).to(torch.float64)  # histogram weights
    lanes = SPREAD if (p.device.type != "cpu" if spread is None else spread) else 0
    size = bins + 2 + 2 * max(lanes - 1, 0)  # bins of one row's histogram
    offset = torch.arange(rows, device=p.device).unsqueeze(-1) * size  # one histogram per row
    if lanes:  # token i outside the bracket goes to lane i mod SPREAD of its side
        lane = torch.arange(n, device=p.device) % lanes
        below_lane, above_lane = lane + offset, lane + (offset + bins + lanes)
        offset = offset + (lanes - 1)
    steps = torch.arange(bins + 1, device=p.device, dtype=torch.float64) / bins  # [M + 1]
    lo = torch.ones(rows, 1, dtype=torch.float64, device=p.device)
    hi = torch.full_like(lo, float(k))
    for _ in range(stages):
        width = hi - lo
        # a closed bracket (ρ found) keeps the scale finite in p's dtype, so no bin is 0 · ∞
        scale = (bins / width.clamp_min(1e-270)).clamp_max(torch.finfo(p.dtype).max)
        # bin 0: r < lo; bin j in 1..M: lo + (j-1) w/M <= r < lo + j w/M; bin M+1: r >= hi. In p's
        # dtype: lo and w are exact there, and r − lo is exact near lo.
        where = (ratio - lo.to(p.dtype)).mul_(scale.to(p.dtype)).add_(1.0).clamp_(0, bins + 1)
        index = where.to(torch.int64).add_(offset)
        if lanes:
            index = torch.where(where < 1, below_lane, torch.where(where >= bins + 1, above_lane, index))
        index = index.view(-1)
        mass_p = torch.zeros(rows * size, dtype=torch.float64, device=p.device).scatter_add_(0, index, p64)
        mass_q = torch.zeros_like(mass_p).scatter_add_(0, index, q64)
        mass_p, mass_q = (
            _gather_lanes(mass_p.view(rows, size), lanes),
            _gather_lanes(mass_q.view(rows, size), lanes),
        )
        below = mass_p.cumsum_(-1)  # Σ p over r < edge
        mass_q = mass_q.cumsum_(-1)
        above = mass_q[:, -1:] - mass_q[:, : bins + 1]  # Σ q over r >= edge_m, m = 0..M
        edge = torch.addcmul(lo, width, steps)  # [R, M + 1]
        h = torch.addcmul(below[:, : bins + 1], edge, above)  # ρ β(ρ) at every edge
        down = (h / edge).neg_().add_(1.0).clamp_(0, 1).pow_(k) >= 1.0 - h  # g(edge) <= 0
        down[:, -1] = True  # hi: g <= 0 (at the first stage g(k) > 0 only by rounding; keep k then)
        m = down.to(torch.uint8).argmax(-1, keepdim=True)  # first edge with g <= 0
        new_hi = edge.gather(-1, m)
        lo = torch.where(m > 0, edge.gather(-1, (m - 1).clamp_min(0)), new_hi)
        hi, beta = new_hi, h.gather(-1, m) / new_hi
    pacc = 1.0 - (1.0 - beta).clamp(0, 1) ** k
    return hi.reshape(shape), beta.reshape(shape), pacc.reshape(shape)


@functools.lru_cache(maxsize=4096)
def _terms(p: bytes, q: bytes, k: int) -> tuple[float, float, float]:
    """ρ, β, p_acc of one pair (float64 bytes) by :func:`kseq_rho`, the sampler's bisection: the output
    law reuses them for every draft tuple of the pair."""
    pt, qt = (torch.from_numpy(np.frombuffer(b, dtype=np.float64).copy()) for b in (p, q))
    return tuple(float(t) for t in kseq_rho(pt, qt, k))


def _reference_rho(p: np.ndarray, q: np.ndarray, k: int) -> float:
    """ρ by plain bisection of g(ρ) = 1 − (1 − β(ρ))^k − ρ β(ρ) over [1, k], on the float64 grid of
    :func:`kseq_rho` (1 + (k − 1) j / 2^48): the reference's own loop."""

    def g(rho):
        b = np.minimum(p / rho, q).sum()
        return 1.0 - (1.0 - b) ** k - rho * b

    lo, hi = 1.0, float(k)
    if g(lo) <= 0:
        return lo
    for _ in range(GRID_BITS[torch.float64]):
        mid = 0.5 * (lo + hi)
        if g(mid) <= 0:
            hi = mid
        else:
            lo = mid
    return hi


@register
class KSeqVerifier(Verifier):
    r"""K-SEQ: accept the first x_i with U_i ≤ p(x_i)/(ρ q(x_i)); else draw norm((p − γ min(p/ρ, q))+).

    β(ρ) = Σ min(p/ρ, q), p_acc = 1 − (1 − β)^k, γ = p_acc/β, ρ from :func:`kseq_rho` (the root of
    p_acc(ρ) = ρ β(ρ) on a fine grid). Guarantee: α ≥ (1 − 1/e) α* (Sun et al. 2023). The acceptance is
    exact for the computed ρ, including the residual landing on a rejected draft (zero when ρ = ρ*
    exactly):

    .. math:: \alpha = p_{acc} + (1 - p_{acc}) \sum_y r(y) \bigl(1 - (1 - d(y))^k\bigr), \quad
              r = \mathrm{norm}\bigl((p - \gamma \min(p/\rho, q))_+\bigr), \;
              d = \frac{(q - p/\rho)_+}{1 - \beta}

    where d is the law of a rejected draft.

    >>> from mdsd.verifiers import verifier
    >>> round(verifier("kseq", 2).acceptance([0.5, 0.5], [0.5, 0.5]), 12)
    1.0
    """

    name = "kseq"

    @classmethod
    def _law(cls, k):
        return IID(k)

    def _acceptance(self, p, q):
        pt, qt = torch.from_numpy(p), torch.from_numpy(q)
        rho, b, pacc = (float(t) for t in kseq_rho(pt, qt, self.k))
        if pacc >= 1.0 or b >= 1.0:
            return min(pacc, 1.0)
        gamma = pacc / b if b > 0 else rho
        r = np.maximum(p - gamma * np.minimum(p / rho, q), 0.0)
        if r.sum() <= 0:
            return pacc
        d = np.maximum(q - p / rho, 0.0) / (1.0 - b)
        landed = (r / r.sum() * (1.0 - (1.0 - np.minimum(d, 1.0)) ** self.k)).sum()
        return float(pacc + (1.0 - pacc) * landed)

    def _output_law(self, p, q, drafts):
        rho, beta, pacc = _terms(p.tobytes(), q.tobytes(), self.k)
        out, alive = np.zeros(p.size), 1.0
        for x in drafts:
            a = ratio(p[x], rho * q[x])
            out += alive * a * onehot(p.size, x)
            alive *= 1 - a
        gamma = pacc / beta if beta > 0 else rho
        return out + alive * normalized(np.maximum(p - gamma * np.minimum(p / rho, q), 0.0), p)

    def _reference(self, p, q, drafts, accept, residual):
        rho = _reference_rho(p, q, self.k)
        for i, x in enumerate(drafts):
            if accept[i] * rho * q[x] < p[x]:
                return x
        b = np.minimum(p / rho, q).sum()
        gamma = (1.0 - (1.0 - b) ** self.k) / b if b > 0 else rho
        return draw_index(normalized(np.maximum(p - gamma * np.minimum(p / rho, q), 0.0), p), residual)

    def _verify(self, rows: Rows):
        p, q, drafts, u = rows.p, rows.q, rows.drafts, rows.u
        rho, b, pacc = kseq_rho(p, q, self.k)  # [*Bp]
        gamma = torch.where(b > 0, pacc / b.clamp_min(torch.finfo(torch.float64).tiny), rho)
        accept = u.accept * rho.unsqueeze(-1) * take(q, drafts) < take(p, drafts)  # [*B, K]
        first = accept.to(torch.uint8).argmax(-1, keepdim=True)
        kept = torch.minimum(q * rho.to(p.dtype).unsqueeze(-1), p).mul_(
            (gamma / rho).to(p.dtype).unsqueeze(-1)
        )
        residual = rows.draw(kept.neg_().add_(p).clamp_min_(0))  # (p − γ min(p/ρ, q))+
        return drafts.gather(-1, first)[..., 0], accept.any(-1), residual
