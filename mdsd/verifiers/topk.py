"""Deterministic top-k drafts (EAGLE-2/3, SGLang): sample y ~ p, accepted iff y is one of the k drafts."""

from __future__ import annotations

import torch

from mdsd.laws import TopK
from mdsd.sampling import top_k
from mdsd.verifiers.base import Rows, Verifier
from mdsd.verifiers.ops import top_tokens
from mdsd.verifiers.reference import draw_index
from mdsd.verifiers.registry import register

__all__ = ["TopKVerifier"]


@register
class TopKVerifier(Verifier):
    r"""Emit y ~ p; it is accepted iff y ∈ T, the k most likely tokens of q. Optimal for that law.

    .. math:: \alpha = p(T)

    This is also the rule every verifier applies on degenerate rows (:mod:`mdsd.verifiers.base`).

    >>> from mdsd.verifiers import verifier
    >>> verifier("topk", 1).acceptance([0.25, 0.75], [0.5, 0.5])
    0.25
    """

    name = "topk"

    @classmethod
    def _law(cls, k):
        return TopK(k)

    def _acceptance(self, p, q):
        return float(p[top_tokens(q, self.k)].sum())

    def _output_law(self, p, q, drafts):
        return p.copy()

    def _reference(self, p, q, drafts, accept, residual):
        return draw_index(p, residual)

    def _check_drafts(self, q, drafts):
        """Top-k drafts are the k most likely tokens of q (some with q = 0 if q has fewer positive)."""
        if not bool((drafts == top_k(q, self.k).expand_as(drafts)).all()):
            raise ValueError(f"top-k drafts must be the {self.k} most likely tokens of q (ties: lower index)")

    def _verify(self, rows: Rows):
        residual = rows.draw_p()
        return residual, torch.zeros_like(residual, dtype=torch.bool), residual
