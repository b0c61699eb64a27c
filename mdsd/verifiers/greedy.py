"""Hu et al.'s optimal verifier for greedy drafts (top k−1 tokens of q plus one random draft)."""

from __future__ import annotations

import numpy as np
import torch

from mdsd.laws import Greedy
from mdsd.verifiers.base import Verifier
from mdsd.verifiers.ops import Uniforms, inverse_cdf, mass_outside, take, top_tokens

__all__ = ["GreedyVerifier"]


class GreedyVerifier(Verifier):
    r"""Single-draft speculative sampling of the random draft x against q' = q restricted to V∖T.

    T = the top k−1 tokens of q (the first k−1 drafts), q'(y) = q(y)/(1 − q(T)) off T. Accept x w.p.
    min(1, p(x)/q'(x)); else emit a draw of norm((p − q')+), which puts exactly the mass p(T) on T: those
    tokens are drafts, so they count as accepted. Optimal for the greedy law (Hu et al., ICLR 2025):

    .. math:: \alpha = p(T) + \sum_{y \notin T} \min\Bigl(p(y), \frac{q(y)}{1 - q(T)}\Bigr) = \alpha^*

    >>> from mdsd.verifiers import verifier
    >>> round(verifier("greedy", 2).acceptance([0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]), 6)
    0.766667
    """

    name = "greedy"

    def _law(self, k):
        return Greedy(k)

    def _acceptance(self, p, q):
        top = top_tokens(q, self.k - 1)
        off = np.ones(q.size, dtype=bool)
        off[top] = False
        return float(p[top].sum() + np.minimum(p[off], q[off] / q[off].sum()).sum())

    def _check_drafts(self, q, drafts):
        super()._check_drafts(q, drafts)
        same = (drafts.unsqueeze(-1) == drafts.unsqueeze(-2)).sum((-1, -2))
        if bool((same > self.k).any()):
            raise ValueError("greedy drafts must be distinct tokens")

    def _verify(self, p, q, drafts, u: Uniforms) -> torch.Tensor:
        top, x = drafts[..., :-1], drafts[..., -1:]  # T [*B, K-1], the random draft [*B, 1]
        flat = top.reshape(x.numel(), self.k - 1)
        if p.ndim == 1 and x.numel() and bool((flat == flat[:1]).all()):
            top = flat[0]  # one pair and one T for every tuple (simulate): the residual is shared, [V]
        scale = 1.0 / mass_outside(q, top).clamp_min(torch.finfo(torch.float64).tiny)  # q' = scale * q off T
        accept = u.accept[..., -1] * scale * take(q, x)[..., 0] < take(p, x)[..., 0]
        gain = (p - scale.to(p.dtype).unsqueeze(-1) * q).clamp_min_(0)  # [*B, V] (or [V])
        gain = gain.scatter_(-1, top, take(p, top))  # q' = 0 on T
        residual = inverse_cdf(gain, u.residual, p.expand_as(gain))
        return torch.where(accept, x[..., 0], residual)
