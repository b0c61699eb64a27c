"""mdsd.toy_pair: SpecHub's toy generator (formula, reproducibility, validation)."""

import math

import numpy as np
import pytest
import scipy.stats
import torch

import mdsd
from mdsd.toy import dirichlet_pair, toy_pair


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("n", [1, 3, 50])
@pytest.mark.parametrize("temperature", [0.1, 0.5, 2.0])
@pytest.mark.parametrize("similarity", [0.0, 0.3, 1.0])
def test_formula_from_the_same_uniforms(n, temperature, similarity):
    """p = softmax(a/T), q = softmax((s a + (1-s) b)/T) with a then b drawn from the generator."""
    p, q = toy_pair(n, temperature, similarity, torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(7)
    a = torch.rand(1, n, generator=g, dtype=torch.float64).numpy()[0]
    b = torch.rand(1, n, generator=g, dtype=torch.float64).numpy()[0]
    # independent softmax in numpy, with an explicit loop for the mixture
    mix = np.array([similarity * a[i] + (1 - similarity) * b[i] for i in range(n)])
    np.testing.assert_allclose(p.numpy(), _softmax(a / temperature), rtol=1e-12, atol=0)
    np.testing.assert_allclose(q.numpy(), _softmax(mix / temperature), rtol=1e-12, atol=0)
    assert p.dtype == q.dtype == torch.float64
    assert p.shape == q.shape == (n,)


def test_similarity_one_gives_equal_pair_and_zero_gives_unrelated():
    p, q = toy_pair(20, 0.3, 1.0, torch.Generator().manual_seed(1))
    assert torch.equal(p, q)
    p, q = toy_pair(20, 0.3, 0.0, torch.Generator().manual_seed(1))
    assert not torch.allclose(p, q)


def test_entries_lie_within_the_softmax_bounds():
    """Logits in [0, 1): every probability lies in [e^{-1/T}/n, e^{1/T}/n]."""
    n, temperature = 30, 0.25
    p, q = toy_pair(n, temperature, 0.6, torch.Generator().manual_seed(3), batch=40)
    for x in (p, q):
        assert float(x.min()) >= math.exp(-1 / temperature) / n
        assert float(x.max()) <= math.exp(1 / temperature) / n
        torch.testing.assert_close(x.sum(-1), torch.ones(40, dtype=torch.float64), rtol=0, atol=1e-12)


def test_seeded_generator_reproduces_and_different_seeds_differ():
    first = toy_pair(10, 0.5, 0.7, torch.Generator().manual_seed(42))
    again = toy_pair(10, 0.5, 0.7, torch.Generator().manual_seed(42))
    other = toy_pair(10, 0.5, 0.7, torch.Generator().manual_seed(43))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], other[0])


def test_batch_rows_are_distinct_pairs():
    p, q = toy_pair(6, 0.5, 0.5, torch.Generator().manual_seed(0), batch=5)
    assert p.shape == q.shape == (5, 6)
    assert len({tuple(row.tolist()) for row in p}) == 5


def test_does_not_touch_the_global_rng_when_given_a_generator():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    toy_pair(10, 0.5, 0.5, torch.Generator().manual_seed(0))
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize(
    ("kwargs", "error", "needle"),
    [
        ({"n": 0}, ValueError, "n"),
        ({"n": 2.5}, TypeError, "n"),
        ({"temperature": 0.0}, ValueError, "temperature"),
        ({"temperature": -1.0}, ValueError, "temperature"),
        ({"temperature": float("nan")}, ValueError, "temperature"),
        ({"temperature": "hot"}, TypeError, "temperature"),
        ({"similarity": 1.5}, ValueError, "similarity"),
        ({"similarity": -0.1}, ValueError, "similarity"),
        ({"similarity": float("inf")}, ValueError, "similarity"),
        ({"generator": 3}, TypeError, "generator"),
        ({"batch": 0}, ValueError, "batch"),
    ],
)
def test_bad_arguments_raise_naming_them(kwargs, error, needle):
    args = {"n": 5, "temperature": 0.5, "similarity": 0.5, "generator": None} | kwargs
    with pytest.raises(error, match=needle):
        toy_pair(**args)


def test_reexported_at_the_root():
    assert mdsd.toy_pair is toy_pair
    assert "toy_pair" in mdsd.__all__


def _ks_pvalue_first_marginal(p0: np.ndarray, n: int, concentration: float) -> float:
    """KS test of p_0 against its exact marginal Beta(c, (n - 1) c)."""
    return scipy.stats.kstest(p0, scipy.stats.beta(concentration, (n - 1) * concentration).cdf).pvalue


@pytest.mark.parametrize(("n", "concentration"), [(3, 0.1), (5, 0.3), (20, 1.0), (50, 4.0)])
def test_dirichlet_marginal_is_beta(n, concentration):
    """Seeded KS test at alpha = 1e-3 against Beta(c, (n-1)c), for p and for q (4000 draws each)."""
    p, q = dirichlet_pair(n, concentration, torch.Generator().manual_seed(11), batch=4000)
    for x in (p, q):
        assert _ks_pvalue_first_marginal(x[:, 0].numpy(), n, concentration) > 1e-3
    assert not torch.equal(p, q)


def test_dirichlet_ks_test_catches_a_missing_power_correction():
    """The same test rejects Gamma(c + 1) components (Dirichlet(c + 1)): the check has power."""
    n, c = 5, 0.3
    rng = np.random.default_rng(0)
    g = rng.gamma(c + 1.0, size=(4000, n))
    wrong = g / g.sum(axis=1, keepdims=True)
    assert _ks_pvalue_first_marginal(wrong[:, 0], n, c) < 1e-3


def test_dirichlet_tiny_concentration_stays_a_distribution():
    p, q = dirichlet_pair(3, 1e-4, torch.Generator().manual_seed(0), batch=200)
    for x in (p, q):
        assert bool(torch.isfinite(x).all())
        torch.testing.assert_close(x.sum(-1), torch.ones(200, dtype=torch.float64), rtol=0, atol=1e-12)


def test_dirichlet_reproducible_and_validated():
    a = dirichlet_pair(8, 0.5, torch.Generator().manual_seed(5))
    b = dirichlet_pair(8, 0.5, torch.Generator().manual_seed(5))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[0].shape == (8,)
    with pytest.raises(ValueError, match="concentration"):
        dirichlet_pair(8, 0.0)
    with pytest.raises(ValueError, match="n"):
        dirichlet_pair(0, 1.0)
    with pytest.raises(TypeError, match="generator"):
        dirichlet_pair(8, 1.0, generator=np.random.default_rng(0))
