"""K-SEQ (SpecTr, Sun et al. 2023): i.i.d. drafts, each accepted with probability min(1, p/(ρ* q))."""

from __future__ import annotations

import numpy as np
import torch

from mdsd.laws import IID
from mdsd.verifiers.base import Verifier
from mdsd.verifiers.ops import Uniforms, inverse_cdf, take

__all__ = ["KSeq", "kseq_rho", "BISECTION_STEPS"]

BISECTION_STEPS = {torch.float32: 32, torch.float64: 60}  # halvings of [1, k]: to the working precision


def kseq_rho(p: torch.Tensor, q: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ρ, β(ρ), p_acc(ρ) for rows of p, q [..., V]: ρ ∈ [1, k] by bisection on g(ρ) = p_acc(ρ) − ρ β(ρ).

    β(ρ) = Σ min(p/ρ, q), p_acc(ρ) = 1 − (1 − β)^k; g is decreasing with g(1) ≥ 0 ≥ g(k). The upper end
    of the final bracket is returned, so g(ρ) ≤ 0 (γ = p_acc/β ≤ ρ): the residual p − γ min(p/ρ, q) is
    then non-negative and the scheme is exactly lossless for the returned ρ, whatever its distance to ρ*.
    Scalars run in float64; the O(V) reductions in p's dtype with float64 accumulation. For one pair
    [V], the tokens with p ≤ q (always adding p to Σ min(p, ρ q)) or p ≥ k q (always adding ρ q) are
    summed once, and each step scans only the others.
    """
    fixed_p = fixed_q = 0.0
    if p.ndim == 1:
        low, high = p <= q, p >= k * q
        fixed_p, fixed_q = (
            float(p[low].sum(dtype=torch.float64)),
            float(q[high & ~low].sum(dtype=torch.float64)),
        )
        middle = ~(low | high)
        p, q = p[middle], q[middle]

    def beta(rho):  # β(ρ) = Σ min(p, ρ q) / ρ, [...] -> [...]
        scan = torch.minimum(p, rho.to(p.dtype).unsqueeze(-1) * q).sum(-1, dtype=torch.float64)
        return (fixed_p + rho * fixed_q + scan) / rho

    def g(rho):
        b = beta(rho)
        return 1.0 - (1.0 - b).clamp(0, 1) ** k - rho * b

    lo = torch.ones(p.shape[:-1], dtype=torch.float64, device=p.device)
    hi = torch.full_like(lo, float(k))
    hi = torch.where(g(lo) <= 0, lo, hi)  # k = 1, p = q or disjoint supports: ρ = 1
    for _ in range(BISECTION_STEPS[p.dtype] + int(np.ceil(np.log2(k)))):
        mid = 0.5 * (lo + hi)
        down = g(mid) <= 0
        hi = torch.where(down, mid, hi)
        lo = torch.where(down, lo, mid)
    b = beta(hi)
    return hi, b, 1.0 - (1.0 - b).clamp(0, 1) ** k


class KSeq(Verifier):
    r"""K-SEQ: accept the first x_i with U_i ≤ p(x_i)/(ρ q(x_i)); else draw norm((p − γ min(p/ρ, q))+).

    β(ρ) = Σ min(p/ρ, q), p_acc = 1 − (1 − β)^k, γ = p_acc/β, ρ from :func:`kseq_rho` (bisection for
    p_acc(ρ) = ρ β(ρ)). Guarantee: α ≥ (1 − 1/e) α* (Sun et al. 2023). The acceptance is exact for the
    computed ρ, including the residual landing on a rejected draft (zero when ρ = ρ* exactly):

    .. math:: \alpha = p_{acc} + (1 - p_{acc}) \sum_y r(y) \bigl(1 - (1 - d(y))^k\bigr), \quad
              r = \mathrm{norm}\bigl((p - \gamma \min(p/\rho, q))_+\bigr), \;
              d = \frac{(q - p/\rho)_+}{1 - \beta}

    where d is the law of a rejected draft.

    >>> from mdsd.verifiers import verifier
    >>> round(verifier("kseq", 2).acceptance([0.5, 0.5], [0.5, 0.5]), 12)
    1.0
    """

    name = "kseq"

    def _law(self, k):
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

    def _verify(self, p, q, drafts, u: Uniforms) -> torch.Tensor:
        rho, b, pacc = kseq_rho(p, q, self.k)  # [*Bp]
        gamma = torch.where(b > 0, pacc / b.clamp_min(torch.finfo(torch.float64).tiny), rho)
        accept = u.accept * rho.unsqueeze(-1) * take(q, drafts) < take(p, drafts)  # [*B, K]
        first = accept.to(torch.uint8).argmax(-1, keepdim=True)
        kept = torch.minimum(p, rho.to(p.dtype).unsqueeze(-1) * q) * (gamma / rho).to(p.dtype).unsqueeze(-1)
        residual = inverse_cdf((p - kept).clamp_min_(0), u.residual, p)
        return torch.where(accept.any(-1), drafts.gather(-1, first)[..., 0], residual)
