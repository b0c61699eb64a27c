"""K-SEQ (SpecTr, Sun et al. 2023): i.i.d. drafts, each accepted with probability min(1, p/(ρ* q))."""

from __future__ import annotations

import numpy as np
import torch

from mdsd.laws import IID
from mdsd.verifiers.base import Verifier
from mdsd.verifiers.ops import Uniforms, inverse_cdf, take

__all__ = ["KSeq", "kseq_rho", "BISECTION_STEPS", "DENSE_STEPS"]

BISECTION_STEPS = {torch.float32: 32, torch.float64: 60}  # halvings of [1, k]: to the working precision
DENSE_STEPS = 6  # halvings over all V tokens before the scan shrinks to the tokens inside the bracket


def kseq_rho(p: torch.Tensor, q: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ρ, β(ρ), p_acc(ρ) for rows of p, q [..., V]: ρ ∈ [1, k] by bisection on g(ρ) = p_acc(ρ) − ρ β(ρ).

    β(ρ) = Σ min(p/ρ, q), p_acc(ρ) = 1 − (1 − β)^k; g is decreasing with g(1) ≥ 0 ≥ g(k). The upper end
    of the final bracket is returned, so g(ρ) ≤ 0 (γ = p_acc/β ≤ ρ): the residual p − γ min(p/ρ, q) is
    then non-negative and the scheme is exactly lossless for the returned ρ, whatever its distance to ρ*.

    Cost: the first :data:`DENSE_STEPS` halvings scan all V tokens; then, inside the bracket [lo, hi],
    a token with p ≤ lo q adds p to ρ β(ρ) = Σ min(p, ρ q) and one with p ≥ hi q adds ρ q, so those are
    summed once and the remaining halvings scan only the few tokens with lo q < p < hi q.
    Scalars run in float64; the O(V) reductions in p's dtype with float64 accumulation.
    """
    shape, n, dtype = p.shape[:-1], p.shape[-1], p.dtype
    pr, qr = p.reshape(-1, n), q.reshape(-1, n)  # [R, V]
    rows = pr.shape[0]

    def g(h, rho):  # g(ρ) and β(ρ) from h = ρ β(ρ)
        b = h / rho
        return 1.0 - (1.0 - b).clamp(0, 1) ** k - h, b

    def dense(rho):  # h(ρ) over all tokens, [R]
        return torch.minimum(pr, rho.to(dtype).unsqueeze(-1) * qr).sum(-1, dtype=torch.float64)

    lo = torch.ones(rows, dtype=torch.float64, device=p.device)
    hi = torch.full_like(lo, float(k))
    hi = torch.where(g(dense(lo), lo)[0] <= 0, lo, hi)  # k = 1, p = q or disjoint supports: ρ = 1
    steps = BISECTION_STEPS[dtype] + int(np.ceil(np.log2(k)))
    for _ in range(min(DENSE_STEPS, steps)):
        mid = 0.5 * (lo + hi)
        down = g(dense(mid), mid)[0] <= 0
        hi, lo = torch.where(down, mid, hi), torch.where(down, lo, mid)
    # keep only the tokens whose min(p, ρ q) can still switch sides inside [lo, hi]
    below = pr <= lo.to(dtype).unsqueeze(-1) * qr
    above = (pr >= hi.to(dtype).unsqueeze(-1) * qr) & ~below
    fixed_p = torch.where(below, pr, 0).sum(-1, dtype=torch.float64)
    fixed_q = torch.where(above, qr, 0).sum(-1, dtype=torch.float64)
    row, col = torch.nonzero(~(below | above), as_tuple=True)
    pm, qm = pr[row, col], qr[row, col]
    fine = steps - min(DENSE_STEPS, steps)
    if rows == 1:  # one row (a decoding step): plain float64 scalars, no per-step tensor overhead
        a, c, pm, qm = (
            float(fixed_p[0]),
            float(fixed_q[0]),
            pm.double().cpu().numpy(),
            qm.double().cpu().numpy(),
        )
        left, right = float(lo[0]), float(hi[0])
        for _ in range(fine):
            mid = 0.5 * (left + right)
            h = a + mid * c + float(np.minimum(pm, mid * qm).sum())
            if 1.0 - min(max(1.0 - h / mid, 0.0), 1.0) ** k - h <= 0:
                right = mid
            else:
                left = mid
        hi = torch.full_like(hi, right)
        h = a + right * c + float(np.minimum(pm, right * qm).sum())
        b = torch.full_like(hi, h / right)
    else:

        def h(rho):
            scan = torch.minimum(pm, rho.to(dtype)[row] * qm).double()
            return fixed_p + rho * fixed_q + torch.zeros_like(rho).index_add_(0, row, scan)

        for _ in range(fine):
            mid = 0.5 * (lo + hi)
            down = g(h(mid), mid)[0] <= 0
            hi, lo = torch.where(down, mid, hi), torch.where(down, lo, mid)
        b = g(h(hi), hi)[1]
    return hi.reshape(shape), b.reshape(shape), (1.0 - (1.0 - b).clamp(0, 1) ** k).reshape(shape)


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
