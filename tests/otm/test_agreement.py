"""The shared battery: every method on every law, against each other, brute force and certificates."""

from __future__ import annotations

import numpy as np
import pytest
from otm_cases import LAW_NAMES, brute_force, check_certificate, instance

import mdsd

INSTANCES_PER_LAW = 500  # random (p, q, k), n <= 7, k <= 4, adversarial shapes mixed in


@pytest.mark.parametrize("name", LAW_NAMES)
def test_methods_agree_with_each_other_and_brute_force(name):
    """coupling, lp, maxflow and dual agree within 1e-8; each result carries a valid certificate."""
    rng = np.random.default_rng(sum(map(ord, name)))
    for _ in range(INSTANCES_PER_LAW):
        p, q, law = instance(rng, name)
        exact = brute_force(p, q, law)
        methods = ["coupling", "lp", "maxflow"] + (["dual"] if name != "joint" else [])
        for method in methods:
            result = mdsd.solve_otm(p, q, law, method=method)
            assert result.method == method
            assert abs(result.value - exact) <= 1e-8, (method, p, q, law, result.value, exact)
            check_certificate(result, p, q, law)
        assert mdsd.solve_otm(p, q, law).value == pytest.approx(exact, abs=1e-8)  # "auto"


def test_dual_is_refused_for_joint_laws():
    law = mdsd.Joint({(0, 1): 1.0})
    with pytest.raises(ValueError, match="dual"):
        mdsd.solve_otm([0.5, 0.5], [0.5, 0.5], law, method="dual")
    assert mdsd.solve_otm([0.5, 0.5], [0.5, 0.5], law).method == "maxflow"
