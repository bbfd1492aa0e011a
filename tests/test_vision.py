"""The vision modules against their NumPy twins, their state-dict names, patchify, and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfattention import (
    ConvSelfAttention,
    PatchAttentionBlock,
    T2TAttention,
    conv_self_attention_forward,
    numpy_state_dict,
    patch_attention_forward,
    patchify,
    t2t_attention_forward,
)
from selfattention.testing import randomise_parameters


def _assert_twin_matches(got, expected, dtype):
    """float64: 1e-10. float32: rounding grows with the outputs' size, so atol is relative to the largest."""
    if dtype == torch.float64:
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(expected).max())))


def test_state_dict_names_are_exactly_the_sources():
    assert list(PatchAttentionBlock().state_dict()) == [
        f"{layer}.{kind}" for layer in ("proj", "to_q", "to_k", "to_v", "to_out") for kind in ("weight", "bias")
    ]
    assert sorted(ConvSelfAttention(16).state_dict()) == sorted(
        ["q.weight", "q.bias", "k.weight", "k.bias", "v.weight", "v.bias", "gamma"]
    )
    assert list(T2TAttention(49, 64).state_dict()) == ["qkv.weight", "proj.weight", "proj.bias"]
    assert list(T2TAttention(49, 64, qkv_bias=True).state_dict()) == [
        "qkv.weight",
        "qkv.bias",
        "proj.weight",
        "proj.bias",
    ]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    ("in_channels", "patch_size", "embed_dim", "size"), [(3, 4, 64, 32), (1, 2, 8, 6), (3, 8, 16, 16)]
)
def test_patch_attention_block_matches_its_twin(dtype, in_channels, patch_size, embed_dim, size):
    module = randomise_parameters(PatchAttentionBlock(in_channels, patch_size, embed_dim).to(dtype), seed=1)
    x = torch.randn(2, in_channels, size, size, dtype=dtype, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = module(x).numpy()
    got, weights = patch_attention_forward(x.numpy(), numpy_state_dict(module), patch_size)
    n = (size // patch_size) ** 2
    assert got.shape == expected.shape == (2, n, embed_dim) and weights.shape == (2, n, n)
    _assert_twin_matches(got, expected, dtype)


def test_patch_attention_block_source_shapes():
    out = PatchAttentionBlock(in_channels=3, patch_size=4, embed_dim=64)(torch.randn(1, 3, 32, 32))
    assert out.shape == (1, 64, 64)
    assert out.transpose(1, 2).reshape(-1, 64, 8, 8).shape == (1, 64, 8, 8)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("gamma", [0.0, 0.7])
@pytest.mark.parametrize(("C", "H", "W"), [(8, 4, 4), (16, 6, 5), (64, 8, 8)])
def test_conv_self_attention_matches_its_twin(dtype, gamma, C, H, W):
    module = randomise_parameters(ConvSelfAttention(C).to(dtype), seed=3)
    with torch.no_grad():
        module.gamma.fill_(gamma)
    x = torch.randn(2, C, H, W, dtype=dtype, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = module(x).numpy()
    got, weights = conv_self_attention_forward(x.numpy(), numpy_state_dict(module))
    assert weights.shape == (2, H * W, H * W)
    _assert_twin_matches(got, expected, dtype)
    if gamma == 0.0:
        np.testing.assert_array_equal(got, x.numpy())


def test_conv_self_attention_starts_as_the_identity():
    module = ConvSelfAttention(32)
    assert module.gamma.item() == 0.0
    x = torch.randn(1, 32, 5, 5)
    assert torch.equal(module(x), x)
    assert module.q.out_channels == module.k.out_channels == 4 and module.v.out_channels == 32


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("num_heads", [1, 2, 4])
@pytest.mark.parametrize("qkv_bias", [False, True])
@pytest.mark.parametrize("qk_scale", [None, 0.05])
def test_t2t_attention_matches_its_twin(dtype, num_heads, qkv_bias, qk_scale):
    module = randomise_parameters(
        T2TAttention(49, 64, num_heads, qkv_bias=qkv_bias, qk_scale=qk_scale).to(dtype), seed=5
    )
    x = torch.rand(13, 100, 49, dtype=dtype, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        expected = module(x).numpy()
    got, weights = t2t_attention_forward(x.numpy(), numpy_state_dict(module), num_heads=num_heads, qk_scale=qk_scale)
    assert got.shape == expected.shape == (13, 100, 64) and weights.shape == (13, num_heads, 100, 100)
    _assert_twin_matches(got, expected, dtype)


def test_t2t_scale_and_parameter_count():
    assert T2TAttention(49, 64, 4).scale == 16**-0.5
    assert T2TAttention(49, 64, 4, qk_scale=0.1).scale == 0.1
    assert T2TAttention(49, 64, 4, qk_scale=0.0).scale == 0.0  # unlike `qk_scale or ...`, 0 is honoured
    for heads in (1, 4):
        assert sum(p.numel() for p in T2TAttention(49, 64, heads).parameters()) == 49 * 64 * 3 + 64**2 + 64


def test_t2t_skip_connection_adds_the_unsplit_values():
    module = randomise_parameters(T2TAttention(10, 8, num_heads=4).double(), seed=7)
    x = torch.randn(2, 5, 10, dtype=torch.float64)
    state = numpy_state_dict(module)
    v = x.numpy() @ state["qkv.weight"][16:].T  # the third block of qkv's outputs
    out, _ = t2t_attention_forward(x.numpy(), state, num_heads=4)
    with torch.no_grad():
        attention_part = module(x).numpy() - v
    np.testing.assert_allclose(out - v, attention_part, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_patchify_equals_a_strided_conv(dtype):
    conv = torch.nn.Conv2d(3, 8, kernel_size=4, stride=4).to(dtype)
    x = torch.randn(2, 3, 12, 16, dtype=dtype)
    with torch.no_grad():
        expected = conv(x).flatten(2).transpose(1, 2).numpy()  # (B, N, E)
    got = patchify(x.numpy(), 4) @ conv.weight.detach().numpy().reshape(8, -1).T + conv.bias.detach().numpy()
    _assert_twin_matches(got, expected, dtype)


def test_patchify_order_is_rows_then_columns_and_channel_row_column_inside():
    image = np.arange(2 * 4 * 6, dtype=float).reshape(2, 4, 6)  # (C, H, W)
    patches = patchify(image, 2)
    assert patches.shape == (6, 8)
    np.testing.assert_array_equal(patches[1], np.concatenate([image[c, 0:2, 2:4].ravel() for c in range(2)]))
    np.testing.assert_array_equal(patches[3], np.concatenate([image[c, 2:4, 0:2].ravel() for c in range(2)]))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: patchify(np.ones((3, 30, 32)), 4),
            r"the image size 30x32 is not a multiple of patch_size=4; crop or resize it to a multiple \(for example 28x32\)",
        ),
        (
            lambda: patchify(np.ones((30, 32)), 4),
            r"images must have at least 3 axes \(\.\.\., C, H, W\); got shape \(30, 32\)",
        ),
        (lambda: patchify(np.ones((3, 8, 8)), 0), r"patch_size must be a positive integer; got 0"),
        (
            lambda: patchify(np.ones((3, 224, 8)), 16),
            r"the image \(224x8\) is smaller than one patch \(16x16\); use patch_size <= 8 or a larger image",
        ),
        (
            lambda: patchify(np.ones((3, 3, 3)), 4),
            r"the image \(3x3\) is smaller than one patch \(4x4\); use patch_size <= 3 or a larger image",
        ),
        (
            lambda: patchify(np.ones((3, 30, 36)), 16),
            r"the image size 30x36 is not a multiple of patch_size=16; crop or resize it to a multiple "
            r"\(for example 16x32\)",
        ),
        (
            lambda: ConvSelfAttention(4),
            r"in_channels must be at least 8, because queries and keys get in_channels // 8 channels; got in_channels=4",
        ),
        (lambda: T2TAttention(49, 64, num_heads=5), r"chan=64 is not divisible by num_heads=5"),
        (lambda: T2TAttention(49, 64, qkv_bias=1), r"qkv_bias must be True or False; got 1"),
        (lambda: T2TAttention(49, 64, qk_scale="big"), r"qk_scale must be a real number; got 'big' of type str"),
        (
            lambda: T2TAttention(49, 64)(torch.rand(100, 49)),
            r"T2TAttention expects input of shape \(B, N, dim=49\); got shape \(100, 49\)",
        ),
        (
            lambda: T2TAttention(49, 64)(torch.rand(2, 100, 48)),
            r"T2TAttention expects input of shape \(B, N, dim=49\); got shape \(2, 100, 48\)",
        ),
        (
            lambda: ConvSelfAttention(8)(torch.rand(8, 4, 4)),
            r"ConvSelfAttention expects input of shape \(B, C, H, W\); got 3 axes, shape \(8, 4, 4\)",
        ),
        (
            lambda: ConvSelfAttention(8)(torch.rand(1, 16, 4, 4)),
            r"ConvSelfAttention was built for 8 input channels; got 16",
        ),
        (
            lambda: PatchAttentionBlock()(torch.rand(1, 3, 30, 30)),
            r"the image size 30x30 is not a multiple of patch_size=4",
        ),
        (
            lambda: PatchAttentionBlock()(np.ones((1, 3, 32, 32))),
            r"PatchAttentionBlock expects a torch.Tensor; got ndarray",
        ),
        (
            lambda: t2t_attention_forward(np.ones((2, 5, 49)), {"qkv.weight": np.ones((192, 49))}),
            r"state is missing \['proj.weight', 'proj.bias'\] for T2TAttention",
        ),
        (
            lambda: t2t_attention_forward(np.ones((2, 5, 48)), numpy_state_dict(T2TAttention(49, 64))),
            r"x must have shape \(B, N, dim=49\); got shape \(2, 5, 48\)",
        ),
        (
            lambda: t2t_attention_forward(np.ones((2, 5, 49)), numpy_state_dict(T2TAttention(49, 64)), num_heads=3),
            r"chan=64 is not divisible by num_heads=3",
        ),
        (
            lambda: conv_self_attention_forward(np.ones((8, 4, 4)), numpy_state_dict(ConvSelfAttention(8))),
            r"x must have shape \(B, C, H, W\); got shape \(8, 4, 4\)",
        ),
        (
            lambda: patch_attention_forward(np.ones((1, 3, 8, 8)), [], 4),
            r"params must be a PatchAttentionParams or the state dict of a PatchAttentionBlock \(a mapping of parameter names to arrays\); got list",
        ),
        (lambda: numpy_state_dict(np.ones(3)), r"expected a torch.nn.Module; got ndarray"),
    ],
)
def test_vision_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
