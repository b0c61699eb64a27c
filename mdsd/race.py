"""Drafts without replacement as an exponential race: Q(all k drafts in A) for every prefix A of the tokens.

Drawing k tokens without replacement from q is a race: token i arrives at time E_i / q_i with E_i ~ Exp(1)
i.i.d., and the drafts are the first k arrivals (Gumbel-top-k). The first k arrivals all lie in A iff the
k-th arrival inside A comes before the first arrival outside A, an Exp(λ) time with λ = q(V∖A). This module
computes that containment probability for all prefixes A_j (the first j tokens of a given order) at once:

- k = 2 in closed form from prefix sums (:func:`pair_containment`);
- any k by a quadrature of the race integral (:func:`race_containment`), with an error estimate;
- a lower bound from the masses of one set (:func:`containment_lower`), exact in floating point.

Every "1 − mass" is a sum of what remains (λ is summed from the tail), so entries of q spanning 1e-300..1
(denormals included) keep their digits. Used by :class:`mdsd.laws.WithoutReplacement`; see
docs/mathematics.md §1 and Hu et al., "Towards Optimal Multi-draft Speculative Decoding", ICLR 2025.
"""

from __future__ import annotations

import math

import numpy as np

from mdsd.cumsum import cumsum

__all__ = [
    "suffix_mass",
    "pair_weights",
    "pair_containment",
    "containment_lower",
    "race_containment",
    "default_step",
]

_LEFT = 1e-17  # the race integral left out below the first node (bound t^(k+1) / (k+1)!)
_TAIL = 45.0  # integrate to rate * t = 45: exp(-45) ~ 3e-20 is left out on the right
_SURE = 40.0  # a token with q t > _SURE has arrived by time t (e^-40 ~ 4e-18)
_CHUNK = 4  # quadrature nodes per vectorised block
_ROUNDING = 1e-14  # float64 rounding of the quadrature (up to 5e-15 seen against enumeration), added to the
# step-halving estimate


def suffix_mass(qs: np.ndarray) -> np.ndarray:
    """λ_j = q(V ∖ A_j) for every prefix length j = 0..n of qs [..., n]: [..., n + 1], summed from the end."""
    tail = cumsum(qs[..., ::-1])[..., ::-1]
    return np.concatenate([tail, np.zeros(qs.shape[:-1] + (1,))], axis=-1)


def pair_weights(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Additive per-token weights for two drafts without replacement, and the top mass, from q [..., n].

    Returns (weights [4, ..., n], q_top [...]): q, q off the top token, the second draw's odds
    q_i / q(V∖{i}) off the top token, and the indicator of the top token (the largest q, lowest index).
    Their sums over a set A, with λ = q(V∖A), give Q(both drafts in A) through :func:`pair_containment`.
    The top token's odds are never formed: q(V∖{top}) may be denormal and q_top over it overflow.
    Every other token has q_i ≤ 1/2, so its rest mass 1 − q_i ≥ 1/2 loses no digits.
    """
    top = np.argmax(q, axis=-1)[..., None]
    is_top = np.arange(q.shape[-1]) == top  # [..., n]
    off_top = np.where(is_top, 0.0, q)
    odds = np.where(is_top, 0.0, q / np.where(is_top, 1.0, 1.0 - q))
    q_top = np.take_along_axis(q, top, axis=-1)[..., 0]
    return np.stack([q, off_top, odds, is_top.astype(np.float64)]), q_top


def pair_containment(sums: np.ndarray, outside: np.ndarray, q_top: np.ndarray | float) -> np.ndarray:
    """Q(both drafts in A) from the sums over A of :func:`pair_weights` [4, ...] and λ = q(V∖A) [...].

    .. math:: Q(\\{x_1, x_2\\} \\subseteq A) = \\sum_{i \\in A} q_i \\frac{q(A) - q_i}{1 - q_i}
              = q(A) - \\lambda \\sum_{i \\in A} \\frac{q_i}{q(V \\setminus \\{i\\})},

    with the top token's term q_top λ / (q(A ∖ top) + λ) (a ratio ≤ 1, so nothing overflows).
    ``q_top`` broadcasts against ``outside`` (a scalar for one row, [..., 1] for rows of prefixes).

    >>> q = np.array([0.5, 0.3, 0.2])  # A = {0, 1}: 0.5 · 0.3/0.5 + 0.3 · 0.5/0.7
    >>> weights, q_top = pair_weights(q)
    >>> bool(abs(pair_containment(weights[:, :2].sum(-1), 0.2, q_top) - (0.3 + 0.15 / 0.7)) < 1e-15)
    True
    """
    inside, off_top, odds, top_in = sums
    rest = off_top + outside  # q(V ∖ top) when the top token is in A
    top_term = q_top * top_in * np.divide(outside, rest, out=np.zeros_like(rest), where=rest > 0)
    return np.clip(inside - outside * odds - top_term, 0.0, 1.0)


def containment_lower(a: np.ndarray, outside: float, k: int) -> float:
    """A lower bound on Q(all k drafts in A) from A's masses ``a`` [m] and λ = q(V∖A) alone.

    Given i earlier draws in A of mass m, the next draw lands in A with probability
    (q(A) − m) / (q(A) − m + λ), which decreases in m; m ≤ M_i, the i largest masses of A, gives

    .. math:: Q \\ge \\prod_{i < k} \\frac{r_i}{r_i + \\lambda}, \\qquad r_i = q(A) - M_i,

    where each r_i is summed from the masses it keeps (no cancellation).

    >>> q_a = np.array([0.5, 0.3])  # λ = 0.2: 0.8 · 0.3/0.5 ≤ Q = 0.5 · 0.3/0.5 + 0.3 · 0.5/0.7
    >>> round(containment_lower(q_a, 0.2, 2), 12)
    0.48
    """
    if np.count_nonzero(a) < k:
        return 0.0
    if outside <= 0:
        return 1.0
    split = a.size - (k - 1)
    parts = np.partition(a, split) if k > 1 else a
    top = np.sort(parts[split:])[::-1]  # the k − 1 largest masses, descending
    kept = np.concatenate([[0.0], np.cumsum(top[::-1])])[::-1]  # kept[i] = Σ top[i:], i = 0..k−1
    rest = parts[:split].sum() + kept
    return float(np.prod(rest / (rest + outside)))


def sure_threshold(k: int, n: int) -> float:
    """q t above which a token counts as arrived: 40, lowered so that (n e^θ)^(k−1) stays below 1e300.

    Raises ``ValueError`` when that would drop below 37 (then 1 − e^{−θ} is no longer 1 in float64).
    """
    theta = min(_SURE, 690.0 / max(k - 1, 1) - math.log(n + 1))
    if theta < 37.0:
        raise ValueError(f"k = {k} drafts without replacement over {n} tokens is beyond the dual's range")
    return theta


def default_step(k: int) -> float:
    """Trapezoid step in s = log t for k drafts: 0.25, less for k > 4 (the k-th arrival's law narrows like
    1/√k in log t); about 1e-13 from exact values, and half of it about 1e-14."""
    return 0.25 * min(1.0, math.sqrt(4.0 / k))


def _log_min_rate(qs: np.ndarray, lam: np.ndarray, k: int, live: np.ndarray) -> float:
    """log of a lower bound on min over live prefixes j of max(λ_j, k-th largest q in A_j).

    The integrand of prefix j decays like exp(−(that rate) t), which sets how far in t to integrate.
    Bisection on τ = 2^−e: some live prefix has both rates ≤ τ (λ falls and the count of q > τ grows with j,
    so the first live j with λ_j ≤ τ decides).
    """

    def reachable(e: int) -> bool:
        tau = math.ldexp(1.0, -e)
        js = np.flatnonzero(live & (lam <= tau))
        return js.size > 0 and np.count_nonzero(qs[: js[0]] > tau) < k

    lo, hi = 0, 1100  # reachable(0) holds (every rate is ≤ 1), reachable(1100) does not (2^-1100 = 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if reachable(mid) else (lo, mid)
    return -hi * math.log(2.0)


def _workspace(m: int, size: int) -> np.ndarray:
    """Buffers [7, m, size + 1] for :func:`_fewer_than_k` over blocks of at most m nodes and ``size``
    tokens, reused from block to block (fresh arrays of this size cost more in page faults than in sums)."""
    return np.empty((7, m, size + 1))


def _fewer_than_k(log_q: np.ndarray, s: np.ndarray, k: int, theta: float, work: np.ndarray) -> np.ndarray:
    """F_{A_j}(t) = P[fewer than k of the first j tokens arrived by t = e^s], all j = 0..J: [m, J + 1], a
    view of the buffers ``work`` (:func:`_workspace`), valid until their next use.

    Token i arrives by t with probability π_i = 1 − e^{−q_i t}. With w_i = e^{q_i t} − 1 = π_i / (1 − π_i),
    P[exactly c arrivals among A_j] = e^{−t q(A_j)} e_c(w over A_j), and the elementary symmetric sums obey
    e_c(j) = e_c(j − 1) + w_j e_{c−1}(j − 1): a cumulative sum per c, all terms positive. Tokens with
    q_i t > θ have surely arrived; they are counted apart so that e_c cannot overflow. q t is formed as
    exp(s + log q), so neither t nor q t overflows into a NaN.
    """
    m, size = s.size, log_q.size
    exponent, summed, e_c, e_next, need = (w[:m] for w in work[:5])
    tq, step = work[5][:m, :size], work[6][:m, :size]
    if s.max() < 700.0:  # t = e^s is finite and q ≤ 1: a product, cheaper than exp
        np.multiply(np.exp(s)[:, None], np.exp(log_q)[None, :], out=tq)  # [m, J]
    else:
        with np.errstate(over="ignore"):
            np.exp(s[:, None] + log_q[None, :], out=tq)  # inf where huge, 0 where q = 0
    sure = tq > theta
    any_sure = bool(sure.any())
    if any_sure:
        tq[sure] = 0.0
    exponent[:, 0] = 0.0  # t q(A_j) over the uncertain tokens
    cumsum(tq, out=exponent[:, 1:])
    w = np.expm1(tq, out=tq)
    if any_sure:  # fewer than k arrivals <=> at most k − 1 − (sure ones) others
        np.copyto(step, sure)
        need[:, 0] = 0.0
        cumsum(step, out=need[:, 1:])
        np.subtract(k - 1, need, out=need)
    summed.fill(1.0)  # Σ_{c ≤ need} e_c
    e_c.fill(1.0)
    for c in range(1, k):
        np.multiply(w, e_c[:, :-1], out=step)
        e_next[:, 0] = 0.0
        cumsum(step, out=e_next[:, 1:])
        e_c, e_next = e_next, e_c
        if any_sure:
            np.add(summed, e_c, out=summed, where=need >= c)
        else:
            summed += e_c
    np.log(summed, out=summed)
    summed -= exponent
    f = np.exp(summed, out=summed)
    if any_sure:
        f[need < 0] = 0.0
    return f


def race_containment(
    qs: np.ndarray, k: int, wanted: np.ndarray | None = None, step: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Q(first k draws without replacement all in A_j) for every prefix of qs [n]; with an error estimate.

    With F_A(t) = P[fewer than k tokens of A arrived by t] and φ(t) = P[Poisson(t) < k] (the same
    1 − O(t^k) start, and ∫ λ e^{−λt} (1 − φ) dt = (1 + λ)^{−k}),

    .. math:: Q(\\mathrm{set}(\\bar x) \\subseteq A)
              = \\int_0^\\infty \\lambda e^{-\\lambda t}(1 - F_A(t))\\,dt
              = (1 + \\lambda)^{-k} + \\int_{-\\infty}^{\\infty} \\lambda t e^{-\\lambda t}
                (\\varphi(t) - F_A(t))\\,ds, \\quad t = e^s.

    The last integrand vanishes like t^{k+1} on the left and exponentially on the right, and is analytic in
    s, so the trapezoid rule converges geometrically; the error estimate is |T_h − T_{2h}| (the same sum on
    every other node) plus float rounding. Everything runs in log space: q down to 5e-324 needs t to 1e325.

    Parameters
    ----------
    qs : ndarray [n]
        Draft probabilities in the prefix order (summing to 1).
    k : int
        Number of drafts, ≥ 1.
    wanted : bool ndarray [n + 1], optional
        Prefixes to integrate; the others come back as NaN unless exact anyway (Q = 0 when A_j holds fewer
        than k tokens, Q = 1 when λ = 0).
    step : float, optional
        Trapezoid step h in s (default :func:`default_step`; its estimate |T_h − T_{2h}| is then near 1e-6,
        far above the true error; at half the default step the estimate falls to about 1e-11).

    Returns
    -------
    (values [n + 1], errors [n + 1])

    >>> values, errors = race_containment(np.array([0.5, 0.3, 0.2]), 2, step=default_step(2) / 2)
    >>> bool(abs(values[2] - (0.5 * 0.3 / 0.5 + 0.3 * 0.5 / 0.7)) < 1e-14), bool(errors.max() < 1e-10)
    (True, True)
    """
    count = np.concatenate([[0], np.cumsum(qs > 0)])
    lam = suffix_mass(qs)
    errors = np.zeros(qs.size + 1)
    if k == 1:
        return np.minimum(np.concatenate([[0.0], np.cumsum(qs)]), 1.0), errors
    values = np.where(count >= k, 1.0, 0.0)  # exact where λ = 0 or A has fewer than k tokens
    live = (count >= k) & (lam > 0)
    if wanted is not None:
        values[live & ~wanted] = np.nan
        errors[live & ~wanted] = np.nan
        live &= wanted
    if not live.any():
        return values, errors
    js = np.flatnonzero(live)
    lo, hi = js[0], js[-1] + 1  # prefixes that need the integral
    tokens = qs[: hi - 1]  # the tokens that can lie in a live prefix
    theta = sure_threshold(k, tokens.size)
    h = default_step(k) if step is None else step
    s_min = math.log((_LEFT * math.factorial(k + 1)) ** (1.0 / (k + 1)))
    s_max = max(math.log(_TAIL) - _log_min_rate(qs, lam, k, live), math.log(50.0 + 3.0 * k))
    s = np.arange(s_min, s_max + h, h)
    with np.errstate(divide="ignore"):
        log_q = np.log(tokens)
        log_lam = np.log(lam[lo:hi])
    fine, coarse = np.zeros(hi - lo), np.zeros(hi - lo)
    log_factorial = np.array([math.lgamma(c + 1.0) for c in range(k)])
    work = _workspace(min(_CHUNK, s.size), tokens.size)
    for start in range(0, s.size, _CHUNK):
        block = s[start : start + _CHUNK]  # [m]
        f = _fewer_than_k(log_q, block, k, theta, work)[:, lo:hi]  # [m, hi − lo]
        with np.errstate(over="ignore"):
            t = np.exp(block)
            phi = np.exp(-t[:, None] + np.arange(k) * block[:, None] - log_factorial).sum(axis=-1)
            u = block[:, None] + log_lam  # log(λ t)
            weighted = np.exp(u - np.exp(u)) * (phi[:, None] - f)  # [m, hi − lo]
        fine += weighted.sum(axis=0)
        coarse += weighted[(start + np.arange(block.size)) % 2 == 0].sum(axis=0)
    base = np.exp(-k * np.log1p(lam[lo:hi]))
    integral = base + h * fine
    estimate = np.abs(integral - (base + 2.0 * h * coarse)) + _ROUNDING
    values[lo:hi] = np.where(live[lo:hi], np.clip(integral, 0.0, 1.0), values[lo:hi])
    errors[lo:hi] = np.where(live[lo:hi], estimate, errors[lo:hi])
    return values, errors
