"""scaled_dot_product_attention and self_attention against PyTorch, plus properties and errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from selfattention import causal_mask, scaled_dot_product_attention, self_attention
from selfattention.testing import assert_parity, to_torch

# (q batch, k/v batch, T, S, Dk, Dv): T != S, T = 1, S = 1, extra leading axes, broadcast batches.
SHAPES = [
    ((), (), 4, 4, 8, 8),
    ((), (), 3, 7, 5, 2),
    ((), (), 1, 6, 4, 4),
    ((), (), 5, 1, 3, 6),
    ((2,), (2,), 6, 6, 16, 16),
    ((2, 3), (2, 3), 4, 9, 8, 5),
    ((2, 3), (3,), 4, 5, 8, 8),
    ((1, 4), (2, 1), 3, 3, 2, 4),
]


def _inputs(rng, shape, dtype):
    q_batch, kv_batch, T, S, Dk, Dv = shape
    q = rng.normal(size=(*q_batch, T, Dk)).astype(dtype)
    k = rng.normal(size=(*kv_batch, S, Dk)).astype(dtype)
    v = rng.normal(size=(*kv_batch, S, Dv)).astype(dtype)
    return q, k, v


def _torch_weights(q, k, mask, scale):
    """PyTorch's attention weights, built from its own softmax (F.sdpa returns only the output)."""
    tq, tk = to_torch(q, k)
    scores = scale * tq @ tk.transpose(-1, -2)
    if mask is not None:
        tmask = torch.from_numpy(mask)
        scores = scores.masked_fill(~tmask, float("-inf")) if mask.dtype == np.bool_ else scores + tmask
    weights = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(weights, nan=0.0)  # PyTorch's SDPA convention for all-blocked rows


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mask_kind", [None, "bool", "float"])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_sdpa_matches_torch(rng, dtype, shape, mask_kind, scale):
    q, k, v = _inputs(rng, shape, dtype)
    T, S = q.shape[-2], k.shape[-2]
    mask = None
    if mask_kind is not None:
        keep = rng.random((T, S)) > 0.3
        keep[0] = False  # a fully masked row
        mask = keep if mask_kind == "bool" else np.where(keep, 0.0, -np.inf).astype(dtype)
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)
    expected = F.scaled_dot_product_attention(
        *to_torch(q, k, v), attn_mask=None if mask is None else torch.from_numpy(mask), scale=scale
    )
    assert out.dtype == dtype and weights.dtype == dtype
    assert_parity(out, expected, dtype)
    actual_scale = scale if scale is not None else q.shape[-1] ** -0.5
    assert_parity(weights, _torch_weights(q, k, mask, actual_scale), dtype)


def test_sdpa_reproduces_the_word_example():
    words = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]])
    legacy = np.random.RandomState(42)
    w_q, w_k, w_v = (legacy.randint(3, size=(3, 3)) for _ in range(3))
    out, weights = scaled_dot_product_attention(words @ w_q, words @ w_k, words @ w_v)
    np.testing.assert_allclose(weights[0], [0.2361, 0.0074, 0.7491, 0.0074], atol=5e-5)
    np.testing.assert_allclose(out[0], [0.9852, 1.7417, 0.7565], atol=5e-5)


def test_fully_masked_query_gets_zero_weights_and_output_without_warnings(rng):
    q, k, v = _inputs(rng, ((), (), 3, 4, 5, 6), np.float64)
    keep = np.ones((3, 4), dtype=bool)
    keep[1] = False
    for mask in (keep, np.where(keep, 0.0, -np.inf)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        np.testing.assert_array_equal(weights[1], 0.0)
        np.testing.assert_array_equal(out[1], 0.0)
        assert np.isfinite(out).all()


@pytest.mark.parametrize("shape", SHAPES)
def test_weights_are_a_distribution_over_keys(rng, shape):
    q, k, v = _inputs(rng, shape, np.float64)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert (weights >= 0).all()
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-12)
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    assert weights.shape == (*batch, q.shape[-2], k.shape[-2])
    assert out.shape == (*np.broadcast_shapes(batch, v.shape[:-2]), q.shape[-2], v.shape[-1])


def test_causal_weights_are_zero_above_the_diagonal(rng):
    x = rng.normal(size=(2, 6, 4))
    _, weights = scaled_dot_product_attention(x, x, x, mask=causal_mask(6))
    assert (np.triu(weights, k=1) == 0).all()
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(weights[:, 0, 0], 1.0)  # the first token can only see itself


def test_integer_inputs_are_promoted_to_float(rng):
    q = rng.integers(-3, 4, size=(4, 3))
    out, weights = scaled_dot_product_attention(q, q, q)
    assert out.dtype == np.float64 and weights.dtype == np.float64
    expected, _ = scaled_dot_product_attention(q.astype(float), q.astype(float), q.astype(float))
    np.testing.assert_array_equal(out, expected)


def _mha(D, dtype):
    module = torch.nn.MultiheadAttention(D, 1, bias=False, batch_first=True).to(
        torch.float64 if dtype == np.float64 else torch.float32
    )
    w_qkv = module.in_proj_weight.detach().numpy().T
    w_out = module.out_proj.weight.detach().numpy().T
    return module, w_qkv, w_out


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("x_shape", [(1, 7, 8), (3, 5, 16), (2, 1, 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_matches_multihead_attention(dtype, x_shape, causal):
    torch.manual_seed(0)
    module, w_qkv, w_out = _mha(x_shape[-1], dtype)
    x = torch.randn(*x_shape, dtype=module.in_proj_weight.dtype)
    T = x_shape[1]
    mask = causal_mask(T, dtype=dtype) if causal else None
    expected_y, expected_w = module(x, x, x, attn_mask=None if mask is None else torch.from_numpy(mask))
    y, weights = self_attention(x.numpy(), w_qkv, w_out, mask=mask)
    assert_parity(y, expected_y, dtype)
    assert_parity(weights, expected_w, dtype)


def test_self_attention_accepts_unbatched_input_like_the_module():
    torch.manual_seed(1)
    module, w_qkv, w_out = _mha(6, np.float64)
    x = torch.randn(5, 6, dtype=torch.float64)
    expected_y, expected_w = module(x, x, x, attn_mask=torch.from_numpy(causal_mask(5)))
    y, weights = self_attention(x.numpy(), w_qkv, w_out, mask=causal_mask(5))
    assert_parity(y, expected_y, np.float64)
    assert_parity(weights, expected_w, np.float64)


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "v_shape", "message"),
    [
        ((4, 64), (4, 32), (4, 8), r"q has 64 features but k has 32; the last axes of q and k must match"),
        ((4, 8), (5, 8), (6, 8), r"k has 5 tokens but v has 6; every key needs one value"),
        ((8,), (4, 8), (4, 8), r"q must have at least 2 axes \(\.\.\., T, Dk\); got shape \(8,\)"),
        ((4, 8), (8,), (4, 8), r"k must have at least 2 axes \(\.\.\., S, Dk\); got shape \(8,\)"),
        ((4, 8), (4, 8), (4,), r"v must have at least 2 axes \(\.\.\., S, Dv\); got shape \(4,\)"),
        (
            (2, 4, 8),
            (3, 4, 8),
            (3, 4, 8),
            r"the leading \(batch\) axes of q \(2,\), k \(3,\) and v \(3,\) do not broadcast",
        ),
        ((0, 8), (4, 8), (4, 8), r"attention needs T, S and Dk of at least 1; got T=0, S=4, Dk=8"),
    ],
)
def test_sdpa_shape_errors(q_shape, k_shape, v_shape, message):
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(np.ones(q_shape), np.ones(k_shape), np.ones(v_shape))


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        (
            np.ones((3, 4), dtype=bool),
            r"mask of shape \(3, 4\) does not broadcast to the scores' shape \(\.\.\., T, S\) = \(2, 4, 5\)",
        ),
        (np.ones((3, 2, 4, 5), dtype=bool), r"mask of shape \(3, 2, 4, 5\) does not broadcast to the scores' shape"),
        (
            np.ones((4, 5), dtype=int),
            r"mask must be boolean \(True = attend\) or floating .*got dtype int64. For a 0/1 mask, pass mask.astype\(bool\)",
        ),
        (np.full((4, 5), np.nan), r"mask must not contain NaN; found 20 NaN"),
        (np.full((4, 5), np.inf), r"mask must be finite or -inf .* found 20 \+inf"),
    ],
)
def test_sdpa_mask_errors(mask, message):
    q = np.ones((2, 4, 8))
    k = v = np.ones((2, 5, 8))
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(q, k, v, mask=mask)


@pytest.mark.parametrize(
    ("scale", "message"),
    [
        ("0.5", r"scale must be a real number; got '0.5' of type str"),
        (True, r"scale must be a real number; got True of type bool"),
        (np.ones(2), r"scale must be a real number; got an array of shape \(2,\) of type ndarray"),
        (float("nan"), r"scale must be finite; got nan"),
    ],
)
def test_sdpa_scale_errors(scale, message):
    x = np.ones((3, 4))
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(x, x, x, scale=scale)


def test_sdpa_rejects_boolean_and_complex_inputs():
    x = np.ones((3, 4))
    with pytest.raises(ValueError, match=r"q must be an array of numbers; got a boolean array"):
        scaled_dot_product_attention(x > 0, x, x)
    with pytest.raises(ValueError, match=r"v must be an array of real numbers; got dtype complex128"):
        scaled_dot_product_attention(x, x, x + 1j)


@pytest.mark.parametrize(
    ("x_shape", "w_qkv_shape", "w_out_shape", "message"),
    [
        ((2, 5, 8), (8, 16), (8, 8), r"w_qkv must have shape \(D, 3\*D\) for x with D=8 = \(8, 24\); got \(8, 16\)"),
        ((2, 5, 8), (24, 8), (8, 8), r"w_qkv must have shape \(D, 3\*D\) for x with D=8 = \(8, 24\); got \(24, 8\)"),
        ((2, 5, 8), (8, 24), (8, 4), r"w_out must have shape \(D, D\) for x with D=8 = \(8, 8\); got \(8, 4\)"),
        ((8,), (8, 24), (8, 8), r"x must have at least 2 axes \(\.\.\., T, D\); got shape \(8,\)"),
    ],
)
def test_self_attention_errors(x_shape, w_qkv_shape, w_out_shape, message):
    with pytest.raises(ValueError, match=message):
        self_attention(np.ones(x_shape), np.ones(w_qkv_shape), np.ones(w_out_shape))


def test_self_attention_mask_errors_name_the_scores_shape():
    with pytest.raises(
        ValueError,
        match=r"mask of shape \(4, 4\) does not broadcast to the scores' shape \(\.\.\., T, S\) = \(2, 5, 5\)",
    ):
        self_attention(np.ones((2, 5, 8)), np.ones((8, 24)), np.ones((8, 8)), mask=causal_mask(4))
