"""Single-draft speculative sampling (Leviathan et al. 2023; Chen et al. 2023)."""

from __future__ import annotations

import numpy as np

from mdsd.laws import IID
from mdsd.verifiers.base import Rows, Verifier
from mdsd.verifiers.ops import take
from mdsd.verifiers.reference import draw_index, normalized, onehot, ratio
from mdsd.verifiers.registry import register

__all__ = ["SingleDraftVerifier"]


@register
class SingleDraftVerifier(Verifier):
    r"""Accept the draft x ~ q with probability min(1, p(x)/q(x)), else emit a draw of norm((p − q)+).

    .. math:: \alpha = \sum_x \min(p(x), q(x)) = 1 - \mathrm{TV}(p, q)

    The residual has no mass on a rejected draft (p(x) < q(x) there), so acceptance = P(Y = x).

    >>> from mdsd.verifiers import verifier
    >>> verifier("single", 1).acceptance([0.5, 0.5], [0.25, 0.75])
    0.75
    """

    name = "single"
    supported_k = frozenset({1})

    @classmethod
    def _law(cls, k):
        return IID(k)

    def _acceptance(self, p, q):
        return float(np.minimum(p, q).sum())

    def _output_law(self, p, q, drafts):
        (x,) = drafts
        a = ratio(p[x], q[x])
        return a * onehot(p.size, x) + (1 - a) * normalized(np.maximum(p - q, 0.0), p)

    def _reference(self, p, q, drafts, accept, residual):
        x = drafts[0]
        if accept[0] * q[x] < p[x]:
            return x
        return draw_index(normalized(np.maximum(p - q, 0.0), p), residual)

    def _verify(self, rows: Rows):
        p, q, drafts, u = rows.p, rows.q, rows.drafts, rows.u
        accepted = u.accept[..., 0] * take(q, drafts)[..., 0] < take(p, drafts)[..., 0]  # U < p(x)/q(x)
        return drafts[..., 0], accepted, rows.draw((p - q).clamp_min_(0))
