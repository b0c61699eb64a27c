"""The two-step verifier is lossless for any selection rule whose law F is exact (docs/mathematics.md §6)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verifier_cases import adversarial_pair

import mdsd
from mdsd.verifiers.optimal.twostep import selection_acceptance, two_step


def _random_rule(rng, joint, n):
    """A random selection rule: each tuple keeps a random share of its mass on its distinct tokens."""
    table = {}
    for x, w in joint.items():
        s = np.zeros(n)
        tokens = sorted(set(x))
        s[tokens] = rng.dirichlet(np.ones(len(tokens))) * rng.choice([1.0, rng.random()])
        table[x] = (w, s)
    return table


def _output_law(p, table, law=None):
    """Law of the emitted token, enumerated from the rule (independent of the samplers); ``law``
    replaces the rule's exact F in the accept step and residual (to break the verifier on purpose)."""
    law = sum(w * s for w, s in table.values()) if law is None else law
    resid = np.maximum(p - law, 0.0)
    resid = resid / resid.sum() if resid.sum() > 0 else np.zeros_like(p)
    accept = np.where(law > 0, np.minimum(1.0, np.divide(p, law, out=np.ones_like(p), where=law > 0)), 0.0)
    out, accepted = np.zeros(p.size), 0.0
    for x, (w, s) in table.items():
        emitted = s * accept + (1.0 - (s * accept).sum()) * resid
        out += w * emitted
        accepted += w * emitted[sorted(set(x))].sum()
    return out, accepted


@pytest.mark.parametrize("law", [mdsd.IID(2), mdsd.WithoutReplacement(3), mdsd.IID(3)])
def test_any_rule_with_its_exact_law_is_lossless(law):
    rng = np.random.default_rng(law.k)
    for kind in range(60):
        n = 3 + kind % 3
        p, q = adversarial_pair(rng, n, kind)
        try:
            law.check(q)
        except ValueError:
            continue
        table = _random_rule(rng, law.joint(q), n)
        out, accepted = _output_law(p, table)
        np.testing.assert_allclose(out, p, rtol=0, atol=1e-12)
        acc, f = selection_acceptance(p, table)
        assert acc == pytest.approx(accepted, abs=1e-12)
        assert acc >= np.minimum(f, p).sum() - 1e-15


def test_a_wrong_law_is_caught():
    """The battery can fail: an accept step that uses a slightly wrong F is not lossless."""
    rng = np.random.default_rng(0)
    p, q = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.4, 0.3, 0.2, 0.1])
    table = _random_rule(rng, mdsd.IID(2).joint(q), 4)
    exact = sum(w * s for w, s in table.values())
    np.testing.assert_allclose(_output_law(p, table, exact)[0], p, atol=1e-12)
    wrong = exact * np.array([1.05, 1.0, 1.0, 0.95])
    assert np.abs(_output_law(p, table, wrong)[0] - p).max() > 1e-3


def test_torch_two_step_matches_the_formula_on_a_grid_of_uniforms():
    """Accept z iff u < min(1, p(z)/F(z)); else the residual drawn with (u − a)/(1 − a)."""
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    law = torch.tensor([0.3, 0.1, 0.25, 0.2], dtype=torch.float64)  # F(V) < 1: ⊥ has mass 0.15
    grid = (torch.arange(200_000, dtype=torch.float64) + 0.5) / 200_000
    resid = (p - law).clamp_min(0)
    resid = resid / resid.sum()
    for z in (-1, 0, 1, 2, 3):
        out = two_step(p, law, torch.full(grid.shape, z), grid)
        freq = torch.bincount(out, minlength=4).double() / grid.numel()
        a = 0.0 if z < 0 else min(1.0, float(p[z] / law[z]))
        expected = (1 - a) * resid
        if z >= 0:
            expected[z] += a
        assert torch.allclose(freq, expected, atol=2e-5), (z, freq, expected)


def test_selection_acceptance_counts_residuals_landing_on_drafts():
    p = np.array([0.5, 0.5])
    table = {(0, 1): (1.0, np.array([1.0, 0.0]))}  # always selects 0, F = (1, 0): half rejected
    acc, f = selection_acceptance(p, table)
    assert f.tolist() == [1.0, 0.0]
    assert acc == pytest.approx(1.0)  # the residual is token 1, which was drafted too
