"""Every verifier's exact acceptance against the optimum α*(p, Q) of its law (mdsd.optimal_acceptance)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from verifier_cases import GRID, pairs_for
from verifier_enumeration import output_law

import mdsd

OPTIMAL = {"spechub", "greedy", "topk", "single", "optimal"}  # optimal for their law (single: k = 1)


def _cases(v):
    rng = np.random.default_rng(len(v.name) * 10 + v.k)
    small = pairs_for(v, 150, seed=v.k + 17)
    large = []
    for n in (40, 300):
        for _ in range(10):
            p, q = rng.dirichlet(np.full(n, 0.3)), rng.dirichlet(np.full(n, 0.3))
            large.append((p, 0.5 * q + 0.5 * p))  # related pairs: acceptance well inside (0, 1)
    return small + large


@pytest.mark.parametrize(("name", "k"), GRID)
def test_acceptance_is_at_most_the_optimum(name, k):
    v = mdsd.verifier(name, k)
    for p, q in _cases(v):
        if v.exact_obstacle(q) is not None:
            continue  # exact RRSw k = 3 stops at its enumeration limit
        # small n: the simplified LP on the exact joint (not the dual closed forms); else the dual
        best = mdsd.optimal_acceptance(p, q, v.law, method="lp" if p.size <= 6 else "auto")
        alpha = v.acceptance(p, q)
        assert alpha <= best + 1e-9, (name, k, alpha, best)
        if name in OPTIMAL or k == 1:
            assert alpha == pytest.approx(best, abs=1e-9), (name, k, p, q)
        if name == "kseq":
            assert alpha >= (1 - 1 / math.e) * best - 1e-9, (p, q)  # 1e-9: the LP solver tolerance


def test_spechub_emits_the_hub_with_probability_p_hub():
    v = mdsd.verifier("spechub", 2)
    for p, q in pairs_for(v, 200, seed=3):
        law, accepted = output_law(v, p, q)
        hub = int(np.argmax(q))
        assert law[hub] == pytest.approx(p[hub], abs=1e-12)
        # every pair holds the hub, so its whole mass p_hub is accepted mass
        others = np.arange(p.size) != hub
        assert accepted == pytest.approx(p[hub] + np.minimum(p[others], q[others] / q[others].sum()).sum())
    p, q = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.4, 0.3, 0.2, 0.1])
    tokens, _ = v.simulate(p, q, 100_000, seed=0)
    rate = float((tokens == 0).double().mean())
    assert abs(rate - 0.1) < 4 * math.sqrt(0.1 * 0.9 / 100_000)


def test_verifiers_rank_as_the_theory_says():
    """On related pairs: RRSw ≥ RRS (without replacement helps) and every multi-draft verifier ≥ single."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        p = rng.dirichlet(np.full(30, 0.5))
        q = 0.6 * p + 0.4 * rng.dirichlet(np.full(30, 0.5))
        single = mdsd.verifier("single", 1).acceptance(p, q)
        rrs, rrsw = mdsd.verifier("rrs", 2).acceptance(p, q), mdsd.verifier("rrsw", 2).acceptance(p, q)
        assert single <= rrs + 1e-12 and rrs <= rrsw + 1e-12
        assert mdsd.verifier("spechub", 2).acceptance(p, q) >= single - 1e-12
