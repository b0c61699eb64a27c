"""Exact output law and acceptance of every verifier by enumeration over the draft tuples (n <= 6): the law is
p, and its acceptance is the verifier's closed form (written separately)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import brentq
from verifier_cases import GRID, pairs_for
from verifier_enumeration import output_law

import mdsd
from mdsd.verifiers import RRSVerifier
from mdsd.verifiers.kseq import kseq_rho

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


def test_enumerator_catches_a_lossy_rule(monkeypatch):
    """The battery can fail: RRS with a biased accept step is not lossless, and the enumeration says so."""
    v = mdsd.verifier("rrs", 2)
    p, q = np.array([0.1, 0.2, 0.7]), np.array([0.5, 0.3, 0.2])
    law, _ = output_law(v, p, q)
    np.testing.assert_allclose(law, p, atol=1e-12)
    original = RRSVerifier._output_law

    def lossy(self, p, q, xs):
        out = original(self, p, q, xs)
        out[xs[0]] += 0.01  # a biased accept step
        return out / out.sum()

    monkeypatch.setattr(RRSVerifier, "_output_law", lossy)
    law, _ = output_law(v, p, q)
    assert np.abs(law - p).max() > 1e-3


def _brent_rho(p, q, k):
    """K-SEQ's ρ*: the root in [1, k] of g(ρ) = 1 − (1 − β(ρ))^k − ρ β(ρ), β(ρ) = Σ min(p/ρ, q), by
    Brent's method (independent of the package's grid bisection)."""

    def g(rho):
        b = np.minimum(p / rho, q).sum()
        return 1 - (1 - b) ** k - rho * b

    if g(1.0) <= 0:
        return 1.0
    if g(float(k)) >= 0:  # only by rounding (β tiny): every ρ is a root to working precision
        return float(k)
    return brentq(g, 1.0, float(k), xtol=1e-15, rtol=4 * np.finfo(float).eps)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_kseq_rho_is_the_root_brent_finds(k):
    """The output law and the sampler share kseq_rho; here it is checked against Brent's method: g(ρ) <= 0
    at the package's ρ, and ρ is Brent's root to 1e-6 or g is flat there (|g| <= 1e-12: p = q, or β so
    small that every ρ is a root to working precision)."""
    for p, q in pairs_for(mdsd.verifier("kseq", k), 200, seed=k, sizes=(2, 3, 5, 8)):
        rho = float(kseq_rho(torch.from_numpy(p), torch.from_numpy(q), k)[0])
        b = np.minimum(p / rho, q).sum()
        g = 1 - (1 - b) ** k - rho * b
        assert g <= 1e-15
        assert abs(rho - _brent_rho(p, q, k)) <= 1e-6 or abs(g) <= 1e-12, (p, q, rho)
