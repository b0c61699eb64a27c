"""The closed-form optimal selection law: a base of g for every token set (all subsets enumerated) with
Σ min(F, p) = α* (LP), for i.i.d. drafts and drafts without replacement; equal to the priority layout's
law for i.i.d. drafts; at full vocabulary against the dual."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from otm_cases import exact_joint, random_pair

import mdsd
from mdsd.otm.selection import optimal_selection_law
from mdsd.verifiers.optimal.layout import iid_layout


def _pairs(law, count, seed):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        p, q = random_pair(rng, int(rng.integers(max(2, law.k), 7)))
        if np.count_nonzero(q) >= law.min_support():
            out.append((p, q))
    return out


@pytest.mark.parametrize(
    "law",
    [
        mdsd.IID(2),
        mdsd.IID(3),
        mdsd.WithoutReplacement(2),
        mdsd.WithoutReplacement(3),
        mdsd.WithoutReplacement(4),
    ],
)
def test_law_is_an_optimal_base_of_every_set(law):
    """F >= 0 sums to 1, F(A) <= g(A) = P(set(x̄) ∩ A ≠ ∅) for all 2^n sets, Σ min(F, p) = α*."""
    for p, q in _pairs(law, 60, seed=law.k + 10 * (law.name == "iid")):
        f = optimal_selection_law(p, q, law).law
        assert f.min() >= 0.0 and f.sum() == pytest.approx(1.0, abs=1e-12)
        joint = exact_joint(q, law)
        for size in range(1, p.size + 1):
            for subset in itertools.combinations(range(p.size), size):
                hit = math.fsum(w for x, w in joint.items() if set(x) & set(subset))
                assert f[list(subset)].sum() <= hit + 1e-12, (p, q, subset)
        best = mdsd.optimal_acceptance(p, q, law, method="lp")
        assert np.minimum(f, p).sum() == pytest.approx(best, abs=1e-9), (p, q)


def test_iid_law_is_the_layouts():
    rng = np.random.default_rng(3)
    for k in (1, 2, 4, 8):
        for _ in range(30):
            p, q = random_pair(rng, int(rng.integers(2, 9)))
            lay = iid_layout(torch.tensor(p)[None], torch.tensor(q)[None], k).target[0].numpy()
            s = optimal_selection_law(p, q, mdsd.IID(k))
            assert s.proven
            np.testing.assert_allclose(s.law, lay, rtol=0, atol=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_without_replacement_at_full_vocabulary(k):
    """V = 151,936: Σ min(F, p) = α*_wor (the dual) and F >= 0 sums to 1; the result says it is checked."""
    gen = torch.Generator().manual_seed(k)
    logits = 3 * torch.randn(151_936, generator=gen, dtype=torch.float64)
    p = torch.softmax(logits, 0).numpy()
    q = torch.softmax(logits + torch.randn(151_936, generator=gen, dtype=torch.float64), 0).numpy()
    law = mdsd.WithoutReplacement(k)
    s = optimal_selection_law(p, q, law)
    assert not s.proven and "checked" in s.basis
    assert s.law.min() >= 0.0 and s.law.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.minimum(s.law, p).sum() == pytest.approx(mdsd.optimal_acceptance(p, q, law), abs=1e-9)


def test_bad_input():
    with pytest.raises(ValueError, match="sorted-prefix dual"):
        optimal_selection_law([0.5, 0.5], [0.5, 0.5], mdsd.Hub())
    with pytest.raises(ValueError, match="same shape"):
        optimal_selection_law([0.5, 0.5], [0.2, 0.3, 0.5], mdsd.IID(2))
    with pytest.raises(ValueError, match="needs at least"):
        optimal_selection_law([0.5, 0.5, 0.0], [1.0, 0.0, 0.0], mdsd.WithoutReplacement(2))
    with pytest.raises(ValueError, match="one distribution"):
        optimal_selection_law([[0.5, 0.5]], [[0.5, 0.5]], mdsd.IID(2))
