"""The weight containers, the multi-head steps (grouped-query attention included) and the interop readers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import selfattention as sa
from selfattention import AttentionParams, EncoderParams, FeedForwardParams, LayerNormParams, Linear
from selfattention.interop.layout import linear_from_torch
from selfattention.testing import assert_parity, randomise_parameters


def _gqa_params(rng, D=16, H=4, Hkv=2, Dh=4, bias=True):
    def linear(d_in, d_out):
        return Linear(rng.normal(size=(d_in, d_out)) / np.sqrt(d_in), rng.normal(size=d_out) if bias else None)

    return AttentionParams(q=linear(D, H * Dh), k=linear(D, Hkv * Dh), v=linear(D, Hkv * Dh), out=linear(H * Dh, D))


def test_linear_is_x_at_w_plus_b_on_any_batch_axes(rng):
    layer = Linear(rng.normal(size=(3, 5)), rng.normal(size=5))
    x = rng.normal(size=(2, 4, 3))
    np.testing.assert_allclose(layer(x), x @ layer.weight + layer.bias, rtol=1e-15)
    assert (layer.d_in, layer.d_out) == (3, 5)
    assert Linear(np.ones((2, 2), dtype=np.float32))(np.ones(2, dtype=np.float32)).dtype == np.float32
    assert Linear(np.eye(2, dtype=int)).weight.dtype == np.float64


@pytest.mark.parametrize(("H", "Hkv"), [(4, 4), (4, 2), (4, 1), (6, 3)])
@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_attention_matches_torch_enable_gqa(H, Hkv, causal):
    rng = np.random.default_rng(H * 10 + Hkv)
    params = _gqa_params(rng, D=24, H=H, Hkv=Hkv, Dh=4)
    assert params.kv_groups == H // Hkv and params.head_counts(H) == (H, Hkv)
    x = rng.normal(size=(2, 5, 24))
    y, weights = sa.multihead_attention(x, params, num_heads=H, is_causal=causal)
    assert weights.shape == (2, H, 5, 5)
    q, k, v = (torch.from_numpy(a) for a in sa.project_qkv(x, params))
    q, k, v = (
        q.view(2, 5, H, 4).transpose(1, 2),
        k.view(2, 5, Hkv, 4).transpose(1, 2),
        v.view(2, 5, Hkv, 4).transpose(1, 2),
    )
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)  # (B, H, T, Dh)
    expected = out.transpose(1, 2).reshape(2, 5, H * 4).numpy() @ params.out.weight + params.out.bias
    assert_parity(y, expected, np.float64)


def test_the_steps_compose_to_multihead_attention(rng):
    params = _gqa_params(rng, H=4, Hkv=2)
    x = rng.normal(size=(3, 6, 16))
    q, k, v = sa.project_qkv(x, params)
    q, k, v = sa.split_heads(q, 4), sa.split_heads(k, 2), sa.split_heads(v, 2)
    assert q.shape == (3, 4, 6, 4) and k.shape == v.shape == (3, 2, 6, 4)
    k, v = sa.repeat_kv(k, 2), sa.repeat_kv(v, 2)
    np.testing.assert_array_equal(k[:, 1], k[:, 0])  # query heads 0 and 1 share key/value head 0
    out, weights = sa.scaled_dot_product_attention(q, k, v, mask=sa.causal_mask(6))
    y = params.out(sa.merge_heads(out))
    expected_y, expected_weights = sa.multihead_attention(x, params, num_heads=4, mask=sa.causal_mask(6))
    np.testing.assert_array_equal(y, expected_y)
    np.testing.assert_array_equal(weights, expected_weights)


def test_fused_and_container_forms_agree_and_round_trip(rng):
    D = 8
    w_qkv, w_out, b_qkv, b_out = (
        rng.normal(size=(D, 3 * D)),
        rng.normal(size=(D, D)),
        rng.normal(size=3 * D),
        rng.normal(size=D),
    )
    params = AttentionParams.from_fused(w_qkv, w_out, b_qkv, b_out)
    np.testing.assert_array_equal(params.w_qkv, w_qkv)
    np.testing.assert_array_equal(params.b_qkv, b_qkv)
    np.testing.assert_array_equal(params.q.weight, w_qkv[:, :D])
    np.testing.assert_array_equal(params.v.bias, b_qkv[2 * D :])
    x, key = rng.normal(size=(2, 5, D)), rng.normal(size=(2, 7, D))
    for kwargs in ({}, {"key": key}, {"mask": sa.causal_mask(5)}):
        fused = sa.multihead_attention(x, w_qkv, w_out, 2, b_qkv=b_qkv, b_out=b_out, **kwargs)
        contained = sa.multihead_attention(x, params, num_heads=2, **kwargs)
        for a, b in zip(fused, contained, strict=True):
            np.testing.assert_array_equal(a, b)
    assert AttentionParams.from_fused(w_qkv, w_out).b_qkv is None


def test_named_arrays_walk_every_weight_and_containers_are_frozen(rng):
    layer = randomise_parameters(
        torch.nn.TransformerEncoderLayer(8, 2, 12, dropout=0.0, batch_first=True).double(), seed=0
    )
    params = EncoderParams.from_torch(layer)
    names = [name for name, _ in params.named_arrays()]
    assert names[:2] == ["attention.q.weight", "attention.q.bias"] and names[-1] == "norm2.bias"
    assert sum(a.size for _, a in params.named_arrays()) == sum(p.numel() for p in layer.parameters())
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.norm1 = params.norm2
    no_bias = Linear(np.ones((2, 3)))
    assert [name for name, _ in no_bias.named_arrays()] == ["weight"]


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layers_without_biases_are_read_and_match_torch(norm_first):
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, bias=False, norm_first=norm_first, batch_first=True)
    layer = randomise_parameters(layer.double(), seed=1)
    params = EncoderParams.from_torch(layer)
    assert params.b_qkv is None and params.b_ff1 is None and params.norm1.bias is None
    x = torch.randn(2, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = layer(x)
    assert_parity(sa.encoder_block(x.numpy(), params, **sa.encoder_layer_config(layer)), expected, np.float64)


def test_interop_copies_and_transposes_in_one_place():
    torch.manual_seed(0)
    linear = torch.nn.Linear(3, 5)
    layer = linear_from_torch(linear.weight.detach().numpy(), linear.bias.detach().numpy())
    np.testing.assert_array_equal(layer.weight, linear.weight.detach().numpy().T)
    assert layer.weight.flags.c_contiguous and not np.shares_memory(layer.weight, linear.weight.detach().numpy())
    row = np.ones((1, 4))  # a (1, d_in) weight: its transpose is contiguous already, and must still be a copy
    assert not np.shares_memory(linear_from_torch(row).weight, row)
    conv = torch.nn.Conv2d(3, 6, kernel_size=2, stride=2)
    patch = linear_from_torch(conv.weight.detach().numpy(), conv.bias.detach().numpy())
    images = torch.randn(1, 3, 4, 4)
    with torch.no_grad():
        expected = conv(images).flatten(2).transpose(1, 2).numpy()
    assert_parity(patch(sa.patchify(images.numpy(), 2)), expected, np.float32, rtol=1e-5, atol=1e-5)


def test_state_dict_readers_match_the_module_readers():
    torch.manual_seed(0)
    encoder = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(8, 2, 12, batch_first=True), 2, enable_nested_tensor=False
    )
    state = sa.numpy_state_dict(randomise_parameters(encoder, seed=3))
    from_state = sa.encoder_from_state_dict(state, prefix="layers.1.")
    from_module = EncoderParams.from_torch(encoder.layers[1])
    for (name, a), (other, b) in zip(from_state.named_arrays(), from_module.named_arrays(), strict=True):
        assert name == other
        np.testing.assert_array_equal(a, b)
    attention = sa.attention_from_state_dict(state, prefix="layers.0.self_attn.")
    np.testing.assert_array_equal(attention.w_qkv, encoder.layers[0].self_attn.in_proj_weight.detach().numpy().T)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: Linear(np.ones(3)),
            r"weight must be a 2-D \(d_in, d_out\) matrix with d_in, d_out >= 1; got shape \(3,\)",
        ),
        (
            lambda: Linear(np.ones((2, 3)), np.ones(2)),
            r"bias must have shape \(d_out,\) = \(3,\) for weight \(2, 3\); got \(2,\)",
        ),
        (
            lambda: Linear(np.ones((2, 3)))(np.ones((4, 3))),
            r"x must have 2 features in its last axis for this layer; got shape \(4, 3\)",
        ),
        (
            lambda: LayerNormParams(np.ones((2, 2))),
            r"weight must be a vector of shape \(D,\) with D >= 1; got shape \(2, 2\)",
        ),
        (lambda: FeedForwardParams(Linear(np.ones((4, 6))), np.ones((6, 4))), r"down must be a Linear; got ndarray"),
        (
            lambda: AttentionParams(
                Linear(np.ones((8, 8))), Linear(np.ones((8, 3))), Linear(np.ones((8, 3))), Linear(np.ones((8, 8)))
            ),
            r"q has 8 outputs and k has 3; q's must be a whole multiple of k's",
        ),
        (
            lambda: AttentionParams(
                Linear(np.ones((8, 8))), Linear(np.ones((8, 4))), Linear(np.ones((6, 4))), Linear(np.ones((8, 8)))
            ),
            r"k and v must read the same input width; got 8 and 6",
        ),
        (
            lambda: AttentionParams(
                Linear(np.ones((8, 8))), Linear(np.ones((8, 4))), Linear(np.ones((8, 4))), Linear(np.ones((4, 8)))
            ),
            r"out must take the H\*Dv = 8 features of the merged heads \(v gives 4 for 2 query head\(s\) per key/value head\); got 4",
        ),
        (
            lambda: _gqa_params(np.random.default_rng(0), H=4, Hkv=2).head_counts(1),
            r"num_heads=1 must be a multiple of 2, the query heads per key/value head \(q has 16 outputs, k has 8\)",
        ),
        (
            lambda: _gqa_params(np.random.default_rng(0), H=4, Hkv=2).head_counts(3),
            r"the model width D=16 is not divisible by num_heads=3",
        ),
        (
            lambda: AttentionParams.from_fused(np.ones(3), np.ones((3, 3))),
            r"w_qkv must be a 2-D \(D, 3\*D\) matrix; got shape \(3,\)",
        ),
        (
            lambda: sa.multihead_attention(
                np.ones((2, 16)), _gqa_params(np.random.default_rng(0)), np.ones((16, 16)), 4
            ),
            r"with an AttentionParams, pass the head count by keyword and no other weights",
        ),
        (
            lambda: sa.multihead_attention(np.ones((2, 16)), _gqa_params(np.random.default_rng(0))),
            r"num_heads is missing",
        ),
        (
            lambda: sa.multihead_attention(np.ones((2, 8)), _gqa_params(np.random.default_rng(0)), num_heads=4),
            r"x has width D=8 but the parameters are for D=16",
        ),
        (lambda: sa.multihead_attention(np.ones((2, 16)), np.ones((16, 48))), r"w_out is missing"),
        (lambda: sa.project_qkv(np.ones((2, 16)), {"q": 1}), r"params must be an AttentionParams; got dict"),
        (
            lambda: sa.repeat_kv(np.ones((2, 3)), 2),
            r"x must have at least 3 axes \(\.\.\., Hkv, S, Dh\); got shape \(2, 3\)",
        ),
        (lambda: sa.repeat_kv(np.ones((2, 3, 4)), 0), r"n_rep must be a positive integer; got 0"),
        (lambda: EncoderParams(1, 2, 3, 4), r"attention must be an AttentionParams; got int"),
        (lambda: sa.feed_forward(np.ones(4), "weights"), r"params must be a FeedForwardParams; got str"),
        (
            lambda: sa.feed_forward(
                np.ones(4), FeedForwardParams(Linear(np.ones((4, 6))), Linear(np.ones((6, 4)))), "swish"
            ),
            r"activation must be one of \['gelu', 'relu'\]; got 'swish'",
        ),
        (
            lambda: sa.encoder_from_state_dict({"linear1.weight": np.ones((2, 2))}),
            r"state is missing \['linear2.weight', 'norm1.weight', 'norm2.weight'\]",
        ),
        (lambda: sa.attention_params(torch.nn.Linear(2, 2)), r"expected a torch.nn.MultiheadAttention; got Linear"),
    ],
)
def test_container_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
