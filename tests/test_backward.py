"""Chapter 10: every hand-written gradient against torch.autograd (float64, 1e-9) and central differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import selfattention as sa
from selfattention.testing import randomise_parameters

RNG = np.random.default_rng(0)


def _t(a, grad=False):
    return torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=grad)


def _central_difference(f, x, eps=1e-6):
    """d sum(f(x) * w) / dx for a fixed random w, one entry at a time."""
    w = np.random.default_rng(1).normal(size=np.shape(f(x)))
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = ((f(up) * w).sum() - (f(down) * w).sum()) / (2 * eps)
    return grad, w


def _relative_error(a, b):
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-12)


# --- softmax -------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_backward_matches_autograd(axis):
    x = RNG.normal(size=(3, 4, 5))
    g = RNG.normal(size=(3, 4, 5))
    xt = _t(x, True)
    torch.softmax(xt, dim=axis).backward(_t(g))
    ours = sa.softmax_backward(g, sa.softmax(x, axis=axis), axis=axis)
    np.testing.assert_allclose(ours, xt.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_softmax_backward_matches_central_differences():
    x = RNG.normal(size=(2, 5))
    numeric, w = _central_difference(lambda a: sa.softmax(a), x)
    assert _relative_error(sa.softmax_backward(w, sa.softmax(x)), numeric) < 1e-6


# --- attention -------------------------------------------------------------------------------

CASES = {  # name: (q shape, k shape, v shape, mask kind, scale, is_causal)
    "T != S, Dk != Dv": ((2, 4, 3), (2, 6, 3), (2, 6, 5), None, None, False),
    "bool mask": ((2, 5, 4), (2, 5, 4), (2, 5, 3), "bool", None, False),
    "additive mask": ((2, 5, 4), (2, 7, 4), (2, 7, 3), "float", None, False),
    "causal, T < S": ((2, 3, 4), (2, 6, 4), (2, 6, 2), None, None, True),
    "fully masked rows": ((2, 4, 4), (2, 4, 4), (2, 4, 3), "blocked", None, False),
    "custom scale": ((3, 4, 4), (3, 4, 4), (3, 4, 4), None, 0.37, False),
    "broadcast batch": ((2, 3, 4, 4), (1, 3, 5, 4), (2, 1, 5, 2), "float", None, True),
    "unbatched k, v": ((2, 2, 4, 4), (5, 4), (5, 3), None, None, False),
}


def _mask(kind, T, S, rng):
    if kind == "bool":
        keep = rng.random((T, S)) < 0.7
        keep[:, 0] = True
        return keep
    if kind == "float":
        return np.where(rng.random((T, S)) < 0.7, rng.normal(size=(T, S)), -np.inf)
    if kind == "blocked":
        keep = np.tril(np.ones((T, S), dtype=bool))
        keep[1] = False  # query 1 sees nothing
        return keep
    return None


def _torch_attention(q, k, v, mask, scale, is_causal):
    """The reference: scores, mask, softmax (zeros for blocked rows, as torch's SDPA), weights @ v."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = scale * q @ k.transpose(-1, -2)
    T, S = scores.shape[-2:]
    if mask is not None:
        m = torch.from_numpy(mask)
        scores = scores.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else scores + m
    if is_causal:
        keep = torch.from_numpy(sa.causal_mask(T, S, dtype=bool))
        scores = scores.masked_fill(~keep, float("-inf"))
    blocked = torch.isneginf(scores).all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(blocked, 0.0), dim=-1).masked_fill(blocked, 0.0)
    return weights @ v


@pytest.mark.parametrize("name", CASES)
def test_attention_backward_matches_autograd(name):
    q_shape, k_shape, v_shape, kind, scale, causal = CASES[name]
    rng = np.random.default_rng(len(name))
    q, k, v = rng.normal(size=q_shape), rng.normal(size=k_shape), rng.normal(size=v_shape)
    mask = _mask(kind, q_shape[-2], k_shape[-2], rng)
    out, _ = sa.scaled_dot_product_attention(q, k, v, mask=mask, scale=scale, is_causal=causal)
    grad_out = rng.normal(size=out.shape)
    qt, kt, vt = _t(q, True), _t(k, True), _t(v, True)
    _torch_attention(qt, kt, vt, mask, scale, causal).backward(_t(grad_out))
    grads = sa.scaled_dot_product_attention_backward(grad_out, q, k, v, mask=mask, scale=scale, is_causal=causal)
    for ours, theirs, array in zip(grads, (qt.grad, kt.grad, vt.grad), (q, k, v), strict=True):
        assert ours.shape == array.shape
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-9, atol=1e-11)
    if kind == "blocked":
        np.testing.assert_array_equal(grads[0][:, 1], 0.0)  # the query that sees nothing: zero, finite
        assert np.isfinite(np.concatenate([g.ravel() for g in grads])).all()


def test_attention_backward_matches_central_differences():
    rng = np.random.default_rng(5)
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    mask = sa.causal_mask(3, 5)
    for index, array in enumerate((q, k, v)):

        def f(a, index=index):
            args = [q, k, v]
            args[index] = a
            return sa.scaled_dot_product_attention(*args, mask=mask)[0]

        numeric, w = _central_difference(f, array)
        ours = sa.scaled_dot_product_attention_backward(w, q, k, v, mask=mask)[index]
        assert _relative_error(ours, numeric) < 1e-6


def test_delta_equals_rowsum_of_p_times_dp():
    """D = rowsum(dO * O) = rowsum(P * dP): the backward never needs P to compute D."""
    q, k, v = RNG.normal(size=(3, 4, 6, 5))
    out, p = sa.scaled_dot_product_attention(q, k, v)
    grad_out = RNG.normal(size=out.shape)
    dp = grad_out @ np.swapaxes(v, -1, -2)
    np.testing.assert_allclose((grad_out * out).sum(-1), (p * dp).sum(-1), rtol=1e-12)


# --- the memory-efficient backward ------------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("block_size", [1, 2, 3, 16])
def test_memory_efficient_backward_equals_the_plain_one(name, block_size):
    q_shape, k_shape, v_shape, kind, scale, causal = CASES[name]
    rng = np.random.default_rng(len(name) + block_size)
    q, k, v = rng.normal(size=q_shape), rng.normal(size=k_shape), rng.normal(size=v_shape)
    mask = _mask(kind, q_shape[-2], k_shape[-2], rng)
    out, lse = sa.memory_efficient_attention(
        q, k, v, mask=mask, scale=scale, is_causal=causal, block_size=block_size, return_lse=True
    )
    grad_out = rng.normal(size=out.shape)
    plain = sa.scaled_dot_product_attention_backward(grad_out, q, k, v, mask=mask, scale=scale, is_causal=causal)
    blocked = sa.memory_efficient_attention_backward(
        grad_out, q, k, v, out, lse, mask=mask, scale=scale, is_causal=causal, block_size=block_size
    )
    for ours, reference in zip(blocked, plain, strict=True):
        assert ours.shape == reference.shape
        np.testing.assert_allclose(ours, reference, rtol=1e-9, atol=1e-11)


def test_lse_is_the_log_sum_exp_of_the_scaled_masked_scores():
    q, k, v = RNG.normal(size=(3, 2, 5, 4))
    mask = sa.causal_mask(5)
    mask[2] = -np.inf  # query 2 sees nothing
    _, lse = sa.memory_efficient_attention(q, k, v, mask=mask, block_size=2, return_lse=True)
    scores = torch.from_numpy(q @ np.swapaxes(k, -1, -2) / 2 + mask)
    np.testing.assert_allclose(lse, torch.logsumexp(scores, dim=-1).numpy(), rtol=1e-12)
    assert lse.shape == (2, 5) and np.isneginf(lse[:, 2]).all()


def test_the_memory_efficient_backward_holds_no_t_by_s_array():
    T, block = 1024, 128
    q, k, v = (RNG.normal(size=(1, T, 16)).astype(np.float32) for _ in range(3))
    out, lse = sa.memory_efficient_attention(q, k, v, block_size=block, return_lse=True)
    grad_out = np.ones_like(out)
    plain = sa.measure.peak_bytes(lambda: sa.scaled_dot_product_attention_backward(grad_out, q, k, v))
    blocked = sa.measure.peak_bytes(
        lambda: sa.memory_efficient_attention_backward(grad_out, q, k, v, out, lse, block_size=block)
    )
    assert plain > 2 * T * T * 4  # the weights and dS: two T x S float32 arrays at once
    assert blocked < T * T * 4 / 4  # less than a quarter of one of them


# --- linear, layer norm, the multi-head layer ----------------------------------------------------


def test_linear_backward_matches_autograd():
    x, w, b = RNG.normal(size=(2, 3, 4)), RNG.normal(size=(4, 5)), RNG.normal(size=5)
    g = RNG.normal(size=(2, 3, 5))
    xt, wt, bt = _t(x, True), _t(w, True), _t(b, True)
    (xt @ wt + bt).backward(_t(g))
    for ours, theirs in zip(sa.linear_backward(g, x, w, b), (xt.grad, wt.grad, bt.grad), strict=True):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12)
    assert sa.linear_backward(g, x, w)[2] is None


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_backward_matches_autograd_and_central_differences(affine):
    x, w, b = RNG.normal(size=(2, 3, 6)), 1 + 0.3 * RNG.normal(size=6), RNG.normal(size=6)
    g = RNG.normal(size=x.shape)
    xt, wt, bt = _t(x, True), _t(w, True), _t(b, True)
    F.layer_norm(xt, (6,), wt if affine else None, bt if affine else None, eps=1e-5).backward(_t(g))
    ours = sa.layer_norm_backward(g, x, w if affine else None, b if affine else None)
    np.testing.assert_allclose(ours[0], xt.grad.numpy(), rtol=1e-9, atol=1e-12)
    if affine:
        np.testing.assert_allclose(ours[1], wt.grad.numpy(), rtol=1e-9)
        np.testing.assert_allclose(ours[2], bt.grad.numpy(), rtol=1e-9)
    else:
        assert ours[1] is None and ours[2] is None
    numeric, weights = _central_difference(lambda a: sa.layer_norm(a, w, b), x[0])
    assert _relative_error(sa.layer_norm_backward(weights, x[0], w, b)[0], numeric) < 1e-6


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("H", [1, 2, 4])
def test_multihead_backward_matches_autograd_through_nn_multiheadattention(H, causal):
    D, T = 8, 5
    torch.manual_seed(H)
    mha = randomise_parameters(torch.nn.MultiheadAttention(D, H, batch_first=True).double(), scale=0.5)
    x = RNG.normal(size=(2, T, D))
    g = RNG.normal(size=(2, T, D))
    xt = _t(x, True)
    mask = torch.from_numpy(sa.causal_mask(T, dtype=bool)) if causal else None
    y, _ = mha(xt, xt, xt, attn_mask=None if mask is None else ~mask, need_weights=False)
    y.backward(_t(g))
    params = sa.AttentionParams.from_torch(mha)
    grad_x, grads = sa.multihead_attention_backward(g, x, params, H, is_causal=causal)
    np.testing.assert_allclose(grad_x, xt.grad.numpy(), rtol=1e-9, atol=1e-11)
    w_qkv = np.concatenate([grads.q.weight, grads.k.weight, grads.v.weight], axis=1)  # our (D, 3D) layout
    np.testing.assert_allclose(w_qkv, mha.in_proj_weight.grad.numpy().T, rtol=1e-9, atol=1e-11)
    b_qkv = np.concatenate([grads.q.bias, grads.k.bias, grads.v.bias])
    np.testing.assert_allclose(b_qkv, mha.in_proj_bias.grad.numpy(), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(grads.out.weight, mha.out_proj.weight.grad.numpy().T, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(grads.out.bias, mha.out_proj.bias.grad.numpy(), rtol=1e-9, atol=1e-11)


def test_multihead_backward_with_shared_key_value_heads_matches_central_differences():
    rng = np.random.default_rng(3)
    D, H, Hkv, Dh = 4, 2, 1, 2
    params = sa.AttentionParams(
        *(sa.Linear(rng.normal(size=(D, n)), rng.normal(size=n)) for n in (H * Dh, Hkv * Dh, Hkv * Dh)),
        sa.Linear(rng.normal(size=(H * Dh, D)), rng.normal(size=D)),
    )
    x = rng.normal(size=(3, D))

    def forward(x_, p=params):
        return sa.multihead_attention(x_, p, num_heads=H, is_causal=True)[0]

    numeric, w = _central_difference(forward, x)
    grad_x, grads = sa.multihead_attention_backward(w, x, params, H, is_causal=True)
    assert _relative_error(grad_x, numeric) < 1e-6
    k_weight = params.k.weight

    def through_k(kw):
        p = sa.AttentionParams(params.q, sa.Linear(kw, params.k.bias), params.v, params.out)
        return forward(x, p)

    numeric_k, _ = _central_difference(through_k, k_weight)
    assert _relative_error(grads.k.weight, numeric_k) < 1e-6


# --- bad input -----------------------------------------------------------------------------------

Q, K, V = RNG.normal(size=(3, 4)), RNG.normal(size=(5, 4)), RNG.normal(size=(5, 2))
OUT, LSE = sa.memory_efficient_attention(Q, K, V, return_lse=True)
_PARAMS = sa.AttentionParams.from_fused(RNG.normal(size=(8, 24)), RNG.normal(size=(8, 8)))

BAD_INPUT = [
    (lambda: sa.softmax_backward(np.ones(3), np.ones(4) / 4), r"grad_y must have the shape of y, \(4,\); got \(3,\)"),
    (lambda: sa.softmax_backward(np.ones(3), np.ones(3) / 3, axis=2), r"axis=2 is out of range"),
    (lambda: sa.softmax_backward(np.full(3, np.nan), np.ones(3) / 3), r"grad_y must hold only finite numbers"),
    (
        lambda: sa.scaled_dot_product_attention_backward(np.ones((3, 3)), Q, K, V),
        r"grad_out must have the shape of the attention output, \(3, 2\); got \(3, 3\)",
    ),
    (
        lambda: sa.scaled_dot_product_attention_backward(np.ones((3, 2)), Q, K[:, :3], V),
        r"q has 4 features but k has 3",
    ),
    (
        lambda: sa.memory_efficient_attention_backward(np.ones((3, 2)), Q, K, V, OUT, LSE[:2]),
        r"lse must have one entry per query, shape \(3,\); got \(2,\)",
    ),
    (
        lambda: sa.memory_efficient_attention_backward(np.ones((3, 2)), Q, K, V, OUT[:2], LSE),
        r"out must have the shape of the attention output, \(3, 2\)",
    ),
    (
        lambda: sa.memory_efficient_attention_backward(np.ones((3, 2)), Q, K, V, OUT, np.full(3, np.nan)),
        r"lse must hold finite numbers or -inf",
    ),
    (
        lambda: sa.memory_efficient_attention_backward(np.ones((3, 2)), Q, K, V, OUT, LSE, block_size=0),
        r"block_size must be a positive integer",
    ),
    (lambda: sa.memory_efficient_attention(Q, K, V, return_lse="yes"), r"return_lse must be True or False"),
    (
        lambda: sa.linear_backward(np.ones((2, 5)), np.ones((2, 3)), np.ones((4, 5))),
        r"x has 3 features but weight expects d_in=4",
    ),
    (
        lambda: sa.linear_backward(np.ones((2, 4)), np.ones((2, 3)), np.ones((3, 5))),
        r"grad_y must have the shape of the layer's output, \(2, 5\)",
    ),
    (lambda: sa.layer_norm_backward(np.ones((2, 3)), np.ones((2, 4))), r"grad_y must have the shape of x, \(2, 4\)"),
    (
        lambda: sa.layer_norm_backward(np.ones((2, 4)), np.ones((2, 4)), np.ones(3)),
        r"weight must have shape \(D,\) = \(4,\)",
    ),
    (
        lambda: sa.multihead_attention_backward(np.ones((3, 4)), np.ones((3, 4)), "params", 2),
        r"params must be an AttentionParams",
    ),
    # found by an adversarial review: silent wrong gradients before
    (
        lambda: sa.memory_efficient_attention_backward(np.ones((3, 2)), Q, K, V, OUT, LSE - 800),
        r"lse does not fit these scores",
    ),
    (
        lambda: sa.memory_efficient_attention_backward(np.ones((3, 2)), Q, K, V, OUT, LSE - 5),
        r"lse does not fit these scores",
    ),
    (
        lambda: sa.memory_efficient_attention_backward(np.ones((3, 2)), Q, K, V, OUT, LSE, scale=0.1),
        r"lse does not fit these scores",
    ),
    (
        lambda: sa.multihead_attention_backward(
            np.ones((4, 5, 8)), np.ones((4, 5, 8)), _PARAMS, 4, mask=np.ones((4, 5, 5), bool)
        ),
        r"its first axis would line up with the heads",
    ),
    (
        lambda: sa.layer_norm_backward(np.ones((2, 4)), np.ones((2, 4)), np.full(4, np.nan)),
        r"weight must hold only finite numbers",
    ),
    (
        lambda: sa.layer_norm_backward(np.ones((2, 4)), np.ones((2, 4)), np.ones(4), np.full(4, np.inf)),
        r"bias must hold only finite numbers",
    ),
    (
        lambda: sa.softmax_backward(np.ones(5), np.array([-1.0, 2.0, 0.5, 0.1, 0.3])),
        r"y must be the softmax's output.*Did you pass the logits",
    ),
    (
        lambda: sa.linear_backward(
            np.full((300, 2), 300, np.float16), np.full((300, 2), 300, np.float16), np.ones((2, 2), np.float16)
        ),
        r"grad_weight overflowed float16",
    ),
]


@pytest.mark.parametrize(("call", "message"), BAD_INPUT, ids=[m for _, m in BAD_INPUT])
def test_bad_input_gets_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_float16_lse_is_kept_in_float32_so_a_large_bias_survives():
    rng = np.random.default_rng(9)
    q, k, v, g = (rng.normal(size=shape).astype(np.float16) for shape in ((3, 2), (4, 2), (4, 2), (3, 2)))
    mask = np.zeros((3, 4))
    mask[1] = -1e5  # the same for every key of query 1: its weights do not change
    out, lse = sa.memory_efficient_attention(q, k, v, mask=mask, return_lse=True)
    assert lse.dtype == np.float32 and np.isfinite(lse).all()
    blocked = sa.memory_efficient_attention_backward(g, q, k, v, out, lse, mask=mask)
    plain = sa.scaled_dot_product_attention_backward(g, q, k, v, mask=mask)
    for a, b in zip(blocked, plain, strict=True):
        assert a.dtype == np.float16
        np.testing.assert_allclose(a.astype(float), b.astype(float), atol=2e-3)


def test_float16_layer_norm_and_its_backward_work_in_float32():
    x = (np.random.default_rng(2).normal(size=(1, 8)) * 300 + 5000).astype(np.float16)
    g = np.ones_like(x)
    g[0, 0] = 2
    y = sa.layer_norm(x)
    assert y.dtype == np.float16 and np.abs(y).max() > 0.5  # not the zeros of an overflowed variance
    grad_x = sa.layer_norm_backward(g, x)[0]
    reference = sa.layer_norm_backward(g.astype(float), x.astype(float))[0]
    np.testing.assert_allclose(grad_x.astype(float), reference, rtol=2e-2, atol=1e-6)
