r"""Exact acceptance of the optimal verifier's fallback for drafts without replacement (k <= 4, any V).

**The fallback** (:class:`mdsd.verifiers.optimal.OptimalVerifier` beyond its flow size) turns the k drafts
without replacement into the first k draws of an i.i.d. stream whose distinct tokens, in order, are the
drafts, and runs the optimal i.i.d. rule (the priority layout, :mod:`mdsd.verifiers.optimal.layout`) on those
draws: select the draw of least depth, accept it w.p. min(1, p/F), else emit y ~ r = norm((p − F)+).

**Its acceptance.** The i.i.d. rule accepts Σ min(F, p) = α*_iid(k). A rejection needs a selected z with
F(z) > p(z) (the set R, ρ(z) = 1 − p(z)/F(z)), which lies in A*, and then every draw lies in A* (B* owns
the top q(B*) of the depths); r lives on B*, so the emitted y never equals a draw. It is accepted when it
is among the k − m drafts beyond the m distinct draws D, which are k − m draws without replacement from
V ∖ D. With s(T) = 1 − q(T), e(T) = Σ_{y ∉ T} r(y) q(y) and ℓ_x(t) the mass of x deeper than depth t:

* *the extension* (exponential clocks: x ∉ D first arrives at rate q(x), and y is among the first j new
  tokens when fewer than j others arrive before it):

  .. math:: \sum_y r(y)\, \pi_j(y \mid V \setminus D) = \sum_{X \subseteq V \setminus D,\ |X| < j}
            e(D \cup X)\, J(D \cup X; X), \qquad
            J(T; X) = \int_0^\infty e^{-s(T) t} \prod_{x \in X} (1 - e^{-q(x) t})\, dt,

  so J(T; ∅) = 1/s(T) and J(T; {x}) = q(x) / (s(T) s(T ∖ x));
* *the rejections with draw set D*: the selected draw z ∈ D is the least deep; the other k − 1 draws lie
  deeper, inside D, and cover G = D ∖ z:

  .. math:: P(\text{set } D, \text{reject}) = \sum_{z \in D} k\, \rho(z) \int_{\text{pieces of } z}
            \sum_{c} \binom{k - 1}{c_z, c_{g_1}, \ldots}\, \ell_z^{c_z} \prod_{g \in G} \ell_g^{c_g}\, dt
            \quad (\text{every } c_g \ge 1).

Hence α = α*_iid(k) + Σ over ordered tuples of distinct tokens (z; g_1..g_{m−1}; x_1..x_i), m + i <= k − 1,
of k ρ(z) ∫ (the monomials) e(T) J(T; X) / ((m − 1)! i!), T = {z, g, x}.

**Computing it in O((pieces + V) · nodes) plus a function of ``explicit``.** The ``explicit`` tokens of
largest q (M, the set H) take every ordered combination one by one; the others are *light*, summed as
vectors. Distinct light tokens come from inclusion–exclusion; a light g needs Σ_x c(x) ℓ_x(π)^c at every
piece π (one cumulative sum from the deepest piece up); a light z sums over its pieces; a light x is a
plain sum; an explicit g is a step function of the piece, integrated against cumulative sums between its
steps. J separates over light members after scaling time by σ >= s(E) (E = the explicit members of the
rate set, σ on the grid 2^{−j/4}): J = (1/σ) Σ_ν ω_ν e^{τ_ν (σ − s(E))/σ} Π_{light} e^{τ_ν q/σ} (…) at
Gauss–Laguerre nodes τ_ν. The integrand grows at rate u <= 1 − 2^{−1/4} + 3 q_{M+1} / s(H's top two)
<= 0.16 + 3/(M − 1) (the light members hold at most 3 q_{M+1}; every token of H beyond the top two
outweighs q_{M+1}), and the nodes are as many as make u^{2n} < 1e-17. For an explicit x the factor
1 − e^{−q(x) t} is split into its two terms (the second has x outside the rate set): a fast decay is not
polynomial-like enough for the quadrature, and the difference costs only absolute precision, e(T) J <= 1.
The explicit s(E) and e(E) are summed from the other entries (no cancellation).

Checked against exact enumeration of the fallback's output law (drafts, repeats and verifier
randomness) for k = 2, 3, 4 in the tests, with every token explicit and with light tokens.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from mdsd.validation import check_k
from mdsd.verifiers.optimal.layout import iid_layout, pair_layout

__all__ = ["fallback_acceptance", "EXPLICIT"]

EXPLICIT = 10  # tokens of largest q summed one combination at a time; the rest as vectors
_STEPS = 4  # time scales σ = 2^(−j / _STEPS): the least one at or above the rate set's explicit part
_MAX_RATE = 0.75  # largest growth rate u of the quadrature's integrand accepted (M too small otherwise)


def fallback_acceptance(p: np.ndarray, q: np.ndarray, k: int, explicit: int = EXPLICIT) -> float:
    """Exact acceptance of the without-replacement fallback (module docstring) for k = 1..4.

    ``p``, ``q`` are distributions [V] (float64, q with at least k tokens); ``explicit`` (>= 1) only moves
    work between the one-by-one sums and the vector sums, not the value (a value too small for ``q``
    raises a ValueError).

    >>> round(fallback_acceptance(np.array([0.0, 0.5, 0.5]), np.array([0.8, 0.1, 0.1]), 2), 12)
    0.68
    """
    if k not in (1, 2, 3, 4):
        raise ValueError(f"k must be 1, 2, 3 or 4 for the fallback's exact acceptance, got {k}")
    explicit = check_k(explicit, "explicit")
    lay = iid_layout(torch.from_numpy(p)[None], torch.from_numpy(q)[None], k)
    order = lay.order[0].numpy()
    ps, qs, law = p[order], q[order], lay.f_sorted[0].numpy()
    base = float(np.minimum(law, ps).sum())
    excess = np.maximum(ps - law, 0.0)
    over = law > ps
    if k == 1 or excess.sum() <= 0.0 or not over.any():
        return base
    rho = np.where(over, 1.0 - ps / np.where(over, law, 1.0), 0.0)
    return base + _Extension(_Pieces(lay), qs, rho, excess / excess.sum() * qs, k, explicit).total()


def _grid(s: float) -> float:
    """The least time scale 2^(−j / _STEPS) at or above s."""
    return 2.0 ** (-math.floor(-_STEPS * math.log2(s)) / _STEPS)


def _cover(m: int, k: int) -> list[tuple[float, tuple[int, ...]]]:
    """Monomials of P(k − 1 draws deeper than t inside D = {z, g_1..g_{m−1}} covering every g):
    (multinomial coefficient, powers by position: z, each g (>= 1), then 0 for the extension tokens)."""
    out = []
    for powers in itertools.product(range(k), repeat=m):
        if sum(powers) == k - 1 and all(c >= 1 for c in powers[1:]):
            coef = math.factorial(k - 1) // math.prod(math.factorial(c) for c in powers)
            out.append((float(coef), powers + (0,) * (k - 1)))
    return out


class _Pieces:
    """The layout's pieces in depth order (shallowest first): token (sorted position), length, and the
    token's own length deeper than the piece."""

    def __init__(self, lay) -> None:
        pair = pair_layout(lay)
        qs = lay.q_sorted[0].numpy()
        ptr, start_t = pair.ptr.numpy(), pair.piece_t.numpy()
        counts = np.diff(ptr)
        token = np.repeat(np.arange(qs.size), counts)
        end_t = np.empty_like(start_t)
        end_t[:-1] = start_t[1:]
        owners = np.flatnonzero(counts)
        end_t[ptr[owners + 1] - 1] = pair.tops.numpy()[owners] + qs[owners]
        length = np.maximum(end_t - start_t, 0.0)
        total = np.bincount(token, weights=length, minlength=qs.size)
        # each token's pieces hold exactly its mass (the sampler draws a fraction u of q along them); a
        # token whose pieces have no width in float64 sits at the start of its first piece
        length *= np.where(total > 0, qs / np.where(total > 0, total, 1.0), 0.0)[token]
        point = owners[total[owners] <= 0]
        length[ptr[point]] = qs[point]
        depth = start_t + lay.prefix_q[0].numpy()[pair.piece_j.numpy()]
        # own length deeper than each piece, summed within the token (at most a few pieces each)
        order = np.lexsort((-depth, token))  # by token, deepest piece first
        grouped, grouped_length = token[order], length[order]
        starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
        rank = np.arange(grouped.size) - np.repeat(starts, np.diff(np.r_[starts, grouped.size]))
        below = np.zeros(grouped.size)
        for level in range(1, int(rank.max(initial=0)) + 1):
            at = np.flatnonzero(rank == level)
            below[at] = below[at - 1] + grouped_length[at - 1]
        deeper = np.empty_like(length)
        deeper[order] = below
        down = np.argsort(depth, kind="stable")
        self.token, self.length, self.deeper = token[down], length[down], deeper[down]


class _Extension:
    """The extension's sum (module docstring) over the layout's pieces from the shallowest piece of R down.

    Positions of a tuple: 0 is z (the selected draw's token), then the g (the other draw tokens), then the
    x (the extension tokens of J). Each position is explicit (a token of H) or light (a vector)."""

    def __init__(self, pieces: _Pieces, qs, rho, rq, k: int, explicit: int) -> None:
        self.k, self.q, self.rho, self.rq = k, qs, rho, rq
        rejecting = np.flatnonzero(rho[pieces.token] > 0)
        start = int(rejecting[0]) if rejecting.size else pieces.token.size  # nothing shallower matters
        self.tok, self.length, self.deep = pieces.token[start:], pieces.length[start:], pieces.deeper[start:]
        self.heavy = np.argsort(-qs, kind="stable")[: min(explicit, qs.size)]
        self.light = np.ones(qs.size, dtype=bool)
        self.light[self.heavy] = False
        self.z_pieces = np.flatnonzero(self.light[self.tok] & (rho[self.tok] > 0))  # pieces of a light z
        top = float(qs[self.light].max(initial=0.0))
        two = self._outside(qs, self.heavy[:2])
        rate = 1.0 - 2.0 ** (-1 / _STEPS) + (3.0 * top / two if two > 0 else 0.0)
        if rate >= _MAX_RATE:
            raise ValueError(
                f"explicit = {explicit} is too small for this q (the light tokens are too heavy)"
            )
        self.tau, self.omega = np.polynomial.laguerre.laggauss(
            max(6, math.ceil(17 * math.log(10) / 2 / -math.log(rate)))
        )
        self.cache: dict[tuple, object] = {}

    def _outside(self, values: np.ndarray, members) -> float:
        """Σ of values over every token outside the explicit ``members``, from the other entries."""
        keep = ~np.isin(self.heavy, np.asarray(members, dtype=np.int64))
        return float(values[self.light].sum()) + float(values[self.heavy[keep]].sum())

    def total(self) -> float:
        out = 0.0
        for m in range(1, self.k):
            monomials = _cover(m, self.k)
            for i in range(self.k - m):
                kinds = ("z",) + ("g",) * (m - 1) + ("x",) * i
                out += self._tuples(kinds, monomials) / (math.factorial(m - 1) * math.factorial(i))
        return self.k * out

    def _tuples(self, kinds, monomials) -> float:
        """Σ over every pattern of explicit positions and every ordered explicit combination; an explicit
        x's factor 1 − e^{−q(x) t} is split into its two terms (``split``: x outside the rate set)."""
        out = 0.0
        for pattern in itertools.product((True, False), repeat=len(kinds)):
            explicit = [j for j in range(len(kinds)) if pattern[j]]
            light = [j for j in range(len(kinds)) if not pattern[j]]
            x_explicit = [j for j in explicit if kinds[j] == "x"]
            for combo in itertools.permutations(self.heavy.tolist(), len(explicit)):
                token = dict(zip(explicit, combo, strict=True))
                if pattern[0] and self.rho[token[0]] <= 0:
                    continue
                reach = self._outside(self.rq, combo)  # e(T) = reach − Σ_light r q
                for size in range(len(x_explicit) + 1):
                    for split in itertools.combinations(x_explicit, size):
                        rate_set = [token[j] for j in explicit if j not in split]
                        value = self._combination(kinds, light, token, rate_set, reach, monomials)
                        out += (-1) ** size * value
        return out

    def _combination(self, kinds, light, token, rate_set, reach, monomials) -> float:
        """One explicit combination and rate set: Σ over the pieces of z and the light tokens."""
        s = self._outside(self.q, rate_set)
        if light:
            sigma = _grid(s)
            scale = self.omega / sigma * np.exp(self.tau * (sigma - s) / sigma)
        else:  # every member explicit: J is 1 / s exactly
            sigma, scale = 1.0, np.array([1.0 / s])
        geo = [j for j in token if kinds[j] == "g"]
        if 0 in light:  # light z: cumulative sums over its pieces, an explicit g's steps by segments
            groups: dict[tuple, list] = {}
            for coef, powers in monomials:
                groups.setdefault(tuple(powers[j] for j in geo), []).append((coef, powers))
            out = 0.0
            for signature, group in groups.items():
                cum_reach, cum_rq = self._light_z((sigma, kinds, tuple(light), tuple(geo), signature), group)
                steps = [(token[j], c) for j, c in zip(geo, signature, strict=True)]
                out += float(
                    scale @ (reach * self._segments(cum_reach, steps) - self._segments(cum_rq, steps))
                )
            return out
        at = np.flatnonzero(self.tok == token[0])
        out = 0.0
        for coef, powers in monomials:
            w = coef * self.rho[token[0]] * self._integral(powers[0])[at]
            for j in geo:
                w = w * self._step(token[j])[at] ** powers[j]
            for choice in [None] + light:  # the numerator: reach, less each light member's r q
                blocks = self._blocks(sigma, kinds, light, powers, choice)
                value = blocks[:, at] @ w if light else np.array([w.sum()])
                out += (reach if choice is None else -1.0) * float(scale @ value)
        return out

    def _light_z(self, key, group) -> list[np.ndarray]:
        """Cumulative sums over the pieces of light z ([nodes, pieces + 1]) of Σ_monomials coef ρ(z)
        ∫ℓ_z^c e^{τ q(z)/σ} × the other light positions: the part the explicit reach multiplies, and the
        light members' own r q (subtracted)."""
        if key not in self.cache:
            sigma, kinds, light, _, _ = key
            at, z = self.z_pieces, self.tok[self.z_pieces]
            parts = [np.zeros((self.tau.size, at.size)) for _ in range(2)]
            for coef, powers in group:
                w = coef * self.rho[z] * self._integral(powers[0])[at]
                for choice in [None, *light]:
                    own = self._coef(sigma, 1, 0, choice == 0)[:, z]
                    blocks = self._blocks(sigma, kinds, list(light), powers, choice)
                    parts[choice is not None] += own * w * (blocks[:, at] if np.ndim(blocks) else blocks)
            self.cache[key] = [np.pad(np.cumsum(part, axis=1), ((0, 0), (1, 0))) for part in parts]
        return self.cache[key]

    def _segments(self, cum: np.ndarray, steps) -> np.ndarray:
        """Σ over the pieces of light z of the body times Π ℓ_h^c over explicit g: each ℓ_h is constant
        between consecutive pieces of the explicit tokens."""
        if not steps:
            return cum[:, -1]
        cuts = np.unique(np.concatenate([np.flatnonzero(self.tok == h) for h, _ in steps]))
        starts = np.concatenate([[0], cuts])
        value = np.ones(starts.size)
        for h, c in steps:
            value = value * self._step(h)[starts] ** c
        first = np.searchsorted(self.z_pieces, starts)  # the cuts' places among the pieces of light z
        last = np.append(first[1:], self.z_pieces.size)
        return (cum[:, last] - cum[:, first]) @ value

    def _blocks(self, sigma, kinds, light, powers, choice):
        """Σ over distinct light tokens other than z for the light positions except z, at every piece
        [nodes, pieces] (1.0 when there are none): products of blocks less the coincidences."""
        others = [j for j in light if j != 0]

        def block(positions):
            x = sum(kinds[j] == "x" for j in positions)
            power = sum(powers[j] for j in positions if kinds[j] == "g")
            return self._block(sigma, len(positions), x, choice in positions, power)

        if not others:
            return 1.0
        if len(others) == 1:
            return block(others)
        a, b = others
        return block([a]) * block([b]) - block([a, b])

    def _coef(self, sigma, size, n_x, with_rq) -> np.ndarray:
        """[nodes, V] on light tokens: e^{size τ q/σ} (1 − e^{−τ q/σ})^{n_x} (r q)."""
        key = ("coef", sigma, size, n_x, with_rq)
        if key not in self.cache:
            kq = np.outer(self.tau / sigma, np.where(self.light, self.q, 0.0))
            c = np.exp(size * kq) * (-np.expm1(-kq)) ** n_x * (self.rq if with_rq else 1.0)
            self.cache[key] = np.where(self.light, c, 0.0)
        return self.cache[key]

    def _block(self, sigma, size, n_x, with_rq, power) -> np.ndarray:
        """[nodes, pieces]: Σ_{light x ≠ token of π} coef(x) ℓ_x(π)^power, one cumulative sum from the
        deepest piece up (power 0: the plain sum less the piece's own token)."""
        key = ("block", sigma, size, n_x, with_rq, power)
        if key not in self.cache:
            c = self._coef(sigma, size, n_x, with_rq)
            own = c[:, self.tok]
            if power == 0:
                self.cache[key] = c.sum(axis=1, keepdims=True) - own
            else:
                b, length = self.deep, self.length
                rise = own * ((b + length) ** power - b**power)
                deeper = np.cumsum(rise[:, ::-1], axis=1)[:, ::-1]
                self.cache[key] = np.pad(deeper[:, 1:], ((0, 0), (0, 1))) - own * b**power
        return self.cache[key]

    def _integral(self, c: int) -> np.ndarray:
        """∫ ℓ_z(t)^c dt over each piece (ℓ_z: the token's own length deeper, plus the rest of the piece)."""
        key = ("integral", c)
        if key not in self.cache:
            b, length = self.deep, self.length
            self.cache[key] = ((b + length) ** (c + 1) - b ** (c + 1)) / (c + 1)
        return self.cache[key]

    def _step(self, h: int) -> np.ndarray:
        """ℓ_h at each piece: h's length strictly deeper (a step function)."""
        key = ("step", h)
        if key not in self.cache:
            own = np.where(self.tok == h, self.length, 0.0)
            self.cache[key] = np.append(np.cumsum(own[::-1])[::-1][1:], 0.0)
        return self.cache[key]
