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
    if 0 < len(mask_batch) < len(scores_batch) >= 2:  # four-axis scores: a mask names every axis (or none)
        mask_batch = (1,) * (len(scores_batch) - len(mask_batch)) + mask_batch
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


# --- Issue 28: the newer modules on drawn shapes ----------------------------------------------------------------


def _float64(case):
    return tuple(None if a is None else (a.astype(np.float64) if a.dtype != np.bool_ else a) for a in case[:4])


@given(attention_cases())
def test_the_backward_matches_autograd(case):
    """dQ, dK, dV of the reference against torch.autograd, float64, every drawn mask and broadcast batch."""
    (q, k, v, mask), scale = _float64(case), case[4]
    grad_out = np.random.default_rng(1).normal(size=sa.scaled_dot_product_attention(q, k, v, mask=mask)[0].shape)
    ours = sa.scaled_dot_product_attention_backward(grad_out, q, k, v, mask=mask, scale=scale)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    scores = (tq.expand(*batch, *q.shape[-2:]) @ tk.expand(*batch, *k.shape[-2:]).transpose(-1, -2)) * (
        q.shape[-1] ** -0.5 if scale is None else scale
    )
    if mask is not None:
        m = torch.from_numpy(np.ascontiguousarray(mask))
        scores = scores.masked_fill(~m, -torch.inf) if mask.dtype == np.bool_ else scores + m.to(scores.dtype)
    blocked = torch.isneginf(scores).all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(blocked, 0.0), dim=-1).masked_fill(blocked, 0.0)  # the 0/0 convention
    (weights @ tv.expand(*batch, *v.shape[-2:])).backward(torch.from_numpy(grad_out))
    for name, mine, theirs in zip("qkv", ours, (tq.grad, tk.grad, tv.grad), strict=True):
        assert mine.shape == theirs.shape, name
        np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-9, atol=1e-10, err_msg=f"d{name}")


@given(attention_cases(), st.integers(1, 10), st.booleans())
def test_the_recomputing_backward_equals_the_plain_one(case, block_size, is_causal):
    (q, k, v, mask), scale = _float64(case), case[4]
    out, lse = sa.memory_efficient_attention(q, k, v, mask=mask, scale=scale, is_causal=is_causal, return_lse=True)
    grad_out = np.random.default_rng(2).normal(size=out.shape)
    before = _copies(grad_out, q, k, v, out, lse, mask)
    recomputed = sa.memory_efficient_attention_backward(
        grad_out, q, k, v, out, lse, mask=mask, scale=scale, is_causal=is_causal, block_size=block_size
    )
    _unchanged(before, (grad_out, q, k, v, out, lse, mask))
    plain = sa.scaled_dot_product_attention_backward(grad_out, q, k, v, mask=mask, scale=scale, is_causal=is_causal)
    for name, a, b in zip("qkv", recomputed, plain, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10, err_msg=f"d{name}")


@given(
    st.integers(1, 12),
    st.integers(1, 4),
    st.lists(st.integers(1, 5), min_size=1, max_size=6),
    st.integers(0, 2**32 - 1),
)
def test_online_softmax_folds_any_split_of_the_keys_into_the_softmax(S, Dv, cuts, seed):
    rng = np.random.default_rng(seed)
    scores, values = rng.normal(size=(2, S)) * 4, rng.normal(size=(S, Dv))
    scores[1, : S // 2] = -np.inf  # a row whose first keys are blocked
    m, total, out = np.full((2, 1), -np.inf), np.zeros((2, 1)), np.zeros((2, Dv))
    start = 0
    for cut in [*cuts, S]:
        stop = min(S, start + cut)
        if stop > start:
            m, total, out = sa.online_softmax_update(m, total, out, scores[:, start:stop], values[start:stop])
        start = stop
    np.testing.assert_allclose(out / total, sa.softmax(scores) @ values, rtol=1e-12, atol=1e-12)


@given(
    st.integers(1, 4).map(lambda n: 2 * n),
    st.integers(-50, 50),
    st.integers(0, 60),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_rope_scores_depend_only_on_the_offset(head_dim, shift, offset, interleaved, seed):
    rng = np.random.default_rng(seed)
    q, k = rng.normal(size=(1, head_dim)), rng.normal(size=(1, head_dim))

    def score(i, j):
        qi = sa.apply_rope(q, [i], interleaved=interleaved)
        kj = sa.apply_rope(k, [j], interleaved=interleaved)
        return float((qi @ kj.T)[0, 0])

    i = abs(shift) + offset
    np.testing.assert_allclose(score(i, i - offset), score(i + 7, i - offset + 7), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(
        np.linalg.norm(sa.apply_rope(q, [i], interleaved=interleaved)), np.linalg.norm(q), rtol=1e-12
    )


@given(
    st.integers(1, 3).flatmap(lambda kv: st.tuples(st.just(kv), st.integers(1, 2).map(lambda g: g * kv))),
    st.integers(1, 6),
    st.one_of(st.none(), st.integers(1, 5)),
    st.integers(0, 1000),
)
@settings(max_examples=25)
def test_cached_decoding_equals_recomputing(heads, steps, window, seed):
    num_kv_heads, num_heads = heads
    model = sa.TinyDecoder.random(12, 4 * num_heads, num_heads, num_kv_heads, 2, 16, seed=seed)
    prompt = list(np.random.default_rng(seed).integers(0, 12, size=3))
    assert model.generate(prompt, steps, window=window) == model.generate(prompt, steps, use_cache=False, window=window)


@given(attention_cases(with_mask=False), st.integers(1, 5), st.booleans())
@settings(max_examples=50)
def test_split_over_threads_equals_one_call(case, threads, is_causal):
    q, k, v, _, scale = case
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    q, k, v = (np.broadcast_to(a, (*batch, *a.shape[-2:])).copy() for a in (q, k, v))
    whole = sa.memory_efficient_attention(q, k, v, scale=scale, is_causal=is_causal)
    split = sa.split_over_threads(sa.memory_efficient_attention, q, k, v, threads, scale=scale, is_causal=is_causal)
    assert split.dtype == whole.dtype and split.shape == whole.shape
    assert_parity(split, whole, **_loose(whole.dtype), what="split output")


@given(
    batch=st.integers(1, 3),
    kv_heads=st.integers(1, 3),
    group=st.integers(1, 4),
    T=st.integers(1, 5),
    S=st.integers(1, 6),
    mask_kind=st.sampled_from(["none", "shared", "per-head", "per-example", "additive"]),
    is_causal=st.booleans(),
    dtype=DTYPES,
    seed=st.integers(0, 2**32 - 1),
)
def test_grouped_query_attention_is_repeat_kv_without_the_copies(
    batch, kv_heads, group, T, S, mask_kind, is_causal, dtype, seed
):
    """enable_gqa reads each key/value head in place; it must give exactly what repeating them gives."""
    rng = np.random.default_rng(seed)
    H = kv_heads * group
    q = rng.standard_normal((batch, H, T, 4)).astype(dtype)
    k = rng.standard_normal((batch, kv_heads, S, 4)).astype(dtype)
    v = rng.standard_normal((batch, kv_heads, S, 3)).astype(dtype)
    mask = {
        "none": None,
        "shared": rng.random((T, S)) < 0.7,
        "per-head": rng.random((1, H, T, S)) < 0.7,
        "per-example": sa.padding_mask(rng.integers(1, S + 1, batch), S)[:, None],
        "additive": np.where(rng.random((batch, H, T, S)) < 0.7, 0.0, -np.inf),
    }[mask_kind]
    out, weights = sa.scaled_dot_product_attention(q, k, v, mask=mask, is_causal=is_causal, enable_gqa=True)
    k_all, v_all = sa.repeat_kv(k, group), sa.repeat_kv(v, group)
    want_out, want_weights = sa.scaled_dot_product_attention(q, k_all, v_all, mask=mask, is_causal=is_causal)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(weights, want_weights)
