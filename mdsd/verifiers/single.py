"""Single-draft speculative sampling (Leviathan et al. 2023; Chen et al. 2023)."""

from __future__ import annotations

import numpy as np
import torch

from mdsd.laws import IID
from mdsd.verifiers.base import Verifier
from mdsd.verifiers.ops import Uniforms, inverse_cdf, take

__all__ = ["SingleDraft"]


class SingleDraft(Verifier):
    r"""Accept the draft x ~ q with probability min(1, p(x)/q(x)), else emit a draw of norm((p − q)+).

    .. math:: \alpha = \sum_x \min(p(x), q(x)) = 1 - \mathrm{TV}(p, q)

    The residual has no mass on a rejected draft (p(x) < q(x) there), so acceptance = P(Y = x).

    >>> from mdsd.verifiers import verifier
    >>> verifier("single", 1).acceptance([0.5, 0.5], [0.25, 0.75])
    0.75
    """

    name = "single"

    def _check_k(self, k):
        if k != 1:
            raise ValueError(f"the single-draft verifier needs k = 1, got k = {k}")

    def _law(self, k):
        return IID(k)

    def _acceptance(self, p, q):
        return float(np.minimum(p, q).sum())

    def _verify(self, p, q, drafts, u: Uniforms) -> torch.Tensor:
        x = drafts[..., 0]  # [*B]
        accept = u.accept[..., 0] * take(q, drafts)[..., 0] < take(p, drafts)[..., 0]  # U < p(x)/q(x)
        residual = inverse_cdf((p - q).clamp_min(0), u.residual, p)
        return torch.where(accept, x, residual)
