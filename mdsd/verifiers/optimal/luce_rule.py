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
F_θ from :func:`mdsd.verifiers.optimal.luce.luce_law` at a coarse step. Tight sets that are not prefixes drive
some weights apart; log-weights are kept within a level's range (:data:`SPREAD`), the limit being
approached. Whatever the weights reached, the law used for verification is computed afresh at the fine
step for exactly those weights, so an unconverged solve costs acceptance, never correctness.

**Many light tokens.** Where a level holds more than :data:`MANY` tokens light enough to be summed in
groups by :func:`~mdsd.verifiers.optimal.luce.luce_law`, they share weights by bins of log(F*/q) (for a light
token F ≈ q ψ(w), ψ increasing, so tokens of one ratio want one weight), and the solver fits each bin's
total target; the bins' width trades acceptance (about width/8 of their target mass) for nodes.

**Which weights, and when to stop.** The objective is the acceptance, not the fit: every iterate's
Σ min(F_θ, p) is computed from its law (exactly, for the levels whose weights do not matter: a token
alone at its level has F = F*), and the iterate of largest value is returned, the start included, so the
steps never make the rule worse than its start. The solver stops once the acceptance that further steps
can still buy, R = min(α*_wor − A, Σ_u (F*(u) − F_θ(u))+) (:func:`remaining`), is at most
:data:`RTOL` · α*_wor, or when :data:`STALL` steps have not raised A. Σ min(F_θ, p) is only a lower
bound on the acceptance (after a rejection the residual draw may land on another draft), so a solve that
stalls short of its stop returns whichever of the best iterate, the start and the iterate closest to F*
accepts most by the exact acceptance (:func:`luce_acceptance`): on a near one-hot q the start accepted
α*_wor exactly while its bound was 0.16, and the best bound's iterate 5e-3 less.

**Warm start.** ``init`` (log-weights [n], e.g. the previous node's) replaces the start log(F*/q):
it helps where consecutive pairs are alike; on recorded decode positions the cold start is often within
the stop already, so :class:`~mdsd.verifiers.optimal.OptimalVerifier` warm-starts only when asked. The
law returned is computed afresh for exactly the weights returned, so a start, good or bad, only moves
the acceptance (the best-iterate rule keeps it at least the start's); the verifier stays lossless.

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
from mdsd.verifiers.ops import take
from mdsd.verifiers.optimal.luce import light_tokens, luce_hits, luce_law, merge_levels

__all__ = ["LuceRule", "luce_rule", "levels_of", "luce_select", "remaining", "luce_acceptance"]

COARSE = 0.35  # trapezoid step in log u of the law inside the solver (relative accuracy ~1e-10)
RTOL = 1e-5  # stop once the acceptance further steps can still buy is below this share of α*_wor ...
STALL = 12  # ... or once this many steps have not raised the best Σ min(F_θ, p) (8 stopped one recorded
# node at k = 4 with 2.4e-4 of α*_wor unbought; it reached the stop 22 steps later, at 1.3e-5)
ITERATIONS = 40  # most MM / Anderson steps
HISTORY = 3  # Anderson mixing depth (deeper mixes stall on the coarse law's rounding)
SPREAD = 60.0  # log-weights of a level stay within [−SPREAD, 0]
TIGHT = 1e-12  # a prefix whose slack g − F* is at most this is a level boundary
MANY = 2048  # a level with more light free tokens than this bins them (see _units)
BIN_LOSS = 2e-5  # acceptance a level's bins may cost (sets their width)
WIDTHS = (0.005, 1.0)  # least and largest bin width in log(F*/q)


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
        F of this rule (:func:`mdsd.verifiers.optimal.luce.luce_law`, default step), 0 where q = 0.
    error : float
        Bound on Σ |law − F| (the quadrature's).
    target : ndarray [n]
        The optimal F* the weights were fitted to.
    distance : float
        Σ |F_θ − F*| over the solver's units (tokens, or bins of light tokens) at the weights returned
        (coarse law).
    iterations : int
        Solver steps taken.
    remaining : float
        Bound on the acceptance further steps could still buy when the solver stopped (:func:`remaining`).
    """

    level: np.ndarray
    log_weight: np.ndarray
    law: np.ndarray
    error: float
    target: np.ndarray
    distance: float
    iterations: int
    remaining: float


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


def _units(q: np.ndarray, target: np.ndarray, level: np.ndarray, free: np.ndarray, k: int) -> np.ndarray:
    """The solver's unknowns: unit [n] (−1: not free). A free token is
    its own unit, except the light tokens of a level holding more than :data:`MANY` of them: those share
    a unit per bin of log(F*/q) (the weight a light token needs is a function of F*/q), of width
    δ = 8 · :data:`BIN_LOSS` / p(bin tokens) within [:data:`WIDTHS`] (a bin's tokens then miss their F*
    by about δ/2, costing about δ/8 of their mass in acceptance). Tokens with F* = 0 share a bin of
    their own."""
    unit = np.full(q.size, -1)
    light = light_tokens(q, k)
    binned = np.zeros(q.size, dtype=bool)
    count = 0
    for lev in np.unique(level[free]):
        mine = free & (level == lev)
        many = mine & light
        if np.count_nonzero(many) <= MANY:
            continue
        with np.errstate(divide="ignore"):
            ratio = np.log(target[many]) - np.log(q[many])
        width = float(np.clip(8.0 * BIN_LOSS / max(target[many].sum(), 1e-300), *WIDTHS))
        finite = np.isfinite(ratio)
        key = np.where(finite, np.floor((ratio - ratio[finite].min(initial=0.0)) / width), -1).astype(
            np.int64
        )
        _, ids = np.unique(key, return_inverse=True)
        unit[many] = count + ids.reshape(-1)
        count += int(ids.max()) + 1
        binned |= many
    alone = free & ~binned
    unit[alone] = count + np.arange(np.count_nonzero(alone))
    return unit


def luce_rule(
    p: np.ndarray,
    q: np.ndarray,
    k: int,
    rtol: float = RTOL,
    iterations: int = ITERATIONS,
    step: float | None = None,
    init: np.ndarray | None = None,
) -> LuceRule:
    r"""Levels and weights whose Luce law approaches the optimal F* for k drafts without replacement.

    p, q [n] float64 distributions (q with at least k positive entries). The solver starts from ``init``
    (log-weights [n], e.g. the previous node's :attr:`LuceRule.log_weight`; only differences within a
    level matter, a non-finite entry takes the cold start there) or, by default, from log(F*/q), takes at
    most ``iterations`` steps (0: the start), and returns the iterate of largest Σ min(F_θ, p) (after a
    stall short of the stop: of largest exact acceptance among it, the start and the closest to F*). It stops
    once the acceptance that further steps can still buy is at most ``rtol`` · α*_wor
    (:func:`remaining`), or when :data:`STALL` steps have not raised it. ``step`` is the fine step of the
    final law (default: the quadrature's :func:`~mdsd.verifiers.optimal.luce.default_step`).

    Whatever the start and the steps, the law returned is computed afresh for exactly the weights
    returned, so the start changes the acceptance, never the verifier's output law.

    >>> rule = luce_rule(np.array([0.0, 0.5, 0.5]), np.array([0.6, 0.2, 0.2]), 2)
    >>> rule.level.tolist(), bool(abs(rule.law[1:].sum() - 1.0) < 1e-12)  # token 0 last, never chosen
    ([1, 0, 0], True)
    """
    if not rtol >= 0.0:
        raise ValueError(f"rtol must be >= 0; got {rtol}")
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0; got {iterations}")
    target = optimal_selection_law(p, q, WithoutReplacement(k))
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if init is not None and np.shape(init) != q.shape:
        raise ValueError(f"init must be log-weights of shape {q.shape}; got shape {np.shape(init)}")
    level = levels_of(target.order, target.slack)
    drafted = q > 0
    counts = np.bincount(level[drafted], minlength=level.max() + 1)
    free = drafted & (counts[level] > 1)  # tokens whose weight matters
    wanted = target.law
    best_value = float(np.minimum(wanted, p).sum())  # α*_wor
    fixed = float(np.minimum(wanted[~free], p[~free]).sum())  # a token alone at its level has F = F*
    unit = _units(q, wanted, level, free, k)
    units = int(unit.max()) + 1
    unit_want = np.bincount(unit[free], weights=wanted[free], minlength=units)
    unit_q = np.bincount(unit[free], weights=q[free], minlength=units)
    with np.errstate(divide="ignore"):
        x = np.log(unit_want) - np.log(unit_q)
    if init is not None:
        x = _warm(x, unit, free, np.asarray(init, dtype=np.float64))
    unit_level = np.zeros(units, dtype=np.int64)
    unit_level[unit[free]] = level[free]
    x = _normalise(x, unit_level)
    merged = merge_levels(level, np.unique(level[free]))  # for the solver: the levels in between as one each
    only = np.unique(merged[free])
    kept, least = None, np.inf  # the best iterate (x, Σ min(F_θ, p), distance); least distance
    closest = None  # the iterate of least distance (x, distance): the fixed point's side
    start = None  # the first iterate (x, distance)
    xs: list = []
    rs: list = []
    scale = np.sqrt(unit_want)
    theta = np.zeros(q.size)
    taken = 0
    for taken in range(iterations + 1):  # noqa: B007
        theta[free] = x[unit[free]]
        law = luce_law(q, merged, theta, k, step=COARSE, only=only).law
        unit_law = np.bincount(unit[free], weights=law[free], minlength=units)
        distance = float(np.abs(unit_law - unit_want).sum())
        accepted = fixed + float(np.minimum(law[free], p[free]).sum())
        if closest is None or distance < closest[1]:
            closest = (x, distance)
        if start is None:
            start = (x, distance)
        if kept is None or accepted > kept[1]:
            kept, since = (x, accepted, distance), 0
        else:
            since += 1
        bound = remaining(best_value, kept[1], unit_want, unit_law)
        if bound <= rtol * best_value or since >= STALL or taken == iterations:
            break
        if distance > 4.0 * least:  # Anderson blew up: restart from a plain MM step
            xs.clear()
            rs.clear()
        least = min(least, distance)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.clip(np.nan_to_num(np.log(unit_want) - np.log(unit_law), nan=0.0), -SPREAD, SPREAD)
        x = _normalise(_anderson(x, r, xs, rs, scale), unit_level)
    theta[free] = kept[0][unit[free]]
    final, distance = luce_law(q, level, theta, k, step=step), kept[2]
    if bound > rtol * best_value:
        # Stalled short of the stop. Σ min(F_θ, p) only bounds the acceptance from below (a rejected
        # selection's residual draw may land on another draft): an iterate of smaller bound can accept more,
        # up to α*_wor (seen on a near one-hot q). Keep whichever of the largest bound's, the start's and the
        # closest to F* accepts most, exactly.
        exact = luce_acceptance(p, q, level, theta, final.law, k, step)
        seen = {id(kept[0])}
        for other, other_distance in (start, closest):
            if id(other) in seen:
                continue
            seen.add(id(other))
            near = theta.copy()
            near[free] = other[unit[free]]
            law = luce_law(q, level, near, k, step=step)
            value = luce_acceptance(p, q, level, near, law.law, k, step)
            if value > exact:
                theta, final, distance, exact = near, law, other_distance, value
    return LuceRule(level, theta, final.law, final.error, wanted, distance, taken, bound)


def luce_acceptance(
    p: np.ndarray,
    q: np.ndarray,
    level: np.ndarray,
    log_weight: np.ndarray,
    law: np.ndarray,
    k: int,
    step: float | None = None,
) -> float:
    r"""The exact acceptance of the two-step verifier with a Luce rule (levels, log-weights) whose law
    is F (``law``): Σ min(F, p), plus the residual draws from norm((p − F)+) that land on another draft
    after a rejection (:func:`~mdsd.verifiers.optimal.luce.luce_hits`, within the law's relative error).

    >>> q, p = np.array([0.5, 0.5]), np.array([1.0, 0.0])
    >>> rule = luce_rule(p, q, 2)
    >>> round(luce_acceptance(p, q, rule.level, rule.log_weight, rule.law, 2), 12)  # both drafted
    1.0
    """
    excess = np.maximum(law - p, 0.0)
    reject = np.divide(excess, law, out=np.zeros_like(law), where=excess > 0)
    gain = np.maximum(p - law, 0.0)
    accepted = float(np.minimum(law, p).sum())
    if gain.sum() == 0 or not reject.any():
        return accepted
    return accepted + luce_hits(q, level, log_weight, k, reject, gain / gain.sum(), step)


def remaining(best: float, accepted: float, unit_want: np.ndarray, unit_law: np.ndarray) -> float:
    r"""Bound on the acceptance Σ min(F, p) that further solver steps can still buy.

    With α*_wor = Σ min(F*, p) (``best``), A the best iterate's Σ min(F_θ, p) (``accepted``) and the
    units' laws F_θ(u) against their targets F*(u) (``unit_law``, ``unit_want`` [U]):

    .. math:: R = \min\Bigl(\alpha^*_{wor} - A,\ \sum_u \bigl(F^*(u) - F_\theta(u)\bigr)_+\Bigr).

    The first term bounds what any rule can still gain (no lossless rule beats α*_wor). The second is
    what reaching the solver's fixed point can still buy: min(·, p) is 1-Lipschitz and increasing, so
    moving F_θ to F* raises Σ min(F, p) by at most Σ (F* − F_θ)+ (exact per token; for a bin of light
    tokens sharing one weight, whose laws move in proportion, to first order), which the units' sum is.

    >>> remaining(1.0, 0.75, np.array([0.5, 0.5]), np.array([0.375, 0.625]))  # half the distance 0.25
    0.125
    """
    return max(0.0, min(best - accepted, float(np.maximum(unit_want - unit_law, 0.0).sum())))


def _warm(x: np.ndarray, unit: np.ndarray, free: np.ndarray, init: np.ndarray) -> np.ndarray:
    """The units' start [U] from log-weights ``init`` [n]: each unit's mean of init over its tokens,
    x (the cold start) where one of them is not finite (the weights' levels may differ)."""
    ids = unit[free]
    good = np.bincount(ids, weights=np.isfinite(init[free]), minlength=x.size)
    total = np.bincount(ids, weights=np.where(np.isfinite(init[free]), init[free], 0.0), minlength=x.size)
    size = np.bincount(ids, minlength=x.size)
    return np.where((good == size) & (size > 0), total / np.maximum(size, 1), x)


def _normalise(x: np.ndarray, level: np.ndarray) -> np.ndarray:
    """Shift each level's log-weights x [U] (units of levels ``level`` [U]) to max 0, clipped to
    [−SPREAD, 0] (−inf: a unit whose target is 0)."""
    if x.size == 0:
        return x
    top = np.full(level.max() + 1, -np.inf)
    np.maximum.at(top, level, np.where(np.isfinite(x), x, -np.inf))
    out = x - np.where(np.isfinite(top[level]), top[level], 0.0)
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
