"""layer_norm, activations, EncoderParams, encoder_block and encoder_stack against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from selfattention import (
    EncoderParams,
    causal_mask,
    encoder_block,
    encoder_layer_config,
    encoder_stack,
    gelu,
    layer_norm,
    relu,
)
from selfattention.testing import assert_parity, randomise_parameters

TORCH_DTYPES = {np.float64: torch.float64, np.float32: torch.float32}
# Looser for float32: two LayerNorms, a 4-head attention and a feed-forward compound rounding.
BLOCK_TOLERANCE = {np.float64: dict(rtol=1e-10, atol=1e-10), np.float32: dict(rtol=1e-4, atol=1e-4)}


def _layer(D=16, H=4, F_=32, norm_first=False, activation="relu", dtype=np.float64, seed=0):
    layer = torch.nn.TransformerEncoderLayer(
        D, H, dim_feedforward=F_, dropout=0.0, activation=activation, norm_first=norm_first, batch_first=True
    ).to(TORCH_DTYPES[dtype])
    return randomise_parameters(layer, seed=seed)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm_matches_torch(rng, dtype, affine):
    x = (3.0 + 2.0 * rng.normal(size=(2, 5, 8))).astype(dtype)
    weight = (1 + 0.3 * rng.normal(size=8)).astype(dtype) if affine else None
    bias = (0.3 * rng.normal(size=8)).astype(dtype) if affine else None
    expected = F.layer_norm(
        torch.from_numpy(x),
        (8,),
        None if weight is None else torch.from_numpy(weight),
        None if bias is None else torch.from_numpy(bias),
        eps=1e-5,
    )
    got = layer_norm(x, weight, bias)
    assert got.dtype == dtype
    assert_parity(got, expected, dtype)
    if not affine:
        np.testing.assert_allclose(got.mean(axis=-1), 0.0, atol=1e-5)
        np.testing.assert_allclose(got.std(axis=-1), 1.0, rtol=1e-3)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_activations_match_torch(rng, dtype):
    x = (3.0 * rng.normal(size=(4, 7))).astype(dtype)
    assert relu(x).dtype == dtype and gelu(x).dtype == dtype
    assert_parity(relu(x), F.relu(torch.from_numpy(x)), dtype)
    assert_parity(gelu(x), F.gelu(torch.from_numpy(x)), dtype)  # exact (erf) GELU


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("masked", [False, True])
def test_encoder_block_matches_transformer_encoder_layer(dtype, norm_first, activation, masked):
    layer = _layer(norm_first=norm_first, activation=activation, dtype=dtype)
    x = torch.randn(3, 6, 16, dtype=TORCH_DTYPES[dtype], generator=torch.Generator().manual_seed(1))
    mask = causal_mask(6, dtype=dtype) if masked else None
    with torch.no_grad():
        expected = layer(x, src_mask=None if mask is None else torch.from_numpy(mask))
    got = encoder_block(x.numpy(), EncoderParams.from_torch(layer), mask=mask, **encoder_layer_config(layer))
    assert got.dtype == dtype
    np.testing.assert_allclose(got, expected.numpy(), **BLOCK_TOLERANCE[dtype])


def test_encoder_block_with_unbatched_input_and_a_boolean_mask():
    layer = _layer(seed=3)
    x = torch.randn(5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    blocked = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)  # PyTorch: True = blocked
    with torch.no_grad():
        expected = layer(x, src_mask=blocked)
    got = encoder_block(
        x.numpy(), EncoderParams.from_torch(layer), num_heads=4, mask=~blocked.numpy()
    )  # ours: True = attend
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_returns_the_weights_its_attention_used(norm_first):
    layer = _layer(norm_first=norm_first, seed=4)
    params = EncoderParams.from_torch(layer)
    x = np.random.default_rng(5).normal(size=(2, 5, 16))
    keep = np.array([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]  # (B, 1, 1, S): key padding
    y, weights = encoder_block(x, params, 4, mask=keep, norm_first=norm_first, return_weights=True)
    np.testing.assert_array_equal(y, encoder_block(x, params, 4, mask=keep, norm_first=norm_first))
    h = layer_norm(x, params.norm1.weight, params.norm1.bias) if norm_first else x  # what the attention read
    with torch.no_grad():
        _, expected = layer.self_attn(
            *[torch.from_numpy(h)] * 3,
            key_padding_mask=torch.from_numpy(~keep[:, 0, 0]),
            need_weights=True,
            average_attn_weights=False,
        )
    assert weights.shape == (2, 4, 5, 5)
    np.testing.assert_allclose(weights, expected.numpy(), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="return_weights must be"):
        encoder_block(x, params, 4, return_weights=1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("num_layers", [1, 3])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("final_norm", [False, True])
def test_encoder_stack_matches_transformer_encoder(dtype, num_layers, norm_first, final_norm):
    template = _layer(norm_first=norm_first, dtype=dtype)
    norm = torch.nn.LayerNorm(16).to(TORCH_DTYPES[dtype]) if final_norm else None
    encoder = torch.nn.TransformerEncoder(template, num_layers, norm=norm, enable_nested_tensor=False)
    randomise_parameters(encoder, seed=7)  # every layer different, final norm included
    x = torch.randn(2, 6, 16, dtype=TORCH_DTYPES[dtype], generator=torch.Generator().manual_seed(3))
    mask = causal_mask(6, dtype=dtype)
    with torch.no_grad():
        expected = encoder(x, mask=torch.from_numpy(mask))
    layers = [EncoderParams.from_torch(layer) for layer in encoder.layers]
    assert not np.allclose(layers[0].w_ff1, layers[-1].w_ff1) or num_layers == 1
    final = (encoder.norm.weight.detach().numpy(), encoder.norm.bias.detach().numpy()) if final_norm else None
    got = encoder_stack(x.numpy(), layers, num_heads=4, mask=mask, norm_first=norm_first, final_norm=final)
    np.testing.assert_allclose(got, expected.numpy(), **BLOCK_TOLERANCE[dtype])


def test_encoder_params_reads_every_parameter():
    layer = _layer()
    params = EncoderParams.from_torch(layer)
    assert (params.d_model, params.dim_feedforward) == (16, 32)
    np.testing.assert_array_equal(params.w_ff1, layer.linear1.weight.detach().numpy().T)
    np.testing.assert_array_equal(params.b_ff2, layer.linear2.bias.detach().numpy())
    np.testing.assert_array_equal(params.norm2_weight, layer.norm2.weight.detach().numpy())
    assert sum(array.size for _, array in params.named_arrays()) == sum(p.numel() for p in layer.parameters())


def test_encoder_layer_config_reads_the_settings():
    layer = torch.nn.TransformerEncoderLayer(
        16, 2, 32, dropout=0.0, activation="gelu", norm_first=True, layer_norm_eps=1e-6
    )
    assert encoder_layer_config(layer) == {"num_heads": 2, "norm_first": True, "activation": "gelu", "eps": 1e-6}


def _params(D=4, F_=6, **override):
    arrays = dict(
        w_qkv=np.ones((D, 3 * D)),
        b_qkv=np.ones(3 * D),
        w_out=np.ones((D, D)),
        b_out=np.ones(D),
        w_ff1=np.ones((D, F_)),
        b_ff1=np.ones(F_),
        w_ff2=np.ones((F_, D)),
        b_ff2=np.ones(D),
        norm1_weight=np.ones(D),
        norm1_bias=np.ones(D),
        norm2_weight=np.ones(D),
        norm2_bias=np.ones(D),
    )
    arrays.update(override)
    return arrays


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (dict(w_qkv=np.ones((4, 8))), r"w_qkv must have shape \(D, 3\*D\) = \(4, 12\); got \(4, 8\)"),
        (
            dict(w_ff1=np.ones(6)),
            r"w_ff1, b_ff1: weight must be a 2-D \(d_in, d_out\) matrix with d_in, d_out >= 1; got shape \(6,\)",
        ),
        (
            dict(b_ff1=np.ones(4)),
            r"w_ff1, b_ff1: bias must have shape \(d_out,\) = \(6,\) for weight \(4, 6\); got \(4,\)",
        ),
        (
            dict(w_ff2=np.ones((4, 6)), b_ff2=np.ones(6)),
            r"up maps 4 -> 6 features, so down must map 6 -> 4; got 4 -> 6",
        ),
        (
            dict(norm2_bias=np.ones(5)),
            r"norm2_weight, norm2_bias: bias must have the weight's shape \(D,\) = \(4,\); got \(5,\)",
        ),
        (dict(b_qkv=np.ones(4)), r"b_qkv must have shape \(3\*D,\) = \(12,\); got \(4,\)"),
        (
            dict(norm1_weight=np.ones(5), norm1_bias=np.ones(5)),
            r"every part must have the model width D=4 of the attention's input; norm1 has 5",
        ),
    ],
)
def test_encoder_params_shape_errors(override, message):
    with pytest.raises(ValueError, match=message):
        EncoderParams.from_arrays(**_params(**override))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: encoder_block(np.ones((3, 4)), EncoderParams.from_arrays(**_params()), 2, activation="tanh"),
            r"activation must be one of \['gelu', 'relu'\]; got 'tanh'",
        ),
        (lambda: encoder_block(np.ones((3, 4)), _params(), 2), r"params must be an EncoderParams; got dict"),
        (
            lambda: encoder_block(np.ones((3, 8)), EncoderParams.from_arrays(**_params()), 2),
            r"x has width D=8 but the parameters are for D=4",
        ),
        (
            lambda: encoder_block(np.ones((3, 4)), EncoderParams.from_arrays(**_params()), 3),
            r"the model width D=4 is not divisible by num_heads=3",
        ),
        (
            lambda: encoder_block(np.ones((3, 4)), EncoderParams.from_arrays(**_params()), 2, norm_first="yes"),
            r"norm_first must be True or False; got 'yes'",
        ),
        (
            lambda: encoder_block(np.ones((3, 4)), EncoderParams.from_arrays(**_params()), 2, eps=0.0),
            r"eps must be positive; got 0.0",
        ),
        (
            lambda: encoder_stack(np.ones((3, 4)), [], 2),
            r"layers must hold at least one EncoderParams; got an empty sequence",
        ),
        (
            lambda: encoder_stack(np.ones((3, 4)), [EncoderParams.from_arrays(**_params()), "x"], 2),
            r"layers\[1\] must be an EncoderParams; got str",
        ),
        (
            lambda: encoder_stack(np.ones((3, 4)), [EncoderParams.from_arrays(**_params())], 2, final_norm=np.ones(4)),
            r"final_norm must be a LayerNormParams, a \(weight, bias\) pair or None; got ndarray",
        ),
        (
            lambda: layer_norm(np.ones((2, 4)), weight=np.ones(3)),
            r"weight must have shape \(D,\) = \(4,\) for x with D=4; got \(3,\)",
        ),
        (
            lambda: layer_norm(np.ones((2, 4)), bias=np.ones((4, 1))),
            r"bias must have shape \(D,\) = \(4,\) for x with D=4; got \(4, 1\)",
        ),
        (lambda: layer_norm(np.float64(1.0)), r"x must have at least 1 axes \(\.\.\., D\); got shape \(\)"),
        (
            lambda: EncoderParams.from_torch(torch.nn.Linear(2, 2)),
            r"expected a torch.nn.TransformerEncoderLayer; got Linear",
        ),
        (
            lambda: encoder_layer_config(torch.nn.TransformerEncoderLayer(4, 2, 8, activation=torch.tanh)),
            r"only ReLU and exact GELU activations are supported",
        ),
        (
            lambda: encoder_layer_config(torch.nn.MultiheadAttention(4, 2)),
            r"expected a torch.nn.TransformerEncoderLayer; got MultiheadAttention",
        ),
    ],
)
def test_encoder_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
