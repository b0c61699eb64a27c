"""Input validation at the public boundary."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mdsd.validation import as_pair, as_probabilities, as_probability_tensor, check_k, sum_tolerance


@pytest.mark.parametrize("convert", [list, np.asarray, torch.tensor], ids=["list", "numpy", "torch"])
def test_accepts_lists_arrays_and_tensors(convert):
    out = as_probabilities(convert([0.2, 0.3, 0.5]), "p")
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, [0.2, 0.3, 0.5])


def test_renormalises_within_tolerance_and_copies():
    x = np.array([0.5, 0.5 + 5e-7])
    out = as_probabilities(x, "p")
    assert out.sum() == pytest.approx(1.0, abs=1e-15)
    assert out is not x and x[1] == 0.5 + 5e-7


def test_batched_rows_checked_one_by_one():
    with pytest.raises(ValueError, match="p must sum to 1"):
        as_probabilities([[0.5, 0.5], [0.5, 0.6]], "p")


@pytest.mark.parametrize(
    "x,match",
    [
        ([0.5, float("nan"), 0.5], "p contains NaN"),
        ([0.5, float("inf")], "p contains NaN or infinite"),
        ([1.2, -0.2], "p has negative entries"),
        ([0.5, 0.4], "p must sum to 1"),
        ([], r"p must have shape \[..., n\]"),
        (0.5, r"p must have shape \[..., n\]"),
    ],
)
def test_bad_vectors_name_the_argument(x, match):
    with pytest.raises(ValueError, match=match):
        as_probabilities(x, "p")
    with pytest.raises(ValueError, match=match):
        as_probability_tensor(torch.tensor(x, dtype=torch.float64), "p")


@pytest.mark.parametrize("x", [["a", "b"], [1 + 1j, 0]])
def test_non_real_input_is_a_type_error(x):
    with pytest.raises(TypeError, match="p must be"):
        as_probabilities(x, "p")


def test_shape_mismatch_names_both():
    with pytest.raises(ValueError, match="p and q must have the same shape"):
        as_pair([0.5, 0.5], [0.2, 0.3, 0.5])


def test_tensor_twin_upcasts_half_precision_and_keeps_float64():
    half = torch.softmax(torch.randn(1000, generator=torch.Generator().manual_seed(0)), 0).to(torch.bfloat16)
    out = as_probability_tensor(half, "q")
    assert out.dtype == torch.float32
    assert float(out.sum()) == pytest.approx(1.0, abs=1e-6)
    assert as_probability_tensor(torch.tensor([0.5, 0.5], dtype=torch.float64), "q").dtype == torch.float64


def test_tolerance_grows_with_rounding_of_narrow_types():
    assert sum_tolerance(np.dtype(np.float64), 10**6) == 1e-6
    assert sum_tolerance(torch.float32, 151_936) > sum_tolerance(torch.float32, 16) > 1e-6
    assert sum_tolerance(torch.bfloat16, 16) > sum_tolerance(torch.float32, 16)


def test_check_k():
    assert check_k(np.int64(3)) == 3
    with pytest.raises(ValueError, match="k must be >= 1"):
        check_k(0)
    with pytest.raises(TypeError, match="k must be an integer"):
        check_k(True)
