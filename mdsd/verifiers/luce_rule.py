r"""Levels and weights of a Luce rule whose selection law is the optimal one, for drafts without replacement.

**Every base is a Luce law (with levels).** Let g(A) = P(set(x̄) ∩ A ≠ ∅) and F a selection law in its
base polytope (F(A) <= g(A) for every token set, F(V) = 1); the optimal laws of the two-step verifier are
such bases (:func:`mdsd.otm.selection.optimal_selection_law`). Consider, over log-weights θ,

.. math:: L(\theta) = \sum_y F(y)\, \theta_y - \sum_S Q(S) \log \sum_{y \in S} e^{\theta_y},
          \qquad \nabla L = F - F_\theta,

the log-likelihood of a Luce model that chose y with frequency F(y) from sets drawn with law Q. It is
concave, and along a direction d with values v_1 > ... > v_r on D_1, ..., D_r its slope at infinity is
Σ_j (v_j − v_{j+1}) (F − g)(D_1 ∪ ... ∪ D_j) <= 0, < 0 unless some D_1 ∪ ... ∪ D_j is tight
(F = g there). So when no proper set is tight, L attains its maximum and the Luce law there is exactly F.
A tight set A must come first: every tuple meeting A selects in A, a priority level; g splits along it
(g(A ∪ X) − g(A) = P(set(x̄) ∩ A = ∅, set(x̄) ∩ X ≠ ∅) is again such a function), so a maximal chain of tight
sets gives levels, each with finite weights. Hence a Luce rule with levels realises every base, for any
draft law (proved here; it answers whether the Luce family can reach α*: it can, whenever an optimal base
is known).

**The construction used.** The closed-form optimal F* (p/q descending order, prefixes P_i) comes with the
slack g(P_i) − F*(P_i); the tight prefixes cut the order into levels (contiguous blocks: most real pairs
give one long block plus single tokens). Within a level the weights maximise L, by Hunter's MM step
θ ← θ + log F* − log F_θ (a majorise-minimise step of L, monotone) accelerated by Anderson mixing, with
F_θ from :func:`mdsd.verifiers.luce.luce_law` at a coarse step. Tight sets that are not prefixes drive
some weights apart; log-weights are kept within a level's range (:data:`SPREAD`), the limit being
approached. Whatever the weights reached, the law used for verification is computed afresh at the fine
step for exactly those weights, so an unconverged solve costs acceptance, never correctness.

**Many light tokens.** Where a level holds more than :data:`BINS`·4 tokens light enough to be summed in
groups, their log-weights are rounded to a grid of :data:`BINS` values over the level's range, so that
:func:`~mdsd.verifiers.luce.luce_law` sums each rounded value as one group; the solver then fits the
groups' total targets.

Luce (1959); Hunter, "MM algorithms for generalized Bradley-Terry models", Ann. Statist. 2004; Walker &
Ni, "Anderson acceleration for fixed-point iterations", SIAM J. Numer. Anal. 2011.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mdsd.laws import WithoutReplacement
from mdsd.otm.selection import optimal_selection_law
from mdsd.sampling import inverse_cdf
from mdsd.verifiers.luce import luce_law
from mdsd.verifiers.ops import take

__all__ = ["LuceRule", "luce_rule", "levels_of", "luce_select"]

COARSE = 0.35  # trapezoid step in log u of the law inside the solver (relative accuracy ~1e-10)
TOLERANCE = 1e-8  # stop once Σ |F_θ − F*| over the levels with weights is below this (coarse law)
ITERATIONS = 40  # most MM / Anderson steps
HISTORY = 3  # Anderson mixing depth (deeper mixes stall on the coarse law's rounding)
SPREAD = 60.0  # log-weights of a level stay within [−SPREAD, 0]
TIGHT = 1e-12  # a prefix whose slack g − F* is at most this is a level boundary
BINS = 2048  # rounded log-weights per level where it holds many light tokens


@dataclass(frozen=True)
class LuceRule:
    """A Luce rule with levels for one pair, its exact law and what it reaches.

    Attributes
    ----------
    level : ndarray [n] of int
        Priority level of each token (0 first).
    log_weight : ndarray [n]
        log w within the level (max 0 per level).
    law : ndarray [n]
        F of this rule (:func:`mdsd.verifiers.luce.luce_law`, default step), 0 where q = 0.
    error : float
        Bound on Σ |law − F| (the quadrature's).
    target : ndarray [n]
        The optimal F* the weights were fitted to.
    distance : float
        Σ |F_θ − F*| at the last solver step (coarse law).
    iterations : int
        Solver steps taken.
    """

    level: np.ndarray
    log_weight: np.ndarray
    law: np.ndarray
    error: float
    target: np.ndarray
    distance: float
    iterations: int


def levels_of(order: np.ndarray, slack: np.ndarray, tight: float = TIGHT) -> np.ndarray:
    """Levels [n] from the tight prefixes of ``order`` [n] (slack [n + 1] per prefix length).

    >>> levels_of(np.array([2, 0, 1]), np.array([0.0, 0.0, 0.1, 0.0])).tolist()  # cut after token 2
    [1, 1, 0]
    """
    cut = np.zeros(order.size, dtype=np.int64)
    cut[1:] = slack[1:-1] <= tight  # a level starts after every tight proper prefix
    level = np.empty(order.size, dtype=np.int64)
    level[order] = np.cumsum(cut)
    return level


def _anderson(x: np.ndarray, r: np.ndarray, xs: list, rs: list, scale: np.ndarray) -> np.ndarray:
    """One Anderson step from iterate x with fixed-point residual r (history xs, rs; weights scale)."""
    xs.append(x.copy())
    rs.append(r.copy())
    del xs[: -(HISTORY + 1)], rs[: -(HISTORY + 1)]
    if len(xs) == 1:
        return x + r
    dr = np.stack([b - a for a, b in zip(rs[:-1], rs[1:], strict=True)], axis=1)
    dx = np.stack([b - a for a, b in zip(xs[:-1], xs[1:], strict=True)], axis=1)
    gamma = np.linalg.lstsq(dr * scale[:, None], r * scale, rcond=None)[0]
    return x + r - (dx + dr) @ gamma


def luce_rule(
    p: np.ndarray,
    q: np.ndarray,
    k: int,
    tolerance: float = TOLERANCE,
    iterations: int = ITERATIONS,
    step: float | None = None,
) -> LuceRule:
    """Levels and weights whose Luce law approaches the optimal F* for k drafts without replacement.

    p, q [n] float64 distributions (q with more than k positive entries); ``iterations`` caps the solver
    (0: the starting weights F*/q); ``step`` is the fine step of the final law (default: the quadrature's
    :func:`~mdsd.verifiers.luce.default_step`).

    >>> rule = luce_rule(np.array([0.0, 0.5, 0.5]), np.array([0.6, 0.2, 0.2]), 2)
    >>> rule.level.tolist(), bool(abs(rule.law[1:].sum() - 1.0) < 1e-12)  # token 0 last, never chosen
    ([1, 0, 0], True)
    """
    target = optimal_selection_law(p, q, WithoutReplacement(k))
    level = levels_of(target.order, target.slack)
    drafted = q > 0
    counts = np.bincount(level[drafted], minlength=level.max() + 1)
    free = drafted & (counts[level] > 1)  # tokens whose weight matters
    wanted = target.law
    with np.errstate(divide="ignore"):
        theta = np.where(free, np.log(wanted) - np.log(np.where(drafted, q, 1.0)), 0.0)
    theta = _normalise(theta, level, free)
    distance, best, taken = np.inf, np.inf, 0
    xs: list = []
    rs: list = []
    for taken in range(1, iterations + 1):  # noqa: B007
        law = luce_law(q, level, theta, k, step=COARSE).law
        distance = float(np.abs(law - wanted)[free].sum())
        if distance <= tolerance:
            break
        if distance > best:  # Anderson overshot: restart from a plain MM step
            xs.clear()
            rs.clear()
        best = min(best, distance)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.clip(np.nan_to_num(np.log(wanted[free]) - np.log(law[free]), nan=0.0), -SPREAD, SPREAD)
        theta[free] = _anderson(theta[free], r, xs, rs, np.sqrt(wanted[free]))
        theta = _normalise(theta, level, free)
    final = luce_law(q, level, theta, k, step=step)
    return LuceRule(level, theta, final.law, final.error, wanted, distance, taken)


def _normalise(theta: np.ndarray, level: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Shift each level's log-weights to max 0 and clip them to [−SPREAD, 0]; 0 where not free."""
    top = np.full(level.max() + 1, -np.inf)
    np.maximum.at(top, level[free], theta[free])
    out = np.where(free, theta - top[level], 0.0)
    return np.clip(np.nan_to_num(out, nan=0.0, neginf=-SPREAD), -SPREAD, 0.0)


def luce_select(
    level: torch.Tensor, log_weight: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor
) -> torch.Tensor:
    """The selected draft [*B]: among the drafts [*B, K] of the highest level (least ``level`` [*Bp, V]),
    one with probability proportional to exp(``log_weight`` [*Bp, V]), by inversion of the uniform u [*B].

    >>> level, lw = torch.tensor([0, 1, 0]), torch.log(torch.tensor([1.0, 5.0, 3.0], dtype=torch.float64))
    >>> luce_select(level, lw, torch.tensor([[0, 1, 2]] * 2), torch.tensor([0.2, 0.3], dtype=torch.float64))
    tensor([0, 2])
    """
    lev, lw = take(level, drafts), take(log_weight, drafts)  # [*B, K]
    top = lev == lev.min(-1, keepdim=True).values
    lw = torch.where(top, lw, -torch.inf)
    w = torch.exp(lw - lw.max(-1, keepdim=True).values)
    return drafts.gather(-1, inverse_cdf(w, u.unsqueeze(-1)))[..., 0]
