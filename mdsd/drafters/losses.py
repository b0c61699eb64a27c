"""Training losses of a drafter against the target's law, on the target's top-K tokens and their tail.

A training position keeps the target's next-token law p as its K likeliest tokens and the mass of the rest
(:mod:`mdsd.drafters.features`). The drafter's law q lives on its draft vocabulary M. Both are compared on
the *lumped* pair over n = K' + 1 cells: the K' top-K tokens that lie in M, and one cell holding everything
else (p's tail and its top-K tokens outside M; q's mass off those K' tokens). Lumping merges overlap, so an
acceptance computed on the lumped pair is at least the full-vocabulary one, by at most min(p_lump, q_lump).

* ``kl``: the forward KL divergence :math:`\\sum_i p_i \\log(p_i / q_i)` (its gradient in q is the
  cross-entropy's; likelihood training);
* ``tv``: :math:`1 - \\sum_i \\min(p_i, q_i)`, one minus the single-draft acceptance (Leviathan et al.);
* ``alpha``: :math:`-\\alpha^*(p, \\mathrm{law}(q))`, the optimal acceptance of k drafts from q (Hu et al.),
  through the min-cut dual: :math:`\\alpha^* = 1 - \\max_A \\bigl[Q(\\mathrm{set}(\\bar x) \\subseteq A) -
  p(A)\\bigr]`, whose maximiser is a prefix of the cells sorted by p/q ascending for i.i.d. drafts
  (:math:`Q = q(A)^k`) and for two drafts without replacement (:math:`Q = \\sum_{i \\ne j \\in A} q_i q_j /
  (1 - q_i)`; docs/mathematics.md §1, :mod:`mdsd.otm.dual`). The prefix is locally constant in q, so the
  value is differentiable almost everywhere and its gradient flows through the maximising prefix's sums.

Every function takes p, q as [..., n] tensors whose rows sum to 1 and returns [...].
"""

from __future__ import annotations

import torch

__all__ = [
    "LOSSES",
    "kl_divergence",
    "total_variation",
    "optimal_acceptance_iid",
    "optimal_acceptance_wor2",
    "lump",
]

LOSSES = ("kl", "tv", "alpha")


def lump(p_ids: torch.Tensor, p_top: torch.Tensor, slot: torch.Tensor, log_q: torch.Tensor) -> tuple:
    """The lumped pair (module docstring): ``p_ids`` [N, K] the target's top-K tokens, ``p_top`` [N, K] their
    probabilities, ``slot`` [V] each token's place in the draft vocabulary (-1 outside), ``log_q`` [N, M]
    the drafter's log-probabilities on it. Returns p, q [N, K + 1] (cells of top-K tokens outside M are
    empty: their p mass joins the last cell) with q's last cell 1 minus the rest (clamped at 0)."""
    at = slot[p_ids]  # [N, K]
    inside = at >= 0
    q_top = torch.where(inside, log_q.gather(1, at.clamp(min=0)).exp(), 0.0)
    p_in = torch.where(inside, p_top, 0.0)
    p = torch.cat([p_in, (1 - p_in.sum(1, keepdim=True)).clamp(min=0)], 1)
    q = torch.cat([q_top, (1 - q_top.sum(1, keepdim=True)).clamp(min=0)], 1)
    return p, q


def kl_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """:math:`\\sum_i p_i \\log(p_i / q_i)` (cells with p = 0 count 0; q is floored at the dtype's tiny)."""
    tiny = torch.finfo(q.dtype).tiny
    return torch.where(p > 0, p * (torch.log(p.clamp(min=tiny)) - torch.log(q.clamp(min=tiny))), 0.0).sum(-1)


def total_variation(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """:math:`1 - \\sum_i \\min(p_i, q_i)`: one minus the single-draft acceptance."""
    return 1 - torch.minimum(p, q).sum(-1)


def _prefix_order(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The cells sorted by p/q ascending, q = 0 last (a detached, stable order)."""
    with torch.no_grad():
        ratio = torch.where(q > 0, p / q.clamp(min=torch.finfo(q.dtype).tiny), torch.inf)
        return torch.sort(ratio, dim=-1, stable=True).indices


def optimal_acceptance_iid(p: torch.Tensor, q: torch.Tensor, k: int) -> torch.Tensor:
    """:math:`\\alpha^*(p, \\mathrm{IID}(k)) = 1 - \\max(0, \\max_j [Q_j^k - P_j])` over the prefixes j of the
    p/q order (P, Q the prefix sums).

    >>> p, q = torch.tensor([0.5, 0.5]), torch.tensor([0.8, 0.2])
    >>> round(float(optimal_acceptance_iid(p, q, 1)), 6), round(float(optimal_acceptance_iid(p, q, 2)), 6)
    (0.7, 0.86)
    """
    order = _prefix_order(p, q)
    P, Q = p.gather(-1, order).cumsum(-1), q.gather(-1, order).cumsum(-1)
    gain = Q.clamp(max=1) ** k - P
    return 1 - gain.amax(-1).clamp(min=0)


def optimal_acceptance_wor2(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """:math:`\\alpha^*(p, \\mathrm{WithoutReplacement}(2))`: the same scan with
    :math:`Q(A) = \\sum_{i \\in A} q_i (q(A) - q_i) / (1 - q_i)`. Only the likeliest cell m can have
    1 - q_m small (every other has 1 - q_i >= 1/2), so its term is computed apart, with 1 - q_m as the sum
    of the other cells and q(A) - q_m as the prefix sum without it: no cancellation at q_m ~ 1 - 1e-300.

    >>> p, q = torch.tensor([0.5, 0.5]), torch.tensor([0.8, 0.2])  # both tokens are always drafted
    >>> round(float(optimal_acceptance_wor2(p, q)), 6)
    1.0
    """
    order = _prefix_order(p, q)
    qs = q.gather(-1, order)
    is_m = torch.nn.functional.one_hot(qs.argmax(-1), qs.shape[-1]).bool()
    others = qs.masked_fill(is_m, 0.0)
    q_m = (qs * is_m).sum(-1, keepdim=True)
    rest_m = others.sum(-1, keepdim=True).clamp(min=torch.finfo(q.dtype).tiny)  # 1 - q_m
    a, a_other = qs.cumsum(-1), others.cumsum(-1)  # prefix sums with and without m
    S, T = (others / (1 - others)).cumsum(-1), (others * others / (1 - others)).cumsum(-1)
    with_m = is_m.cumsum(-1) > 0  # the prefix holds m
    Q = a * S - T + torch.where(with_m, q_m * a_other / rest_m, 0.0)
    gain = Q.clamp(max=1) - p.gather(-1, order).cumsum(-1)
    return 1 - gain.amax(-1).clamp(min=0)
