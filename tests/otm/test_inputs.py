"""Every bad input to the OTM API raises the promised error, naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

import mdsd

GOOD_P = [0.2, 0.3, 0.5]
GOOD_Q = [0.5, 0.3, 0.2]


@pytest.mark.parametrize(
    "p, q, match",
    [
        ([0.2, np.nan, 0.8], GOOD_Q, "p contains NaN"),
        (GOOD_P, [0.5, np.inf, 0.2], "q contains NaN or infinite"),
        ([0.2, -0.3, 1.1], GOOD_Q, "p has negative"),
        (GOOD_P, [0.5, 0.3, 0.3], "q must sum to 1"),
        ([0.2, 0.3, 0.4], GOOD_Q, "p must sum to 1"),
        ([0.5, 0.5], GOOD_Q, "same shape"),
        ([], [], "p must have shape"),
    ],
)
@pytest.mark.parametrize(
    "call", [mdsd.optimal_acceptance, mdsd.solve_otm, lambda p, q, law: mdsd.optimal_coupling(p, q, law)]
)
def test_bad_distributions(call, p, q, match):
    with pytest.raises(ValueError, match=match):
        call(p, q, mdsd.IID(2))


def test_within_tolerance_is_renormalised_and_inputs_are_not_mutated():
    p = np.array([0.2, 0.3, 0.5 + 5e-7])
    q = np.array([0.5, 0.3, 0.2])
    kept = p.copy()
    assert mdsd.optimal_acceptance(p, q, mdsd.IID(1)) == pytest.approx(np.minimum(p / p.sum(), q).sum())
    np.testing.assert_array_equal(p, kept)


@pytest.mark.parametrize(
    "law, q, match",
    [
        (mdsd.WithoutReplacement(3), [0.5, 0.5, 0.0], "q has 2 tokens"),
        (mdsd.Greedy(3), [0.5, 0.5, 0.0], "q has 2 tokens"),
        (mdsd.Hub(), [1.0, 0.0, 0.0], "q has 1 tokens"),
        (mdsd.TopK(4), [0.5, 0.3, 0.2], "q has 3 tokens"),
        (mdsd.Joint({(0, 5): 1.0}), [0.5, 0.3, 0.2], "outside q's vocabulary"),
    ],
)
@pytest.mark.parametrize("method", ["auto", "lp"])
def test_infeasible_k_names_q(law, q, match, method):
    with pytest.raises(ValueError, match=match):
        mdsd.solve_otm(GOOD_P, q, law, method=method)


def test_bad_method_lists_the_valid_ones():
    with pytest.raises(ValueError, match="'auto', 'dual', 'maxflow', 'lp', 'coupling'"):
        mdsd.solve_otm(GOOD_P, GOOD_Q, mdsd.IID(2), method="simplex")
    with pytest.raises(ValueError, match="method must be one of"):
        mdsd.optimal_acceptance(GOOD_P, GOOD_Q, mdsd.IID(2), method="DUAL")


def test_law_must_be_a_draft_law():
    with pytest.raises(TypeError, match="law must be a draft law"):
        mdsd.solve_otm(GOOD_P, GOOD_Q, 2)


def test_one_pair_only_where_promised():
    batch = np.array([GOOD_P, GOOD_Q])
    with pytest.raises(ValueError, match="one pair of vectors"):
        mdsd.solve_otm(batch, batch, mdsd.IID(2))
    with pytest.raises(ValueError, match="one pair of vectors"):
        mdsd.optimal_coupling(batch, batch, mdsd.IID(2))


@pytest.mark.parametrize("method", ["lp", "maxflow", "coupling"])
def test_enumerating_methods_refuse_huge_networks(method):
    p = np.full(100, 0.01)
    with pytest.raises(ValueError, match="too many draft tuples .* use method='dual'"):
        mdsd.solve_otm(p, p, mdsd.IID(4), method=method)
    with pytest.raises(ValueError, match="too many draft tuples"):
        mdsd.optimal_coupling(p, p, mdsd.IID(4))


def test_coupling_refuses_more_variables_than_it_can_build():
    """n = 4, k = 8: 65,536 tuples × 4 tokens; cvxpy took minutes. The LP on the draft sets does not."""
    p, q = [0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]
    with pytest.raises(
        ValueError,
        match="coupling LP of 65,536 tuples and 262,144 variables .* use method='lp' or 'maxflow', or 'dual'",
    ):
        mdsd.solve_otm(p, q, mdsd.IID(8), method="coupling")
    assert mdsd.solve_otm(p, q, mdsd.IID(8), method="lp").value == pytest.approx(
        mdsd.optimal_acceptance(p, q, mdsd.IID(8)), abs=1e-9
    )


def test_dual_refuses_k_beyond_its_float_range():
    """30 drafts over 100 tokens: the race integral would overflow; refused where it is needed."""
    q = np.full(100, 0.01)
    p = np.where(np.arange(100) < 90, 0.0, 0.1)  # the prefix of the 90 tokens p = 0 must be integrated
    with pytest.raises(ValueError, match="beyond the dual's range"):
        mdsd.optimal_acceptance(p, q, mdsd.WithoutReplacement(30))
    assert mdsd.optimal_acceptance(q, q, mdsd.WithoutReplacement(30)) == 1.0  # bounds alone decide p = q


def test_table_arguments():
    with pytest.raises(ValueError, match="hub law has k = 2"):
        mdsd.optimal_acceptance_table(GOOD_P, GOOD_Q, laws=["hub"])
    with pytest.raises(ValueError, match="law must be one of"):
        mdsd.optimal_acceptance_table(GOOD_P, GOOD_Q, laws=["beam"])
    with pytest.raises(TypeError, match="ks must be an integer"):
        mdsd.optimal_acceptance_table(GOOD_P, GOOD_Q, ks=[1.5])
    with pytest.raises(ValueError, match="q has 3 tokens"):
        mdsd.optimal_acceptance_table(GOOD_P, GOOD_Q, ks=[4], laws=["wor"])
    with pytest.raises(ValueError, match="same shape"):
        mdsd.optimal_acceptance_table(GOOD_P, [0.5, 0.5])
