"""The priority layout: its law F is an optimal base of g, and its closed-form windows match the
one-token-at-a-time construction (tests/verifiers/verifier_enumeration.py builds that independently)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
import torch
from verifier_cases import adversarial_pair
from verifier_enumeration import _layout

import mdsd
from mdsd.verifiers.optimal.layout import draft_depths, iid_layout, pair_depths, pair_layout, window_tops
from mdsd.verifiers.optimal.layout_reference import least_depth_odds, stack_pieces


def _pairs(count, seed, sizes=(1, 2, 3, 4, 5, 6)):
    rng = np.random.default_rng(seed)
    return [adversarial_pair(rng, sizes[i % len(sizes)], i) for i in range(count)]


def _extreme_pairs():
    """Entries spanning 1e-300..1, one-hot rows, exact ties, disjoint supports."""
    return [
        (np.array([1.0, 0.0, 0.0]), np.array([1e-300, 0.5, 0.5 - 1e-300])),
        (np.array([0.5, 0.5, 0.0, 0.0]), np.array([0.0, 0.0, 0.5, 0.5])),
        (np.array([1e-300, 1.0 - 1e-300, 0.0]), np.array([0.25, 0.25, 0.5])),
        (np.array([0.25, 0.25, 0.25, 0.25]), np.array([0.25, 0.25, 0.25, 0.25])),
        (np.array([0.2, 0.2, 0.6]), np.array([0.4, 0.4, 0.2])),
        (np.array([0.0, 1.0, 0.0, 0.0]), np.array([1.0, 1e-16, 1e-16, 0.0])),
        (np.array([1e-12, 1e-12, 1.0 - 2e-12]), np.array([1.0 - 2e-200, 1e-200, 1e-200])),
    ]


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8])
def test_law_is_an_optimal_base(k):
    """F >= 0 sums to 1, F(A) <= g(A) = 1 − (1 − q(A))^k for every token set, Σ min(F, p) = α*."""
    for p, q in _pairs(120, seed=k) + _extreme_pairs():
        f = iid_layout(torch.tensor(p)[None], torch.tensor(q)[None], k).target[0].numpy()
        assert f.min() >= 0 and f.sum() == pytest.approx(1.0, abs=1e-12)
        for size in range(1, p.size + 1):
            for subset in itertools.combinations(range(p.size), size):
                mask = list(subset)
                assert f[mask].sum() <= 1.0 - (1.0 - q[mask].sum()) ** k + 1e-12
        best = mdsd.optimal_acceptance(p, q, mdsd.IID(k), method="lp" if p.size**k <= 5000 else "dual")
        assert np.minimum(f, p).sum() == pytest.approx(best, abs=1e-9), (p, q, k)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_selection_law_is_f_exactly(k):
    """Integrating the least-depth rule over every draft tuple gives F, to 1e-12 (pieces from the
    independent construction)."""
    for p, q in _pairs(60 if k < 4 else 30, seed=10 + k, sizes=(2, 3, 4, 5) if k < 4 else (2, 3, 4)):
        law, pieces = _layout(p.tobytes(), q.tobytes(), k)
        f = iid_layout(torch.tensor(p)[None], torch.tensor(q)[None], k).target[0].numpy()
        np.testing.assert_allclose(f, law, rtol=0, atol=1e-13)
        selected = np.zeros(p.size)
        for xs, w in mdsd.IID(k).joint(q).items():
            for x, odds in zip(xs, least_depth_odds([pieces[x] for x in xs]), strict=True):
                selected[x] += w * odds
        np.testing.assert_allclose(selected, f, rtol=0, atol=1e-12)


def _depth_from_pieces(pieces, u):
    """The depth at fraction u of a token's pieces, walking them from the top."""
    total = sum(b - a for a, b in pieces)
    left = u * total
    for a, b in pieces:
        if left <= b - a:
            return a + left
        left -= b - a
    return pieces[-1][1]


@pytest.mark.parametrize("k", [2, 3, 5])
def test_closed_form_windows_realise_f(k):
    """The windows of window_tops (any batch) and the whole stack of one pair place every draft of mass above
    1e-6 at the same depth, to 1e-9, and so does the construction of verifier_enumeration.py; and
    integrating the least-depth rule over the stack's pieces gives F exactly, extremes included.
    (Depths are conditioned like 1/q: F is exact to ~1e-16, and a window of mass q and value F moves by
    ~ΔF / (k q) when F moves by ΔF, so a token of mass 1e-9 sits anywhere within ~1e-7.)"""
    gen = torch.Generator().manual_seed(k)
    for p, q in _pairs(40, seed=20 + k, sizes=(3, 4, 6, 9)) + _extreme_pairs():
        lay = iid_layout(torch.tensor(p)[None], torch.tensor(q)[None], k)
        tokens = torch.tensor([y for y in range(p.size) if q[y] > 0]).repeat(5)
        pos = lay.rank[0, tokens]
        u = torch.rand(pos.shape, generator=gen, dtype=torch.float64)
        rows = torch.zeros_like(pos)
        pair = pair_layout(lay)
        newton = draft_depths(lay, rows, pos, window_tops(lay, rows, pos), u)
        wide = torch.tensor(q)[tokens] > 1e-6
        assert torch.allclose(newton[wide], pair_depths(lay, pair, pos, u)[wide], rtol=0, atol=1e-9), (p, q)
        if p.size <= 6 and k <= 3:
            pieces = stack_pieces(lay, pair)
            selected = np.zeros(p.size)
            for xs, w in mdsd.IID(k).joint(q).items():
                for x, odds in zip(xs, least_depth_odds([pieces[x] for x in xs]), strict=True):
                    selected[x] += w * odds
            np.testing.assert_allclose(selected, lay.target[0].numpy(), rtol=0, atol=1e-12)
        if q[q > 0].min() >= 1e-6:
            _, built = _layout(p.tobytes(), q.tobytes(), k)
            at = torch.tensor(
                [_depth_from_pieces(built[int(y)], float(v)) for y, v in zip(tokens, u, strict=True)]
            )
            assert torch.allclose(newton, at, rtol=0, atol=1e-9), (p, q)


def test_full_vocabulary_law_and_windows():
    """V = 151,936: Σ min(F, p) = α* (the dual), and window_tops agrees with the whole stack (to the
    rounding of float prefix sums at this V, which window_tops differences and the stack does not)."""
    gen = torch.Generator().manual_seed(0)
    n = 151_936
    logits = 3 * torch.randn(n, generator=gen, dtype=torch.float64)
    p = torch.softmax(logits, 0)
    q = torch.softmax(logits + torch.randn(n, generator=gen, dtype=torch.float64), 0)
    for k in (2, 8):
        lay = iid_layout(p[None], q[None], k)
        best = mdsd.optimal_acceptance(p.numpy(), q.numpy(), mdsd.IID(k))
        assert float(torch.minimum(lay.target[0], p).sum()) == pytest.approx(best, abs=1e-12)
    pos = lay.rank[0, torch.multinomial(q, 6, generator=gen)]
    tops = window_tops(lay, torch.zeros_like(pos), pos)
    assert torch.allclose(tops, pair_layout(lay).tops[pos], rtol=0, atol=1e-13)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_small_tokens_keep_their_relative_precision(k):
    """Tokens of mass 1e-9 beside one of mass 1 − 2e-9 that the law puts first (each a drop of h) get
    F = g(P_i) − g(P_{i−1}) to 1e-12 relative, not merely 1e-16 absolute, and the stack places their
    windows at the top of the remaining depths, where their value is F (a window of mass q moves by
    ~ΔF / (k q) when F moves by ΔF: an absolute error of 1e-16 would move it past its own width)."""
    q = np.array([1e-9, 1e-9, 1.0 - 2e-9])
    p = np.array([0.44, 0.36, 0.2])
    lay = iid_layout(torch.tensor(p)[None], torch.tensor(q)[None], k)
    f = lay.target[0].numpy()
    one, two = Fraction(q[0]), Fraction(q[1])
    exact = [1 - (1 - one) ** k, (1 - one) ** k - (1 - one - two) ** k]
    for token in (0, 1):
        assert abs(Fraction(f[token]) - exact[token]) <= 1e-12 * exact[token], (token, f[token])
    pair = pair_layout(lay)
    assert pair.tops[lay.rank[0, :2]].abs().max() < 1e-15  # the rounding of depths, not 1e-8


def _v_shaped_row(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p, q, order): a row whose h = g(P_j) − p(P_j) falls strictly to the middle of the order and rises
    strictly after it, so every token is a drop or a rise of one token. Along the order (a random
    permutation of the tokens) q is random, and p is (1 ± c) times the increment g(P_{j+1}) − g(P_j), whose
    ratio to q, the mean of k x^{k−1} over the token's interval of tails, falls along the order."""
    rng = np.random.default_rng(seed)
    qs = rng.dirichlet(np.ones(n))
    tails = np.append(np.cumsum(qs[::-1])[::-1], 0.0)
    inc = tails[:-1] ** k - tails[1:] ** k
    half = n // 2
    c = 0.5
    ps = inc * np.where(np.arange(n) < half, 1 + c, 1 - c * inc[:half].sum() / inc[half:].sum())
    order = rng.permutation(n)
    p, q = np.empty(n), np.empty(n)
    p[order], q[order] = ps / ps.sum(), qs
    return p, q, order


@pytest.mark.parametrize("k", [2, 3, 4])
def test_the_law_names_every_tokens_place(k):
    """Why the layout is not sort-free (its docstring): on a row where h falls and then rises at every
    token, F at each token is g(P_{t+1}) − g(P_t) = (1 − Q_t)^k − (1 − Q_t − q_t)^k, which names the mass
    Q_t of the tokens before it; F and q alone give back the whole order. So a layout that returns this F
    has ranked every token: an exact bucketed layout refines every bucket of this row, which is the sort."""
    p, q, order = _v_shaped_row(400, k, seed=k)
    lay = iid_layout(torch.tensor(p)[None], torch.tensor(q)[None], k)
    assert torch.equal(lay.order[0], torch.tensor(order))
    f = lay.target[0].numpy()
    tails = np.append(np.cumsum(q[order][::-1])[::-1], 0.0)
    np.testing.assert_allclose(f[order], tails[:-1] ** k - tails[1:] ** k, rtol=1e-9, atol=0)
    assert (np.abs(f - p) > 1e-3 * p).all()  # no token keeps F = p
    lo, hi = np.zeros_like(q), 1.0 - q  # Q_t from F(t) = (1 − Q)^k − (1 − Q − q)^k, falling in Q
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        above = (1 - mid) ** k - np.clip(1 - mid - q, 0, None) ** k > f
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    np.testing.assert_array_equal(np.argsort(0.5 * (lo + hi), kind="stable"), order)
