"""Known facts about α* (docs/mathematics.md §1) and adversarial inputs, each against an independent
computation."""

from __future__ import annotations

import numpy as np
import pytest
from otm_cases import brute_force, check_certificate, instance, random_vector

import mdsd
import mdsd.otm.coupling
import mdsd.otm.lp
from mdsd.highs import LPError, solve_sparse_lp


def heavy_tailed(rng: np.random.Generator, n: int, scale: float) -> np.ndarray:
    z = scale * rng.standard_normal(n)
    v = np.exp(z - z.max())
    return v / v.sum()


def random_pairs(seed: int, count: int = 40, n: int = 30):
    rng = np.random.default_rng(seed)
    for i in range(count):
        scale = 0.2 + 4.0 * (i % 5) / 4
        yield heavy_tailed(rng, n, scale), heavy_tailed(rng, n, scale)


@pytest.mark.parametrize("law", [mdsd.IID(1), mdsd.WithoutReplacement(1), mdsd.Greedy(1)], ids=repr)
def test_one_draft_gives_one_minus_total_variation(law):
    for p, q in random_pairs(1):
        assert mdsd.optimal_acceptance(p, q, law) == pytest.approx(np.minimum(p, q).sum(), abs=1e-12)


@pytest.mark.parametrize("name", ["iid", "without_replacement", "greedy", "topk"])
def test_optimum_never_decreases_in_k(name):
    for p, q in random_pairs(2):
        values = [mdsd.optimal_acceptance(p, q, mdsd.law_from_name(name, k)) for k in range(1, 6)]
        assert np.all(np.diff(values) >= -1e-12), values


@pytest.mark.parametrize("k", [2, 3, 4])
def test_without_replacement_beats_iid(k):
    for p, q in random_pairs(3 + k, count=20):
        wor = mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(k))
        assert wor >= mdsd.optimal_acceptance(p, q, mdsd.IID(k)) - 1e-12


def test_hub_equals_greedy_2_equals_closed_form():
    rng = np.random.default_rng(4)
    for p, q in random_pairs(4):
        if rng.random() < 0.3:
            q[np.argsort(-q)[1]] = q.max()  # a tie at the top: the hub is the lower index
            q /= q.sum()
        a = int(np.argmax(q))  # first maximum
        rest = np.arange(q.size) != a
        closed = p[a] + np.minimum(p[rest], q[rest] / (1.0 - q[a])).sum()
        assert mdsd.optimal_acceptance(p, q, mdsd.Hub()) == pytest.approx(closed, abs=1e-12)
        assert mdsd.optimal_acceptance(p, q, mdsd.Greedy(2)) == pytest.approx(closed, abs=1e-12)


def test_one_hot_target_is_the_chance_the_token_is_drafted():
    rng = np.random.default_rng(5)
    for _ in range(20):
        q = random_vector(rng, 6)
        j = int(rng.integers(6))
        p = np.eye(6)[j]
        for k in (1, 2, 3):
            expected = 1.0 - (1.0 - q[j]) ** k
            assert mdsd.optimal_acceptance(p, q, mdsd.IID(k)) == pytest.approx(expected, abs=1e-12)
            assert mdsd.optimal_acceptance(p, q, mdsd.IID(k), method="lp") == pytest.approx(
                expected, abs=1e-9
            )


def test_one_hot_draft():
    p = np.array([0.1, 0.6, 0.3])
    q = np.array([0.0, 1.0, 0.0])
    for law in (mdsd.IID(1), mdsd.IID(3), mdsd.Greedy(1)):
        assert mdsd.optimal_acceptance(p, q, law) == pytest.approx(0.6, abs=1e-12)
    assert mdsd.optimal_acceptance(p, q, mdsd.TopK(2)) == pytest.approx(0.7, abs=1e-12)  # tie -> token 0
    with pytest.raises(ValueError, match="q has 1 tokens"):
        mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(2))


@pytest.mark.parametrize("method", ["dual", "maxflow", "lp", "coupling"])
def test_disjoint_supports_accept_nothing(method):
    p = np.array([0.5, 0.5, 0.0, 0.0, 0.0])
    q = np.array([0.0, 0.0, 0.2, 0.3, 0.5])
    for law in (mdsd.IID(2), mdsd.WithoutReplacement(3), mdsd.Hub(), mdsd.Greedy(3), mdsd.TopK(3)):
        assert mdsd.solve_otm(p, q, law, method=method).value == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("method", ["dual", "maxflow", "lp", "coupling"])
def test_p_equal_q_accepts_always_except_top_k(method):
    rng = np.random.default_rng(6)
    for _ in range(5):
        q = random_vector(rng, 5)
        if np.count_nonzero(q) < 3:
            continue
        for law in (mdsd.IID(2), mdsd.WithoutReplacement(3), mdsd.Hub(), mdsd.Greedy(3)):
            assert mdsd.solve_otm(q, q, law, method=method).value == pytest.approx(1.0, abs=1e-9)
        top = np.sort(q)[::-1][:2].sum()
        assert mdsd.solve_otm(q, q, mdsd.TopK(2), method=method).value == pytest.approx(top, abs=1e-9)


def test_target_mass_on_undraftable_tokens_is_never_accepted():
    rng = np.random.default_rng(7)
    for name in ("iid", "without_replacement", "greedy", "hub", "topk"):
        for _ in range(20):
            p, q, law = instance(rng, name, max_n=6, max_k=3)
            q[np.argmax(p)] = 0.0  # q = 0 where p > 0
            if q.sum() == 0:
                continue
            q /= q.sum()
            try:
                law.check(q)
            except ValueError:
                continue
            value = mdsd.optimal_acceptance(p, q, law)
            assert value == pytest.approx(brute_force(p, q, law), abs=1e-9)
            if name != "topk":  # top-k may draft a token of q = 0 when q's support is short
                assert value <= 1.0 - p.max() + 1e-12


def test_ties_in_q_follow_the_lowest_index_rule():
    p = np.array([0.1, 0.5, 0.2, 0.2])
    q = np.array([0.3, 0.3, 0.3, 0.1])
    for law in (mdsd.Hub(), mdsd.Greedy(2), mdsd.Greedy(3), mdsd.TopK(2)):
        assert mdsd.optimal_acceptance(p, q, law) == pytest.approx(brute_force(p, q, law), abs=1e-12)
    assert mdsd.optimal_acceptance(p, q, mdsd.TopK(2)) == pytest.approx(0.6, abs=1e-12)


def test_optimal_plan_is_a_coupling_with_the_optimal_acceptance():
    rng = np.random.default_rng(8)
    for name in ("iid", "without_replacement", "hub", "greedy", "topk", "joint"):
        for _ in range(15):
            p, q, law = instance(rng, name, max_n=6, max_k=3)
            result = mdsd.optimal_coupling(p, q, law)
            joint = law.joint(q)
            rows: dict[tuple[int, ...], float] = {}
            cols = np.zeros(p.size)
            accepted = 0.0
            for (x, y), mass in result.plan.items():
                assert mass >= 0.0
                rows[x] = rows.get(x, 0.0) + mass
                cols[y] += mass
                accepted += mass if y in x else 0.0
            assert set(rows) <= set(joint)
            for x, w in joint.items():
                assert rows.get(x, 0.0) == pytest.approx(w, abs=1e-9)
            np.testing.assert_allclose(cols, p, rtol=0, atol=1e-9)
            exact = brute_force(p, q, law)
            assert accepted == pytest.approx(exact, abs=1e-9)
            assert result.value == pytest.approx(exact, abs=1e-9)


def test_regression_coupling_lp_presolve_called_tiny_tuple_mass_infeasible():
    """HiGHS's presolve declared this feasible coupling LP infeasible (Q(2, 2, 2) ≈ 1.2e-11)."""
    q = np.array([0.6, 0.4 - 2.3e-4, 2.3e-4])
    p = np.array([0.2, 0.3, 0.5])
    coupling = mdsd.solve_otm(p, q, mdsd.IID(3), method="coupling")
    assert coupling.value == pytest.approx(brute_force(p, q, mdsd.IID(3)), abs=1e-9)


def test_regression_maxflow_survives_capacities_far_apart():
    """networkx preflow-push failed ('min() arg is an empty sequence') with capacities ~1e-18 and ~1
    (found by experiments/theorems.py on a Dirichlet(0.1) pair); max-flow now uses augmenting paths."""
    p = np.array([1.0681059927779883e-18, 0.999989947065151, 1.0052934849031038e-05])
    q = np.array([0.9276823654627134, 1.1892360627995753e-06, 0.07231644530122396])
    law = mdsd.WithoutReplacement(2)
    result = mdsd.solve_otm(p, q, law, method="maxflow")
    assert result.value == pytest.approx(brute_force(p, q, law), abs=1e-12)
    check_certificate(result, p, q, law)


def test_lp_and_coupling_raise_unless_highs_proves_the_optimum(monkeypatch):
    """An LP stopped early (an iteration limit of 0) must not come back as a value."""
    p, q, law = [0.2, 0.3, 0.5], [0.5, 0.3, 0.2], mdsd.IID(2)

    def stopped(*args, **kwargs):
        return solve_sparse_lp(*args, options={"simplex_iteration_limit": 0, "presolve": "off"})

    monkeypatch.setattr(mdsd.otm.lp, "solve_sparse_lp", stopped)
    with pytest.raises(LPError, match="limit"):
        mdsd.solve_otm(p, q, law, method="lp")
    monkeypatch.setattr(
        mdsd.otm.coupling, "_OPTIONS", {**mdsd.otm.coupling._OPTIONS, "simplex_iteration_limit": 0}
    )
    with pytest.warns(UserWarning), pytest.raises(LPError, match="user_limit"):
        mdsd.solve_otm(p, q, law, method="coupling")


@pytest.mark.parametrize(
    "law, method, status, basis",
    [
        (mdsd.IID(3), "dual", "optimal", "sorted-prefix theorem (i.i.d. drafts)"),
        (
            mdsd.WithoutReplacement(2),
            "dual",
            "optimal",
            "sorted-prefix theorem (drafts without replacement, k <= 2)",
        ),
        (
            mdsd.WithoutReplacement(3),
            "dual",
            "conjectured",
            "sorted-prefix conjecture + race quadrature (error <= ",
        ),
        (mdsd.Hub(), "dual", "optimal", "closed form (containment modular beyond a forced set)"),
        (mdsd.Greedy(3), "auto", "optimal", "closed form"),
        (mdsd.TopK(2), "dual", "optimal", "closed form"),
        (mdsd.WithoutReplacement(3), "lp", "optimal", "LP simplex optimality (HiGHS)"),
        (mdsd.WithoutReplacement(3), "maxflow", "optimal", "max-flow min-cut"),
        (mdsd.WithoutReplacement(3), "coupling", "optimal", "LP optimality (full coupling, cvxpy/HiGHS)"),
        (mdsd.Joint({(0, 1): 1.0}), "auto", "optimal", "max-flow min-cut"),
    ],
    ids=lambda x: x if isinstance(x, str) and len(x) < 12 else None,
)
def test_results_say_how_sure_they_are(law, method, status, basis):
    p, q = [0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]
    result = mdsd.solve_otm(p, q, law, method=method)
    assert result.status == status and result.basis.startswith(basis)
    assert (result.error > 0) == (status == "conjectured") and result.error < 1e-12
