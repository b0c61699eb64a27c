"""Recursive rejection sampling with i.i.d. drafts (RRS; SpecTr / SpecInfer, docs/mathematics.md §3)."""

from __future__ import annotations

import numpy as np
import torch

from mdsd.laws import IID
from mdsd.verifiers.base import Rows, Verifier
from mdsd.verifiers.ops import take
from mdsd.verifiers.reference import draw_index, normalized, onehot, ratio
from mdsd.verifiers.registry import register

__all__ = ["RRSVerifier", "positive_part_mass"]


def positive_part_mass(p: torch.Tensor, q: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """Σ_y (p(y) − λ q(y))+ for rows p, q [*B, V] and λ [*B] float64 -> float64 [*B] (summed in p's dtype)."""
    return torch.addcmul(p, q, -lam.to(p.dtype).unsqueeze(-1)).clamp_min_(0).sum(-1).to(torch.float64)


@register
class RRSVerifier(Verifier):
    r"""Try the i.i.d. drafts in turn: accept x_i w.p. min(1, p_i(x_i)/q(x_i)), else go on with
    p_{i+1} = norm((p_i − q)+).

    If all k are rejected, emit a draw of p_{k+1}.

    .. math:: \alpha = 1 - \prod_{i=1}^{k} \Bigl(1 - \sum_x \min(p_i(x), q(x))\Bigr)

    A rejected draft has p_i(x) < q(x), so every later p_j is 0 there: the residual never lands on a
    draft, and the closed form is exactly P(Y ∈ set(x̄)).

    The sampler carries p_i in closed form, p_i = (p − λ_i q)+ / Z_i with λ_1 = 0, Z_1 = 1,
    λ_{i+1} = λ_i + Z_i and Z_i = Σ (p − λ_i q)+: one O(V) reduction per draft. A residual without mass
    (reached only by rounding) is replaced by p.

    >>> from mdsd.verifiers import verifier
    >>> verifier("rrs", 2).acceptance([0.5, 0.5], [1.0, 0.0])
    0.5
    """

    name = "rrs"

    @classmethod
    def _law(cls, k):
        return IID(k)

    def _acceptance(self, p, q):
        reject, pi = 1.0, p
        for _ in range(self.k):
            reject *= 1.0 - np.minimum(pi, q).sum()
            r = np.maximum(pi - q, 0.0)
            if r.sum() <= 0:  # p_i = q: accepted for sure, reject is now 0
                break
            pi = r / r.sum()
        return float(1.0 - reject)

    def _output_law(self, p, q, drafts):
        out, alive, pi = np.zeros(p.size), 1.0, p
        for x in drafts:
            a = ratio(pi[x], q[x])
            out += alive * a * onehot(p.size, x)
            alive *= 1 - a
            pi = normalized(np.maximum(pi - q, 0.0), pi)
        return out + alive * pi

    def _reference(self, p, q, drafts, accept, residual):
        pi = p
        for i, x in enumerate(drafts):
            if accept[i] * q[x] < pi[x]:
                return x
            pi = normalized(np.maximum(pi - q, 0.0), p)
        return draw_index(pi, residual)

    def _verify(self, rows: Rows):
        p, q, drafts, u = rows.p, rows.q, rows.drafts, rows.u
        px, qx = take(p, drafts).double(), take(q, drafts).double()  # [*B, K]
        lam = torch.zeros(p.shape[:-1], dtype=torch.float64, device=p.device)  # [*Bp]
        mass = torch.ones_like(lam)
        accept = []
        for i in range(self.k):
            # U < p_i(x)/q(x) with p_i = (p − λ q)+ / Z
            accept.append(u.accept[..., i] * qx[..., i] * mass < (px[..., i] - lam * qx[..., i]).clamp_min(0))
            lam = lam + mass
            if i < self.k - 1:
                mass = positive_part_mass(p, q, lam)
                lam, mass = torch.where(mass > 0, lam, 0.0), torch.where(mass > 0, mass, 1.0)
        accept = torch.stack(accept, dim=-1)  # [*B, K]
        first = accept.to(torch.uint8).argmax(-1, keepdim=True)
        residual = rows.draw(torch.addcmul(p, q, -lam.to(p.dtype).unsqueeze(-1)).clamp_min_(0))
        return drafts.gather(-1, first)[..., 0], accept.any(-1), residual
