"""mdsd.sampling and the law samplers built on it: exact inversion, exact masses, the race, the top-k,
and the low-temperature bug (issue 12 §2): drafts with q = 0 from tiny probabilities."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch
from scipy.stats import chi2

import mdsd
from mdsd.laws import ranked
from mdsd.sampling import (
    block_masses,
    block_size,
    drawn_top_k,
    inverse_cdf,
    masses_without,
    race_top_k,
    top_k,
)

ALPHA = 1e-3


def _first_above(w: np.ndarray, u: float) -> int:
    """Flat float64 inversion: the first i with cumsum(w)_i > u Σ w (an independent reference)."""
    c = np.cumsum(w)
    above = np.flatnonzero((c > u * c[-1]) & (w > 0))
    return int(above[0]) if above.size else int(np.flatnonzero(w > 0)[-1])  # u Σ w rounded up to Σ w


def _adversarial_weights(rng: np.random.Generator, n: int, kind: int) -> np.ndarray:
    w = rng.dirichlet(np.full(n, 0.5))
    if kind % 5 == 1:
        w = np.zeros(n)
        w[rng.integers(n)] = 1.0  # one-hot
    elif kind % 5 == 2:
        w[rng.random(n) < 0.6] = 0.0  # many exact zeros
        w[rng.integers(n)] += 1e-3
    elif kind % 5 == 3:
        w = 10.0 ** -rng.uniform(0, 300, size=n)  # entries spanning 1e-300..1
    elif kind % 5 == 4:
        w = rng.integers(0, 3, size=n).astype(float)  # ties and zeros
        w[0] += 1.0
    return w


@pytest.mark.parametrize("n", [1, 2, 7, 16, 17, 130])
def test_inverse_cdf_is_the_flat_inversion(n):
    """Two-level inversion = flat float64 inversion, for uniforms spread over [0, 1) and right at the
    cumulative boundaries; never a token of zero weight."""
    rng = np.random.default_rng(n)
    for kind in range(25):
        w = _adversarial_weights(rng, n, kind)
        c = np.cumsum(w) / w.sum()
        us = np.concatenate([rng.random(50), np.clip(c[:-1], 0, 1 - 1e-16), [0.0, 1 - 2**-53]])
        us = np.minimum(np.concatenate([us, np.nextafter(us, 1.0)]), 1 - 2**-53)  # U in [0, 1)
        got = inverse_cdf(torch.tensor(w), torch.tensor(us).unsqueeze(0))[0].numpy()
        assert (w[got] > 0).all()
        expected = [_first_above(w, u) for u in us]
        mismatch = np.flatnonzero(got != expected)
        # only right at a cumulative boundary may the two summation orders round differently
        assert all(np.isclose(us[i], c, rtol=0, atol=1e-12).any() for i in mismatch), (w, us[mismatch])


def test_inverse_cdf_batched_dropped_and_fallback():
    """Rows broadcast; ``dropped`` equals zeroing those tokens; empty rows and forced rows use the
    fallback; a row without mass and without fallback still returns a token in range."""
    rng = np.random.default_rng(0)
    n = 40
    w = torch.tensor(rng.dirichlet(np.full(n, 0.3), size=6))
    w[1] = 0.0
    w[2] = torch.eye(n)[5].double()
    fallback = torch.tensor(rng.dirichlet(np.ones(n), size=6))
    dropped = torch.tensor([[0, 1], [2, 3], [5, 6], [7, 8], [9, 9], [39, 38]])
    u = torch.rand(6, 300, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    force = torch.tensor([False, False, False, True, False, False])
    got = inverse_cdf(w, u, dropped=dropped, fallback=fallback, use_fallback=force)
    for r in range(6):
        weights = w[r].numpy().copy()
        weights[dropped[r].numpy()] = 0.0
        if weights.sum() == 0 or force[r]:
            weights = fallback[r].numpy()
        assert [_first_above(weights, x) for x in u[r].tolist()] == got[r].tolist()
    lost = inverse_cdf(torch.zeros(3, n), u[:3])
    assert ((lost >= 0) & (lost < n)).all()
    shared = inverse_cdf(w[0], u)  # one row for many draws
    assert torch.equal(shared, inverse_cdf(w[0].expand(6, n), u))


def test_masses_without_has_no_cancellation():
    """Σ_{y ∉ dropped} w(y) to float64 rounding although w(dropped) ≈ 1 (a subtraction gives 0)."""
    for dtype in (torch.float32, torch.float64):
        w = torch.zeros(3, 400, dtype=dtype)
        w[:, 17] = 1.0
        w[0, 18], w[0, 200] = 1e-30, 3e-30  # same block as the dropped token, and another block
        w[1, 399] = 1e-40 if dtype == torch.float64 else 1e-38
        w[2, 16] = 2e-8
        dropped = torch.tensor([[17], [17], [17]])
        rest = masses_without(w, block_masses(w), dropped).sum(-1)
        exact = [math.fsum(np.delete(row.double().numpy(), 17)) for row in w]
        np.testing.assert_allclose(rest.numpy(), exact, rtol=1e-12, atol=0)
        assert float(w[0].double().sum() - w[0, 17].double()) == 0.0  # what the subtraction gives
    assert block_size(151_936) == 390 and block_masses(torch.ones(151_936)).shape == (390,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_top_k_is_ranked_with_ties_to_the_lower_index(dtype):
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 30))
        x = rng.integers(0, 4, size=(3, n)) / 4.0
        x[0] = rng.random(n)
        for k in {0, 1, int(rng.integers(1, n + 1)), n}:
            got = top_k(torch.tensor(x, dtype=dtype), k).numpy()
            assert (got == ranked(x)[:, :k]).all(), (x, k)
    assert top_k(torch.tensor([-0.0, 0.0, 0.0]), 2).tolist() == [0, 1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_drawn_top_k_is_top_k_on_the_rows_with_few_positive_tokens(dtype):
    """Draws as a sampler may return them on a sparse row: its positive tokens first (in any order), then
    any tokens (zeros, repeats of the positive ones)."""
    rng = np.random.default_rng(4)
    sparse_rows = 0
    for _ in range(300):
        n = int(rng.integers(1, 40))
        k = int(rng.integers(1, n + 1))
        need = int(rng.integers(1, k + 1))
        x = rng.integers(0, 3, size=(6, n)) / 3.0  # ties
        x[rng.random((6, n)) < 0.7] = 0.0  # most rows sparse
        x[0] = rng.random(n) * 10.0 ** -rng.integers(0, 300, size=n)  # down to 1e-300 (0 in float32)
        x[1] = 0.0
        x[1, rng.integers(0, n)] = 1.0  # one-hot
        t = torch.tensor(x, dtype=dtype)
        t[2, : k // 2] = -0.0
        drawn = []
        for row in t:
            positive = rng.permutation(np.flatnonzero(row.numpy() > 0))
            drawn.append(np.r_[positive, rng.integers(0, n, size=k)][:k])  # then anything
        sparse, top = drawn_top_k(t, torch.tensor(np.array(drawn)), need)
        assert sparse.tolist() == ((t > 0).sum(-1) < need).tolist()
        assert (top[sparse] == top_k(t, k)[sparse]).all(), (x, k, need)
        sparse_rows += int(sparse.sum())
    assert sparse_rows > 500  # the comparison ran on many rows


def _g_pvalue(drafts: torch.Tensor, joint: dict[tuple[int, ...], float]) -> float:
    """G-test p-value of the drawn tuples [N, k] against the exact joint law: tuples of expected count
    >= 5 are bins, the rest pooled into the smallest bin; a tuple outside the law or of expected count
    below 1e-6 must never appear (P(such a failure) < 1e-5)."""
    total = drafts.shape[0]
    seen = Counter(map(tuple, drafts.tolist()))
    assert set(seen) <= set(joint), set(seen) - set(joint)
    assert all(seen.get(x, 0) == 0 for x, w in joint.items() if w * total < 1e-6)
    big = sorted((x for x, w in joint.items() if w * total >= 5), key=lambda x: joint[x])
    obs = np.array([seen.get(x, 0) for x in big], float)
    exp = np.array([joint[x] for x in big]) * total
    obs[0] += total - obs.sum()
    exp[0] += total - exp.sum()
    if obs.size < 2:
        return 1.0
    g = 2 * np.sum(np.where(obs > 0, obs * np.log(np.maximum(obs, 1) / exp), 0.0))
    return float(chi2.sf(g, obs.size - 1))


def _tiny_q(dtype: torch.dtype) -> torch.Tensor:
    """Rows of q with entries of 1e-40 and exact zeros (float32: subnormal), batched."""
    rows = [
        [0.0, 1.0, 1e-40, 0.0, 2e-40, 0.0],
        [1e-40, 0.0, 0.0, 3e-40, 0.0, 1.0],
        [0.0, 0.5, 0.0, 0.5, 1e-40, 0.0],
    ]
    q = torch.tensor(rows, dtype=dtype)
    return q / q.sum(-1, keepdim=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_race_never_draws_q_zero_and_has_the_law(dtype):
    """Regression (issue 12 §2): E/q overflowed for q ≲ 1e-38 and tied with the q = 0 tokens, so
    drafts without replacement held q = 0 tokens (1,942 of 2,000 tuples on one real row)."""
    q = _tiny_q(dtype)
    draws = race_top_k(q.expand(20_000, 3, 6), 3, torch.Generator().manual_seed(0))  # [N, rows, k]
    assert bool((torch.gather(q.expand(20_000, 3, 6), -1, draws) > 0).all())
    for r in range(3):
        assert _g_pvalue(draws[:, r], mdsd.WithoutReplacement(3).joint(q[r].double().numpy())) > ALPHA


def test_race_check_catches_the_old_overflow():
    """The check above fails for the old sampler: E/q in float32 ties tiny and zero tokens at inf."""
    q = _tiny_q(torch.float32)
    race = torch.empty(2000, 3, 6).exponential_(generator=torch.Generator().manual_seed(0)) / q
    old = torch.topk(race, 3, dim=-1, largest=False).indices
    assert not bool((torch.gather(q.expand(2000, 3, 6), -1, old) > 0).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "law", [mdsd.IID(2), mdsd.WithoutReplacement(2), mdsd.Hub(), mdsd.Greedy(2), mdsd.Greedy(3), mdsd.TopK(2)]
)
def test_law_samplers_on_tiny_and_zero_q(law, dtype):
    """Every law sampler, batched and for one shared row: no q = 0 token, and the exact joint law."""
    q = _tiny_q(dtype)
    gen = torch.Generator().manual_seed(7)
    for r in range(3):
        joint = law.joint(q[r].double().numpy())
        for drafts in (law._sample(q[r].expand(30_000, 6), gen), law._sample(q[r], gen, (30_000,))):
            assert bool((q[r][drafts] > 0).all())
            assert _g_pvalue(drafts, joint) > ALPHA, (law, r)
