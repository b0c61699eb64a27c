"""mdsd.race: containment of drafts without replacement at every prefix, against exact enumeration.

Drafts span the whole float range (1 down to 1e-300, denormals, exact zeros, ties); nothing is smoothed.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mdsd.race import (
    containment_lower,
    default_step,
    pair_containment,
    pair_weights,
    race_containment,
    suffix_mass,
)


def enumerate_prefixes(qs: np.ndarray, k: int) -> np.ndarray:
    """Q(first k draws ⊆ A_j) for j = 0..n by enumerating ordered tuples; each "mass left" is a sum."""
    support = np.flatnonzero(qs).tolist()
    out = np.zeros(qs.size + 1)
    for x in itertools.permutations(support, k):
        w, left = 1.0, set(support)
        for i in x:
            w *= qs[i] / math.fsum(qs[j] for j in left)
            left.discard(i)
        out[max(x) + 1 :] += w
    return out


def extreme_draft(rng: np.random.Generator, n: int) -> np.ndarray:
    kind = rng.integers(5)
    if kind == 0:
        q = 10.0 ** rng.uniform(-300.0, 0.0, n)
    elif kind == 1:
        z = rng.standard_normal(n) / rng.choice([0.01, 0.05, 0.3])
        q = np.exp(z - z.max())
    elif kind == 2:
        q = 10.0 ** -rng.choice([0.0, 8.0, 16.0, 200.0, 310.0, 320.0], n)  # denormals at 1e-310, 1e-320
    elif kind == 3:
        q = 10.0 ** rng.uniform(-20.0, 0.0, n) * (rng.random(n) < 0.7)
    else:
        q = rng.integers(0, 4, n).astype(float)  # ties and zeros
    if q.sum() == 0:
        q[rng.integers(n)] = 1.0
    return q / q.sum()


def test_race_matches_enumeration_at_every_prefix_over_the_float_range():
    rng = np.random.default_rng(0)
    checked = 0
    while checked < 150:
        n = int(rng.integers(3, 8))
        k = int(rng.integers(2, min(n, 5) + 1))
        qs = extreme_draft(rng, n)
        if np.count_nonzero(qs) < k:
            continue
        exact = enumerate_prefixes(qs, k)
        values, errors = race_containment(qs, k)
        np.testing.assert_allclose(values, exact, rtol=0, atol=1e-12, err_msg=f"{qs.tolist()}, k={k}")
        fine, estimate = race_containment(qs, k, step=default_step(k) / 2)
        assert np.all(np.abs(fine - exact) <= estimate + 1e-14), (
            qs.tolist(),
            k,
        )  # + the enumeration rounding
        assert estimate.max() < 1e-10
        checked += 1


def test_denormal_masses_still_decide_the_third_draft():
    """q = (1, 1e-310, 1e-310, 1e-310): the top token comes first, then two of three equal masses, so
    Q(3 drafts in {0, 1, 2}) = 1/3 although λ = 1e-310 needs times up to 1e312."""
    qs = np.array([1.0, 1e-310, 1e-310, 1e-310])
    values, _ = race_containment(qs, 3)
    assert values[3] == pytest.approx(1.0 / 3.0, abs=1e-12)
    pair, q_top = pair_weights(qs)
    sums = np.concatenate([np.zeros((4, 1)), np.cumsum(pair, axis=-1)], axis=-1)
    closed = pair_containment(sums, suffix_mass(qs), q_top)  # two drafts: {0, j} with j ∈ A
    np.testing.assert_allclose(closed, [0.0, 0.0, 1 / 3, 2 / 3, 1.0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("n, k", [(50, 2), (50, 8), (2000, 3), (2000, 5), (2000, 12)])
def test_uniform_draft_matches_the_closed_form(n, k):
    """Uniform q over n tokens: Q(k draws in the first a tokens) = Π_{i<k} (a − i)/(n − i); the k-th
    arrival's law is narrowest here, the hardest case for the quadrature's step."""
    values, _ = race_containment(np.full(n, 1.0 / n), k)
    a = np.arange(n + 1)
    exact = np.prod([np.maximum(a - i, 0) / (n - i) for i in range(k)], axis=0)
    np.testing.assert_allclose(values, exact, rtol=0, atol=1e-12)


def test_pair_closed_form_matches_enumeration_over_the_float_range():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(2, 8))
        qs = extreme_draft(rng, n)
        if np.count_nonzero(qs) < 2:
            continue
        weights, q_top = pair_weights(qs)
        sums = np.concatenate([np.zeros((4, 1)), np.cumsum(weights, axis=-1)], axis=-1)
        got = pair_containment(sums, suffix_mass(qs), q_top)
        np.testing.assert_allclose(
            got, enumerate_prefixes(qs, 2), rtol=0, atol=1e-14, err_msg=str(qs.tolist())
        )


def test_lower_bound_never_exceeds_the_containment():
    """containment_lower is exact in float (no 1 − mass): below the enumerated value at every prefix,
    including drafts where 1 − (top masses) would have lost every digit."""
    rng = np.random.default_rng(2)
    cases = [(np.array([1.0, 1e-8, 1e-16, 1e-16]) / (1.0 + 1e-8 + 2e-16), 3)]
    while len(cases) < 150:
        n = int(rng.integers(3, 8))
        k = int(rng.integers(2, min(n, 5) + 1))
        qs = extreme_draft(rng, n)
        if np.count_nonzero(qs) >= k:
            cases.append((qs, k))
    for qs, k in cases:
        exact = enumerate_prefixes(qs, k)
        outside = suffix_mass(qs)
        for j in range(qs.size + 1):
            assert containment_lower(qs[:j], outside[j], k) <= exact[j] * (1 + 1e-12) + 1e-300, (qs, k, j)


def test_only_wanted_prefixes_are_integrated():
    qs = np.array([0.4, 0.3, 0.2, 0.1])
    wanted = np.array([False, False, False, True, False])
    values, errors = race_containment(qs, 3, wanted)
    assert values[3] == pytest.approx(enumerate_prefixes(qs, 3)[3], abs=1e-13)
    assert values[:3].tolist() == [0.0, 0.0, 0.0] and values[4] == 1.0  # exact anyway: Q = 0, Q = 1
    assert errors[3] > 0 and errors[[0, 1, 2, 4]].tolist() == [0.0] * 4


def test_k_beyond_the_float_range_is_refused():
    with pytest.raises(ValueError, match="beyond the dual's range"):
        race_containment(np.full(100, 0.01), 30)
