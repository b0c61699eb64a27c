"""SpecHub (Sun, Zhou, Chen, Sun, EMNLP 2024): optimal verification of the hub pair (k = 2)."""

from __future__ import annotations

import numpy as np
import torch

from mdsd.laws import Hub
from mdsd.verifiers.base import Verifier
from mdsd.verifiers.ops import Uniforms, inverse_cdf, take

__all__ = ["SpecHub", "spechub_terms"]


def spechub_terms(p: torch.Tensor, q: torch.Tensor) -> dict[str, torch.Tensor]:
    """The per-row quantities of SpecHub for p, q [..., V] (a = argmax q, lowest index on ties).

    Q(a, j) = q_a q_j / (1 − q_a), S_ia = Σ_{j≠a} (q_j − p_j)+, S_ai = Σ_{j≠a} (Q(a,j) − (p_j − q_j)+)+, and
    the residual p''_j = ((p_j − q_j)+ − Q(a,j))+ (j ≠ a), p''_a = ((p_a − S_ai)+ − S_ia)+.
    1 − q_a is computed as Σ_{j≠a} q_j, so a near-one-hot q keeps its precision.
    """
    hub = q.argmax(-1, keepdim=True)  # [..., 1]
    not_hub = torch.ones_like(q, dtype=torch.bool).scatter_(-1, hub, False)
    qa, pa = q.gather(-1, hub), p.gather(-1, hub)  # [..., 1]
    rest = (q * not_hub).sum(-1, keepdim=True).clamp_min(torch.finfo(q.dtype).tiny)
    pair = qa * q / rest * not_hub  # Q(a, j), 0 at the hub
    gain = (p - q).clamp_min(0) * not_hub  # (p_j − q_j)+, j ≠ a
    s_ia = ((q - p).clamp_min(0) * not_hub).sum(-1, keepdim=True)
    s_ai = (pair - gain).clamp_min(0).sum(-1, keepdim=True)
    residual = (gain - pair).clamp_min(0).scatter(-1, hub, ((pa - s_ai).clamp_min(0) - s_ia).clamp_min(0))
    return {
        "hub": hub[..., 0],
        "pa": pa[..., 0],
        "s_ia": s_ia[..., 0],
        "s_ai": s_ai[..., 0],
        "pair": pair,
        "gain": gain,
        "residual": residual,
    }


class SpecHub(Verifier):
    r"""SpecHub's verification of the hub pair, a = argmax q (MATH.md §3).

    Pair (i, a): accept i w.p. min(1, p_i/q_i); else a w.p. min(1, (p_a − S_ai)+/S_ia).
    Pair (a, i): accept i w.p. min(1, (p_i − q_i)+/Q(a,i)); else a w.p. min(1, p_a/S_ai).
    Both rejected: emit a draw of norm(p'') (see :func:`spechub_terms`). Every pair holds the hub, so an
    emitted hub is always accepted; the hub is emitted with probability exactly p_a, and

    .. math:: \alpha = p_a + \sum_{i \ne a} \min\Bigl(p_i, \frac{q_i}{1 - q_a}\Bigr)
              = \alpha^*(p, \mathrm{Hub}(q)).

    >>> from mdsd.verifiers import verifier
    >>> round(verifier("spechub", 2).acceptance([0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]), 6)
    0.766667
    """

    name = "spechub"

    def _check_k(self, k):
        if k != 2:
            raise ValueError(f"SpecHub verifies hub pairs, so it needs k = 2, got k = {k}")

    def _law(self, k):
        return Hub()

    def _acceptance(self, p, q):
        a = int(np.argmax(q))  # the first maximum: ties towards the lower index
        others = np.arange(q.size) != a
        rest = q[others].sum()
        return float(p[a] + np.minimum(p[others], q[others] / rest).sum())

    def _check_drafts(self, q, drafts):
        super()._check_drafts(q, drafts)
        hub = q.argmax(-1, keepdim=True).expand(*drafts.shape[:-1], 1)
        is_hub = drafts == hub
        if not bool((is_hub.sum(-1) == 1).all()):
            raise ValueError("SpecHub drafts must be a hub pair: exactly one of the two drafts is argmax q")

    def _verify(self, p, q, drafts, u: Uniforms) -> torch.Tensor:
        t = spechub_terms(p, q)
        hub = t["hub"].expand(drafts.shape[:-1])
        hub_first = drafts[..., 0] == hub
        i = torch.where(hub_first, drafts[..., 1], drafts[..., 0]).unsqueeze(-1)  # the non-hub draft
        pi, qi = take(p, i)[..., 0], take(q, i)[..., 0]
        gain_i, pair_i = take(t["gain"], i)[..., 0], take(t["pair"], i)[..., 0]
        pa, s_ia, s_ai = t["pa"], t["s_ia"], t["s_ai"]
        u1, u2 = u.accept[..., 0], u.accept[..., 1]
        # pair (i, a): U1 < p_i/q_i, then U2 < (p_a − S_ai)+/S_ia
        # pair (a, i): U1 < (p_i − q_i)+/Q(a,i), then U2 < p_a/S_ai
        take_i = torch.where(hub_first, u1 * pair_i < gain_i, u1 * qi < pi)
        take_a = torch.where(hub_first, u2 * s_ai < pa, u2 * s_ia < (pa - s_ai).clamp_min(0))
        residual = inverse_cdf(t["residual"], u.residual, p)
        return torch.where(take_i, i[..., 0], torch.where(take_a, hub, residual))
