"""Recursive rejection sampling with i.i.d. drafts (RRS; SpecTr / SpecInfer, MATH.md §3)."""

from __future__ import annotations

import numpy as np
import torch

from mdsd.laws import IID
from mdsd.verifiers.base import Verifier
from mdsd.verifiers.ops import Uniforms, inverse_cdf, take

__all__ = ["RRS", "rrs_residuals"]


def rrs_residuals(p: torch.Tensor, q: torch.Tensor, k: int) -> list[torch.Tensor]:
    """The target after each rejection: p_1 = p, p_{i+1} = norm((p_i − q)+) (p_i if that has no mass)."""
    out = [p]
    for _ in range(k):
        r = (out[-1] - q).clamp_min(0)
        mass = r.sum(-1, keepdim=True)
        out.append(torch.where(mass > 0, r / mass.clamp_min(torch.finfo(r.dtype).tiny), out[-1]))
    return out


class RRS(Verifier):
    r"""Try the i.i.d. drafts in turn: accept x_i w.p. min(1, p_i(x_i)/q(x_i)), else go on with
    p_{i+1} = norm((p_i − q)+).

    If all k are rejected, emit a draw of p_{k+1}.

    .. math:: \alpha = 1 - \prod_{i=1}^{k} \Bigl(1 - \sum_x \min(p_i(x), q(x))\Bigr)

    A rejected draft has p_i(x) < q(x), so every later p_j is 0 there: the residual never lands on a
    draft, and the closed form is exactly P(Y ∈ set(x̄)).

    >>> from mdsd.verifiers import verifier
    >>> verifier("rrs", 2).acceptance([0.5, 0.5], [1.0, 0.0])
    0.5
    """

    name = "rrs"

    def _law(self, k):
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

    def _verify(self, p, q, drafts, u: Uniforms) -> torch.Tensor:
        targets = rrs_residuals(p, q, self.k)  # k + 1 tensors [*Bp, V]
        qx = take(q, drafts)  # [*B, K]
        accept = torch.stack(
            [
                u.accept[..., i] * qx[..., i] < take(targets[i], drafts[..., i : i + 1])[..., 0]
                for i in range(self.k)
            ],
            dim=-1,
        )  # [*B, K]
        first = accept.to(torch.uint8).argmax(-1, keepdim=True)
        residual = inverse_cdf(targets[-1], u.residual, p)
        return torch.where(accept.any(-1), drafts.gather(-1, first)[..., 0], residual)
