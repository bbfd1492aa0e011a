"""causal_mask for T != S, padding_mask, combine_masks, and is_causal, against PyTorch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from selfattention import (
    causal_mask,
    combine_masks,
    memory_efficient_attention,
    multihead_attention,
    padding_mask,
    scaled_dot_product_attention,
)
from selfattention.testing import assert_parity, to_torch


@pytest.mark.parametrize(("T", "S"), [(1, 1), (4, 4), (1, 6), (3, 7), (6, 2)])
def test_causal_mask_is_torchs_causal_lower_right(T, S):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that T > S leaves fully masked rows
        expected = causal_lower_right(T, S)._materialize().numpy()  # True = attend
    np.testing.assert_array_equal(causal_mask(T, S, dtype=bool), expected)
    np.testing.assert_array_equal(causal_mask(T, S), np.where(expected, 0.0, -np.inf))


def test_a_new_token_after_a_cache_sees_everything_and_the_square_mask_is_unchanged():
    np.testing.assert_array_equal(causal_mask(1, 5, dtype=bool), np.ones((1, 5), dtype=bool))
    np.testing.assert_array_equal(causal_mask(4), causal_mask(4, 4))
    np.testing.assert_array_equal(causal_mask(4), np.triu(np.full((4, 4), -np.inf), k=1))
    # The last T rows of the S x S mask: the T newest queries of a sequence of S tokens.
    np.testing.assert_array_equal(causal_mask(3, 7), causal_mask(7)[-3:])


DTYPES = [np.float64, np.float32]
SHAPES = [(5, 5), (3, 8), (1, 6), (6, 4)]  # (T, S): square, a cache, one new token, more queries than keys


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("T", "S"), SHAPES)
@pytest.mark.parametrize("blocked", [False, True])
def test_is_causal_equals_the_lower_right_mask_and_torch(dtype, T, S, blocked):
    rng = np.random.default_rng(T * 10 + S)
    q = rng.normal(size=(2, 3, T, 8)).astype(dtype)
    k = rng.normal(size=(2, 3, S, 8)).astype(dtype)
    v = rng.normal(size=(2, 3, S, 4)).astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NaN warnings for the fully masked rows of T > S
        out, weights = scaled_dot_product_attention(q, k, v, is_causal=True)
        blocked_out = memory_efficient_attention(q, k, v, is_causal=True, block_size=3 if blocked else 512)
    masked_out, masked_weights = scaled_dot_product_attention(q, k, v, mask=causal_mask(T, S, dtype=bool))
    np.testing.assert_array_equal(out, masked_out)
    np.testing.assert_array_equal(weights, masked_weights)
    assert_parity(blocked_out, out, dtype)
    tq, tk, tv = to_torch(q, k, v)
    if T == S:
        expected = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)  # upper-left = lower-right here
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=causal_lower_right(T, S))
    keep = causal_mask(T, S, dtype=bool).any(axis=-1)  # queries that see at least one key
    assert_parity(out[..., keep, :], expected.numpy()[..., keep, :], dtype)
    assert (out[..., ~keep, :] == 0).all() and (weights[..., ~keep, :] == 0).all()


def test_torchs_is_causal_aligns_upper_left_and_differs_when_t_is_not_s():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 8)), rng.normal(size=(5, 8)), rng.normal(size=(5, 3))
    ours, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    upper_left = F.scaled_dot_product_attention(*to_torch(q, k, v), is_causal=True).numpy()
    assert not np.allclose(ours, upper_left)
    first_query_sees_key_0_only, _ = scaled_dot_product_attention(q[:1], k[:1], v[:1])
    np.testing.assert_allclose(upper_left[:1], first_query_sees_key_0_only, rtol=1e-12)


def test_is_causal_combines_with_a_mask_and_passes_through_multihead():
    rng = np.random.default_rng(1)
    x, w_qkv, w_out = rng.normal(size=(2, 6, 8)), rng.normal(size=(8, 24)), rng.normal(size=(8, 8))
    pad = padding_mask([6, 4])[:, None]  # (B, 1, 1, S): the second sequence has 2 padding tokens
    y, weights = multihead_attention(x, w_qkv, w_out, num_heads=2, mask=pad, is_causal=True)
    y_masked, weights_masked = multihead_attention(
        x, w_qkv, w_out, num_heads=2, mask=combine_masks(pad, causal_mask(6, dtype=bool))
    )
    np.testing.assert_array_equal(y, y_masked)
    np.testing.assert_array_equal(weights, weights_masked)
    assert (weights[1, :, :, 4:] == 0).all()


def test_padding_mask_shapes_and_polarity():
    mask = padding_mask([3, 1, 4])
    assert mask.shape == (3, 1, 4) and mask.dtype == bool
    np.testing.assert_array_equal(mask[:, 0], [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    additive = padding_mask(np.array([2, 2]), S=3, dtype=np.float32)
    assert additive.dtype == np.float32 and additive.shape == (2, 1, 3)
    np.testing.assert_array_equal(additive[0, 0], [0.0, 0.0, -np.inf])


def test_padding_mask_matches_torchs_key_padding_mask():
    torch.manual_seed(0)
    module = torch.nn.MultiheadAttention(8, 2, batch_first=True).double().eval()
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    lengths = [5, 2, 3]
    key_padding = torch.from_numpy(~padding_mask(lengths)[:, 0])  # torch: True = padding
    expected, _ = module(x, x, x, key_padding_mask=key_padding)
    from selfattention import AttentionParams

    y, _ = multihead_attention(
        x.numpy(), AttentionParams.from_torch(module), num_heads=2, mask=padding_mask(lengths)[:, None]
    )
    assert_parity(y, expected, np.float64)


def test_combine_masks_ands_booleans_and_adds_floats():
    causal, pad = causal_mask(3, dtype=bool), padding_mask([2, 3])
    both = combine_masks(causal, pad)
    assert both.dtype == bool and both.shape == (2, 3, 3)
    np.testing.assert_array_equal(both, causal & pad)
    mixed = combine_masks(causal_mask(3, dtype=np.float32), pad)
    assert mixed.dtype == np.float32
    np.testing.assert_array_equal(mixed, np.where(causal & pad, 0.0, -np.inf))
    single = combine_masks(causal)
    assert single is not causal and np.array_equal(single, causal)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: causal_mask(3, 0), r"S must be a positive integer; got 0"),
        (lambda: causal_mask(3, 4.0), r"S must be a positive integer; got 4.0 of type float"),
        (lambda: padding_mask([[1, 2]]), r"lengths must be a non-empty 1-D array of integers; got shape \(1, 2\)"),
        (lambda: padding_mask([]), r"lengths must be a non-empty 1-D array of integers, one per sequence; got none"),
        (
            lambda: padding_mask([1.5, 2.0]),
            r"lengths must be a non-empty 1-D array of integers; got shape \(2,\), dtype float64",
        ),
        (lambda: padding_mask([0, 2]), r"every length must lie between 1 and S=2; got lengths \[0, 2\]"),
        (lambda: padding_mask([3, 2], S=2), r"every length must lie between 1 and S=2; got lengths \[3, 2\]"),
        (lambda: padding_mask([1], dtype=int), r"dtype must be bool \(True = attend\) or a floating dtype"),
        (lambda: combine_masks(), r"combine_masks needs at least one mask; got none"),
        (
            lambda: combine_masks(np.ones((2, 3), bool), np.ones((4, 3), bool)),
            r"the masks' shapes \[\(2, 3\), \(4, 3\)\] do not broadcast together",
        ),
        (lambda: combine_masks(np.ones(3, bool), "x"), r"masks\[1\] must be boolean .* got dtype <U1"),
        # 0/1 integers are ambiguous (keep-flags or additive?): refused, as the attention functions refuse them
        (lambda: combine_masks(np.ones(3, bool), np.ones(3, int)), r"masks\[1\] must be boolean .*astype\(bool\)"),
        (lambda: combine_masks(np.array([0.0, np.nan])), r"masks\[0\] must not contain NaN; found 1"),
        (lambda: combine_masks(np.array([0.0, np.inf])), r"masks\[0\] must be finite or -inf .* 1 \+inf"),
        (lambda: causal_mask(3, dtype=None), r"dtype must be bool or a NumPy floating dtype .* got None"),
        (lambda: padding_mask([[1, 2]]), r"lengths must be a non-empty 1-D array of integers; got shape \(1, 2\)"),
        (
            lambda: scaled_dot_product_attention(np.ones((2, 4)), np.ones((3, 4)), np.ones((3, 4)), is_causal=1),
            r"is_causal must be True or False; got 1",
        ),
        (
            lambda: memory_efficient_attention(np.ones((2, 4)), np.ones((3, 4)), np.ones((3, 4)), is_causal="yes"),
            r"is_causal must be True or False; got 'yes'",
        ),
    ],
)
def test_mask_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
