"""Exact output law and acceptance of every verifier, by enumeration independent of the samplers (n <= 6)."""

from __future__ import annotations

import numpy as np
import pytest
from verifier_cases import GRID, pairs_for
from verifier_enumeration import output_law

import mdsd

COUNT = {1: 300, 2: 300, 3: 120}  # pairs per (verifier, k); k = 3 enumerates up to 216 tuples per pair


@pytest.mark.parametrize(("name", "k"), GRID)
def test_output_law_is_p_and_acceptance_is_exact(name, k):
    v = mdsd.verifier(name, k)
    sizes = (3, 4, 5, 6) if k == 3 else (1, 2, 3, 4, 5, 6)
    cases = pairs_for(v, COUNT[k], seed=sum(map(ord, name)) + 100 * k, sizes=sizes)
    for p, q in cases:
        law, accepted = output_law(v, p, q)
        np.testing.assert_allclose(law, p, rtol=0, atol=1e-10, err_msg=f"{name} k={k} p={p} q={q}")
        assert v.acceptance(p, q) == pytest.approx(accepted, abs=1e-10), (name, k, p, q)


def test_enumerator_catches_a_lossy_rule():
    """The battery can fail: RRS with the residual norm(p − q)+ replaced by p is not lossless."""
    import verifier_enumeration as enum

    v = mdsd.verifier("rrs", 2)
    p, q = np.array([0.1, 0.2, 0.7]), np.array([0.5, 0.3, 0.2])
    law, _ = output_law(v, p, q)
    np.testing.assert_allclose(law, p, atol=1e-12)
    original = enum.RULES["rrs"]

    def lossy(p, q, xs):
        out = original(p, q, xs)
        out[xs[0]] += 0.01  # a biased accept step
        return out / out.sum()

    enum.RULES["rrs"] = lossy
    try:
        law, _ = output_law(v, p, q)
    finally:
        enum.RULES["rrs"] = original
    assert np.abs(law - p).max() > 1e-3
