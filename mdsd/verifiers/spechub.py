"""SpecHub (Sun, Zhou, Chen, Sun, EMNLP 2024): optimal verification of the hub pair (k = 2)."""

from __future__ import annotations

import numpy as np
import torch

from mdsd.laws import Hub
from mdsd.verifiers.base import Rows, Verifier, collapse
from mdsd.verifiers.ops import mass_outside, take
from mdsd.verifiers.reference import draw_index, normalized, onehot, ratio
from mdsd.verifiers.registry import register

__all__ = ["SpecHubVerifier", "spechub_terms"]


def spechub_terms(
    p: torch.Tensor, q: torch.Tensor, hub: torch.Tensor, q_masses: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """The per-row quantities of SpecHub for p, q [..., V] and the hub a [...] (a = argmax q; q's block
    masses ``q_masses`` if known).

    Q(a, j) = q_a q_j / (1 − q_a), S_ia = Σ_{j≠a} (q_j − p_j)+, S_ai = Σ_{j≠a} (Q(a,j) − (p_j − q_j)+)+, and
    the residual p''_j = ((p_j − q_j)+ − Q(a,j))+ (j ≠ a), p''_a = ((p_a − S_ai)+ − S_ia)+.
    1 − q_a is summed as Σ_{j≠a} q_j (``rest``), every sum over j ≠ a skips the hub instead of
    subtracting it, and Q(a, j) = q_a · (q_j / rest) with q_j / rest <= 1: a near-one-hot q keeps its
    precision and nothing overflows, even in float32.
    """
    a = hub.unsqueeze(-1)  # [..., 1]
    qa, pa = q.gather(-1, a)[..., 0], p.gather(-1, a)[..., 0]
    rest = mass_outside(q, a, q_masses)  # 1 − q_a, float64
    d = (p - q).scatter_(-1, a, 0)  # p_j − q_j off the hub, 0 at the hub
    s_ia = -d.clamp(max=0).sum(-1).to(torch.float64)
    gain = d.clamp_min_(0)  # (p_j − q_j)+, j ≠ a
    share = q / rest.to(q.dtype).unsqueeze(-1)  # q_j / (1 − q_a)
    excess = share.mul_(-qa.unsqueeze(-1)).add_(gain).scatter_(-1, a, 0)  # (p_j − q_j)+ − Q(a, j)
    s_ai = -excess.clamp(max=0).sum(-1).to(torch.float64)
    hub_mass = ((pa.double() - s_ai).clamp_min(0) - s_ia).clamp_min(0)
    residual = excess.clamp_min_(0).scatter_(-1, a, hub_mass.to(p.dtype).unsqueeze(-1))
    return {
        "pa": pa.double(),
        "qa": qa.double(),
        "rest": rest,
        "s_ia": s_ia,
        "s_ai": s_ai,
        "residual": residual,
    }


@register
class SpecHubVerifier(Verifier):
    r"""SpecHub's verification of the hub pair, a = argmax q (docs/mathematics.md §3).

    Pair (i, a): accept i w.p. min(1, p_i/q_i); else a w.p. min(1, (p_a − S_ai)+/S_ia).
    Pair (a, i): accept i w.p. min(1, (p_i − q_i)+/Q(a,i)); else a w.p. min(1, p_a/S_ai).
    Both rejected: emit a draw of norm(p'') (see :func:`spechub_terms`). Every pair holds the hub, so an
    emitted hub is always accepted; the hub is emitted with probability exactly p_a, and

    .. math:: \alpha = p_a + \sum_{i \ne a} \min\Bigl(p_i, \frac{q_i}{1 - q_a}\Bigr)
              = \alpha^*(p, \mathrm{Hub}(q)).

    The kernel reads the hub off the drafts (of a hub pair, the one with the larger q; ties: the lower
    index), so it needs no argmax over the vocabulary.

    >>> from mdsd.verifiers import verifier
    >>> round(verifier("spechub", 2).acceptance([0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]), 6)
    0.766667
    """

    name = "spechub"
    supported_k = frozenset({2})

    @classmethod
    def _law(cls, k):
        return Hub()

    def _acceptance(self, p, q):
        a = int(np.argmax(q))  # the first maximum: ties towards the lower index
        others = np.arange(q.size) != a
        rest = q[others].sum()
        return float(p[a] + np.minimum(p[others], q[others] / rest).sum())

    def _check_law_drafts(self, q, drafts, rows):
        hub = q.argmax(-1, keepdim=True).expand(*drafts.shape[:-1], 1)
        if not bool(((drafts == hub).sum(-1) == 1)[rows].all()):
            raise ValueError("SpecHub drafts must be a hub pair: exactly one of the two drafts is argmax q")

    def _output_law(self, p, q, drafts):
        a, i, (n1, d1), (n2, d2), rest = _hub_branches(p, q, drafts)
        first, second = ratio(n1, d1), ratio(n2, d2)
        out = first * onehot(p.size, i) + (1 - first) * second * onehot(p.size, a)
        return out + (1 - first) * (1 - second) * normalized(rest, p)

    def _reference(self, p, q, drafts, accept, residual):
        a, i, (n1, d1), (n2, d2), rest = _hub_branches(p, q, drafts)
        if accept[0] * d1 < n1:
            return i
        if accept[1] * d2 < n2:
            return a
        return draw_index(normalized(rest, p), residual)

    def _verify(self, rows: Rows):
        p, q, drafts, u = rows.p, rows.q, rows.drafts, rows.u
        qx = take(q, drafts)  # [*B, 2]
        hub_first = (qx[..., 0] > qx[..., 1]) | (
            (qx[..., 0] == qx[..., 1]) & (drafts[..., 0] < drafts[..., 1])
        )
        hub = torch.where(hub_first, drafts[..., 0], drafts[..., 1])  # [*B]
        i = torch.where(hub_first, drafts[..., 1], drafts[..., 0]).unsqueeze(-1)  # the other draft
        t = spechub_terms(p, q, collapse(hub, q.shape[:-1]), rows.q_masses)
        pi, qi = take(p, i)[..., 0].double(), take(q, i)[..., 0].double()
        gain_i, pair_i = (pi - qi).clamp_min(0), t["qa"] * (qi / t["rest"])  # Q(a, i)
        pa, s_ia, s_ai = t["pa"], t["s_ia"], t["s_ai"]
        u1, u2 = u.accept[..., 0], u.accept[..., 1]
        # pair (i, a): U1 < p_i/q_i, then U2 < (p_a − S_ai)+/S_ia
        # pair (a, i): U1 < (p_i − q_i)+/Q(a,i), then U2 < p_a/S_ai
        take_i = torch.where(hub_first, u1 * pair_i < gain_i, u1 * qi < pi)
        take_a = torch.where(hub_first, u2 * s_ai < pa, u2 * s_ia < (pa - s_ai).clamp_min(0))
        return torch.where(take_i, i[..., 0], hub), take_i | take_a, rows.draw(t["residual"])


def _hub_branches(p: np.ndarray, q: np.ndarray, drafts: tuple[int, ...]):
    """For one pair and one hub pair, in float64: the hub a, the other draft i, the tests of accepting i
    then a as (numerator, denominator) of min(1, numerator / denominator) (class docstring), and the
    unnormalised residual p'' [n]."""
    a = int(np.argmax(q))  # the first maximum: ties towards the lower index
    others = np.arange(q.size) != a
    total = q[others].sum()  # 1 − q_a, summed without cancellation
    pair = np.zeros(q.size)  # Q(a, j) = q_a q_j / (1 − q_a), 0 at the hub
    if total > 0:
        pair[others] = q[a] * (q[others] / total)
    gain = np.where(others, np.maximum(p - q, 0.0), 0.0)  # (p_j − q_j)+, j ≠ a
    s_ia = np.maximum(q - p, 0.0)[others].sum()
    s_ai = np.maximum(pair - gain, 0.0)[others].sum()
    if drafts[1] == a:  # pair (i, a)
        i = drafts[0]
        first, second = (p[i], q[i]), (max(p[a] - s_ai, 0.0), s_ia)
    else:  # pair (a, i)
        i = drafts[1]
        first, second = (gain[i], pair[i]), (p[a], s_ai)
    rest = np.maximum(gain - pair, 0.0)
    rest[a] = max(max(p[a] - s_ai, 0.0) - s_ia, 0.0)
    return a, i, first, second, rest
