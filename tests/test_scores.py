"""softmax and causal_mask: parity with PyTorch, properties, and error messages."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from selfattention import causal_mask, softmax
from selfattention.testing import assert_parity


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("shape", "axis"), [((7,), -1), ((3, 5), -1), ((3, 5), 0), ((2, 3, 4), 1), ((1, 1), -1)])
def test_softmax_matches_torch(rng, dtype, shape, axis):
    x = (3.0 * rng.normal(size=shape)).astype(dtype)
    got = softmax(x, axis=axis)
    assert got.dtype == dtype
    assert_parity(got, torch.softmax(torch.from_numpy(x), dim=axis), dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("offset", [1e4, -1e4])
def test_softmax_is_finite_and_correct_for_huge_scores(rng, dtype, offset):
    x = (offset + rng.normal(size=(4, 6))).astype(dtype)
    got = softmax(x)
    assert np.isfinite(got).all()
    assert_parity(got, torch.softmax(torch.from_numpy(x), dim=-1), dtype)


def test_softmax_promotes_integers_and_rows_sum_to_one():
    got = softmax(np.array([[8, 2, 10, 2], [4, 0, 4, 0]]))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=0, atol=1e-15)
    assert (got >= 0).all()


def test_softmax_gives_zero_weight_to_minus_inf_and_zeros_for_an_all_blocked_row():
    x = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from inf - inf
        got = softmax(x)
    kept = np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum()  # the two unblocked entries
    np.testing.assert_allclose(got[0], [kept[0], 0.0, kept[1]], rtol=1e-15)
    np.testing.assert_array_equal(got[1], [0.0, 0.0, 0.0])


def test_softmax_does_not_modify_its_input():
    x = np.array([1.0, 2.0, 3.0])
    softmax(x)
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    ("x", "axis", "message"),
    [
        (np.array([1.0, np.nan]), -1, r"x must not contain NaN; found 1 NaN"),
        (np.array([1.0, np.inf]), -1, r"x must be finite or -inf .* found 1 \+inf"),
        (np.ones((2, 3)), 2, r"axis=2 is out of range for an array with 2 axes"),
        (np.ones((2, 3)), 1.0, r"axis must be an integer; got 1.0 of type float"),
        (np.float64(3.0), -1, r"x must have at least 1 axis; got a 0-dimensional scalar"),
        (np.ones((2, 0)), -1, r"x has length 0 along axis 1 \(shape \(2, 0\)\)"),
        (np.array([True, False]), -1, r"x must be an array of numbers; got a boolean array"),
        (np.array(["a", "b"]), -1, r"x must be an array of real numbers; got dtype <U1"),
        ([[1.0, 2.0], [3.0]], -1, r"x must be an array of numbers; could not convert it"),
    ],
)
def test_softmax_errors(x, axis, message):
    with pytest.raises(ValueError, match=message):
        softmax(x, axis=axis)


@pytest.mark.parametrize("T", [1, 2, 5])
def test_causal_mask_values(T):
    mask = causal_mask(T)
    assert mask.shape == (T, T) and mask.dtype == np.float64
    rows, cols = np.indices((T, T))
    np.testing.assert_array_equal(mask[cols <= rows], 0.0)
    assert np.isneginf(mask[cols > rows]).all()


def test_causal_mask_matches_the_torch_idiom_and_takes_a_dtype():
    torch_mask = torch.triu(torch.full((4, 4), float("-inf"), dtype=torch.float64), diagonal=1)
    np.testing.assert_array_equal(causal_mask(4), torch_mask.numpy())
    assert causal_mask(3, dtype=np.float32).dtype == np.float32


@pytest.mark.parametrize(
    ("T", "dtype", "message"),
    [
        (0, np.float64, r"T must be a positive integer; got 0"),
        (2.5, np.float64, r"T must be a positive integer; got 2.5 of type float"),
        (True, np.float64, r"T must be a positive integer; got True of type bool"),
        (3, np.int64, r"dtype must be bool \(True = attend\) or a floating dtype \(it holds -inf\); got int64"),
        (3, "not-a-dtype", r"dtype must be bool or a NumPy floating dtype; got 'not-a-dtype'"),
    ],
)
def test_causal_mask_errors(T, dtype, message):
    with pytest.raises(ValueError, match=message):
        causal_mask(T, dtype=dtype)
