"""mdsd.cumsum against numpy's prefix sums: float64 entries spanning 1e-300..1 with exact zeros, integer and
bool counts, reversed and broadcast views, and sums written into a view of a larger array."""

from __future__ import annotations

import numpy as np
import pytest

from mdsd.cumsum import cumsum


def test_prefix_sums_match_numpy():
    rng = np.random.default_rng(0)
    x = 10.0 ** rng.uniform(-300, 0, size=(3, 5000)) * (rng.random((3, 5000)) < 0.8)
    for a in (x, x[..., ::-1], x[:, ::7], np.broadcast_to(x[0], (2, 5000))):
        expected = np.cumsum(a, axis=-1)
        np.testing.assert_allclose(cumsum(a), expected, rtol=1e-12, atol=0)
    np.testing.assert_allclose(cumsum(x, axis=0), np.cumsum(x, axis=0), rtol=1e-12, atol=0)
    counts = rng.random((2, 999)) < 0.3
    for a in (counts, counts.astype(np.int64)):
        got = cumsum(a)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, np.cumsum(a, axis=-1))


def test_sums_into_a_view():
    rng = np.random.default_rng(1)
    a = rng.random((2, 3, 100))
    out = np.full((2, 3, 101), -1.0)
    assert cumsum(a, out=out[..., 1:]) is not None
    np.testing.assert_allclose(out[..., 1:], np.cumsum(a, axis=-1), rtol=1e-13)
    assert (out[..., 0] == -1.0).all()  # nothing outside the view


@pytest.mark.parametrize("shape", [(0,), (1,), (4, 0)])
def test_empty_and_single(shape):
    a = np.ones(shape)
    np.testing.assert_array_equal(cumsum(a), np.cumsum(a, axis=-1))
