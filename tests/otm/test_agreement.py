"""The shared battery: every method on every law, against each other, brute force and certificates.

Inputs are adversarial and never smoothed (tests/otm/otm_cases.py): entries from 1 down to 1e-300, softmax
at temperatures down to 0.01, exact zeros, one-hot vectors, ties, p = q, disjoint supports. lp, maxflow and
dual run on every case (2,100 in all, n <= 8, k <= 4); the cvxpy coupling LP, slow to build, on one case in
eight. All must agree with the brute force over every cut within 1e-9.
"""

from __future__ import annotations

import numpy as np
import pytest
from otm_cases import LAW_NAMES, brute_force, check_certificate, exact_joint, instance

import mdsd

CASES_PER_LAW = 350
COUPLING_EVERY = 8
TOL = 1e-9


@pytest.mark.parametrize("name", LAW_NAMES)
def test_methods_agree_with_each_other_and_brute_force(name):
    """coupling, lp, maxflow and dual agree within 1e-9; each result carries a valid certificate."""
    rng = np.random.default_rng(sum(map(ord, name)))
    for case in range(CASES_PER_LAW):
        p, q, law = instance(rng, name)
        joint = exact_joint(q, law)
        exact = brute_force(p, q, law, joint)
        methods = ["lp", "maxflow"] + (["dual"] if law.dual_form() is not None else [])
        methods += ["coupling"] if case % COUPLING_EVERY == 0 else []
        for method in methods:
            result = mdsd.solve_otm(p, q, law, method=method)
            assert result.method == method
            assert abs(result.value - exact) <= TOL, (
                method,
                p.tolist(),
                q.tolist(),
                law,
                result.value,
                exact,
            )
            check_certificate(result, p, q, law, TOL, joint)
        assert abs(mdsd.optimal_acceptance(p, q, law) - exact) <= TOL  # "auto", the value-only path


def test_dual_is_refused_for_joint_laws():
    law = mdsd.Joint({(0, 1): 1.0})
    with pytest.raises(ValueError, match="dual"):
        mdsd.solve_otm([0.5, 0.5], [0.5, 0.5], law, method="dual")
    assert mdsd.solve_otm([0.5, 0.5], [0.5, 0.5], law).method == "maxflow"
