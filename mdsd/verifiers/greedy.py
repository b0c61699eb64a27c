"""Hu et al.'s optimal verifier for greedy drafts (top k−1 tokens of q plus one random draft)."""

from __future__ import annotations

import numpy as np
import torch

from mdsd.laws import Greedy
from mdsd.sampling import top_k
from mdsd.verifiers.base import Rows, Verifier, collapse
from mdsd.verifiers.ops import mass_outside, take, top_tokens
from mdsd.verifiers.reference import draw_index, normalized, onehot, ratio
from mdsd.verifiers.registry import register

__all__ = ["GreedyVerifier"]


@register
class GreedyVerifier(Verifier):
    r"""Single-draft speculative sampling of the random draft x against q' = q restricted to V∖T.

    T = the top k−1 tokens of q (the first k−1 drafts), q'(y) = q(y)/(1 − q(T)) off T. Accept x w.p.
    min(1, p(x)/q'(x)); else emit a draw of norm((p − q')+), which puts exactly the mass p(T) on T: those
    tokens are drafts, so they count as accepted. Optimal for the greedy law (Hu et al., ICLR 2025):

    .. math:: \alpha = p(T) + \sum_{y \notin T} \min\Bigl(p(y), \frac{q(y)}{1 - q(T)}\Bigr) = \alpha^*

    1 − q(T) is summed over the tokens outside T (no cancellation) and q' is formed as q / (1 − q(T)),
    at most 1 off T (no overflow in float32 for a near-one-hot q). T is read off the drafts, one T per
    row of q (so one pair shared by many tuples shares its residual).

    >>> from mdsd.verifiers import verifier
    >>> round(verifier("greedy", 2).acceptance([0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]), 6)
    0.766667
    """

    name = "greedy"

    @classmethod
    def _law(cls, k):
        return Greedy(k)

    def _acceptance(self, p, q):
        top = top_tokens(q, self.k - 1)
        off = np.ones(q.size, dtype=bool)
        off[top] = False
        return float(p[top].sum() + np.minimum(p[off], q[off] / q[off].sum()).sum())

    def _output_law(self, p, q, drafts):
        x, rest = drafts[-1], self._off_top(q, drafts)
        a = ratio(p[x], rest[x])
        return a * onehot(p.size, x) + (1 - a) * normalized(np.maximum(p - rest, 0.0), p)

    def _reference(self, p, q, drafts, accept, residual):
        x, rest = drafts[-1], self._off_top(q, drafts)
        if accept[-1] * rest[x] < p[x]:
            return x
        return draw_index(normalized(np.maximum(p - rest, 0.0), p), residual)

    @staticmethod
    def _off_top(q, drafts):
        """q' = q restricted to V∖T (T: the first k − 1 drafts), renormalised."""
        rest = q.copy()
        rest[list(drafts[:-1])] = 0.0
        return rest / rest.sum()

    def _check_law_drafts(self, q, drafts, rows):
        same = (drafts.unsqueeze(-1) == drafts.unsqueeze(-2)).sum((-1, -2))
        if bool(((same > self.k) & rows).any()):
            raise ValueError("greedy drafts must be distinct tokens")
        top = top_k(q, self.k - 1).expand(*drafts.shape[:-1], self.k - 1)
        if not bool((drafts[..., :-1] == top).all(-1)[rows].all()):
            raise ValueError(f"greedy drafts must start with the top {self.k - 1} tokens of q")

    def _verify(self, rows: Rows):
        p, q, drafts, u = rows.p, rows.q, rows.drafts, rows.u
        x = drafts[..., -1:]  # the random draft [*B, 1]
        top = collapse(drafts[..., :-1], q.shape[:-1], event=1)  # T [*Bq, K-1]: one T per row of q
        rest = mass_outside(q, top, rows.q_masses)  # 1 − q(T) [*Bq], float64: q' = q / rest off T
        accepted = u.accept[..., -1] * (take(q, x)[..., 0] / rest) < take(p, x)[..., 0]
        gain = torch.addcdiv(p, q, -rest.to(p.dtype).unsqueeze(-1)).clamp_min_(0)  # (p − q')+ off T
        gain = gain.scatter_(-1, top, take(p, top))  # q' = 0 on T
        return x[..., 0], accepted, rows.draw(gain)
