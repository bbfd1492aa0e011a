"""multihead_attention, split/merge_heads, mha_weights and the cost formulas, against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfattention import (
    causal_mask,
    merge_heads,
    mha_multiply_adds,
    mha_parameter_count,
    mha_weights,
    multihead_attention,
    split_heads,
)
from selfattention.testing import assert_parity, randomise_parameters

TORCH_DTYPES = {np.float64: torch.float64, np.float32: torch.float32}


def _random_mha(D, H, dtype, bias=True, seed=0):
    """An nn.MultiheadAttention with every parameter random and non-zero; seeds torch's global generator."""
    torch.manual_seed(seed)  # the inputs the tests then draw with torch.randn are fixed too
    module = torch.nn.MultiheadAttention(D, H, bias=bias, batch_first=True).to(TORCH_DTYPES[dtype])
    return randomise_parameters(module, scale=0.5)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("H", [1, 2, 4, 8])
@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("masked", [False, True])
def test_matches_multihead_attention_with_random_biases(dtype, H, average, masked):
    D, B, T = 16, 3, 7
    module = _random_mha(D, H, dtype)
    x = torch.randn(B, T, D, dtype=TORCH_DTYPES[dtype])
    mask = causal_mask(T, dtype=dtype) if masked else None
    expected_y, expected_w = module(
        x, x, x, attn_mask=None if mask is None else torch.from_numpy(mask), average_attn_weights=average
    )
    y, weights = multihead_attention(x.numpy(), **mha_weights(module), num_heads=H, mask=mask)
    assert weights.shape == (B, H, T, T)
    assert y.dtype == dtype and weights.dtype == dtype
    assert_parity(y, expected_y, dtype)
    assert_parity(weights.mean(axis=-3) if average else weights, expected_w, dtype)


@pytest.mark.parametrize("H", [1, 4])
def test_unbatched_input_and_boolean_masks(H):
    D, T = 8, 5
    module = _random_mha(D, H, np.float64, seed=1)
    x = torch.randn(T, D, dtype=torch.float64)
    blocked = torch.from_numpy(~np.tril(np.ones((T, T), dtype=bool)))  # nn.MultiheadAttention: True = blocked
    expected_y, expected_w = module(x, x, x, attn_mask=blocked, average_attn_weights=False)
    y, weights = multihead_attention(
        x.numpy(), **mha_weights(module), num_heads=H, mask=~blocked.numpy()
    )  # ours: True = attend
    assert_parity(y, expected_y, np.float64)
    assert_parity(weights, expected_w, np.float64)


@pytest.mark.parametrize("H", [1, 2, 4])
@pytest.mark.parametrize("same_key_and_value", [True, False])
def test_cross_attention_with_t_not_equal_s(H, same_key_and_value):
    D, B, T, S = 8, 2, 3, 6
    module = _random_mha(D, H, np.float64, seed=2)
    x = torch.randn(B, T, D, dtype=torch.float64)
    key = torch.randn(B, S, D, dtype=torch.float64)
    value = key if same_key_and_value else torch.randn(B, S, D, dtype=torch.float64)
    expected_y, expected_w = module(x, key, value, average_attn_weights=False)
    y, weights = multihead_attention(
        x.numpy(),
        **mha_weights(module),
        num_heads=H,
        key=key.numpy(),
        value=None if same_key_and_value else value.numpy(),
    )
    assert y.shape == (B, T, D) and weights.shape == (B, H, T, S)
    assert_parity(y, expected_y, np.float64)
    assert_parity(weights, expected_w, np.float64)


def test_without_biases_matches_bias_false_module():
    module = _random_mha(12, 3, np.float64, bias=False)
    params = mha_weights(module)
    assert params["b_qkv"] is None and params["b_out"] is None
    x = torch.randn(2, 4, 12, dtype=torch.float64)
    expected_y, _ = module(x, x, x)
    y, _ = multihead_attention(x.numpy(), **params, num_heads=3)
    assert_parity(y, expected_y, np.float64)


def test_one_head_equals_self_attention():
    from selfattention import self_attention

    rng = np.random.default_rng(0)
    x, w_qkv, w_out = rng.normal(size=(2, 5, 6)), rng.normal(size=(6, 18)), rng.normal(size=(6, 6))
    y1, w1 = multihead_attention(x, w_qkv, w_out, num_heads=1, mask=causal_mask(5))
    y2, w2 = self_attention(x, w_qkv, w_out, mask=causal_mask(5))
    np.testing.assert_allclose(y1, y2, rtol=1e-12)
    np.testing.assert_allclose(w1[:, 0], w2, rtol=1e-12)


def test_heads_use_the_head_width_for_the_scale():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 8))
    w_qkv, w_out = rng.normal(size=(8, 24)), np.eye(8)
    _, weights = multihead_attention(x, w_qkv, w_out, num_heads=4)
    q, k, _ = np.split(x @ w_qkv, 3, axis=-1)
    scores_head0 = q[:, :2] @ k[:, :2].T / np.sqrt(2)  # Dh = 2, not D = 8
    e = np.exp(scores_head0 - scores_head0.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(weights[0], e / e.sum(axis=-1, keepdims=True), rtol=1e-12)


def test_mha_weights_copies_and_transposes():
    module = _random_mha(6, 2, np.float32)
    params = mha_weights(module)
    np.testing.assert_array_equal(params["w_qkv"], module.in_proj_weight.detach().numpy().T)
    np.testing.assert_array_equal(params["w_out"], module.out_proj.weight.detach().numpy().T)
    assert params["w_qkv"].dtype == np.float32 and params["w_qkv"].shape == (6, 18)
    params["w_qkv"][0, 0] += 1.0  # a copy: the module is untouched
    assert params["w_qkv"][0, 0] != module.in_proj_weight[0, 0].item()


@pytest.mark.parametrize("D", [4, 6, 12])
@pytest.mark.parametrize("H", [1, 2])
def test_split_and_merge_heads_are_inverse_and_deal_consecutive_columns(D, H):
    x = np.arange(2 * 3 * D, dtype=float).reshape(2, 3, D)
    heads = split_heads(x, H)
    Dh = D // H
    assert heads.shape == (2, H, 3, Dh)
    for h in range(H):
        np.testing.assert_array_equal(heads[:, h], x[..., h * Dh : (h + 1) * Dh])
    np.testing.assert_array_equal(merge_heads(heads), x)


def test_split_heads_matches_torch_view_transpose():
    x = torch.randn(2, 5, 12)
    expected = x.view(2, 5, 3, 4).transpose(1, 2)
    np.testing.assert_array_equal(split_heads(x.numpy(), 3), expected.numpy())


@pytest.mark.parametrize("D", [8, 64, 768])
@pytest.mark.parametrize("bias", [True, False])
def test_parameter_count_matches_the_module(D, bias):
    module = torch.nn.MultiheadAttention(D, 4 if D >= 8 else 1, bias=bias)
    assert mha_parameter_count(D, bias=bias) == sum(p.numel() for p in module.parameters())


def test_multiply_adds_formula_and_head_independence():
    cost = mha_multiply_adds(T=100, d_model=64, num_heads=4)
    assert cost == {
        "projections": 4 * 100 * 64 * 64,
        "scores": 100 * 100 * 64,
        "weighted_values": 100 * 100 * 64,
        "total": 4 * 100 * 64 * 64 + 2 * 100 * 100 * 64,
    }
    assert all(mha_multiply_adds(100, 64, H) == cost for H in (1, 2, 8, 16))
    cross = mha_multiply_adds(T=10, d_model=8, num_heads=2, S=30)
    assert cross["projections"] == 10 * 64 + 2 * 30 * 64 + 10 * 64 and cross["scores"] == 10 * 30 * 8


def test_multiply_adds_count_the_matmuls_of_the_implementation():
    """Count the products in an einsum version of the layer and compare."""
    T, D, H = 5, 12, 3
    Dh = D // H
    counted = 0
    counted += T * D * 3 * D  # x @ w_qkv
    counted += H * T * T * Dh  # scores
    counted += H * T * T * Dh  # weights @ v
    counted += T * D * D  # output projection
    assert mha_multiply_adds(T, D, H)["total"] == counted


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            dict(num_heads=5),
            r"the model width D=16 is not divisible by num_heads=5; each head needs D // num_heads columns \(try num_heads in \[1, 2, 4, 8, 16\]\)",
        ),
        (dict(num_heads=0), r"num_heads must be a positive integer; got 0"),
        (dict(num_heads=2.0), r"num_heads must be a positive integer; got 2.0 of type float"),
        (
            dict(num_heads=2, b_qkv=np.zeros(16)),
            r"b_qkv must have shape \(3\*D,\) = \(48,\) for x with D=16; got \(16,\)",
        ),
        (dict(num_heads=2, b_out=np.zeros(48)), r"b_out must have shape \(D,\) = \(16,\) for x with D=16; got \(48,\)"),
        (dict(num_heads=2, value=np.zeros((3, 16))), r"value was given without key; pass key"),
        (dict(num_heads=2, key=np.zeros((3, 8))), r"key has 8 features but x has 16; they must match"),
        (
            dict(num_heads=2, key=np.zeros((3, 16)), value=np.zeros((4, 16))),
            r"key has 3 tokens but value has 4; they must match",
        ),
        (
            dict(num_heads=2, mask=np.ones((4, 4), dtype=bool)),
            r"mask of shape \(4, 4\) does not broadcast to the scores' shape \(\.\.\., T, S\) = \(2, 2, 5, 5\)",
        ),
    ],
)
def test_multihead_attention_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        multihead_attention(np.ones((2, 5, 16)), np.ones((16, 48)), np.ones((16, 16)), **kwargs)


def test_multihead_attention_weight_shape_errors():
    with pytest.raises(
        ValueError, match=r"w_qkv must have shape \(D, 3\*D\) for x with D=16 = \(16, 48\); got \(16, 16\)"
    ):
        multihead_attention(np.ones((5, 16)), np.ones((16, 16)), np.ones((16, 16)), num_heads=2)
    with pytest.raises(ValueError, match=r"w_out must have shape \(D, D\) for x with D=16 = \(16, 16\); got \(16, 8\)"):
        multihead_attention(np.ones((5, 16)), np.ones((16, 48)), np.ones((16, 8)), num_heads=2)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: split_heads(np.ones((5, 12)), 5), r"the model width D=12 is not divisible by num_heads=5"),
        (lambda: split_heads(np.ones(12), 3), r"x must have at least 2 axes \(\.\.\., T, D\); got shape \(12,\)"),
        (
            lambda: merge_heads(np.ones((5, 12))),
            r"x must have at least 3 axes \(\.\.\., H, T, Dh\); got shape \(5, 12\)",
        ),
        (lambda: mha_parameter_count(0), r"d_model must be a positive integer; got 0"),
        (lambda: mha_parameter_count(8, bias="yes"), r"bias must be True or False; got 'yes'"),
        (lambda: mha_multiply_adds(10, 12, 5), r"the model width D=12 is not divisible by num_heads=5"),
        (lambda: mha_multiply_adds(10, 12, 3, S=0), r"S must be a positive integer; got 0"),
        (lambda: mha_weights(torch.nn.Linear(3, 3)), r"expected a torch.nn.MultiheadAttention; got Linear"),
        (lambda: mha_weights(torch.nn.MultiheadAttention(8, 2, kdim=4)), r"kdim=4 and vdim=8 must equal embed_dim=8"),
        (
            lambda: mha_weights(torch.nn.MultiheadAttention(8, 2, add_bias_kv=True)),
            r"add_bias_kv=True and add_zero_attn=True are not supported",
        ),
    ],
)
def test_other_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
