"""Chapter 12: the digits split, TinyViT against its NumPy forward, attention rollout, and the deletion tools."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch

import selfattention as sa

RNG = np.random.default_rng(0)


def _vit(seed=0, **sizes):
    torch.manual_seed(seed)
    model = sa.TinyViT(**sizes).eval()
    with torch.no_grad():  # move every weight off its initial value (biases 0, LayerNorm 1), so all are tested
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def test_the_digits_split_is_stratified_fixed_and_scaled():
    x_train, x_test, y_train, y_test = sa.load_digits_split()
    assert x_train.shape == (1347, 1, 8, 8) and x_test.shape == (450, 1, 8, 8) and x_train.dtype == np.float32
    assert 0 <= x_train.min() and x_train.max() <= 1 and x_train.max() == 1
    totals = np.bincount(y_train) + np.bincount(y_test)
    assert (np.abs(np.bincount(y_test) - totals / 4) <= 1).all()
    again = sa.load_digits_split()
    assert all((a == b).all() for a, b in zip((x_train, x_test, y_train, y_test), again, strict=True))
    other = sa.load_digits_split(seed=1)
    assert not (other[3] == y_test).all()


@pytest.mark.parametrize(
    "sizes",
    [
        {},
        {"image_size": 8, "patch_size": 4, "channels": 3, "d_model": 16, "num_heads": 2, "num_layers": 3},
        {"image_size": 12, "patch_size": 3, "num_classes": 4, "dim_feedforward": 8},
    ],
)
def test_vit_forward_equals_tiny_vit(sizes):
    model = _vit(**sizes)
    x = RNG.random((5, model.channels, model.image_size, model.image_size)).astype(np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    logits, weights = sa.vit_forward(x, sa.tiny_vit_params(model), model.num_heads)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)
    T = (model.image_size // model.patch_size) ** 2 + 1
    assert weights.shape == (len(model.blocks), 5, model.num_heads, T, T)
    np.testing.assert_allclose(weights.sum(-1), 1, rtol=1e-5)
    logits64, _ = sa.vit_forward(x.astype(np.float64), sa.tiny_vit_params(model.double()), model.num_heads)
    with torch.no_grad():
        np.testing.assert_allclose(logits64, model(torch.from_numpy(x.astype(np.float64))).numpy(), rtol=1e-10)


def test_the_weights_are_those_of_torch_multihead_attention():
    model = _vit().double()
    x = RNG.random((2, 1, 8, 8))
    _, weights = sa.vit_forward(x, sa.tiny_vit_params(model), 4)
    with torch.no_grad():  # the first block's weights, from torch itself
        xt = torch.from_numpy(x)
        B, p = 2, 2
        patches = xt.reshape(B, 1, 4, p, 4, p).permute(0, 2, 4, 1, 3, 5).reshape(B, 16, 4)
        z = torch.cat([model.cls_token.expand(B, -1, -1), model.patch(patches)], 1) + model.positions
        block = model.blocks[0]
        normed = block.norm1(z)
        _, expected = block.self_attn(normed, normed, normed, average_attn_weights=False)
    np.testing.assert_allclose(weights[0], expected.numpy(), rtol=1e-10)


def test_rollout_on_a_hand_computed_case():
    a1 = np.array([[[1.0, 0.0], [0.5, 0.5]], [[0.0, 1.0], [0.5, 0.5]]])  # layer 1, two heads: mean [[.5,.5],[.5,.5]]
    a2 = np.array([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]])  # layer 2: the identity
    weights = np.stack([a1, a2])  # (L=2, H=2, 2, 2)
    # layer 1: 0.5 * [[.5,.5],[.5,.5]] + 0.5 * I = [[.75,.25],[.25,.75]]; layer 2: I; product: layer 1's
    np.testing.assert_allclose(sa.attention_rollout(weights), [[0.75, 0.25], [0.25, 0.75]])
    np.testing.assert_allclose(sa.attention_rollout(weights, residual=False), [[0.5, 0.5], [0.5, 0.5]])
    swapped = sa.attention_rollout(np.stack([a2, a1]))  # the order matters once neither is the identity
    np.testing.assert_allclose(swapped, [[0.75, 0.25], [0.25, 0.75]])


def test_rollout_multiplies_later_layers_on_the_left_and_keeps_batches():
    weights = sa.softmax(RNG.normal(size=(3, 2, 4, 5, 5)))  # (L, B, H, T, T)
    expected = np.stack(
        [
            np.linalg.multi_dot([0.5 * weights[layer, b].mean(0) + 0.5 * np.eye(5) for layer in (2, 1, 0)])
            for b in range(2)
        ]
    )
    result = sa.attention_rollout(weights)
    np.testing.assert_allclose(result, expected, rtol=1e-12)
    np.testing.assert_allclose(result.sum(-1), 1, rtol=1e-12)


def test_patch_ink_and_blank_patches():
    images = np.arange(2 * 1 * 4 * 4, dtype=float).reshape(2, 1, 4, 4)
    ink = sa.patch_ink(images, 2)
    np.testing.assert_allclose(ink[0], [0 + 1 + 4 + 5, 2 + 3 + 6 + 7, 8 + 9 + 12 + 13, 10 + 11 + 14 + 15])
    blanked = sa.blank_patches(images, np.array([[1], [2]]), 2)
    assert (blanked[0, 0, :2, 2:] == 0).all() and (blanked[1, 0, 2:, :2] == 0).all()
    np.testing.assert_allclose(sa.patch_ink(blanked, 2)[0], [ink[0, 0], 0, ink[0, 2], ink[0, 3]])
    assert images[0, 0, 0, 2] == 2  # the input is left alone
    np.testing.assert_array_equal(sa.blank_patches(images, np.zeros((2, 0), int), 2), images)


_X = RNG.random((2, 1, 8, 8))
_PARAMS = sa.tiny_vit_params(_vit())
_W = sa.softmax(RNG.normal(size=(2, 1, 2, 3, 3)))

BAD_INPUT = [
    (lambda: sa.load_digits_split(test_size=1.0), r"test_size must be a fraction between 0 and 1; got 1.0"),
    (lambda: sa.load_digits_split(test_size=0), r"test_size must be positive"),
    (lambda: sa.load_digits_split(seed=-1), r"seed must be a non-negative integer"),
    (lambda: sa.TinyViT(image_size=8, patch_size=3), r"not a multiple of|divid"),
    (lambda: sa.TinyViT(d_model=30, num_heads=4), r"not divisible by num_heads=4"),
    (lambda: sa.TinyViT(d_model=2048, num_layers=64, dim_feedforward=8192), r"more than 2\*\*27 weights"),
    (lambda: sa.TinyViT()(torch.zeros(2, 1, 6, 6)), r"built for 8x8 images; got 6x6"),
    (lambda: sa.TinyViT()(torch.zeros(2, 3, 8, 8)), r"was built for 1 input channels; got 3"),
    (lambda: sa.tiny_vit_params(torch.nn.Linear(2, 2)), r"expected a TinyViT; got Linear"),
    (lambda: sa.vit_forward(_X, "params", 4), r"params must be a ViTParams; got str"),
    (lambda: sa.vit_forward(_X[0], _PARAMS, 4), r"images must have shape \(B, C, H, W\)"),
    (lambda: sa.vit_forward(np.zeros((2, 1, 4, 4)), _PARAMS, 4), r"position table is for 16 patches; .* give 4"),
    (lambda: sa.vit_forward(np.zeros((2, 3, 8, 8)), _PARAMS, 4), r"reads 4 values per patch; .* give 12"),
    (lambda: sa.vit_forward(_X * np.nan, _PARAMS, 4), r"images must hold only finite"),
    (lambda: sa.vit_forward(_X, _PARAMS, 3), r"num_heads=3"),
    (lambda: dataclasses.replace(_PARAMS, cls_token=np.ones(5)), r"cls_token must have D=32 values"),
    (lambda: dataclasses.replace(_PARAMS, positions=np.ones((17, 5))), r"positions must be an \(N \+ 1, D=32\) table"),
    (lambda: dataclasses.replace(_PARAMS, blocks=()), r"blocks must be a non-empty list of EncoderParams"),
    (lambda: dataclasses.replace(_PARAMS, patch_size=0), r"patch_size must be a positive integer"),
    (lambda: sa.attention_rollout(_W[0, 0]), r"weights must have shape \(L, \.\.\., H, T, T\)"),
    (lambda: sa.attention_rollout(np.ones((2, 1, 2, 3, 3))), r"each row summing to 1"),
    (lambda: sa.attention_rollout(_W, residual="yes"), r"residual must be True or False"),
    (lambda: sa.attention_rollout(_W * np.inf), r"weights must hold only finite"),
    (lambda: sa.patch_ink(np.ones((4, 4)), 2), r"images must have at least 3 axes"),
    (lambda: sa.patch_ink(np.ones((1, 1, 5, 5)), 2), r"not a multiple of|divid"),
    (lambda: sa.blank_patches(_X, np.array([[16]]).repeat(2, 0), 2), r"patch indices must lie in 0 … 15; got 16"),
    (lambda: sa.blank_patches(_X, np.array([[0.5], [1.0]]), 2), r"patches must be a \(B, k\) integer array"),
    (lambda: sa.blank_patches(_X, np.array([[0]]), 2), r"the patches of each of the 2 images; got 1 rows"),
    (lambda: sa.blank_patches(_X[0], np.array([[0]]), 2), r"images must have shape \(B, C, H, W\)"),
    (lambda: sa.load_digits_split(test_size=0.001), r"leaves 2 test and 1795 training images"),
    (lambda: sa.load_digits_split(seed=2**32), r"seed must be below 2\*\*32"),
    (lambda: sa.TinyViT(image_size=1024, patch_size=1, d_model=8, num_heads=2), r"more than 4,096"),
    (lambda: sa.TinyViT()(torch.full((1, 1, 8, 8), float("nan"))), r"only finite numbers"),
    (lambda: sa.tiny_vit_params(_modified("blocks", 0, _layer(activation="relu"))), r"block 0 must be pre-norm, GELU"),
    (lambda: sa.tiny_vit_params(_modified("blocks", 1, _layer(norm_first=False))), r"block 1 must be pre-norm"),
    (lambda: sa.tiny_vit_params(_modified("blocks", 0, _layer(nhead=2))), r"with 4 heads"),
    (lambda: sa.tiny_vit_params(_modified("head", None, torch.nn.Linear(32, 10, bias=False))), r"head must be an nn"),
    (lambda: sa.tiny_vit_params(_modified("norm", None, torch.nn.LayerNorm(32, eps=1e-6))), r"norm must be an nn"),
    (lambda: dataclasses.replace(_PARAMS, patch_size=3), r"reads 4 values per patch, which is not channels"),
    (lambda: sa.attention_rollout(_W * 1.01), r"found row sums from 1.01"),
]


def _layer(**changes):
    settings = dict(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, activation="gelu")
    return torch.nn.TransformerEncoderLayer(**{**settings, "batch_first": True, "norm_first": True, **changes})


def _modified(name, index, replacement):
    model = sa.TinyViT()
    if index is None:
        setattr(model, name, replacement)
    else:
        getattr(model, name)[index] = replacement
    return model


def test_rollout_accepts_float16_and_bfloat16_weights():
    weights = sa.softmax(RNG.normal(size=(2, 1, 3, 5, 5)))
    half = torch.from_numpy(weights).to(torch.bfloat16)
    np.testing.assert_allclose(
        sa.attention_rollout(weights.astype(np.float16)), sa.attention_rollout(weights), atol=1e-2
    )
    np.testing.assert_allclose(sa.attention_rollout(half), sa.attention_rollout(weights), atol=2e-2)


@pytest.mark.parametrize(("call", "message"), BAD_INPUT, ids=[m for _, m in BAD_INPUT])
def test_bad_input_gets_a_clear_value_error(call, message):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=message):
            call()
