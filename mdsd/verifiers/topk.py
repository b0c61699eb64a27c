"""Deterministic top-k drafts (EAGLE-2/3, SGLang): sample y ~ p, accepted iff y is one of the k drafts."""

from __future__ import annotations

from mdsd.laws import TopK
from mdsd.verifiers.base import Verifier
from mdsd.verifiers.ops import Uniforms, inverse_cdf, top_tokens

__all__ = ["TopKVerifier"]


class TopKVerifier(Verifier):
    r"""Emit y ~ p; it is accepted iff y ∈ T, the k most likely tokens of q. Optimal for that law.

    .. math:: \alpha = p(T)

    >>> from mdsd.verifiers import verifier
    >>> verifier("topk", 1).acceptance([0.25, 0.75], [0.5, 0.5])
    0.25
    """

    name = "topk"

    def _law(self, k):
        return TopK(k)

    def _acceptance(self, p, q):
        return float(p[top_tokens(q, self.k)].sum())

    def _check_drafts(self, q, drafts):
        """Top-k drafts may include tokens with q = 0 (when q has fewer than k positive entries)."""

    def _verify(self, p, q, drafts, u: Uniforms):
        return inverse_cdf(p, u.residual, p)
