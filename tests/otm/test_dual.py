"""The O(n log n) dual: the exponential-race integral, large n against the LP, batching, the table."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from otm_cases import brute_force, random_vector

import mdsd
from mdsd.otm.dual import prefix_dual, prefix_order, wor2_containment, wor_containment
from mdsd.otm.scan import best_gains


def enumerate_wor(q: np.ndarray, k: int) -> dict[tuple[int, ...], float]:
    """Exact law of k draws without replacement; each denominator is the mass left, summed directly."""
    support = np.flatnonzero(q).tolist()
    joint = {}
    for x in itertools.permutations(support, k):
        w, left = 1.0, set(support)
        for i in x:
            w *= q[i] / sum(q[j] for j in left)
            left.discard(i)
        joint[x] = w
    return joint


def heavy_tailed(rng: np.random.Generator, n: int, scale: float) -> np.ndarray:
    """softmax(scale · N(0, 1)): real-logit-like, with entries down to ~exp(-6 scale) of the top."""
    z = scale * rng.standard_normal(n)
    v = np.exp(z - z.max())
    return v / v.sum()


@pytest.mark.parametrize("k", [3, 4])
def test_wor_integral_matches_enumeration_at_every_prefix(k):
    rng = np.random.default_rng(k)
    for trial in range(25):
        n = int(rng.integers(8, 11)) if k == 3 else int(rng.integers(8, 10))
        q = heavy_tailed(rng, n, scale=[0.5, 2.0, 4.0][trial % 3])
        if trial % 4 == 0:
            q[rng.integers(n, size=2)] = 0.0  # zeros inside the prefix order
            q /= q.sum()
        order = rng.permutation(n)
        joint = enumerate_wor(q, k)
        rank = np.empty(n, dtype=int)
        rank[order] = np.arange(n)
        exact = [sum(w for x, w in joint.items() if rank[list(x)].max() < j) for j in range(n + 1)]
        np.testing.assert_allclose(wor_containment(q[order], k), exact, rtol=0, atol=1e-10)


@pytest.mark.parametrize("k", [3, 4])
def test_wor_dual_matches_brute_force_at_n_8_to_10(k):
    rng = np.random.default_rng(10 + k)
    for _ in range(12):
        n = int(rng.integers(8, 11)) if k == 3 else 8
        p, q = heavy_tailed(rng, n, 1.5), heavy_tailed(rng, n, 1.5)
        law = mdsd.WithoutReplacement(k)
        assert mdsd.optimal_acceptance(p, q, law) == pytest.approx(brute_force(p, q, law), abs=1e-9)


def test_wor_k3_integral_matches_exact_sum_at_n_300():
    """Q(3 draws in A) = Σ_{x1≠x2∈A} q1 q2/(1−q1) · (q(A)−q1−q2)/(1−q1−q2), O(|A|²), tiny tail masses."""
    rng = np.random.default_rng(3)
    q = heavy_tailed(rng, 300, scale=3.0)
    got = wor_containment(q, 3)
    for j in [3, 10, 50, 150, 299, 300]:
        a = q[:j]
        pair = np.outer(a, a) / (1.0 - a)[:, None]
        np.fill_diagonal(pair, 0.0)
        left = 1.0 - a[:, None] - a[None, :]
        third = np.divide(a.sum() - a[:, None] - a[None, :], left, out=np.zeros_like(left), where=left > 0)
        assert got[j] == pytest.approx((pair * third).sum(), abs=1e-10), j


@pytest.mark.parametrize("scale", [0.1, 2.0, 6.0])
def test_wor_integral_k2_matches_closed_form_at_large_n(scale):
    rng = np.random.default_rng(int(scale * 10))
    q = heavy_tailed(rng, 3000, scale)
    order = rng.permutation(q.size)
    np.testing.assert_allclose(wor_containment(q[order], 2), wor2_containment(q[order]), rtol=0, atol=1e-11)


@pytest.mark.parametrize(
    "law", [mdsd.IID(2), mdsd.WithoutReplacement(2), mdsd.Hub(), mdsd.Greedy(3), mdsd.TopK(3)], ids=repr
)
def test_dual_matches_lp_at_n_200(law):
    rng = np.random.default_rng(200)
    for scale in (1.0, 3.0):
        p, q = heavy_tailed(rng, 200, scale), heavy_tailed(rng, 200, scale)
        dual = mdsd.solve_otm(p, q, law, method="dual")
        lp = mdsd.solve_otm(p, q, law, method="lp")
        assert dual.value == pytest.approx(lp.value, abs=1e-8)
        assert dual.cut_value == pytest.approx(dual.value, abs=1e-9)
        assert lp.cut_value == pytest.approx(lp.value, abs=1e-9)


@pytest.mark.parametrize("n, law", [(40, mdsd.IID(2)), (40, mdsd.WithoutReplacement(2)), (12, mdsd.IID(3))])
def test_dual_matches_maxflow_at_moderate_n(n, law):
    rng = np.random.default_rng(n)
    p, q = heavy_tailed(rng, n, 2.0), heavy_tailed(rng, n, 2.0)
    assert mdsd.optimal_acceptance(p, q, law) == pytest.approx(
        mdsd.optimal_acceptance(p, q, law, method="maxflow"), abs=1e-8
    )


@pytest.mark.parametrize(
    "law",
    [
        mdsd.IID(1),
        mdsd.IID(3),
        mdsd.WithoutReplacement(2),
        mdsd.WithoutReplacement(3),
        mdsd.Hub(),
        mdsd.Greedy(3),
        mdsd.TopK(2),
    ],
    ids=repr,
)
def test_batched_equals_per_row(law):
    rng = np.random.default_rng(7)
    p = np.stack([heavy_tailed(rng, 30, s) for s in np.linspace(0.1, 4.0, 6)]).reshape(2, 3, 30)
    q = np.stack([heavy_tailed(rng, 30, s) for s in np.linspace(4.0, 0.1, 6)]).reshape(2, 3, 30)
    batched = mdsd.optimal_acceptance(p, q, law)
    assert batched.shape == (2, 3)
    for index in np.ndindex(2, 3):
        assert batched[index] == pytest.approx(mdsd.solve_otm(p[index], q[index], law).value, abs=1e-12)
    from_torch = mdsd.optimal_acceptance(torch.from_numpy(p), torch.from_numpy(q), law)
    np.testing.assert_allclose(from_torch, batched, rtol=0, atol=1e-12)
    from_lists = mdsd.optimal_acceptance(p.tolist(), q.tolist(), law)
    np.testing.assert_allclose(from_lists, batched, rtol=0, atol=1e-12)


def test_batched_other_methods_solve_row_by_row():
    rng = np.random.default_rng(8)
    p = np.stack([heavy_tailed(rng, 4, 1.0) for _ in range(3)])
    q = np.stack([heavy_tailed(rng, 4, 1.0) for _ in range(3)])
    law = mdsd.IID(2)
    np.testing.assert_allclose(
        mdsd.optimal_acceptance(p, q, law, method="lp"), mdsd.optimal_acceptance(p, q, law), atol=1e-8
    )


def test_table_equals_separate_calls():
    rng = np.random.default_rng(9)
    p = np.stack([heavy_tailed(rng, 50, s) for s in (0.3, 1.0, 2.0, 3.0, 5.0)])
    q = np.stack([heavy_tailed(rng, 50, s) for s in (5.0, 0.3, 2.0, 1.0, 3.0)])
    table = mdsd.optimal_acceptance_table(p, q, ks=[1, 2, 3, 5], laws=["iid", "wor"], rows_per_block=2)
    assert set(table) == {(name, k) for name in ("iid", "without_replacement") for k in (1, 2, 3, 5)}
    for (name, k), values in table.items():
        law = mdsd.IID(k) if name == "iid" else mdsd.WithoutReplacement(k)
        np.testing.assert_allclose(values, mdsd.optimal_acceptance(p, q, law), rtol=0, atol=1e-12)
    mixed = mdsd.optimal_acceptance_table(p, q, laws={"iid": range(1, 4), "wor": [2]})
    assert sorted(mixed) == [("iid", 1), ("iid", 2), ("iid", 3), ("without_replacement", 2)]
    for key in [("iid", 1), ("iid", 2), ("iid", 3), ("without_replacement", 2)]:
        np.testing.assert_array_equal(mixed[key], table[key])


def test_prefix_order_puts_zero_draft_mass_last_and_never_reorders_input():
    p = np.array([0.1, 0.2, 0.3, 0.4])
    q = np.array([0.4, 0.0, 0.3, 0.3])
    kept = (p.copy(), q.copy())
    assert prefix_order(p, q).tolist() == [0, 2, 3, 1]
    np.testing.assert_array_equal(p, kept[0])
    np.testing.assert_array_equal(q, kept[1])


def test_bucketed_scan_matches_the_full_sort():
    """The value-only scan (buckets of p/q, partial sort) equals the full-sort prefix scan."""
    rng = np.random.default_rng(11)
    items = [("iid", k) for k in range(1, 9)] + [("without_replacement", 2)]
    cases = [(random_vector(rng, int(n)), random_vector(rng, int(n))) for n in rng.integers(1, 40, 400)]
    cases += [
        (heavy_tailed(rng, n, s), heavy_tailed(rng, n, s)) for n in (1000, 20000) for s in (0.3, 3.0, 8.0)
    ]
    q = heavy_tailed(rng, 5000, 2.0)
    cases += [(q, q), (np.eye(5000)[7], q), (q, np.eye(5000)[7])]  # p = q, one-hot p, one-hot q
    for p, q in cases:
        gains = best_gains(p, q, items)
        for name, k in items:
            if name == "without_replacement" and np.count_nonzero(q) < 2:
                continue
            law = mdsd.IID(k) if name == "iid" else mdsd.WithoutReplacement(k)
            assert 1.0 - gains[(name, k)] == pytest.approx(prefix_dual(p, q, law)[0], abs=1e-12)


def test_regression_wor2_peaked_draft_used_one_minus_q_for_the_rest_mass():
    """q_max = 1 − 9e-8: 1 − q_max missed the rounding of Σ q, α* was off by 7e-12 (exact: rationals)."""
    from fractions import Fraction

    p = [
        0.004959532446409506,
        0.0013133695858105893,
        0.00018540534292551132,
        0.0015123338884217715,
        0.0043709997714945934,
        0.0014049636356241468,
        0.7489545487678543,
        0.2372988465614596,
    ]
    q = [
        1.7287560031488251e-15,
        6.353443489518057e-14,
        2.628193304514717e-10,
        4.858120445466586e-10,
        6.371402235394997e-08,
        2.093658123629479e-08,
        0.9999999133856918,
        1.215007983438827e-09,
    ]
    exact_p, exact_q = ([Fraction(x) for x in v] for v in (p, q))
    exact_p, exact_q = ([x / sum(v) for x in v] for v in (exact_p, exact_q))
    exact = min(
        sum(exact_p[i] for i in a)
        + 1
        - sum(exact_q[i] * exact_q[j] / (1 - exact_q[i]) for i in a for j in a if i != j)
        for r in range(9)
        for a in itertools.combinations(range(8), r)
    )
    law = mdsd.WithoutReplacement(2)
    assert mdsd.optimal_acceptance(p, q, law) == pytest.approx(float(exact), abs=1e-14)
    assert mdsd.solve_otm(p, q, law).value == pytest.approx(float(exact), abs=1e-14)


def test_prefix_claim_for_drafts_without_replacement_against_all_cuts():
    """MATH.md §1: for drafts without replacement the best cut is a p/q prefix (conjectured; tested here)."""
    rng = np.random.default_rng(12)
    checked = 0
    while checked < 200:
        n = int(rng.integers(6, 10))
        k = int(rng.integers(2, 6))
        if math.perm(n, k) > 5000:
            continue
        if checked % 3 == 0:
            p, q = random_vector(rng, n), random_vector(rng, n)  # ties, zeros, one-hot shapes
        else:
            p, q = heavy_tailed(rng, n, float(rng.choice([0.3, 1.5, 4.0]))), heavy_tailed(rng, n, 2.0)
        law = mdsd.WithoutReplacement(k)
        if np.count_nonzero(q) < k:
            continue
        assert mdsd.optimal_acceptance(p, q, law) == pytest.approx(brute_force(p, q, law), abs=1e-9), (
            p,
            q,
            k,
        )
        checked += 1
