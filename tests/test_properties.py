"""Property-based tests (Hypothesis): the attention functions against PyTorch on shapes nobody wrote by hand.

Hypothesis draws batch axes that broadcast between q, k, v and the mask, T != S,
Dk != Dv, dtypes, masks (boolean, additive 0/-inf, additive finite, fully masked
rows, key padding), scales and block sizes, and checks:

- ``scaled_dot_product_attention`` against ``torch.nn.functional.scaled_dot_product_attention``;
- ``memory_efficient_attention`` against ``scaled_dot_product_attention``;
- ``multihead_attention`` against ``torch.nn.MultiheadAttention``;
- that no function changes its inputs, and that float dtypes are kept.

The "ci" profile is derandomized with a bounded number of examples, so every run
tries the same cases; set HYPOTHESIS_PROFILE=explore locally to search further.
"""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import selfattention as sa
from selfattention.testing import assert_parity, randomise_parameters, tolerance

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=200,
    deadline=None,
    database=None,  # nothing written to .hypothesis/ in a clean clone
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# make unit: the same fixed cases, fewer of them (make test runs the "ci" profile).
settings.register_profile(
    "unit",
    derandomize=True,
    max_examples=50,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", max_examples=2000, deadline=None, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

DTYPES = st.sampled_from([np.float16, np.float32, np.float64])
MHA_DTYPES = st.sampled_from([np.float32, np.float64])
TORCH_DTYPES = {
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
}


def _loose(dtype):
    """Tolerance against torch: float32 sums differ in their order of rounding; float64 agrees to rounding.

    float16 results are rounded from float32 sums on both sides, so they may differ by a float16 step.
    """
    return {np.dtype(np.float32): dict(rtol=2e-5, atol=2e-6), np.dtype(np.float16): dict(rtol=2e-3, atol=4e-3)}.get(
        np.dtype(dtype), tolerance(dtype)
    )


@st.composite
def attention_cases(draw, with_mask=True):
    """q, k, v (and a mask) with batch axes that broadcast, T, S, Dk, Dv drawn independently."""
    shapes = draw(mutually_broadcastable_shapes(num_shapes=4, min_dims=0, max_dims=2, max_side=3))
    q_batch, k_batch, v_batch, mask_batch = shapes.input_shapes
    T, S = draw(st.integers(1, 6)), draw(st.integers(1, 7))
    Dk, Dv = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    dtype = draw(DTYPES)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def normal(*shape):
        return rng.uniform(-3, 3, size=shape).astype(dtype)

    q, k, v = normal(*q_batch, T, Dk), normal(*k_batch, S, Dk), normal(*v_batch, S, Dv)
    # the mask may not have batch axes the scores lack; give it the q, k broadcast ones at most
    scores_batch = np.broadcast_shapes(q_batch, k_batch)
    mask_batch = mask_batch[len(mask_batch) - min(len(mask_batch), len(scores_batch)) :]
    if np.broadcast_shapes(mask_batch, scores_batch) != scores_batch:
        mask_batch = ()
    kind = draw(st.sampled_from(["none", "bool", "additive", "finite", "padding", "causal"])) if with_mask else "none"
    keep = rng.random((*mask_batch, T, S)) < draw(st.sampled_from([0.3, 0.7, 1.0]))
    if draw(st.booleans()):
        keep[..., 0, :] = False  # a fully masked query
    if kind == "none":
        mask = None
    elif kind == "bool":
        mask = keep
    elif kind == "additive":
        mask = np.where(keep, 0.0, -np.inf).astype(draw(DTYPES))
    elif kind == "finite":
        mask = rng.normal(size=(*mask_batch, T, S)).astype(dtype)
    elif kind == "padding":
        mask = np.arange(S) < rng.integers(1, S + 1, size=(*mask_batch, 1, 1))  # (..., 1, S): keys kept per example
    else:
        mask = sa.causal_mask(T, S, dtype=bool)
    scale = draw(st.one_of(st.none(), st.floats(0.05, 2.0)))
    return q, k, v, mask, scale


def _torch_sdpa(q, k, v, mask, scale):
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(a)) for a in (q, k, v))
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    tq, tk, tv = (t.expand(*batch, *t.shape[-2:]) for t in (tq, tk, tv))  # torch broadcasts less than NumPy
    attn_mask = (
        None
        if mask is None
        else torch.from_numpy(np.ascontiguousarray(mask)).to(torch.bool if mask.dtype == np.bool_ else tq.dtype)
    )
    return F.scaled_dot_product_attention(tq, tk, tv, attn_mask=attn_mask, scale=scale).numpy()


def _copies(*arrays):
    return [None if a is None else np.array(a, copy=True) for a in arrays]


def _unchanged(before, after):
    for b, a in zip(before, after, strict=True):
        if b is not None:
            np.testing.assert_array_equal(a, b)


@given(attention_cases())
def test_sdpa_matches_torch(case):
    q, k, v, mask, scale = case
    before = _copies(q, k, v, mask)
    out, weights = sa.scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)
    _unchanged(before, (q, k, v, mask))
    dtype = np.result_type(q, k, v)
    assert out.dtype == weights.dtype == dtype
    assert_parity(out, _torch_sdpa(q, k, v, mask, scale), **_loose(dtype), what="output")
    # every row of weights sums to 1, or is all zero where the mask blocks every key
    sums = weights.sum(axis=-1)
    assert np.all((np.abs(sums.astype(np.float64) - 1) < (2e-3 if dtype == np.float16 else 1e-4)) | (sums == 0))


@given(attention_cases(), st.integers(1, 10))
def test_memory_efficient_matches_the_reference(case, block_size):
    q, k, v, mask, scale = case
    before = _copies(q, k, v, mask)
    blocked = sa.memory_efficient_attention(q, k, v, mask=mask, scale=scale, block_size=block_size)
    _unchanged(before, (q, k, v, mask))
    out, _ = sa.scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)
    assert blocked.dtype == out.dtype
    assert_parity(blocked, out, **_loose(out.dtype), what="blocked output")


@given(attention_cases(with_mask=False), st.booleans(), st.integers(1, 10))
def test_is_causal_equals_the_explicit_lower_right_mask(case, blocked, block_size):
    q, k, v, _, scale = case
    mask = sa.causal_mask(q.shape[-2], k.shape[-2], dtype=bool)
    if blocked:  # is_causal skips the blocked tiles, so its sums run in another order: equal up to rounding
        got = sa.memory_efficient_attention(q, k, v, scale=scale, is_causal=True, block_size=block_size)
        want = sa.memory_efficient_attention(q, k, v, mask=mask, scale=scale, block_size=block_size)
        assert_parity(got, want, **_loose(want.dtype), what="is_causal output")
    else:
        got = sa.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=True)[0]
        want = sa.scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)[0]
        np.testing.assert_array_equal(got, want)


@st.composite
def mha_cases(draw):
    H, Dh = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    B, T = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    S = draw(st.sampled_from([T, draw(st.integers(1, 6))]))  # self-attention (S = T) or cross-attention
    cross = S != T or draw(st.booleans())
    dtype = draw(MHA_DTYPES)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.uniform(-2, 2, size=(B, T, H * Dh)).astype(dtype)
    key = rng.uniform(-2, 2, size=(B, S, H * Dh)).astype(dtype) if cross else None
    kind = draw(st.sampled_from(["none", "attn_bool", "attn_float", "key_padding"]))
    return H, x, key, kind, draw(st.booleans()), draw(st.integers(0, 1000)), rng


@given(mha_cases())
@settings(max_examples=100)
def test_multihead_matches_torch(case):
    H, x, key, kind, bias, seed, rng = case
    B, T, D = x.shape
    S = T if key is None else key.shape[1]
    module = torch.nn.MultiheadAttention(D, H, bias=bias, batch_first=True).to(TORCH_DTYPES[x.dtype])
    randomise_parameters(module, seed=seed)
    keep = rng.random((T, S)) < 0.6
    keep[:, 0] = True  # torch's MultiheadAttention returns NaN for a fully masked query; the package returns 0
    lengths = rng.integers(1, S + 1, size=B)
    torch_kwargs, mask = {}, None
    if kind == "attn_bool":
        torch_kwargs["attn_mask"], mask = torch.from_numpy(~keep), keep  # torch: True = blocked
    elif kind == "attn_float":
        additive = np.where(keep, rng.normal(size=(T, S)), -np.inf).astype(x.dtype)
        torch_kwargs["attn_mask"], mask = torch.from_numpy(additive), additive
    elif kind == "key_padding":
        padded = np.arange(S)[None, :] >= lengths[:, None]  # (B, S), torch: True = padding
        torch_kwargs["key_padding_mask"], mask = torch.from_numpy(padded), sa.padding_mask(lengths, S)[:, None]
    before = _copies(x, key, mask)
    params = sa.AttentionParams.from_torch(module)
    y, weights = sa.multihead_attention(x, params, num_heads=H, mask=mask, key=key)
    _unchanged(before, (x, key, mask))
    tx = torch.from_numpy(x)
    tk = tx if key is None else torch.from_numpy(key)
    with torch.no_grad():
        ty, tw = module(tx, tk, tk, need_weights=True, average_attn_weights=False, **torch_kwargs)
    assert y.dtype == weights.dtype == x.dtype
    assert_parity(y, ty.numpy(), **_loose(x.dtype), what="output")
    assert_parity(weights, tw.numpy(), **_loose(x.dtype), what="weights")


ELEMENTWISE = [sa.softmax, sa.relu, sa.gelu, sa.layer_norm]


@given(
    st.sampled_from(ELEMENTWISE),
    st.sampled_from([np.float16, np.float32, np.float64, np.int64]),
    st.lists(st.integers(1, 4), min_size=1, max_size=3),
    st.integers(0, 2**32 - 1),
)
def test_elementwise_functions_keep_the_float_dtype_and_their_input(function, dtype, shape, seed):
    x = (np.random.default_rng(seed).uniform(-4, 4, size=shape) * (3 if dtype == np.int64 else 1)).astype(dtype)
    before = x.copy()
    y = function(x)
    np.testing.assert_array_equal(x, before)
    assert y.dtype == (np.float64 if dtype == np.int64 else dtype) and y.shape == x.shape
