"""The min-cut dual of the OTM problem: one sort and one scan (prefix laws), or a closed form.

Hu et al. ("Towards Optimal Multi-draft Speculative Decoding", ICLR 2025) show

.. math:: \\alpha^*(p, Q) = \\min_{A \\subseteq V} \\; p(A) + 1 - Q(\\mathrm{set}(\\bar x) \\subseteq A)
          = 1 - \\max_A g(A), \\qquad g(A) = Q(\\mathrm{set}(\\bar x) \\subseteq A) - p(A).

A law's :meth:`~mdsd.laws.DraftLaw.dual_form` says how its maximiser is found, and on what grounds:

**Sorted-prefix theorem, i.i.d. drafts** (Hu et al.): some maximiser of g is a prefix of the tokens sorted by
p/q ascending (q = 0 last). With Q = q(A)^k: if i ∈ A, j ∉ A, p_j/q_j < p_i/q_i and A is optimal, removing i
costs q(A)^k − (q(A) − q_i)^k ≥ p_i and adding j gains (q(A) + q_j)^k − q(A)^k ≤ p_j; by convexity of t^k the
gain is ≥ q_j k q(A)^{k−1} ≥ (q_j/q_i)(q(A)^k − (q(A) − q_i)^k) ≥ q_j p_i/q_i > p_j, a contradiction.

**Sorted-prefix theorem, two drafts without replacement** (proved here). Q(both in A) = Σ_{i≠j ∈ A} q_i q_j /
(1 − q_i). With a = q(A) and S = Σ_{l∈A} q_l/(1 − q_l), the marginal gain of adding j ∉ A and the marginal
loss of removing i ∈ A are

.. math:: \\Delta^+_j = q_j \\Big(\\frac{a}{1 - q_j} + S\\Big), \\qquad
          \\Delta^-_i = q_i \\Big(\\frac{a - 2 q_i}{1 - q_i} + S\\Big).

Since a ≤ 1 < 2, (a − 2q_i)/(1 − q_i) ≤ a ≤ a/(1 − q_j), so Δ⁺_j/q_j ≥ Δ⁻_i/q_i. If A maximises g then
Δ⁻_i ≥ p_i and Δ⁺_j ≤ p_j, so p_j/q_j ≥ Δ⁺_j/q_j ≥ Δ⁻_i/q_i ≥ p_i/q_i: every token outside A (q > 0) has a
ratio at least that of every token inside. Where ratios tie, Δ⁺_j ≥ p_j lets the whole tie class join A
without loss; tokens of A with q = 0 must have p = 0 (else dropping them gains) and can be dropped. So some
maximiser is a prefix of the p/q order, whatever the order of ties; for k = 1 g is modular and the same holds.

**Sorted-prefix conjecture, k ≥ 3 drafts without replacement**: the same scan, unproven; it held on every
instance tried, and the tests check it against all 2^n cuts (n ≤ 8, every law, wide dynamic ranges). The
containment comes from a quadrature of the exponential race (:mod:`mdsd.race`) with an error estimate; results
say "conjectured".

**Closed form** (hub, greedy, top-k): Q(set ⊆ A) = [F ⊆ A] (base + r(A ∖ F)) for a forced set F, so
:math:`\\alpha^* = p(F) + \\sum_{i \\notin F} \\min(p_i, r_i)`, attained by A = F ∪ {r > p}.

Everything here is batched over leading axes: p, q are [..., n]; values come back as [...].
See docs/mathematics.md §1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdsd.laws import DraftLaw
from mdsd.race import suffix_mass

_CANDIDATES = 8  # prefixes whose lower bound sets the first pruning floor of an inexact law
_MARGIN = 1e-13  # an upper bound this far below the best exact gain still gets its prefix evaluated: the
# bounds are prefix sums with differences, exact to float rounding in absolute terms only


@dataclass(frozen=True)
class PrefixScan:
    """The sorted-prefix scan of the dual, batched over leading axes.

    Attributes
    ----------
    value : ndarray [...]
        α* = 1 − max_j g(A_j).
    order : ndarray [..., n]
        The token order (p/q ascending); A_j is its first j tokens.
    length : ndarray [...]
        The maximising prefix length j.
    error : ndarray [...]
        Estimated error of ``value`` from a numerical containment (the race quadrature); 0 where exact.
    """

    value: np.ndarray
    order: np.ndarray
    length: np.ndarray
    error: np.ndarray


def log_ratio(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """log(p/q) per token [..., n]: −inf where p = 0 < q, +inf where q = 0 (p = 0 too).

    Formed as log p − log q, so a ratio beyond the float range (p = 0.5, q = 1e-310) still sorts before
    the tokens of q = 0.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        level = np.log(p) - np.log(q)
    return np.where(q > 0, level, np.inf)


def prefix_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Token order by p/q ascending (q = 0 last), per row of [..., n]: the dual's prefix order.

    Ties may come in any order: the minimum over prefixes is the same (see the module docstring).
    """
    return np.argsort(log_ratio(p, q), axis=-1)


def _with_zero(x: np.ndarray) -> np.ndarray:
    """Prefix sums [..., n] -> [..., n + 1] with the empty prefix 0 in front."""
    return np.concatenate([np.zeros(x.shape[:-1] + (1,)), np.cumsum(x, axis=-1)], axis=-1)


def _refine(
    qs: np.ndarray, spent: np.ndarray, bound: np.ndarray, law: DraftLaw, fine: bool
) -> tuple[float, int, float]:
    """max_j g(A_j) for one row when only an upper bound of g is cheap: (gain, prefix length, error).

    Exact containments are computed at the most promising prefixes and wherever the bound reaches the
    floor set by their lower bounds (exact in float: sums of what remains, no differences); then, until no
    prefix left out has a bound above the best exact gain (less :data:`_MARGIN`), those prefixes are
    computed too. So the maximum is always taken over exact values: a prefix left out is one whose upper
    bound is below the answer.
    """
    outside = suffix_mass(qs)
    candidates = np.argsort(-bound, kind="stable")[:_CANDIDATES]
    floor = 0.0  # the empty prefix
    for j in candidates:
        floor = max(floor, law.containment_lower(qs[:j], float(outside[j])) - spent[j])
    values, errors = np.full(bound.size, np.nan), np.zeros(bound.size)
    todo = bound + _MARGIN >= floor
    todo[candidates] = True
    while todo.any():
        exact, error = law.prefix_containment(qs, todo, fine)
        values[todo], errors[todo] = exact[todo], error[todo]
        gains = values - spent
        best = float(np.nanmax(gains))
        todo = np.isnan(values) & (bound + _MARGIN > best)
    return best, int(np.nanargmax(gains)), float(errors.max())


def prefix_scan(
    p: np.ndarray, q: np.ndarray, law: DraftLaw, fine: bool = False, order: np.ndarray | None = None
) -> PrefixScan:
    """α* by the sorted-prefix scan for laws of dual kind "prefix", batched over [..., n].

    .. math:: \\alpha^* = 1 - \\max_{j=0..n} \\big[ Q(\\mathrm{set}(\\bar x) \\subseteq A_j) - p(A_j) \\big],
              \\quad A_j = \\text{the } j \\text{ tokens of smallest } p/q.

    ``fine`` asks the law's numerical containment (if any) for a tighter error estimate; ``order`` reuses a
    :func:`prefix_order` of the same p, q.

    >>> from mdsd.laws import IID
    >>> float(prefix_scan(np.array([1.0, 0.0]), np.array([0.5, 0.5]), IID(2)).value)
    0.75
    """
    order = prefix_order(p, q) if order is None else order
    qs = np.take_along_axis(q, order, axis=-1)
    spent = _with_zero(np.take_along_axis(p, order, axis=-1))  # p(A_j) [..., n + 1]
    stats = law.prefix_statistics(q)
    weights = np.take_along_axis(stats.weights, np.broadcast_to(order, stats.weights.shape), axis=-1)
    bound = stats.containment(_with_zero(weights), suffix_mass(qs)) - spent  # [..., n + 1]
    if stats.exact:
        length = np.argmax(bound, axis=-1)
        gain = np.take_along_axis(bound, length[..., None], axis=-1)[..., 0]
        error = np.zeros(gain.shape)
    else:
        rows = zip(
            qs.reshape(-1, qs.shape[-1]), *(x.reshape(-1, x.shape[-1]) for x in (spent, bound)), strict=True
        )
        found = [_refine(a, b, c, law, fine) for a, b, c in rows]
        gain, length, error = (np.array(x).reshape(bound.shape[:-1]) for x in zip(*found, strict=True))
    return PrefixScan(np.clip(1.0 - gain, 0.0, 1.0), order, length, error)


def modular_dual(p: np.ndarray, q: np.ndarray, law: DraftLaw) -> tuple[np.ndarray, np.ndarray]:
    """α* for laws of dual kind "modular" (hub, greedy, top-k), batched: (values [...], A mask [..., n]).

    With Q(set ⊆ A) = [F ⊆ A] (base + r(A ∖ F)) and base + r(V ∖ F) = 1 (:meth:`DraftLaw.modular_form`),

    .. math:: \\alpha^* = p(F) + \\sum_{i \\notin F} \\min(p_i, r_i),

    minimised by A = F ∪ {i : r_i > p_i}. Greedy: F = the top k − 1 tokens, r = q off F renormalised;
    hub: the same with F = {argmax q}; top-k: F = the top k, r = 0.

    >>> from mdsd.laws import Hub
    >>> v, a = modular_dual(np.array([0.5, 0.5]), np.array([0.9, 0.1]), Hub())
    >>> float(v), a.tolist()
    (1.0, [True, True])
    """
    forced, r, _ = law.modular_form(q)
    values = np.where(forced, p, np.minimum(p, r)).sum(axis=-1)
    return np.clip(values, 0.0, 1.0), forced | (r > p)
