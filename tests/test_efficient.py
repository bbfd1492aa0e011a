"""memory_efficient_attention equals the reference and uses far less memory."""

from __future__ import annotations

import warnings
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import selfattention as sa
from selfattention import causal_mask, memory_efficient_attention, scaled_dot_product_attention
from selfattention.measure import peak_bytes
from selfattention.testing import assert_parity, to_torch


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("block_size", [1, 7, 64, 1000])
@pytest.mark.parametrize("mask_kind", [None, "bool", "float", "causal"])
@pytest.mark.parametrize(
    ("q_shape", "kv_shape"), [((2, 3, 40, 8), (2, 3, 50, 8)), ((5, 16), (9, 16)), ((2, 1, 6, 4), (3, 6, 4))]
)
def test_matches_the_reference_and_torch(dtype, block_size, mask_kind, q_shape, kv_shape):
    rng = np.random.default_rng(0)
    q = rng.normal(size=q_shape).astype(dtype)
    k = rng.normal(size=kv_shape).astype(dtype)
    v = rng.normal(size=(*kv_shape[:-1], 5)).astype(dtype)
    T, S = q_shape[-2], kv_shape[-2]
    mask = None
    if mask_kind in ("bool", "float"):
        keep = rng.random((T, S)) > 0.4
        keep[0] = False  # a fully masked query
        mask = keep if mask_kind == "bool" else np.where(keep, 0.0, -np.inf).astype(dtype)
    elif mask_kind == "causal" and T == S:
        mask = causal_mask(T, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = memory_efficient_attention(q, k, v, mask=mask, block_size=block_size)
    reference, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    assert got.dtype == dtype and got.shape == reference.shape
    tolerance = dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, reference, **tolerance)
    expected = F.scaled_dot_product_attention(
        *to_torch(q, k, v), attn_mask=None if mask is None else torch.from_numpy(mask)
    )
    assert_parity(got, expected, dtype)


def test_float64_agreement_is_within_1e_minus_6_at_a_realistic_size():
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=(4, 512, 64)) for _ in range(3))
    got = memory_efficient_attention(q, k, v, mask=causal_mask(512), block_size=128)
    reference, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(512))
    assert np.abs(got - reference).max() < 1e-6


def test_peak_memory_grows_with_the_block_not_with_s():
    rng = np.random.default_rng(2)
    q = rng.normal(size=(4, 256, 32)).astype(np.float32)
    peaks = {}
    for S in (2048, 4096):
        k, v = (rng.normal(size=(4, S, 32)).astype(np.float32) for _ in range(2))
        peaks[S] = (
            peak_bytes(partial(scaled_dot_product_attention, q, k, v)),
            peak_bytes(partial(memory_efficient_attention, q, k, v, block_size=64)),
        )
    reference_4096, blocked_4096 = peaks[4096]
    assert reference_4096 >= 4 * 256 * 4096 * 4  # the reference holds every (B, T, S) float32 score
    assert blocked_4096 < 0.1 * reference_4096, peaks
    assert peaks[4096][0] > 1.8 * peaks[2048][0]  # the reference doubles with S...
    # ...the blocked version grows only by what the inputs' checks allocate (a boolean array of k's size, less
    # than k's float32 bytes), never by a (T, S) array: T * 2048 more float32 scores would be 8 MiB.
    assert peaks[4096][1] - peaks[2048][1] < 4 * 2048 * 32 * 4


def test_errors():
    x = np.ones((3, 4))
    with pytest.raises(ValueError, match=r"block_size must be a positive integer; got 0"):
        memory_efficient_attention(x, x, x, block_size=0)
    with pytest.raises(ValueError, match=r"q has 4 features but k has 3; the last axes of q and k must match"):
        memory_efficient_attention(x, np.ones((3, 3)), x)
    with pytest.raises(ValueError, match=r"mask of shape \(2, 2\) does not broadcast to the scores' shape"):
        memory_efficient_attention(x, x, x, mask=np.ones((2, 2), dtype=bool))


@pytest.mark.parametrize(("T", "S", "block", "tiles"), [(8, 8, 2, 10), (8, 8, 8, 1), (4, 8, 2, 7)])
def test_causal_attention_skips_the_tiles_above_the_diagonal(monkeypatch, T, S, block, tiles):
    """Each query block stops at its last visible key: only tiles with a visible key are computed."""
    from selfattention import efficient

    seen = []
    original = efficient._online_softmax_update

    def counting(running_max, running_sum, out, scores, values, **kwargs):
        seen.append(scores.shape[-2:])
        return original(running_max, running_sum, out, scores, values, **kwargs)

    monkeypatch.setattr(efficient, "_online_softmax_update", counting)
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, T, 4)), rng.normal(size=(2, S, 4)), rng.normal(size=(2, S, 3))
    got = sa.memory_efficient_attention(q, k, v, block_size=block, is_causal=True)
    np.testing.assert_allclose(got, sa.scaled_dot_product_attention(q, k, v, is_causal=True)[0], rtol=1e-12)
    visible = sa.causal_mask(T, S, dtype=bool)
    expected = sum(visible[i : i + block, j : j + block].any() for i in range(0, T, block) for j in range(0, S, block))
    assert len(seen) == expected == tiles
