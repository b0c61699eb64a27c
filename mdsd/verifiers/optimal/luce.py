r"""The selection law of a Luce rule with priority levels, for k drafts without replacement.

**The rule.** Every token y carries a level ℓ(y) (0 = highest priority) and a weight w(y) > 0. Given the
drafted set S (the first k arrivals of exponential clocks with rates q, :class:`mdsd.WithoutReplacement`),
select one token of S's highest level with probability proportional to its weight:

.. math:: s(y \mid S) = \frac{w(y)}{\sum_{z \in S,\ \ell(z) = \ell(y)} w(z)}
          \quad (\ell(y) = \min_{z \in S} \ell(z)), \qquad F(y) = \sum_{S \ni y} Q(S)\, s(y \mid S).

One level is the plain Luce rule; levels are its limits when weights differ by orders of magnitude. Two-step
verification against F (:mod:`mdsd.verifiers.optimal.twostep`) is lossless for any levels and weights,
provided F is the law of the rule actually used; this module computes it.

**The double integral.** Write 1/W = ∫_0^∞ e^{−tW} dt for the Luce share. For a token y, let T be the
k-th arrival among the other tokens and S' their first k − 1 arrivals: y ∈ S iff y arrives before T, and
then S = {y} ∪ S'. With b_i = e^{−q_i u} (not arrived by u), a_i = (1 − e^{−q_i u}) e^{−t w_i} (arrived,
weighted; a_i = 1 − e^{−q_i u} for a lower level, 0 for a higher one) and c_i = q_i e^{−q_i u} (the
density of the k-th other arrival), summing over which others arrived gives

.. math:: F(y) = \int_0^\infty\!\!\int_0^\infty w(y)\, a_y(u, t)\;
          [z^{k-1} \zeta] \prod_{i \ne y} (b_i + a_i z + c_i \zeta)\; du\, dt,

with ζ² = 0 and levels as above (only the t-integral of y's own level remains; a single token alone
at its level needs no t at all: ∫ w e^{−tw} dt = 1). The product is an elementary symmetric sum of order
k − 1 with one density term: O(k n) per node (u, t) by prefix and suffix sums, all terms positive, in
log space, with the tokens surely arrived by u (q_i u > 40) counted apart.

**Groups of light tokens.** In a level holding many tokens whose q u stays below 1/2 on the whole
u-grid, those tokens are summed by groups, one per distinct weight: a group's share of the product is exp
of a power series in u with its power sums Σ q_i^n (no per-token work at a node; a group of one token
costs a few multiply-adds per (u, t) node where an explicit token costs two scans), and for a member y,
with Φ the product over all tokens, ρ_y = a_y / b_y and (1 + ρ z + q ζ)^{−1} = Σ_m (−ρ z)^m (1 − (m + 1) q ζ)
(mod ζ²),

.. math:: w\, a_y \prod_{i \ne y} = w \sum_{m < k} (-1)^m \rho_y^{m+1}
          \bigl(\Phi^{\zeta}_{k-1-m} - (m + 1)\, q_y\, \Phi_{k-1-m}\bigr),

and (e^{qu} − 1)^r = r! Σ_n S(n, r) (qu)^n / n! (Stirling numbers of the second kind) turns F(y) into a
power series in q_y with coefficients shared by the group: O(terms) per token after the nodes.

**Two drafts in closed form.** For k = 2 the drafted set is a pair, drawn in either order: with T = Σ q and
r_i = T − q_i (the mass left after drawing i, summed from the others),
Q({y, z}) = (q_y q_z / T)(1/r_y + 1/r_z), and y is selected from {y, z} with share σ_yz = 1 when z lies
below y's level, w_y/(w_y + w_z) when at it, 0 above. So

.. math:: F(y) = \frac{q_y}{T}\Bigl[\frac{1}{r_y} \sum_{z \ne y} \sigma_{yz}\, q_z
          + \sum_{z \ne y} \sigma_{yz}\, \frac{q_z}{r_z}\Bigr],

sums over the levels below (suffix sums) and, within y's level, over its d distinct weights (d² shares,
the tokens of one weight summed first): no quadrature, only float rounding. The residual hits take the
same sums with the marks. A level with more than :data:`PAIR_WEIGHTS` distinct weights is integrated
instead.

**Quadrature and its error.** The trapezoid rule in s = log u (step h, :func:`default_step`) from
u^{k+1} ~ 1e-17 to λ_k u = 50 (λ_k = q outside the k most likely tokens; the integrand decays like
e^{−λ_k u}), and in σ = log t (step 1/4) from t = e^{−20} to t w_min = 50, the nodes below e^{−20}
summed in closed form. A level with one weight needs no trapezoid in t: with x = e^{−tw} the integrand
is a polynomial of degree < k in x, and Gauss-Legendre with ⌈k/2⌉ nodes is exact. Both trapezoid rules
converge geometrically, and the trapezoid theorem for integrands analytic in a strip gives a bound
relative to F(y) for every token, hence on the L1 error (:func:`quadrature_error`; the default step
keeps it below 1e-13). :attr:`LuceLaw.error` adds float rounding and the tails left out. The tests check
the law against exact enumeration of every tuple (n <= 7) within that bound.

Shapes: n tokens; U u-nodes, T t-nodes. See Luce, "Individual Choice Behavior" (1959), and for the race
Hu et al., "Towards Optimal Multi-draft Speculative Decoding", ICLR 2025.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from mdsd.cumsum import cumsum
from mdsd.race import suffix_mass

__all__ = [
    "LuceLaw",
    "luce_law",
    "luce_hits",
    "merge_levels",
    "quadrature_error",
    "default_step",
    "light_tokens",
    "GROUP",
    "PAIR_WEIGHTS",
]

TARGET = 1e-13  # the default step keeps the trapezoid bound (quadrature_error) below this
_STEPS = (0.25, 0.2, 0.18, 0.16, 0.14, 0.125, 0.1, 0.08, 0.0625)  # steps tried by default_step, largest first
GROUP = 16  # least number of light tokens in one level for them to be summed as groups (one per weight)
_THETA = 40.0  # q u above which a token counts as arrived (e^-40 ~ 4e-18 left out)
_LEFT = 1e-17  # mass left out below the first u-node (bound u^(k+1))
T_STEP = 0.25  # trapezoid step in log t: relative error below 2e-15 (quadrature_error's t-part)
_T_LOW = -20.0  # log t of the first t-node; the nodes below are summed in closed form
_TAIL = 50.0  # integrate until rate · time = 50 (e^-50 · 50^k / k! left out)
_LIGHT = 0.5  # a token with q u <= this on the whole u-grid may be summed in a group
_TERMS = 28  # series terms in q u: (k/2)^28 / 28! < 1e-20 for k <= 8
_BLOCK = 1 << 16  # node × token entries per vectorised block (times 2k coefficients)
_CHUNK = 512  # groups whose moments are formed at once ([_CHUNK, terms, U] powers)
PAIR_WEIGHTS = 4096  # most distinct weights in one level for k = 2's closed form (d² shares per level)
_ROUNDING = 5e-14  # float64 rounding of the node values (exponents up to ~700) and sums, and the tails
# Nilpotent monomials of a product's coefficients: 0 = 1, 1 = ζ (the k-th other arrival), 2 = η (a marked
# arrival, for residual hits), 3 = ζη. _TIMES[m] lists (a, b, c) with monomial a × b = c, for m monomials.
_TIMES = {
    2: ((0, 0, 0), (0, 1, 1), (1, 0, 1)),
    4: ((0, 0, 0), (0, 1, 1), (1, 0, 1), (0, 2, 2), (2, 0, 2), (0, 3, 3), (3, 0, 3), (1, 2, 3), (2, 1, 3)),
}


@dataclass(frozen=True)
class LuceLaw:
    """The selection law of a Luce rule with levels, and how sure it is.

    Attributes
    ----------
    law : ndarray [n]
        F(y) = P(y is selected), 0 where q = 0.
    error : float
        Bound on Σ_y |F̂(y) − F(y)|: :func:`quadrature_error` at the step used, plus rounding and tails.
    nodes : int
        Quadrature nodes: u-nodes plus the (u, t) nodes of every level that integrates over t.
    """

    law: np.ndarray
    error: float
    nodes: int


def quadrature_error(step: float, k: int) -> float:
    r"""Bound on the relative error of the infinite trapezoid rules of step h in log u and :data:`T_STEP`
    in log t.

    Trapezoid theorem (Trefethen & Weideman 2014, Thm 5.1): an integrand analytic in |Im s| < a has
    error <= 2 M_d / (e^{2πd/h} − 1) for d < a, M_d = sup_{|Im s| <= d} ∫|f|. Every term of the law's
    integrand is a product of factors 1 − e^{−qu}, e^{−qu} and q e^{−qu}; on Im s = φ (c = cos φ),
    |1 − e^{−w}| <= min(|w|, 2) <= C/c · (1 − e^{−c|w|}) with C = 2/(1 − 1/e), so with k arrival factors,
    the density's 1/c and the measure's 1/c, M_φ <= (C/c)^k c^{−2} F(y). In t the integrand is a positive
    mixture of e^{−tW} t, analytic for |Im σ| < π/2 with M_d = F(y)/cos d. Hence

    .. math:: \frac{|\hat F(y) - F(y)|}{F(y)} \le \min_\varphi \frac{2 (C/\cos\varphi)^k}
              {\cos^2\varphi\,(e^{2\pi\varphi/h} - 1)} + \min_d \frac{2}{\cos d\,(e^{2\pi d/h_t} - 1)},

    and Σ_y F(y) = 1 makes it a bound on the L1 error too.

    >>> quadrature_error(0.18, 4) < 1e-14
    True
    """
    angle = np.linspace(0.01, 1.56, 311)
    c = np.cos(angle)
    growth = np.expm1(np.minimum(2.0 * np.pi * angle / step, 700.0))
    in_u = float((2.0 * (2.0 / (1.0 - math.exp(-1.0)) / c) ** k / c**2 / growth).min())
    in_t = float((2.0 / c / np.expm1(np.minimum(2.0 * np.pi * angle / T_STEP, 700.0))).min())
    return in_u + in_t


def default_step(k: int) -> float:
    """The largest step of a fixed menu whose :func:`quadrature_error` is below 1e-13.

    >>> default_step(2), default_step(4)
    (0.2, 0.18)
    """
    return next((h for h in _STEPS if quadrature_error(h, k) <= TARGET), _STEPS[-1])


# -- polynomials mod (z^k, ζ², η²) over nodes ---------------------------------------------------------------
# A product of token factors is a triple (scale, shift, C): exp(scale) · z^shift · Σ_{a, c} C[a, c] μ_a z^c
# with μ_a the monomials above; scale, shift [...], C [M, k, ...].


def _stirling_series(k: int, terms: int) -> np.ndarray:
    """γ[r, n] = r! S(n, r) / n!, so that (e^x − 1)^r = Σ_n γ[r, n] x^n: [k + 1, terms]."""
    stirling = np.zeros((terms, k + 1))
    stirling[0, 0] = 1.0
    for n in range(1, terms):
        for r in range(1, min(n, k) + 1):
            stirling[n, r] = r * stirling[n - 1, r] + stirling[n - 1, r - 1]
    fact = np.array([float(math.factorial(r)) for r in range(k + 1)])
    inv = np.array([1.0 / math.factorial(n) for n in range(terms)])
    return (stirling * fact[None, :] * inv[:, None]).T


def _multiply(a, b, k: int):
    """The product of two polynomials (scale, shift, C)."""
    ca, cb = a[2], b[2]
    out = np.zeros((ca.shape[0], k, *np.broadcast_shapes(ca.shape[2:], cb.shape[2:])))
    for x, y, z in _TIMES[ca.shape[0]]:
        for c in range(k):
            for i in range(c + 1):
                out[z, c] += ca[x, i] * cb[y, c - i]
    return a[0] + b[0], a[1] + b[1], out


def _top(poly, k: int, monomial: int) -> np.ndarray:
    """[z^{k−1} μ] of a polynomial, scale applied: a plain array."""
    scale, shift, coef = poly
    need = k - 1 - shift
    out = np.zeros(np.broadcast_shapes(np.shape(scale), np.shape(need), coef.shape[2:]))
    for c in range(k):
        out = np.where(need == c, coef[monomial, c], out)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(need >= 0, np.exp(scale) * out, 0.0)


def _top_product(a, b, k: int, monomial: int) -> np.ndarray:
    """[z^{k−1} μ] (a × b) without forming the product: a plain array."""
    scale, need = a[0] + b[0], k - 1 - (a[1] + b[1])
    pairs = [(x, y) for x, y, z in _TIMES[a[2].shape[0]] if z == monomial]
    out = np.zeros(np.broadcast_shapes(np.shape(scale), np.shape(need), a[2].shape[2:], b[2].shape[2:]))
    for d in range(k):
        at = need == d
        if not np.any(at):
            continue
        value = sum(a[2][x, i] * b[2][y, d - i] for x, y in pairs for i in range(d + 1))
        out = np.where(at, value, out)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(need >= 0, np.exp(scale) * out, 0.0)


def _tops_times(poly, factor, k: int, monomials: tuple[int, ...]) -> np.ndarray:
    """[z^{k−1} μ] (poly × factor) for each monomial μ, scales not applied: [S, ..., n], for a polynomial
    [..., n] and a ``factor`` [..., 1] constant along the last axis. Per order shortfall d of poly, one
    matrix product of poly's M k coefficient rows [..., M k, n] with the factor's weights [..., S, M k]."""
    _, shift, coef = poly
    rows = coef.shape[0] * k
    need = k - 1 - (shift + factor[1])
    a = np.moveaxis(coef.reshape(rows, *coef.shape[2:]), 0, -2)  # [..., M k, n]
    lead = a.shape[:-2]
    out = np.zeros((len(monomials), *np.broadcast_shapes(need.shape, coef.shape[2:])))
    least, high = int(need.min()), int(need.max())
    for d in range(max(least, 0), high + 1):
        w = np.zeros((*lead, len(monomials), coef.shape[0], k))
        for s, monomial in enumerate(monomials):
            for x, y, z in _TIMES[coef.shape[0]]:
                if z == monomial:
                    for i in range(d + 1):
                        w[..., s, x, i] += factor[2][y, d - i][..., 0]
        value = np.moveaxis(w.reshape(*lead, len(monomials), rows) @ a, -2, 0)  # [S, ..., n]
        out = value if least == high else np.where(need == d, value, out)
    return out


def _above(poly, exponent: np.ndarray, mass: np.ndarray):
    """``poly`` times the tokens of the levels above, of total q ``mass``, none arrived by u:
    e^{−u Q} (1 + Q ζ), ``exponent`` = u Q (only the ζ-free monomials gain a ζ term)."""
    scale, shift, coef = poly
    coef = coef.copy()
    coef[1] += mass * coef[0]
    if coef.shape[0] == 4:
        coef[3] += mass * coef[2]
    return scale - exponent, shift, coef


def _scan(q: np.ndarray, u: np.ndarray, tw, marks, k: int, monomials: int, reverse: bool, start=None):
    """Products of the token factors b + a (1 + r η) z + q b ζ over the tokens before position j (reverse:
    from j on), for q [m] at nodes u, tw = t·w (broadcasting to [..., m]): polynomials [..., m + 1],
    times the polynomial ``start`` [...] if given.

    A token with q u > θ has surely arrived: factor a (1 + r η) z. Otherwise b (1 + ρ z + q ζ + ρ r z η)
    with ρ = (e^{qu} − 1) e^{−tw}. One cumulative sum of positive terms per order and monomial.
    """
    qu = q * u
    qu = np.broadcast_to(qu, np.broadcast_shapes(qu.shape, np.shape(tw)))
    sure = qu > _THETA
    any_sure = bool(sure.any())
    decay = 1.0 if np.ndim(tw) == 0 and tw == 0.0 else np.exp(-tw)
    if any_sure:
        with np.errstate(divide="ignore"):
            scale = np.where(sure, np.log(-np.expm1(-qu)) - tw, -qu)
        rho = np.where(sure, 0.0, np.expm1(np.minimum(qu, _THETA)) * decay)
        kap = np.where(sure, 0.0, np.broadcast_to(q, rho.shape))
    else:  # the common case, without the masks
        scale, rho, kap = -qu, np.expm1(qu) * decay, np.broadcast_to(q, qu.shape)
    shift = sure.astype(np.int64)
    sig = rr = None
    if monomials == 4:  # a marked token: surely arrived σ = r, else ρ r z η
        sig, rr = np.where(sure, marks, 0.0), np.where(sure, 0.0, rho * marks)
    if reverse:
        scale, shift, rho, kap = scale[..., ::-1], shift[..., ::-1], rho[..., ::-1], kap[..., ::-1]
        if monomials == 4:
            sig, rr = sig[..., ::-1], rr[..., ::-1]
    coef = np.zeros((monomials, k, *rho.shape[:-1], rho.shape[-1] + 1))
    scale_sum = np.zeros((*scale.shape[:-1], scale.shape[-1] + 1))
    shift_sum = np.zeros((*shift.shape[:-1], shift.shape[-1] + 1), dtype=np.int64)
    if start is None:
        coef[0, 0] = 1.0
    else:
        coef[..., 0] = start[2]
        coef[0, 0] = coef[0, 0][..., :1]  # [z^0] of a factor is 1: the start's constant term throughout
        scale_sum[..., 0], shift_sum[..., 0] = start[0], start[1]

    def run(x: int, c: int, step: np.ndarray) -> None:  # coef[x, c] from its start by the increments
        cumsum(step, out=coef[x, c][..., 1:])
        coef[x, c][..., 1:] += coef[x, c][..., :1]

    for c in range(k):
        if c:
            run(0, c, rho * coef[0, c - 1][..., :-1])
        run(1, c, kap * coef[0, c][..., :-1] + (rho * coef[1, c - 1][..., :-1] if c else 0.0))
        if monomials == 4:  # η: a surely arrived marked token (σ), or a marked arrival ρ r z
            marked = sig * coef[0, c][..., :-1]
            both = sig * coef[1, c][..., :-1]
            if c:
                marked = marked + rho * coef[2, c - 1][..., :-1] + rr * coef[0, c - 1][..., :-1]
                both = both + rho * coef[3, c - 1][..., :-1] + rr * coef[1, c - 1][..., :-1]
            run(2, c, marked)
            run(3, c, both + kap * coef[2, c][..., :-1])
    cumsum(scale, out=scale_sum[..., 1:])
    scale_sum[..., 1:] += scale_sum[..., :1]
    if any_sure:
        cumsum(shift, out=shift_sum[..., 1:])
    shift_sum[..., 1:] += shift_sum[..., :1]
    if reverse:
        return scale_sum[..., ::-1], shift_sum[..., ::-1], coef[..., ::-1]
    return scale_sum, shift_sum, coef


# -- groups of light tokens ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Groups:
    """Light tokens of one (level, weight), summed by power series: per group its level, log-weight,
    largest q (scale), mass and power sums Σ (q/scale)^n (marked: Σ r (q/scale)^n)."""

    level: np.ndarray  # [G]
    log_weight: np.ndarray  # [G]
    scale: np.ndarray  # [G]
    mass: np.ndarray  # [G]
    power: np.ndarray  # [G, terms]
    marked: np.ndarray | None  # [G, terms]


def _group_log(
    groups: _Groups, which: slice, u: np.ndarray, gamma: np.ndarray, k: int, monomials: int, damp=None
):
    """Coefficients of log Π_{i ∈ g} (1 + ρ_i z + q_i ζ + ρ_i r_i z η) at nodes u [U]: per group [M, k, U, G]
    with ρ = e^{qu} − 1, or, given damp [k, T, G] = e^{−r t w_g}, summed over the groups [M, k, U, T].

    log(1 + ρz) = Σ_r (−1)^{r+1} Σρ^r z^r / r; ζ part q / (1 + ρz); η part ρ r z / (1 + ρ z); ζη part
    −q ρ r z / (1 + ρz)². Sums of (e^{qu} − 1)^r are Σ_n γ[r, n] u^n Σ q^n (Stirling series).
    """
    x = groups.scale[which] * u[:, None]  # [U, G], at most 1/2
    series = x[..., None] ** np.arange(_TERMS)  # [U, G, n]
    gk = gamma[:k].T  # [n, k]

    def moments(power):  # Σ_n γ[r, n] x^n power[g, n]: [k, U, G]
        return np.moveaxis((series * power) @ gk, -1, 0)

    shifted = np.concatenate([groups.power[which, 1:], np.zeros((x.shape[1], 1))], axis=1)
    sums = [moments(groups.power[which]), moments(shifted) * groups.scale[which]]  # Σ ρ^r, Σ q ρ^r
    if monomials == 4:
        marked = groups.marked[which]
        shifted = np.concatenate([marked[:, 1:], np.zeros((x.shape[1], 1))], axis=1)
        sums += [moments(marked), moments(shifted) * groups.scale[which]]  # Σ r ρ^r, Σ q r ρ^r
    if damp is not None:  # Σ_g e^{−r t w_g} (...)_g: one matrix product per order r
        sums = [s @ np.swapaxes(damp, 1, 2) for s in sums]
    r = np.arange(k).reshape((k,) + (1,) * (sums[0].ndim - 1))
    alt = np.where(r % 2 == 1, 1.0, -1.0)  # (−1)^{r+1}
    out = np.zeros((monomials, *sums[0].shape))
    out[0] = np.where(r > 0, alt / np.maximum(r, 1), 0.0) * sums[0]
    out[1] = -alt * sums[1]
    if monomials == 4:
        out[2] = np.where(r > 0, alt, 0.0) * sums[2]
        out[3] = -np.where(r > 0, alt * r, 0.0) * sums[3]
    return out


def _exp(scale, log_coef: np.ndarray, k: int):
    """exp(scale + L(z) + ζ M(z) + η N(z) + ζη O(z)) mod (z^k, ζ², η²) as a polynomial (shift 0):
    e^L (1 + ζ M + η N + ζη (M N + O))."""
    monomials = log_coef.shape[0]
    e = np.zeros(log_coef.shape[1:])
    e[0] = 1.0
    for c in range(1, k):
        e[c] = sum(r * log_coef[0, r] * e[c - r] for r in range(1, c + 1)) / c

    def times(a, b):
        return np.stack([sum(a[r] * b[c - r] for r in range(c + 1)) for c in range(k)])

    coef = [e, times(e, log_coef[1])]
    if monomials == 4:
        coef += [times(e, log_coef[2]), times(e, times(log_coef[1], log_coef[2]) + log_coef[3])]
    scale = np.broadcast_to(scale, e.shape[1:])
    return scale, np.zeros(scale.shape, dtype=np.int64), np.stack(coef)


def _series(cz: np.ndarray, c0: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Σ_n x^n cz[.., n] − Σ_n x^(n+1) c0[.., n] for the members' x = q / scale [m] (Horner; cz, c0 [n] or
    [m, n])."""
    out = np.zeros_like(x)
    for n in range(cz.shape[-1] - 1, -1, -1):
        out = out * x + cz[..., n] - x * c0[..., n]
    return out


# -- the integrals ------------------------------------------------------------------------------------------


def _u_grid(q: np.ndarray, k: int, h: float) -> np.ndarray:
    """log u nodes [U] from u^{k+1} ~ 1e-17 to λ_k u = 50, λ_k = q outside the k most likely."""
    rest = np.sort(q)[: max(q.size - k, 0)].sum()  # summed from the smallest: no cancellation
    s_min = math.log((_LEFT * math.factorial(k + 1)) ** (1.0 / (k + 1)))
    tail = math.log(50.0 + 3.0 * k)
    s_max = tail if rest == 0.0 else max(math.log(_TAIL / rest), tail)  # rest = 0: k tokens, always drafted
    return s_min + h * np.arange(math.ceil((s_max - s_min) / h) + 1)


def light_tokens(q: np.ndarray, k: int) -> np.ndarray:
    """Tokens [n] bool whose q u stays below 1/2 on the u-grid of k drafts from q: the tokens that
    :func:`luce_law` sums as groups (one per weight) in a level holding :data:`GROUP` or more of them.

    >>> light_tokens(np.array([0.5, 0.3, 0.2 - 1e-4, 1e-4]), 2).tolist()  # u reaches 50 / 0.2 = 250
    [False, False, False, True]
    """
    s = _u_grid(q[q > 0], k, default_step(k))
    return (q > 0) & (q * math.exp(s[-1]) <= _LIGHT)


def _t_rule(log_w: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes t [T] and weights [T] for ∫_0^∞ dt of a level with weights exp(log_w) (max 1).

    One weight: Gauss-Legendre in x = e^{−t} with ⌈k/2⌉ nodes, exact (the integrand is a polynomial of
    degree < k in x). Several: the trapezoid rule of step :data:`T_STEP` in σ = log t from σ_0 = −20,
    the nodes below σ_0 summed as f(0) h e^{σ_0} / (e^h − 1) (a node at t = 0; f(t) = f(0) + O(t) with
    |f'| <= k f, so the remainder is below k e^{2σ_0} relative).
    """
    if np.all(log_w == 0.0):
        x, w = np.polynomial.legendre.leggauss(max(1, (k + 1) // 2))
        x, w = (x + 1.0) / 2.0, w / 2.0
        return -np.log(x), w / x
    high = math.log(_TAIL) - float(log_w.min())
    t = np.exp(_T_LOW + T_STEP * np.arange(math.ceil((high - _T_LOW) / T_STEP) + 1))
    tail = T_STEP * math.exp(_T_LOW) / math.expm1(T_STEP)
    return np.r_[0.0, t], np.r_[tail, T_STEP * t]


def _float_key(x: np.ndarray) -> torch.Tensor:
    """int64 keys [m] ordered as the float64 values x [m] (no NaN; −0 as +0): the bits, negatives flipped."""
    bits = (x + 0.0).view(np.int64)
    return torch.from_numpy(bits ^ ((bits >> 63) & np.int64(0x7FFFFFFFFFFFFFFF)))


def _lexsort(*keys: np.ndarray) -> np.ndarray:
    """Indices sorting by the last key, then the one before, ... (ties in index order): ``np.lexsort(keys)``
    for float64 and integer keys, by one stable radix sort of int64 keys per key (about 5× faster here)."""
    order = np.arange(keys[0].size)
    for key in keys:
        value = key[order]
        ranked = torch.from_numpy(value.astype(np.int64)) if value.dtype.kind in "iu" else _float_key(value)
        order = order[torch.sort(ranked, stable=True).indices.numpy()]
    return order


@dataclass(frozen=True)
class _Problem:
    """The support sorted by (level, q descending), split into explicit tokens and groups."""

    k: int
    u: np.ndarray  # [U]
    h: float
    monomials: int
    tokens: np.ndarray  # [m] positions in the caller's arrays
    grouped: np.ndarray  # [m] bool
    gid: np.ndarray  # [m] group of a grouped token, else −1
    level: np.ndarray  # [m]
    q: np.ndarray  # [m]
    log_weight: np.ndarray  # [m]
    marks: np.ndarray  # [m] residual marks r (zeros for the law)
    groups: _Groups
    gamma: np.ndarray


def _problem(q, level, log_weight, k, h, group, marks) -> _Problem:
    """Sort the support by (level, weight, q descending) and split it into explicit tokens and groups."""
    support = np.flatnonzero(q > 0)
    s = _u_grid(q[support], k, h)
    tokens = support[np.argsort(level[support], kind="stable")]  # then (weight, q descending) within levels:
    lev = level[tokens]  # only the levels of several tokens need it (most levels hold one)
    shared = np.r_[lev[1:] == lev[:-1], False] | np.r_[False, lev[1:] == lev[:-1]]
    sub = tokens[shared]
    tokens[shared] = sub[_lexsort(-q[sub], log_weight[sub], level[sub])]
    qs, lev, lw = q[tokens], level[tokens], log_weight[tokens]
    r = np.zeros(qs.size) if marks is None else marks[tokens]
    light = qs * math.exp(s[-1]) <= _LIGHT
    run = np.cumsum(np.r_[True, (np.diff(lev) != 0) | (np.diff(lw) != 0)]) - 1  # one (level, weight)
    lev_id = np.cumsum(np.r_[True, np.diff(lev) != 0]) - 1
    grouped = light & (np.bincount(lev_id[light], minlength=lev_id[-1] + 1)[lev_id] >= group)
    gid = np.full(qs.size, -1)
    _, gid[grouped] = np.unique(run[grouped], return_inverse=True)
    starts = np.flatnonzero(np.r_[True, np.diff(gid[grouped]) != 0]) if grouped.any() else np.zeros(0, int)
    member_q = qs[grouped]
    scale = member_q[starts] if starts.size else np.zeros(0)  # the first member has the largest q
    mass = np.add.reduceat(member_q, starts) if starts.size else np.zeros(0)
    power, marked = (
        np.zeros((starts.size, _TERMS)),
        None if marks is None else np.zeros((starts.size, _TERMS)),
    )
    if starts.size:  # Σ (q/scale)^n per group, one product and one segmented sum per power
        ratio, term = member_q / scale[gid[grouped]], np.ones(member_q.size)
        for n in range(_TERMS):
            power[:, n] = np.add.reduceat(term, starts)
            if marked is not None:
                marked[:, n] = np.add.reduceat(r[grouped] * term, starts)
            term = term * ratio
    groups = _Groups(lev[grouped][starts], lw[grouped][starts], scale, mass, power, marked)
    monomials = 2 if marks is None else 4
    return _Problem(
        k, np.exp(s), h, monomials, tokens, grouped, gid, lev, qs, lw, r, groups, _stirling_series(k, _TERMS)
    )


@dataclass(frozen=True)
class _Levels:
    """Where each level sits: its explicit tokens [xa, xb), its groups [ga, gb), the mass above it, and
    the t-rule of the levels that integrate over t (nodes, weights, the level's largest log-weight)."""

    explicit: np.ndarray  # [nx] sorted positions of the explicit tokens
    higher: np.ndarray  # [L]
    xa: np.ndarray
    xb: np.ndarray
    ga: np.ndarray
    gb: np.ndarray
    singles: np.ndarray  # levels holding one explicit token and no group (no t)
    rules: dict  # level index -> (t [T], weights [T], top log-weight)


def _levels(pb: _Problem, only: np.ndarray | None) -> _Levels:
    explicit = np.flatnonzero(~pb.grouped)
    xlev, gr = pb.level[explicit], pb.groups
    levels = np.unique(pb.level)
    before = np.concatenate([[0.0], np.cumsum(pb.q)])  # mass of the tokens before each sorted position
    higher = before[np.searchsorted(pb.level, levels, side="left")]
    xa, xb = np.searchsorted(xlev, levels, side="left"), np.searchsorted(xlev, levels, side="right")
    ga, gb = np.searchsorted(gr.level, levels, side="left"), np.searchsorted(gr.level, levels, side="right")
    single = (xb - xa == 1) & (ga == gb)
    wanted = np.ones(levels.size, dtype=bool) if only is None else np.isin(levels, only)
    rules = {}
    for i in np.flatnonzero(wanted & ~single):
        lw = np.concatenate([pb.log_weight[explicit[xa[i] : xb[i]]], gr.log_weight[ga[i] : gb[i]]])
        rules[int(i)] = (*_t_rule(lw - lw.max(), pb.k), lw.max())
    return _Levels(explicit, higher, xa, xb, ga, gb, np.flatnonzero(wanted & single), rules)


class _Integrator:
    """The per-token integrals of w a_y [z^{k−1} μ] Π_{i ≠ y} over (u, t): F(y) for μ = ζ, the marked
    integral for μ = ζη, accumulated over blocks of u-nodes (the products over lower levels change with u)."""

    def __init__(self, pb: _Problem, only: np.ndarray | None) -> None:
        self.pb, self.lv = pb, _levels(pb, only)
        self.target, self.base = (1, 0) if pb.monomials == 2 else (3, 2)  # μ, and μ without ζ
        self.result = np.zeros(pb.q.size)
        self.psi = {i: np.zeros((2, self.lv.gb[i] - self.lv.ga[i], pb.k, pb.u.size)) for i in self.lv.rules}
        self.decay = {}  # per level with groups: w_g [G] and e^{−r t w_g} [k + 1, T, G] (its t-nodes)
        for i, (t, _, top_w) in self.lv.rules.items():
            if self.lv.gb[i] > self.lv.ga[i]:
                wg = np.exp(pb.groups.log_weight[self.lv.ga[i] : self.lv.gb[i]] - top_w)
                rates = t[:, None] * wg[None, :]
                self.decay[i] = wg, np.exp(-np.arange(pb.k + 1)[:, None, None] * rates[None])
        ex = self.lv.explicit
        self.xq, self.xlw, self.xr = pb.q[ex], pb.log_weight[ex], pb.marks[ex]
        self.g_below = suffix_mass(pb.groups.mass)  # q of the groups from each on [G + 1], for every u-block

    @property
    def nodes(self) -> int:
        return self.pb.u.size * (1 + sum(rule[0].size for rule in self.lv.rules.values()))

    def run(self) -> np.ndarray:
        pb, lv = self.pb, self.lv
        width = max(1, _BLOCK // (lv.explicit.size + pb.groups.scale.size + 1))
        for start in range(0, pb.u.size, width):
            ub = slice(start, min(start + width, pb.u.size))
            self._block(ub)
        for i in lv.rules:
            self._group_values(i)
        return self.result

    def _block(self, ub: slice) -> None:
        """Every level's contribution at the u-nodes ub."""
        pb, lv, k = self.pb, self.lv, self.pb.k
        uu = pb.u[ub]
        self.lower = _scan(self.xq, uu[:, None], 0.0, self.xr, k, pb.monomials, reverse=True)
        g_log = _group_log(pb.groups, slice(None), uu, pb.gamma, k, pb.monomials)  # [M, k, Ub, G]
        tail = np.zeros(g_log.shape[:-1] + (1,))
        self.g_suffix = np.concatenate([cumsum(g_log[..., ::-1])[..., ::-1], tail], axis=-1)
        self.g_scale = -uu[:, None] * self.g_below[None, :]  # [Ub, G + 1]
        if lv.singles.size:  # one explicit token alone at its level: no t
            y = lv.xa[lv.singles]
            top = self._context_top(uu, lv.singles, y + 1)
            val = -np.expm1(-self.xq[y][None, :] * uu[:, None]) * top
            self.result[lv.explicit[y]] += (val * (uu * pb.h)[:, None]).sum(0)
        for i in lv.rules:
            ctx = self._context(uu, np.array([i]), np.array([lv.xb[i]]))
            ctx = tuple(a[..., 0] for a in ctx)  # [.., Ub]
            t = lv.rules[i][0]
            inner = max(1, _BLOCK // (t.size * (lv.xb[i] - lv.xa[i] + lv.gb[i] - lv.ga[i] + 1)))
            for a in range(0, uu.size, inner):
                sub = slice(a, min(a + inner, uu.size))
                self._level(i, uu[sub], tuple(x[..., sub, None] for x in ctx), ub.start + a)

    def _below(self, levels: np.ndarray, at: np.ndarray):
        """The tokens below the levels: the explicit ones from position ``at`` on, times the groups after
        the level (None where there are none, for every level): polynomials [.., Ub, L]."""
        lo_x = tuple(a[..., at] for a in self.lower)
        gb = self.lv.gb[levels]
        if np.all(gb == self.pb.groups.scale.size):
            return lo_x, None
        ids, inverse = np.unique(gb, return_inverse=True)  # many levels share the groups below them
        lo_g = _exp(self.g_scale[:, ids], self.g_suffix[..., ids], self.pb.k)
        return lo_x, tuple(a[..., inverse] for a in lo_g)

    def _context(self, uu: np.ndarray, levels: np.ndarray, at: np.ndarray):
        """Tokens of the levels above (none arrived: e^{−u Q_H}(1 + Q_H ζ)) times those below (from
        explicit position ``at`` on): a polynomial [.., Ub, L]."""
        lo_x, lo_g = self._below(levels, at)
        poly = _above(lo_x, uu[:, None] * self.lv.higher[levels][None, :], self.lv.higher[levels][None, :])
        return poly if lo_g is None else _multiply(poly, lo_g, self.pb.k)

    def _context_top(self, uu: np.ndarray, levels: np.ndarray, at: np.ndarray) -> np.ndarray:
        """[z^{k−1} μ] of :meth:`_context` at increasing explicit positions ``at``, not formed: [Ub, L].

        The levels above contribute e^{−u Q_H}(1 + Q_H ζ), so [μ](above · X) = e^{−u Q_H}([μ] X + Q_H [μ∖ζ] X)
        with X the tokens below. Levels sharing the groups below them sit at contiguous positions: each such
        run takes X's two coefficients over its range of positions at once (no per-level gather of X)."""
        pb, k = self.pb, self.pb.k
        mass, gb = self.lv.higher[levels], self.lv.gb[levels]
        out = np.empty((uu.size, levels.size))
        cuts = np.flatnonzero(np.r_[True, np.diff(gb) != 0, True])
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            lo, hi = at[a], at[b - 1] + 1
            scale, shift, coef = (x[..., lo:hi] for x in self.lower)
            poly = (np.zeros(()), shift, coef)  # the scale is applied below, once
            if gb[a] == pb.groups.scale.size:
                tops = [_top(poly, k, m) for m in (self.target, self.base)]
            else:
                g = slice(gb[a], gb[a] + 1)
                lo_g = _exp(np.zeros(()), self.g_suffix[..., g], k)
                tops = _tops_times(poly, lo_g, k, (self.target, self.base))
                scale = scale + self.g_scale[:, g]
            j, m = at[a:b] - lo, mass[a:b]
            out[:, a:b] = np.exp(scale[:, j] - uu[:, None] * m) * (tops[0][:, j] + m * tops[1][:, j])
        return out

    def _level(self, i: int, un: np.ndarray, ctx, u_first: int) -> None:
        """Level i at u-nodes un [Us] with its context [.., Us, 1]: explicit members' integrals, and the
        t-integrals psi of its groups' kernels w e^{−(m+1) t w} Φ_{k−1−m} (Φ the product over all)."""
        pb, lv, k = self.pb, self.lv, self.pb.k
        t, tw, top_w = lv.rules[i]
        members, groups = slice(lv.xa[i], lv.xb[i]), slice(lv.ga[i], lv.gb[i])
        wx = np.exp(self.xlw[members] - top_w)
        if lv.gb[i] > lv.ga[i]:
            wg, decay = self.decay[i]
            logs = _group_log(pb.groups, groups, un, pb.gamma, k, pb.monomials, decay[:k])  # [M, k, Us, T]
            ctx = _multiply(ctx, _exp(-un[:, None] * pb.groups.mass[groups].sum(), logs, k), k)
        tw_x = t[:, None] * wx[None, :]  # [T, nx]
        xq, xr = self.xq[members], self.xr[members]
        start = tuple(np.broadcast_to(x, x.shape[:-1] + (t.size,)) for x in ctx)  # [.., Us, T]
        pre = _scan(xq, un[:, None, None], tw_x, xr, k, pb.monomials, reverse=False, start=start)
        measure = (un * pb.h)[:, None] * tw[None, :]  # du dt = u h · (t-weight)  [Us, T]
        if lv.xb[i] > lv.xa[i]:
            suf = _scan(xq, un[:, None, None], tw_x, xr, k, pb.monomials, reverse=True)
            with np.errstate(divide="ignore"):
                log_wa = np.log(wx) + np.log(-np.expm1(-xq * un[:, None, None])) - tw_x
            loo = _top_product(
                tuple(x[..., :-1] for x in pre), tuple(x[..., 1:] for x in suf), k, self.target
            )
            val = np.exp(log_wa) * loo * measure[..., None]
            self.result[lv.explicit[members]] += val.sum((0, 1))
        if lv.gb[i] > lv.ga[i]:
            phi = tuple(x[..., -1] for x in pre)  # Φ: the product over every token [.., Us, T]
            nodes = slice(u_first, u_first + un.size)
            for which, monomial in ((0, self.target), (1, self.base)):
                for m in range(k):
                    v = _top((phi[0], phi[1] + m, phi[2]), k, monomial) * tw  # Φ_{k−1−m} dt [Us, T]
                    self.psi[i][which, :, m, nodes] = (v @ decay[m + 1]).T * wg[:, None]

    def _group_values(self, i: int) -> None:
        """Members of level i's groups: w Σ_m (−1)^m ρ^{m+1} (Φ^μ − (m+1) q Φ^{μ∖ζ})_{k−1−m}, as a power
        series in q per group (Stirling series of (e^{qu} − 1)^{m+1}), :data:`_CHUNK` groups at a time."""
        pb, k, u = self.pb, self.pb.k, self.pb.u
        sign = np.where(np.arange(k) % 2 == 0, 1.0, -1.0)
        gamma = pb.gamma[1 : k + 1]
        ga, gb = self.lv.ga[i], self.lv.gb[i]
        mine = np.flatnonzero((pb.gid >= ga) & (pb.gid < gb))
        for a in range(ga, gb, _CHUNK):
            b = min(a + _CHUNK, gb)
            scale = pb.groups.scale[a:b]
            x = scale[:, None] * u[None, :]
            powers = x[:, None, :] ** np.arange(_TERMS)[None, :, None]  # [G, n, U]
            moments = np.einsum("gnu,wgmu,u->wgmn", powers, self.psi[i][:, a - ga : b - ga], u * pb.h)
            cz = np.einsum("m,mn,gmn->gn", sign, gamma, moments[0])
            c0 = scale[:, None] * np.einsum("m,mn,gmn->gn", sign * np.arange(1, k + 1), gamma, moments[1])
            part = mine[(pb.gid[mine] >= a) & (pb.gid[mine] < b)]
            g = pb.gid[part] - a
            self.result[part] = _series(cz[g], c0[g], pb.q[part] / scale[g])


# -- two drafts in closed form ------------------------------------------------------------------------------


def _pair_terms(q: np.ndarray, level: np.ndarray, log_weight: np.ndarray):
    """(support, q/T, 1/r, q/r, share sums) for k = 2's closed form (module docstring), or None where a level
    holds more than :data:`PAIR_WEIGHTS` distinct weights. ``share sums`` maps a vector a [m] on the support
    to Σ_{z ≠ y} σ_yz a_z for every support token y."""
    support = np.flatnonzero(q > 0)
    qs, lev, lw = q[support], level[support], log_weight[support]
    total = qs.sum()
    top = int(np.argmax(qs))
    rest = total - qs  # every token but the likeliest holds at most half the mass: no cancellation
    rest[top] = np.delete(qs, top).sum()
    order = np.lexsort((lw, lev))  # by level, then weight
    lev_s, lw_s = lev[order], lw[order]
    new_level = np.r_[True, lev_s[1:] != lev_s[:-1]]
    new_class = new_level | np.r_[True, lw_s[1:] != lw_s[:-1]]
    level_id, class_id = np.cumsum(new_level) - 1, np.cumsum(new_class) - 1
    class_level = level_id[new_class]
    class_lw = lw_s[new_class]
    counts = np.bincount(class_level)
    if counts.max() > PAIR_WEIGHTS:
        return None
    multi = np.flatnonzero(counts > 1)
    first = np.r_[0, np.cumsum(counts)[:-1]]  # each level's first class

    # the likeliest token's share against each other token (1 below it, 0 above, by weight at its level)
    with np.errstate(over="ignore"):
        beside = 1.0 / (1.0 + np.exp(lw[top] - lw))
    to_top = np.where(lev[top] > lev, 1.0, np.where(lev[top] < lev, 0.0, beside))
    to_top[top] = 0.0

    def share_sums(a: np.ndarray) -> np.ndarray:
        # The likeliest token's terms are added apart: its q/r may be ~1/r_top, and its own sum must not
        # come from subtracting it from its class (r_top can be ~1e-9: that cancellation would show).
        a_top, a = a[top], a.copy()
        a[top] = 0.0
        a_s = a[order]
        per_class = np.bincount(class_id, weights=a_s)
        per_level = np.bincount(class_level, weights=per_class)
        below = np.r_[np.cumsum(per_level[::-1])[::-1][1:], 0.0]  # the levels after each
        same = np.zeros(per_class.size)  # Σ over the level's other weights of a · w_y / (w_y + w_z)
        with np.errstate(over="ignore"):
            for i in multi:
                c = slice(first[i], first[i] + counts[i])
                share = 1.0 / (1.0 + np.exp(class_lw[None, c] - class_lw[c, None]))
                np.fill_diagonal(share, 0.0)
                same[c] = share @ per_class[c]
        out = np.empty(a.size)
        out[order] = below[level_id] + same[class_id] + 0.5 * (per_class[class_id] - a_s)
        return out + to_top * a_top

    return support, qs / total, 1.0 / rest, qs / rest, share_sums


def _pair_selected(q, level, log_weight, marks=None) -> tuple[np.ndarray, np.ndarray] | None:
    """(support, per token y of it: Σ_z Q({y, z}) σ_yz m_z) for k = 2 in closed form (module docstring), the
    partner z weighted by ``marks`` m (none: 1, the law F); None where a level has too many weights."""
    terms = _pair_terms(q, level, log_weight)
    if terms is None:
        return None
    support, share, inv_rest, odds, sums = terms
    m = 1.0 if marks is None else marks[support]
    return support, share * (inv_rest * sums(m * q[support]) + sums(m * odds))


def _check_method(method: str) -> None:
    if method not in ("auto", "quadrature"):
        raise ValueError(f"method must be 'auto' or 'quadrature', got {method!r}")


# -- public -------------------------------------------------------------------------------------------------


def _check(q, level, log_weight, k):
    q = np.asarray(q, dtype=np.float64)
    level, log_weight = np.asarray(level), np.asarray(log_weight, dtype=np.float64)
    if q.ndim != 1 or level.shape != q.shape or log_weight.shape != q.shape:
        raise ValueError(
            f"q, level and log_weight must be vectors of one length; got {q.shape}, "
            f"{level.shape}, {log_weight.shape}"
        )
    if not np.all(np.isfinite(log_weight[q > 0])):
        raise ValueError("log_weight must be finite where q > 0")
    if np.count_nonzero(q) < k:
        raise ValueError(f"q must have at least k = {k} positive entries, got {np.count_nonzero(q)}")
    return q, level, log_weight


def luce_law(
    q: np.ndarray,
    level: np.ndarray,
    log_weight: np.ndarray,
    k: int,
    step: float | None = None,
    group: int = GROUP,
    only: np.ndarray | None = None,
    method: str = "auto",
) -> LuceLaw:
    """The law F of the Luce rule with levels (module docstring) for k drafts without replacement from q.

    Parameters
    ----------
    q : ndarray [n]
        Draft distribution (float64, at least k positive entries).
    level : ndarray [n] of int
        Priority level of each token, lower first; only the order of the values matters.
    log_weight : ndarray [n]
        log w(y), finite where q > 0; only differences within a level matter.
    k : int
        Drafts per step.
    step : float, optional
        Trapezoid step in log u (default :func:`default_step`; coarser is cheaper, and ``error`` says by
        how much the law may then be off). The step in log t is :data:`T_STEP` whatever this is.
    group : int
        Least number of light tokens in one level for them to be summed as groups, one per weight.
    only : ndarray of int, optional
        Levels to compute (the others come back 0): a solver adjusting some levels' weights.
    method : str
        ``"auto"``: k = 2 in closed form (where no level holds more than :data:`PAIR_WEIGHTS` distinct
        weights; ``step`` and ``group`` then play no part), else the quadrature; ``"quadrature"``: always
        the quadrature.

    Returns
    -------
    LuceLaw
        F [n] (0 where q = 0) and a bound on its L1 error (float rounding alone in closed form, with 0
        nodes).

    >>> from mdsd import WithoutReplacement
    >>> q, w = np.array([0.5, 0.3, 0.2]), np.array([1.0, 1.0, 2.0])
    >>> law = luce_law(q, np.zeros(3, dtype=int), np.log(w), 2).law
    >>> exact = np.zeros(3)
    >>> for x, prob in WithoutReplacement(2).joint(q).items():
    ...     exact[list(x)] += prob * w[list(x)] / w[list(x)].sum()
    >>> bool(np.abs(law - exact).max() < 1e-14)
    True
    """
    q, level, log_weight = _check(q, level, log_weight, k)
    _check_method(method)
    out = np.zeros(q.size)
    support = np.flatnonzero(q > 0)
    if support.size == k or k == 1:  # the drafts are the whole support, or one draw of q
        lev = level[support]
        top = lev == lev.min() if k > 1 else np.ones(support.size, dtype=bool)
        w = np.where(top, np.exp(log_weight[support] - log_weight[support][top].max()), 0.0)
        out[support] = q[support] if k == 1 else w / w.sum()
        return LuceLaw(out, 0.0, 0)
    if k == 2 and method == "auto":
        pair = _pair_selected(q, level, log_weight)
        if pair is not None:
            out[pair[0]] = pair[1]
            if only is not None:
                out[~np.isin(level, only)] = 0.0
            return LuceLaw(out, _ROUNDING, 0)
    h = default_step(k) if step is None else float(step)
    integrator = _Integrator(_problem(q, level, log_weight, k, h, group, None), only)
    out[integrator.pb.tokens] = integrator.run()
    return LuceLaw(out, quadrature_error(h, k) + _ROUNDING, integrator.nodes)


def luce_hits(
    q: np.ndarray,
    level: np.ndarray,
    log_weight: np.ndarray,
    k: int,
    reject: np.ndarray,
    residual: np.ndarray,
    step: float | None = None,
    group: int = GROUP,
    method: str = "auto",
) -> float:
    r"""Σ_z reject(z) E[1{z ∈ S} s(z | S) Σ_{y ∈ S ∖ z} residual(y)] for the Luce rule with levels.

    With reject = (1 − p/F)+ and residual = norm((p − F)+), this is the probability that the two-step verifier
    rejects its selection and the residual draw lands on another draft: the second term of its acceptance
    (:mod:`mdsd.verifiers.optimal.twostep`). Same integral as :func:`luce_law` with every arrived token marked
    by η residual(y) and the coefficient of ζη taken. ``reject`` and ``residual`` must not both be positive on
    one token. Its error is at most the law's, relative. ``method`` as :func:`luce_law`'s (k = 2 in closed
    form: the same sums with the marks).

    >>> q, level = np.array([0.5, 0.3, 0.2]), np.zeros(3, dtype=int)
    >>> hits = luce_hits(q, level, np.zeros(3), 2, np.array([1.0, 0, 0]), np.array([0, 1.0, 0]))
    >>> round(hits, 12)  # token 0 selected half the time when {0, 1} is drafted
    0.257142857143
    """
    q, level, log_weight = _check(q, level, log_weight, k)
    reject, residual = np.asarray(reject, dtype=np.float64), np.asarray(residual, dtype=np.float64)
    if np.any((reject > 0) & (residual > 0)):
        raise ValueError("reject and residual must not both be positive on a token")
    _check_method(method)
    if k == 1 or np.count_nonzero(q) == k:
        return float(_hits_by_sets(q, level, log_weight, k, reject, residual))
    if k == 2 and method == "auto":
        pair = _pair_selected(q, level, log_weight, residual)
        if pair is not None:
            return float(reject[pair[0]] @ pair[1])
    h = default_step(k) if step is None else float(step)
    kept = np.unique(level[(reject > 0) & (q > 0)])  # the levels whose selections may be rejected
    if kept.size == 0:
        return 0.0
    level, mine = merge_levels(level, kept), np.isin(level, kept)
    log_weight = np.where(mine, log_weight, 0.0)  # the others' weights do not matter
    integrator = _Integrator(_problem(q, level, log_weight, k, h, group, residual), np.unique(level[mine]))
    return float(reject[integrator.pb.tokens] @ integrator.run())


def merge_levels(level: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """Levels [n] with every run of levels between two ``kept`` ones merged into one.

    A level's law depends only on which tokens lie above it and which below, not on their levels or
    weights; merged (and given one weight), the light ones among them are summed as groups.

    >>> merge_levels(np.array([0, 1, 2, 3, 4, 4]), np.array([2])).tolist()
    [0, 0, 1, 2, 2, 2]
    """
    values = np.unique(level)
    keep = np.isin(values, kept)
    new = np.cumsum(keep | np.r_[True, keep[:-1]]) - 1  # a new id at each kept level and after it
    return new[np.searchsorted(values, level)]


def _hits_by_sets(q, level, log_weight, k, reject, residual) -> float:
    """luce_hits where the drafts are certain (the whole support) or single (k = 1: no other draft)."""
    if k == 1:
        return 0.0
    support = np.flatnonzero(q > 0)
    lev = level[support]
    top = lev == lev.min()
    w = np.where(top, np.exp(log_weight[support] - log_weight[support][top].max()), 0.0)
    share = w / w.sum()
    marks = residual[support]
    return float(sum(reject[z] * share[i] * (marks.sum() - marks[i]) for i, z in enumerate(support)))
