"""The min-cut dual of the OTM problem, solved in O(n log n) by one sort and one scan.

Hu et al. ("Towards Optimal Multi-draft Speculative Decoding", ICLR 2025) show

.. math:: \\alpha^*(p, Q) = \\min_{A \\subseteq V} \\; p(A) + 1 - Q(\\mathrm{set}(\\bar x) \\subseteq A),

and that for i.i.d. drafts the minimising A is a prefix of the tokens sorted by p/q ascending. The same
prefix scan is used for drafts without replacement (checked against brute force in the tests).
Hub, Greedy and TopK laws have closed forms. Everything here is batched over leading axes:
p, q are [..., n] and values come back as [...]. See ../shared/MATH.md §1.
"""

from __future__ import annotations

import math

import numpy as np

from mdsd.laws import IID, DraftLaw, Greedy, Hub, TopK, WithoutReplacement, ranked

Items = list[tuple[str, int]]  # (law name, k) pairs
PREFIX_LAWS = (IID, WithoutReplacement)
CLOSED_FORM_LAWS = (Hub, Greedy, TopK)

_STEP = 0.25  # trapezoid step in s = log t (error ~1e-13 against enumeration; 0.3 gives ~1e-10)
_LEFT = 1e-14  # start where the integrand, below lam t^(k+1) / k!, is smaller than this
_TAIL = 45.0  # integrate to t = _TAIL / (smallest decay rate): exp(-45) ~ 3e-20 is left out
_CHUNK = 16  # quadrature nodes per vectorised block
_SURE = 40.0  # a token with q t > _SURE has arrived by time t (1 - exp(-40) == 1 in float64)


def prefix_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Token order by p/q ascending (q = 0 last), per row of [..., n]: the dual's prefix order.

    Ties may come in any order: the minimum over prefixes is the same (an exchange argument for i.i.d.
    drafts; checked against brute force with many ties for the other laws).
    """
    ratio = np.divide(p, q, out=np.full(p.shape, np.inf), where=q > 0)
    return np.argsort(ratio, axis=-1)


def _with_zero(x: np.ndarray) -> np.ndarray:
    """Prefix sums [..., n] -> [..., n + 1] with the empty prefix 0 in front."""
    return np.concatenate([np.zeros(x.shape[:-1] + (1,)), x], axis=-1)


def _suffix_mass(qs: np.ndarray) -> np.ndarray:
    """λ_j = q(V ∖ A_j) for every prefix length j = 0..n, summed from the tail (accurate when small)."""
    tail = np.cumsum(qs[..., ::-1], axis=-1)[..., ::-1]
    return np.concatenate([tail, np.zeros(qs.shape[:-1] + (1,))], axis=-1)


def iid_containment(qs: np.ndarray, k: int) -> np.ndarray:
    """Q(set(x̄) ⊆ A_j) = q(A_j)^k for i.i.d. drafts; qs [..., n] in prefix order -> [..., n + 1]."""
    return np.minimum(_with_zero(np.cumsum(qs, axis=-1)), 1.0) ** k


def draw_odds(q: np.ndarray) -> np.ndarray:
    """q_i / q(V ∖ {i}) per token of q [..., n]: the second draw's odds once token i is drawn.

    The denominator is 1 − q_i except for the largest token, whose rest mass is summed directly: when
    q_i is close to 1, 1 − q_i would miss the float rounding of Σ q (relative error ~1e-16 / (1 − q_i)).
    """
    rest = 1.0 - q
    top = np.argmax(q, axis=-1)[..., None]
    others = np.where(np.arange(q.shape[-1]) == top, 0.0, q).sum(axis=-1, keepdims=True)
    np.put_along_axis(rest, top, others, axis=-1)
    return np.divide(q, rest, out=np.zeros_like(q), where=rest > 0)


def wor2_containment(qs: np.ndarray) -> np.ndarray:
    """Q(both drafts in A_j) for two drafts without replacement; qs [..., n] -> [..., n + 1].

    .. math:: Q(\\{x_1, x_2\\} \\subseteq A) = q(A) - q(V \\setminus A) \\sum_{i \\in A} \\frac{q_i}{1 - q_i}.
    """
    odds = draw_odds(qs)
    inside = _with_zero(np.cumsum(qs, axis=-1))
    return np.clip(inside - _suffix_mass(qs) * _with_zero(np.cumsum(odds, axis=-1)), 0.0, 1.0)


def _min_decay(qs: np.ndarray, lam: np.ndarray, k: int, live: np.ndarray) -> float:
    """A lower bound on min over live prefixes j of max(λ_j, k-th largest q in A_j).

    The integrand of prefix j decays like exp(−(that rate)·t), which sets how far in t to integrate.
    """

    def reachable(tau: float) -> bool:  # some live prefix has both rates <= tau
        js = np.flatnonzero(live & (lam <= tau))
        return js.size > 0 and np.count_nonzero(qs[: js[0]] > tau) < k

    lo, hi = 0, 1100  # tau = 2^-e: reachable(1) holds, reachable(2^-1100 = 0) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if reachable(2.0**-mid):
            lo = mid
        else:
            hi = mid
    return 2.0**-hi


def sure_threshold(k: int, n: int) -> float:
    """q t above which a token counts as arrived: 40, lowered so that (n e^θ)^(k−1) stays below 1e300.

    Raises ``ValueError`` when that would drop below 37 (then 1 − e^{−θ} is no longer 1 in float64).
    """
    theta = min(_SURE, 690.0 / max(k - 1, 1) - math.log(n + 1))
    if theta < 37.0:
        raise ValueError(f"k = {k} drafts without replacement over {n} tokens is beyond the dual's range")
    return theta


def _fewer_than_k(tokens: np.ndarray, t: np.ndarray, k: int) -> np.ndarray:
    """F_{A_j}(t) = P[fewer than k of the first j tokens arrived by time t], all j = 0..J: [m, J + 1].

    Token i arrives by t with probability π_i = 1 − e^{−q_i t}. With w_i = e^{q_i t} − 1 = π_i / (1 − π_i),
    P[exactly c arrivals among A_j] = e^{−t q(A_j)} e_c(w over A_j), and the elementary symmetric sums obey
    e_c(j) = e_c(j − 1) + w_j e_{c−1}(j − 1): a cumulative sum per c. Tokens with q_i t > 40 have surely
    arrived; they are counted apart so that w stays small enough for e_c not to overflow.
    """
    m, size = t.shape[0], tokens.shape[-1]
    tq = t * tokens  # [m, J]
    sure = tq > sure_threshold(k, size)
    any_sure = bool(sure.any())
    if any_sure:
        tq[sure] = 0.0
    exponent = np.zeros((m, size + 1))  # t q(A_j) over the uncertain tokens
    np.cumsum(tq, axis=-1, out=exponent[:, 1:])
    w = np.expm1(tq, out=tq)
    need = np.full((m, size + 1), k - 1)  # fewer than k arrivals <=> at most k - 1 - (sure ones) others
    if any_sure:
        need[:, 1:] -= np.cumsum(sure, axis=-1)
    summed = np.ones((m, size + 1))  # Σ_{c <= need} e_c
    e_c = np.ones((m, size + 1))
    e_next = np.zeros((m, size + 1))
    for c in range(1, k):
        np.multiply(w, e_c[:, :-1], out=e_c[:, 1:])  # reuse the buffer: e_c is read before written
        np.cumsum(e_c[:, 1:], axis=-1, out=e_next[:, 1:])
        e_c, e_next = e_next, e_c
        e_c[:, 0] = 0.0
        summed += np.where(need >= c, e_c, 0.0) if any_sure else e_c
    with np.errstate(divide="ignore"):
        f = np.exp(np.log(summed) - exponent)
    if any_sure:
        f[need < 0] = 0.0
    return f


def wor_containment(qs: np.ndarray, k: int, wanted: np.ndarray | None = None) -> np.ndarray:
    """Q(first k draws without replacement all in A_j) for every prefix; qs [n] -> [n + 1].

    ``wanted`` (bool [n + 1]) limits the integral to those prefixes; the others come back as NaN
    unless they are exact anyway (Q = 0 when A_j holds fewer than k tokens, Q = 1 when λ = 0).

    Sampling without replacement is an exponential race (token i arrives at E_i / q_i, E_i ~ Exp(1));
    the first k arrivals lie in A iff the k-th arrival in A precedes the first arrival outside A, an
    Exp(λ) time with λ = q(V∖A). With F_A(t) = P[fewer than k tokens of A arrived by t],

    .. math:: Q(\\mathrm{set}(\\bar x) \\subseteq A)
              = \\int_0^\\infty \\lambda e^{-\\lambda t}(1 - F_A(t))\\,dt
              = \\Big(\\frac{1}{1 + \\lambda}\\Big)^k + \\int_{-\\infty}^{\\infty} \\lambda t e^{-\\lambda t}
                (\\varphi(t) - F_A(t))\\,ds, \\quad t = e^s,

    where φ(t) = P[Poisson(t) < k] has the same 1 − O(t^k) start as F_A and a known transform
    (∫ λ e^{−λt} (1 − φ) dt = (1 + λ)^{−k}). The last integrand vanishes like t^{k+1} on the left and
    exponentially on the right, so the trapezoid rule in s converges geometrically.
    F_{A_j}(t) for all prefixes at once: F = e^{−t q(A_j)} Σ_{c<k} e_c(w), the elementary symmetric
    sums of w_i = e^{q_i t} − 1 over the prefix, built by cumulative sums (all terms positive).

    >>> qs = np.array([0.5, 0.3, 0.2])
    >>> bool(abs(wor_containment(qs, 2)[2] - (0.5 * 0.3 / 0.5 + 0.3 * 0.5 / 0.7)) < 1e-12)
    True
    """
    count = np.concatenate([[0], np.cumsum(qs > 0)])
    lam = _suffix_mass(qs)
    if k == 1:
        return np.clip(1.0 - lam, 0.0, 1.0)
    out = np.where(count >= k, 1.0, 0.0)  # exact where λ = 0 or A has fewer than k tokens
    live = (count >= k) & (lam > 0)
    if wanted is not None:
        out[live & ~wanted] = np.nan
        live &= wanted
    if not live.any():
        return out
    rate = _min_decay(qs, lam, k, live)
    t_min = (_LEFT * math.factorial(k)) ** (1.0 / (k + 1))  # the integrand is below λ t^(k+1) / k!
    s = np.arange(math.log(t_min), math.log(_TAIL / min(rate, 1.0)) + _STEP, _STEP)
    poisson = [1.0 / math.factorial(c) for c in range(k)]
    js = np.flatnonzero(live)
    lo, hi = js[0], js[-1] + 1  # prefixes that need the integral
    lam_live = lam[lo:hi]
    total = np.zeros(hi - lo)
    tokens = qs[: hi - 1]  # the tokens that can lie in a live prefix
    for start in range(0, s.size, _CHUNK):
        t = np.exp(s[start : start + _CHUNK])[:, None]  # [m, 1]
        f = _fewer_than_k(tokens, t, k)[:, lo:hi]  # [m, hi - lo]
        phi = np.exp(-t) * np.polyval(poisson[::-1], t)  # P[Poisson(t) < k]
        weight = lam_live * t * np.exp(-lam_live * t)
        total += (weight * (phi - f)).sum(axis=0)
    integral = np.clip((1.0 + lam_live) ** -k + _STEP * total, 0.0, 1.0)
    out[lo:hi] = np.where(live[lo:hi], integral, out[lo:hi])
    return out


def _wor_lower(a: np.ndarray, k: int) -> float:
    """A lower bound on Q(k draws without replacement all in A) from A's masses ``a`` alone.

    Given i earlier draws in A, the next lands in A with probability (q(A) − m)/(1 − m), m their mass,
    which decreases in m; so m ≤ M_i (the i largest masses of A) gives Π_{i<k} (q(A) − M_i)/(1 − M_i).
    """
    if np.count_nonzero(a) < k:
        return 0.0
    inside = a.sum()
    top = np.concatenate([[0.0], np.cumsum(np.sort(np.partition(a, a.size - k + 1)[a.size - k + 1 :])[::-1])])
    left = 1.0 - top
    return float(np.prod(np.divide(inside - top, left, out=np.ones(k), where=left > 0).clip(0.0, 1.0)))


def _wor_gains(qs: np.ndarray, spent: np.ndarray, k: int) -> np.ndarray:
    """Q(set ⊆ A_j) − p(A_j) for k ≥ 3 drafts without replacement: one row qs [n], spent [n + 1].

    The integral is evaluated only where it can matter: Q_k ≤ min(Q_2, q(A)^k) bounds every gain from
    above, :func:`_wor_lower` at the most promising prefixes bounds the best gain from below, and
    prefixes whose upper bound falls short keep it (they cannot be the maximum).
    """
    bound = np.minimum(wor2_containment(qs), iid_containment(qs, k)) - spent
    floor = 0.0  # the empty prefix
    for j in np.argpartition(-bound, 7)[:8] if bound.size > 8 else range(bound.size):
        floor = max(floor, _wor_lower(qs[:j], k) - spent[j])
    wanted = bound >= floor - 1e-12
    return np.where(wanted, wor_containment(qs, k, wanted) - spent, bound)


def prefix_gains(qs: np.ndarray, spent: np.ndarray, law: DraftLaw) -> np.ndarray:
    """Q(set(x̄) ⊆ A_j) − p(A_j) at every prefix, or an upper bound where that prefix cannot win.

    qs [..., n] in prefix order, spent = p(A_j) [..., n + 1]; returns [..., n + 1].
    """
    if isinstance(law, IID) or law.k <= 2:
        return prefix_containment(qs, law) - spent
    sure_threshold(law.k, qs.shape[-1])  # refuse a k beyond float range before any work
    flat_q, flat_spent = qs.reshape(-1, qs.shape[-1]), spent.reshape(-1, spent.shape[-1])
    rows = [_wor_gains(a, b, law.k) for a, b in zip(flat_q, flat_spent, strict=True)]
    return np.stack(rows).reshape(spent.shape)


def prefix_containment(qs: np.ndarray, law: DraftLaw) -> np.ndarray:
    """Q(set(x̄) ⊆ A_j) for every prefix A_j of qs [..., n] (already in prefix order): [..., n + 1]."""
    if isinstance(law, IID) or law.k == 1:
        return iid_containment(qs, law.k)
    if law.k == 2:
        return wor2_containment(qs)
    flat = qs.reshape(-1, qs.shape[-1])
    rows = [wor_containment(row, law.k) for row in flat]
    return np.stack(rows).reshape(qs.shape[:-1] + (qs.shape[-1] + 1,))


def prefix_dual(p: np.ndarray, q: np.ndarray, law: DraftLaw) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """α* by the sorted-prefix scan for IID / WithoutReplacement laws, batched over [..., n].

    .. math:: \\alpha^* = 1 - \\max_{j=0..n} \\big[ Q(\\mathrm{set}(\\bar x) \\subseteq A_j) - p(A_j) \\big],
              \\quad A_j = \\text{the } j \\text{ tokens of smallest } p/q.

    Returns (values [...], the token order [..., n], the best prefix length [...]).

    >>> v, _, _ = prefix_dual(np.array([1.0, 0.0]), np.array([0.5, 0.5]), IID(2))
    >>> float(v)
    0.75
    """
    order = prefix_order(p, q)
    ps = np.take_along_axis(p, order, axis=-1)
    qs = np.take_along_axis(q, order, axis=-1)
    gains = prefix_gains(qs, _with_zero(np.cumsum(ps, axis=-1)), law)
    best = np.argmax(gains, axis=-1)
    values = 1.0 - np.take_along_axis(gains, best[..., None], axis=-1)[..., 0]
    return np.clip(values, 0.0, 1.0), order, best


def prefix_table(p: np.ndarray, q: np.ndarray, items: Items) -> dict[tuple[str, int], np.ndarray]:
    """α* for several (law name, k) from one sort of p/q: rows [B, n] -> {(name, k): values [B]}.

    Names are "iid" and "without_replacement"; the sort and the prefix sums of p are shared.
    """
    order = prefix_order(p, q)
    qs = np.take_along_axis(q, order, axis=-1)
    spent = _with_zero(np.cumsum(np.take_along_axis(p, order, axis=-1), axis=-1))  # p(A_j)
    out = {}
    for name, k in items:
        law = IID(k) if name == "iid" else WithoutReplacement(k)
        out[(name, k)] = np.clip(1.0 - prefix_gains(qs, spent, law).max(axis=-1), 0.0, 1.0)
    return out


def closed_form_dual(p: np.ndarray, q: np.ndarray, law: DraftLaw) -> tuple[np.ndarray, np.ndarray]:
    """α* for Hub, Greedy(k) and TopK(k), batched over [..., n]; returns (values [...], A mask [..., n]).

    With T the top k−1 tokens of q (Greedy; the hub {a} for Hub) and r = q / (1 − q(T)) off T,

    .. math:: \\alpha^*_{\\text{greedy}} = p(T) + \\sum_{i \\notin T} \\min(p_i, r_i), \\qquad
              \\alpha^*_{\\text{top-}k} = p(\\text{top } k),

    minimised by A = T ∪ {i : r_i > p_i} (greedy) and A = top k (top-k).

    >>> v, a = closed_form_dual(np.array([0.5, 0.5]), np.array([0.9, 0.1]), Hub())
    >>> float(v), a.tolist()
    (1.0, [True, True])
    """
    order = ranked(q)
    top_k = law.k if isinstance(law, TopK) else law.k - 1
    inside = np.zeros(p.shape, dtype=bool)
    np.put_along_axis(inside, order[..., :top_k], True, axis=-1)
    if isinstance(law, TopK):
        return np.where(inside, p, 0.0).sum(axis=-1), inside
    off_top = np.where(inside, 0.0, q)
    r = off_top / off_top.sum(axis=-1, keepdims=True)  # q restricted to V ∖ T, renormalised
    values = np.where(inside, p, np.minimum(p, r)).sum(axis=-1)
    return np.clip(values, 0.0, 1.0), inside | (r > p)


def containment(q: np.ndarray, law: DraftLaw, inside: np.ndarray) -> float:
    """Q(set(x̄) ⊆ A) for one q [n] and a membership mask [n], by the law's formula (no enumeration)."""
    if isinstance(law, CLOSED_FORM_LAWS):
        order = ranked(q)
        top_k = law.k if isinstance(law, TopK) else law.k - 1
        if not inside[order[:top_k]].all():
            return 0.0
        if isinstance(law, TopK):
            return 1.0
        off_top = np.ones(q.size, dtype=bool)
        off_top[order[:top_k]] = False
        return float(q[inside & off_top].sum() / q[off_top].sum())
    qs = np.concatenate([q[inside], q[~inside]])  # A first: A is the prefix of length |A|
    size = int(inside.sum())
    if isinstance(law, WithoutReplacement) and law.k > 2:
        wanted = np.zeros(qs.size + 1, dtype=bool)
        wanted[size] = True
        return float(wor_containment(qs, law.k, wanted)[size])
    return float(prefix_containment(qs, law)[size])
