"""Issue 11: unusual but reasonable input to the NumPy core gets a ValueError that names the argument.

Each case below was tried as a learner would and, before the fix, escaped as a
foreign exception (TypeError, IndexError, ZeroDivisionError, a NumPy broadcast
error), returned NaN, or ran silently with a wrong answer. The accepted forms
(tensors, lists, exotic real numbers) are tested at the end.
"""

from __future__ import annotations

import dataclasses
import decimal
import fractions
import warnings

import numpy as np
import pytest
import torch

import selfattention as sa
from selfattention import testing

RNG = np.random.default_rng(0)
Q, K, V = RNG.normal(size=(3, 4)), RNG.normal(size=(5, 4)), RNG.normal(size=(5, 6))
X = RNG.normal(size=(2, 3, 4))


def _encoder(D=4, F_=6):
    rng = np.random.default_rng(1)
    shapes = dict(
        w_qkv=(D, 3 * D),
        b_qkv=(3 * D,),
        w_out=(D, D),
        b_out=(D,),
        w_ff1=(D, F_),
        b_ff1=(F_,),
        w_ff2=(F_, D),
        b_ff2=(D,),
        norm1_weight=(D,),
        norm1_bias=(D,),
        norm2_weight=(D,),
        norm2_bias=(D,),
    )
    return sa.EncoderParams.from_arrays(**{name: rng.normal(size=shape) for name, shape in shapes.items()})


def _attention(D=4):
    rng = np.random.default_rng(2)
    return sa.AttentionParams.from_fused(rng.normal(size=(D, 3 * D)), rng.normal(size=(D, D)))


def _with(array, index, value):
    array = array.copy()
    array[index] = value
    return array


BAD_INPUT = [
    # --- scalars --------------------------------------------------------------------
    (lambda: sa.scaled_dot_product_attention(Q, K, V, scale=10**400), r"scale must be a finite number that fits"),
    (lambda: sa.scaled_dot_product_attention(Q, K, V, scale="0.5"), r"scale must be a real number; got '0.5'"),
    (lambda: sa.scaled_dot_product_attention(Q, K, V, scale=np.ones(2)), r"scale .* an array of shape \(2,\)"),
    (lambda: sa.memory_efficient_attention(Q, K, V, block_size=2.0), r"block_size must be a positive .*write 2"),
    (lambda: sa.memory_efficient_attention(Q, K, V, block_size=0), r"block_size must be a positive integer; got 0"),
    (lambda: sa.layer_norm(X, eps=-1), r"eps must be positive; got -1.0"),
    (lambda: sa.layer_norm(X, eps=None), r"eps must be a real number; got None"),
    # --- NaN and infinities: one policy (reject in the inputs; -inf only in masks) ----------
    (lambda: sa.softmax([1.0, np.nan]), r"x must not contain NaN; found 1"),
    (lambda: sa.scaled_dot_product_attention(_with(Q, (0, 0), np.nan), K, V), r"q must hold only finite .* 1 NaN"),
    (lambda: sa.scaled_dot_product_attention(Q, _with(K, (1, 1), np.inf), V), r"k must hold only finite .* 1 infinite"),
    (lambda: sa.memory_efficient_attention(Q, K, _with(V, (0, 0), -np.inf)), r"v must hold only finite"),
    (lambda: sa.memory_efficient_attention(Q, K, V, mask=np.full((3, 5), np.nan)), r"mask must not contain NaN"),
    (
        lambda: sa.scaled_dot_product_attention(Q * 1e200, K * 1e200, V),
        r"the attention overflowed float64: the scores .* pass a smaller scale$",
    ),
    (
        lambda: sa.memory_efficient_attention(Q * 1e200, K * 1e200, V),
        r"the attention overflowed float64",
    ),
    (
        lambda: sa.multihead_attention(_with(X, (0, 0, 0), np.nan), _attention(), num_heads=2),
        r"x must hold only finite",
    ),
    (lambda: sa.layer_norm(_with(X, (0, 0, 0), np.inf)), r"x must hold only finite numbers; found 1 infinite"),
    (lambda: sa.Linear(np.full((2, 2), np.nan)), r"weight must hold only finite numbers; found 4 NaN"),
    (lambda: sa.LayerNormParams(np.ones(2), np.array([0.0, np.inf])), r"bias must hold only finite"),
    # --- empty widths -----------------------------------------------------------------
    (lambda: sa.Linear(np.ones((0, 3))), r"weight must be a 2-D \(d_in, d_out\) matrix with d_in, d_out >= 1"),
    (lambda: sa.LayerNormParams(np.ones(0)), r"weight must be a vector of shape \(D,\) with D >= 1; got shape \(0,\)"),
    (lambda: sa.layer_norm(np.ones((3, 0))), r"x must have at least one feature .*\(shape \(3, 0\)\)"),
    # --- masks ------------------------------------------------------------------------
    (lambda: sa.combine_masks(np.ones((3, 5), int)), r"masks\[0\] must be boolean .* got dtype int64"),
    (lambda: sa.combine_masks(np.full(3, np.inf)), r"masks\[0\] must be finite or -inf"),
    (lambda: sa.causal_mask(3, dtype=None), r"dtype must be bool .* got None"),
    (
        # (B, 1, S) padding mask with B == H: its batch axis would meet the heads
        lambda: sa.multihead_attention(X, _attention(), num_heads=2, mask=sa.padding_mask([3, 2])),
        r"mask has 3 axes \(2, 1, 3\) but the scores have 4 \(\.\.\., H, T, S\).*mask\[:, None\]",
    ),
    (
        lambda: sa.encoder_block(X, _encoder(), 2, mask=sa.padding_mask([3, 2])),
        r"its first axis would line up with the heads",
    ),
    # --- multi-head and parameters ----------------------------------------------------------
    (
        lambda: sa.multihead_attention(X, _attention(), num_heads=2, key=np.ones((3, 5, 4))),
        r"the batch axes of x \(2,\), key \(3,\) and value \(3,\) do not broadcast together",
    ),
    (lambda: sa.multihead_attention(X, _attention(), num_heads=2.0), r"num_heads must be a positive integer"),
    (lambda: sa.AttentionParams.from_fused(np.ones((4, 12)), np.ones((4, 4)), d_model="4"), r"d_model must be a pos"),
    (lambda: sa.AttentionParams.from_fused(np.ones((4, 12)), np.ones((4, 4)), d_model=-1), r"d_model must be a pos"),
    (lambda: sa.AttentionParams.from_fused(np.ones((4, 12)), np.ones((4, 4)), d_model=True), r"d_model must be a pos"),
    (
        lambda: sa.AttentionParams(
            sa.Linear(np.ones((4, 8))),
            sa.Linear(np.ones((4, 8))),
            sa.Linear(np.ones((4, 6))),
            sa.Linear(np.ones((6, 4))),
        ).head_counts(4),
        r"the values' width Hkv\*Dv = 6 must split into Hkv=4 heads",
    ),
    (lambda: sa.EncoderParams(1, 2, 3, 4), r"attention must be an AttentionParams; got int"),
    # --- the encoder ------------------------------------------------------------------
    (lambda: sa.encoder_block(X, _encoder(), 2, activation=["relu"]), r"activation must be one of \['gelu', 'relu'\]"),
    (lambda: sa.encoder_block(X, [_encoder()], 2), r"params must be an EncoderParams; got list; pass one block's"),
    (lambda: sa.encoder_stack(X, None, 2), r"layers must be a list of EncoderParams, one per block; got NoneType"),
    (lambda: sa.encoder_stack(X, _encoder(), 2), r"got a single EncoderParams \(pass \[params\]"),
    (lambda: sa.encoder_stack(X, [_encoder()], 2, final_norm=(np.ones(4),)), r"final_norm must be a LayerNormParams"),
    (lambda: sa.encoder_stack(X, [_encoder()], 2, final_norm_eps=0), r"final_norm_eps must be positive; got 0.0"),
    # --- the online softmax step (chapter 7's exercise) ----------------------------------
    (
        lambda: sa.online_softmax_update(np.zeros((3, 1)), np.zeros((3, 1)), np.zeros((3, 6)), Q, V),
        r"values must end in shape \(4, 6\) for scores of shape \(\.\.\., T, block\) = \(3, 4\)",
    ),
    (
        lambda: sa.online_softmax_update(np.zeros(3), np.zeros((3, 1)), np.zeros((3, 6)), Q, V[:4]),
        r"running_max must have at least 2 axes",
    ),
    (
        lambda: sa.online_softmax_update(np.zeros((3, 1)), np.zeros((3, 1)), np.zeros((3, 6)), Q * np.nan, V[:4]),
        r"scores must not contain NaN",
    ),
    (
        lambda: sa.online_softmax_update(np.zeros((3, 1)), np.zeros((3, 1)), np.zeros((3, 6)), Q, V[:4], in_place=1),
        r"in_place must be True or False; got 1",
    ),
    (lambda: sa.repeat_kv(np.ones((2, 3, 4)), 2**70), r"n_rep=.* would make .* numbers"),
    (lambda: sa.measure.best_time(lambda: None, repeats=2**70), r"repeats must be at most 1,000,000"),
    (lambda: sa.T2TAttention(2**70, 4), r"dim must be at most 1,048,576"),
    (lambda: sa.PatchAttentionBlock(3, 4, embed_dim=2**40), r"embed_dim must be at most"),
    # --- the testing helpers ------------------------------------------------------------
    (lambda: testing.to_torch(np.ones(2), "abc"), r"arrays\[1\] must hold numbers or booleans; got dtype <U3"),
    (lambda: testing.tolerance(None), r"dtype must be float16, float32 or float64; got None"),
    (lambda: testing.assert_parity(np.ones(2), np.ones(2), rtol=-1), r"rtol must be zero or positive; got -1.0"),
    (lambda: testing.assert_parity(np.ones(2), np.ones(2), atol=np.nan), r"atol must be finite; got nan"),
    (lambda: testing.assert_parity("1.0", np.ones(2)), r"actual must be an array of real numbers; got dtype <U3"),
    (lambda: testing.randomise_parameters(torch.nn.Linear(2, 2), seed="1"), r"seed must be a non-negative integer"),
    (lambda: testing.randomise_parameters(torch.nn.Linear(2, 2), seed=1.5), r"seed must be a non-negative integer"),
    (lambda: testing.randomise_parameters(torch.nn.Linear(2, 2), seed=2**70), r"seed must be below 2\*\*64"),
    # Issue 28: the newer modules held to the same standard.
    (lambda: sa.causal_mask(10**6), r"causal_mask\(T, S\) would hold 1,000,000,000,000 entries .*pass is_causal=True"),
    (lambda: sa.padding_mask([3] * 10**5, 10**4), r"padding_mask\(lengths, S\) would hold 1,000,000,000 entries"),
    (
        lambda: sa.combine_masks(np.ones((10**5, 1), bool), np.ones((1, 10**5), bool)),
        r"combine_masks\(\.\.\.\) would hold 10,000,000,000 entries",
    ),
    (
        lambda: sa.online_softmax_update(np.zeros((1, 1)), -np.ones((1, 1)), np.zeros((1, 2)), Q[:1, :3], V[:3, :2]),
        r"running_sum must be a sum of exponentials, never negative; got a smallest entry of -1",
    ),
    (
        lambda: sa.online_softmax_update(
            np.full((1, 1), -np.inf), np.ones((1, 1)), np.zeros((1, 2)), Q[:1, :3], V[:3, :2]
        ),
        r"running_sum must be 0 on rows whose running_max is -inf",
    ),
    (
        lambda: sa.online_softmax_update(
            np.zeros((1, 1)), np.ones((1, 1)), np.full((1, 2), np.nan), Q[:1, :3], V[:3, :2]
        ),
        r"out must hold only finite numbers",
    ),
    (
        lambda: sa.softmax_backward(np.zeros((2, 0)), np.zeros((2, 0))),
        r"y must hold at least one entry along each axis",
    ),
    (  # B = H = 4: the package's own (B, 1, S) padding mask would silently mask heads, not examples
        lambda: sa.scaled_dot_product_attention(
            RNG.normal(size=(4, 4, 5, 8)),
            RNG.normal(size=(4, 2, 6, 8)),
            RNG.normal(size=(4, 2, 6, 8)),
            mask=sa.padding_mask([6, 3, 2, 1], 6),
            enable_gqa=True,
        ),
        r"mask has 3 axes \(4, 1, 6\) but the scores have 4 \(\.\.\., H, T, S\); its first axis would line up",
    ),
    (
        lambda: sa.layer_norm_backward(np.zeros((2, 0)), np.zeros((2, 0))),
        r"x must have at least one feature to normalise; its last axis is empty \(shape \(2, 0\)\)",
    ),
]


@pytest.mark.parametrize(("call", "message"), BAD_INPUT)
def test_bad_input_gets_a_clear_value_error(call, message):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no NumPy RuntimeWarning on the way
        with pytest.raises(ValueError, match=message):
            call()


def test_assert_parity_counts_nan_as_outside():
    with pytest.raises(AssertionError, match=r"1 of 2 elements are outside the tolerance"):
        testing.assert_parity(np.array([1.0, np.nan]), np.ones(2))


# --- accepted forms ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "scale", [0.5, fractions.Fraction(1, 2), decimal.Decimal("0.5"), np.float32(0.5), np.array(0.5), torch.tensor(0.5)]
)
def test_scale_accepts_any_real_number(scale):
    out, _ = sa.scaled_dot_product_attention(Q, K, V, scale=scale)
    np.testing.assert_allclose(out, sa.scaled_dot_product_attention(Q, K, V, scale=0.5)[0], rtol=1e-15)


def test_arrays_accept_tensors_that_require_grad_and_nested_lists():
    expected = sa.scaled_dot_product_attention(Q, K, V)[0]
    q = torch.tensor(Q, requires_grad=True)
    np.testing.assert_allclose(sa.scaled_dot_product_attention(q, K.tolist(), V)[0], expected, rtol=1e-14)
    np.testing.assert_allclose(sa.memory_efficient_attention(q, K, torch.tensor(V), block_size=2), expected, 1e-14)
    mask = torch.tensor(sa.causal_mask(3, 5, dtype=bool))
    np.testing.assert_array_equal(
        sa.scaled_dot_product_attention(Q, K, V, mask=mask)[0],
        sa.scaled_dot_product_attention(Q, K, V, is_causal=True)[0],
    )
    bf16 = torch.tensor(Q, dtype=torch.bfloat16)  # NumPy has no bfloat16: read as float32, which holds it exactly
    assert sa.softmax(bf16).dtype == np.float32
    assert sa.padding_mask(torch.tensor([2, 1])).shape == (2, 1, 2)
    assert sa.memory_efficient_attention(Q, K, V, block_size=np.int64(2)).shape == (3, 6)
    assert sa.mha_parameter_count(np.array(4)) == 80


def test_memory_efficient_attention_accepts_what_the_reference_accepts():
    # q and k unbatched, v batched: the running state needs v's batch axes too
    q, k, v = Q, K, RNG.normal(size=(2, 5, 6))
    reference = sa.scaled_dot_product_attention(q, k, v)[0]
    for block_size in (1, 2, 5, 8):
        np.testing.assert_allclose(sa.memory_efficient_attention(q, k, v, block_size=block_size), reference, 1e-13)
    mask = sa.causal_mask(3, 5, dtype=bool)
    reference = sa.scaled_dot_product_attention(q, k, v, mask=mask)[0]
    np.testing.assert_allclose(sa.memory_efficient_attention(q, k, v, mask=mask, block_size=2), reference, 1e-13)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_every_function_keeps_the_float_dtype(dtype):
    q, k, v, x = (a.astype(dtype) for a in (Q, K, V, X))
    out, weights = sa.scaled_dot_product_attention(q, k, v)
    assert out.dtype == weights.dtype == dtype
    assert sa.memory_efficient_attention(q, k, v, block_size=2).dtype == dtype
    for function in (sa.softmax, sa.relu, sa.gelu, sa.layer_norm):
        assert function(x).dtype == dtype, function.__name__


def test_float16_attention_matches_float64_to_float16_precision():
    # float16 is computed in float32, so it is as close as rounding to float16 allows
    q, k, v = (a.astype(np.float16) for a in (Q, K, V))
    out = sa.scaled_dot_product_attention(q, k, v)[0]
    exact = sa.scaled_dot_product_attention(*(a.astype(np.float64) for a in (q, k, v)))[0]
    np.testing.assert_allclose(out, exact, rtol=1e-3, atol=1e-3)


def test_float16_scores_beyond_its_range_do_not_overflow():
    # scores of 80,000 exceed float16's largest number, 65,504; computed in float32 they are fine
    q = np.full((2, 4), 200, dtype=np.float16)
    out, weights = sa.scaled_dot_product_attention(q, q, q)
    assert out.dtype == np.float16 and np.all(out == 200) and np.all(weights == 0.5)
    assert np.all(sa.memory_efficient_attention(q, q, q, block_size=1) == 200)


def test_integers_promote_to_float64():
    ints = np.arange(12).reshape(3, 4)
    assert sa.scaled_dot_product_attention(ints, ints, ints)[0].dtype == np.float64
    assert sa.gelu(ints).dtype == sa.relu(ints).dtype == sa.layer_norm(ints).dtype == np.float64


def test_per_example_mask_with_the_head_axis_is_accepted():
    mask = sa.padding_mask([3, 2])[:, None]  # (B, 1, 1, S)
    y, weights = sa.multihead_attention(X, _attention(), num_heads=2, mask=mask)
    assert y.shape == X.shape and np.all(weights[1, :, :, 2] == 0)


def test_final_norm_eps_matches_torch():
    D = 4
    layer = torch.nn.TransformerEncoderLayer(D, 2, 6, dropout=0.0, batch_first=True).double()
    stack = torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(D, eps=0.5), enable_nested_tensor=False)
    testing.randomise_parameters(stack.double(), seed=3)
    layers = [sa.EncoderParams.from_torch(block) for block in stack.layers]
    final = sa.LayerNormParams(stack.norm.weight.detach().numpy(), stack.norm.bias.detach().numpy())
    with torch.no_grad():
        expected = stack(torch.tensor(X)).numpy()
    actual = sa.encoder_stack(X, layers, 2, final_norm=final, final_norm_eps=0.5)
    testing.assert_parity(actual, expected)
    assert not np.allclose(sa.encoder_stack(X, layers, 2, final_norm=final), expected, atol=1e-3)


# --- vision modules, their NumPy twins, and the state-dict readers ---------------------------


def _state(module):
    return sa.numpy_state_dict(module)


_MHA_STATE = _state(torch.nn.MultiheadAttention(12, 2))
_T2T_STATE = _state(sa.T2TAttention(49, 64))
_CONV_STATE = _state(sa.ConvSelfAttention(16))
_GQA = sa.AttentionParams(
    sa.Linear(np.ones((8, 8))), sa.Linear(np.ones((8, 4))), sa.Linear(np.ones((8, 4))), sa.Linear(np.ones((8, 8)))
)

VISION_AND_INTEROP = [
    (
        lambda: sa.PatchAttentionBlock(3, 4, 8)(torch.ones(1, 3, 8, 8, dtype=torch.float64)),
        r"PatchAttentionBlock's weights are torch.float32 but x is torch.float64; call module.double\(\)",
    ),
    (
        lambda: sa.ConvSelfAttention(16)(torch.ones(1, 16, 2, 2, dtype=torch.float64)),
        r"ConvSelfAttention's weights are torch.float32 but x is torch.float64",
    ),
    (lambda: sa.T2TAttention(49, 64)(np.ones((1, 3, 49))), r"T2TAttention expects a torch.Tensor; got ndarray"),
    (
        lambda: sa.patch_attention_forward(np.ones((1, 3, 8, 8)), _state(sa.PatchAttentionBlock(3, 4, 8)), 2),
        r"params\['proj.weight'\] has shape \(8, 3, 4, 4\), a 4x4 patch kernel, but patch_size=2",
    ),
    (
        lambda: sa.patch_attention_forward(np.ones((1, 1, 8, 8)), _state(sa.PatchAttentionBlock(3, 4, 8)), 4),
        r"x has 1 channels but the weights are for C=3 \(the patch embedding reads 48 = C\*4\*4",
    ),
    (
        lambda: sa.attention_from_state_dict({**_MHA_STATE, "in_proj_weight": _MHA_STATE["in_proj_weight"].T}),
        r"in_proj_weight must have shape \(3\*D, D\) .* got \(12, 36\) \(in_proj_weight looks transposed",
    ),
    (
        lambda: sa.attention_from_state_dict({**_MHA_STATE, "in_proj_weight": np.ones(36)}),
        r"in_proj_weight must have shape \(3\*D, D\) in PyTorch's layout; got \(36,\)",
    ),
    (
        lambda: sa.attention_from_state_dict({**_MHA_STATE, "in_proj_weight": np.float64(1.0)}),
        r"in_proj_weight must have shape .* got \(\)",
    ),
    (
        lambda: sa.attention_from_state_dict({**_MHA_STATE, "out_proj.bias": np.ones(5)}),
        r"out_proj.bias must have shape \(d_out,\) = \(12,\) for out_proj.weight of shape \(12, 12\); got \(5,\)",
    ),
    (
        lambda: sa.attention_from_state_dict({**_MHA_STATE, "out_proj.weight": np.full((12, 12), np.nan)}),
        r"out_proj.weight must hold only finite numbers",
    ),
    (lambda: sa.attention_from_state_dict({"x": 1}), r"state is missing \['in_proj_weight', .* it holds \['x'\]"),
    (lambda: sa.attention_from_state_dict(_MHA_STATE, prefix=1), r"prefix must be a string"),
    (
        lambda: sa.attention_params(torch.nn.MultiheadAttention(4, 2, device="meta")),
        r"in_proj_weight is a torch tensor on the 'meta' device",
    ),
    (
        lambda: sa.t2t_attention_from_state_dict({**_T2T_STATE, "qkv.weight": _T2T_STATE["qkv.weight"].T}),
        r"qkv.weight must have shape \(3\*W, d_in\) .* got \(49, 192\) \(qkv.weight looks transposed",
    ),
    (
        lambda: sa.conv_attention_from_state_dict({**_CONV_STATE, "q.weight": np.ones((2, 16, 3, 3))}),
        r"q.weight must have shape \(d_out, d_in, 1, 1\) in PyTorch's layout; got \(2, 16, 3, 3\)",
    ),
    (
        lambda: sa.PatchAttentionParams(sa.Linear(np.ones((48, 8))), _GQA),
        r"the block has one attention head of width E=8: q, k, v and out must all map E -> E",
    ),
    (
        lambda: sa.t2t_attention_forward(np.ones((1, 3, 8)), _GQA, 2),
        r"T2T attention needs q, k and v of the same width",
    ),
]


@pytest.mark.parametrize(("call", "message"), VISION_AND_INTEROP)
def test_vision_and_interop_bad_input_gets_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_bfloat16_module_is_read_as_float32():
    module = torch.nn.MultiheadAttention(4, 2).to(torch.bfloat16)
    params = sa.attention_params(module)
    assert params.q.weight.dtype == np.float32
    np.testing.assert_array_equal(params.w_out, module.out_proj.weight.detach().float().numpy().T)


# --- plotting ------------------------------------------------------------------------


@pytest.mark.parametrize("cmap", [["viridis"], "no-such-map", None, np.ones(2)])
def test_plot_helpers_refuse_an_unknown_cmap(cmap):
    with pytest.raises(ValueError, match=r"cmap must be the name of a matplotlib colour map"):
        sa.plot_attention(np.full((2, 2), 0.5), cmap=cmap)
    with pytest.raises(ValueError, match=r"cmap must be the name of a matplotlib colour map"):
        sa.plot_token_grid(np.ones(4), (2, 2), cmap=cmap)


def test_plot_mask_reads_a_tensor_that_requires_grad():
    import matplotlib.pyplot as plt

    mask = torch.zeros(3, 3, requires_grad=True)
    assert sa.plot_mask(mask) is not None
    plt.close("all")


# --- Round two (issue 28): the newer modules' silent wrong answers, found by adversarial testers -----------

_RNG = np.random.default_rng(28)
_Q, _K, _V = (_RNG.standard_normal((2, 3, 5, 4)) for _ in range(3))
_G = _RNG.standard_normal((2, 3, 5, 4))


def _forward_and_lse(**kwargs):
    return sa.memory_efficient_attention(_Q, _K, _V, return_lse=True, **kwargs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("made_up", [1e6, 1e15, -1e6, 30.0])
def test_a_made_up_lse_is_refused_however_large(dtype, made_up):
    q, k, v, g = (a.astype(dtype) for a in (_Q, _K, _V, _G))
    out, _ = sa.memory_efficient_attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match=r"lse does not fit these scores: .* query \(0, 0, 0\) sums to"):
        sa.memory_efficient_attention_backward(g, q, k, v, out, np.full((2, 3, 5), made_up, dtype))


def test_minus_inf_lse_is_refused_on_a_query_that_sees_a_key():
    out, lse = _forward_and_lse()
    lse[1, 2, 3] = -np.inf
    with pytest.raises(ValueError, match=r"lse is -inf for query \(1, 2, 3\), which the mask lets see some key"):
        sa.memory_efficient_attention_backward(_G, _Q, _K, _V, out, lse)


def test_minus_inf_lse_is_refused_even_where_the_scores_underflow():
    # every score of query 0 is about -1000: its weights' sum underflows to 0 as a blocked query's does
    q = _Q.copy()
    q[..., 0, :] = -1000.0 * np.sign(_K.sum(axis=-2))
    out, lse = sa.memory_efficient_attention(q, _K, _V, scale=1.0, return_lse=True)
    assert np.isfinite(lse).all()
    lse[..., 0] = -np.inf
    with pytest.raises(ValueError, match=r"lse is -inf for query \(0, 0, 0\)"):
        sa.memory_efficient_attention_backward(_G, q, _K, _V, out, lse, scale=1.0)


@pytest.mark.parametrize("is_causal", [False, True])
def test_minus_inf_lse_is_accepted_on_fully_masked_queries(is_causal):
    mask = np.ones((5, 5), bool)
    mask[2] = False
    k, v = _K[..., :3, :], _V[..., :3, :]  # S < T: with is_causal the first two queries see nothing
    m = mask[:, :3]
    out, lse = sa.memory_efficient_attention(_Q, k, v, mask=m, is_causal=is_causal, return_lse=True)
    assert np.isneginf(lse[..., 2]).all()
    grads = sa.memory_efficient_attention_backward(_G, _Q, k, v, out, lse, mask=m, is_causal=is_causal)
    reference = sa.scaled_dot_product_attention_backward(_G, _Q, k, v, mask=m, is_causal=is_causal)
    for got, want in zip(grads, reference, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-12)


_PER_EXAMPLE = sa.padding_mask([3, 5, 2])  # (B, 1, S) with B = 3 = H below: it would meet the head axis
_QKV_BH = tuple(_RNG.standard_normal((3, 3, 5, 4)) for _ in range(3))
_HEAD_AXIS = r"mask has 3 axes \(3, 1, 5\) but the scores have 4 .*its first axis would line up with the heads"


@pytest.mark.parametrize(
    "call",
    [
        lambda m: sa.scaled_dot_product_attention(*_QKV_BH, mask=m),
        lambda m: sa.scaled_dot_product_attention(*_QKV_BH, mask=m, enable_gqa=True),
        lambda m: sa.memory_efficient_attention(*_QKV_BH, mask=m),
        lambda m: sa.scaled_dot_product_attention_backward(_QKV_BH[0], *_QKV_BH, mask=m),
        lambda m: sa.memory_efficient_attention_backward(
            _QKV_BH[0], *_QKV_BH, *sa.memory_efficient_attention(*_QKV_BH, mask=m, return_lse=True), mask=m
        ),
    ],
    ids=["sdpa", "sdpa-gqa", "memory-efficient", "backward", "memory-efficient-backward"],
)
def test_every_attention_function_refuses_a_per_example_mask_on_the_head_axis(call):
    with pytest.raises(ValueError, match=_HEAD_AXIS):
        call(_PER_EXAMPLE)
    call(_PER_EXAMPLE[:, None])  # with the head axis it is accepted
    call(np.ones((1, 5, 5), bool))  # size-1 extra axes cannot line up wrongly
    call(np.ones((1, 3, 5, 5), bool))  # a per-head mask, with every axis named


@pytest.mark.parametrize(
    "call",
    [
        lambda m: sa.scaled_dot_product_attention(_Q, _K, _V, mask=m),
        lambda m: sa.memory_efficient_attention(_Q, _K, _V, mask=m),
        lambda m: sa.multihead_attention(_Q[0, 0], _attention(4), num_heads=2, mask=m),
    ],
    ids=["sdpa", "memory-efficient", "multihead"],
)
def test_a_float_mask_of_zeros_and_ones_is_refused(call):
    keep = (np.arange(5)[None, :] <= np.arange(5)[:, None]).astype(np.float32)
    with pytest.raises(ValueError, match=r"mask is a float mask of only 0s and 1s: .* pass mask.astype\(bool\)"):
        call(keep)
    call(keep.astype(bool))
    call(np.where(keep.astype(bool), 0.0, -np.inf))
    call(np.zeros((5, 5)))  # an all-zero additive mask keeps everything: accepted


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_refuses_a_variance_that_overflows(dtype):
    big = np.finfo(dtype).max / 4
    x = np.array([[big, -big, 1.0]], dtype)
    for call in (lambda: sa.layer_norm(x), lambda: sa.layer_norm_backward(np.ones_like(x), x)):
        with pytest.raises(
            ValueError, match=rf"x is too large to normalise in {np.dtype(dtype).name}: its mean or var"
        ):
            call()
    with pytest.raises(ValueError, match=r"layer_norm overflowed float64"):
        sa.layer_norm(np.array([[1.0, 2.0, 3.0]]), weight=[1.7e308, 1.7e308, 1.7e308])
    with pytest.raises(ValueError, match=r"layer_norm_backward overflowed float64"):
        sa.layer_norm_backward(np.full((1, 3), 1e308), np.array([[1.0, 2.0, 3.0]]), weight=[1e308, 1.0, 1.0])


def _online_state(B=2, T=3, block=4, Dv=5):
    return (
        np.full((B, T, 1), -np.inf),
        np.zeros((B, T, 1)),
        np.zeros((B, T, Dv)),
        _RNG.standard_normal((B, T, block)),
        _RNG.standard_normal((B, block, Dv)),
    )


def _read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: (s[0], s[1].astype(int), *s[2:]), r"running_sum is an array of dtype int64"),
        (lambda s: (s[0], s[1], s[2], s[3].tolist(), s[4]), r"scores is a list"),
        (lambda s: (s[0], _read_only(s[1]), *s[2:]), r"running_sum is an array of dtype float64 that is read-only"),
        (lambda s: (s[0], s[1][0], *s[2:]), r"in_place=True writes the result into running_sum, .* \(2,\); got"),
    ],
)
def test_online_softmax_update_in_place_refuses_what_it_cannot_update(change, message):
    with pytest.raises(ValueError, match=message):
        sa.online_softmax_update(*change(_online_state()), in_place=True)


def test_online_softmax_update_broadcasts_and_takes_an_empty_block():
    m, total, o, s, v = _online_state()
    full = sa.online_softmax_update(m, total, o, s, v)
    shared = sa.online_softmax_update(m[0], total[0], o[0], s, v)  # the state without the batch axis
    for a, b in zip(full, shared, strict=True):
        np.testing.assert_array_equal(a, b)
    after = sa.online_softmax_update(*full, np.zeros((2, 3, 0)), np.zeros((2, 0, 5)))
    for a, b in zip(full, after, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"the leading \(batch\) axes must broadcast together"):
        sa.online_softmax_update(m, total, o, s, np.zeros((3, 4, 5)))


def _decoder():
    return sa.TinyDecoder.random(20, 16, 4, 2, 3, 32, seed=0)


def _cache_state(cache):
    """The position, and the keys a later update can still return (a KVCache's rows past it are unused)."""
    rows = cache.position if isinstance(cache, sa.KVCache) else cache.window
    return cache.position, cache._keys[..., :rows, :].copy()


@pytest.mark.parametrize("kind", ["kv", "window"])
def test_a_failed_forward_leaves_every_cache_as_it_was(kind):
    model = _decoder()
    caches = model.new_caches(max_len=40) if kind == "kv" else model.new_caches(window=3)
    window = None if kind == "kv" else 3
    model.forward([1, 2, 3, 4, 5], caches, window)
    before = [_cache_state(c) for c in caches]
    # a failure in the last block, after the first two updated their caches: its weights overflow
    blocks = model.blocks
    object.__setattr__(model, "blocks", (*blocks[:2], _huge(blocks[2])))  # the same decoder, its last block broken
    with pytest.raises(ValueError, match="overflowed"):
        model.forward([6, 7], caches, window)
    object.__setattr__(model, "blocks", blocks)
    for cache, (position, keys) in zip(caches, before, strict=True):
        assert _cache_state(cache)[0] == position
        np.testing.assert_array_equal(_cache_state(cache)[1], keys)
    # and decoding goes on as if the failed call had never been made
    fresh = model.new_caches(max_len=40) if kind == "kv" else model.new_caches(window=3)
    model.forward([1, 2, 3, 4, 5], fresh, window)
    np.testing.assert_array_equal(model.forward([6, 7], caches, window), model.forward([6, 7], fresh, window))


def _huge(block):
    ff = block.feed_forward
    big = sa.Linear(np.full_like(ff.up.weight, 1e300), ff.up.bias)
    return type(block)(block.attention, type(ff)(big, ff.down), block.norm1, block.norm2)


def test_forward_refuses_caches_at_different_positions_or_full_before_changing_any():
    model = _decoder()
    caches = model.new_caches(max_len=10)
    caches[1].update(np.zeros((2, 1, 4)), np.zeros((2, 1, 4)))
    with pytest.raises(ValueError, match=r"one kind and at one position.* positions \[0, 1, 0\]"):
        model.forward([1], caches)
    full = model.new_caches(max_len=4)
    model.forward([1, 2, 3], full)
    with pytest.raises(ValueError, match=r"the caches are full: .* have 3, and these tokens add 2"):
        model.forward([4, 5], full)
    assert [c.position for c in full] == [3, 3, 3]
    mixed = [sa.KVCache(10), sa.SlidingWindowCache(10), sa.KVCache(10)]
    with pytest.raises(ValueError, match=r"one kind and at one position"):
        model.forward([1], mixed)


def test_forward_refuses_another_blocks_or_another_decoders_caches():
    model, other = _decoder(), sa.TinyDecoder.random(20, 16, 4, 2, 3, 32, seed=1)
    caches = model.new_caches(max_len=10)
    model.forward([1, 2], caches)
    with pytest.raises(ValueError, match=r"caches\[0\] holds the keys and values of block 2 of this decoder"):
        model.forward([3], caches[::-1])
    with pytest.raises(ValueError, match=r"caches\[0\] holds the keys and values of block 0 of another"):
        other.forward([3], caches)
    filled = [sa.KVCache(10) for _ in range(3)]
    for cache in filled:
        cache.update(np.zeros((2, 1, 4)), np.zeros((2, 1, 4)))
    with pytest.raises(ValueError, match=r"caches\[0\] already holds 1 tokens from outside this decoder"):
        model.forward([3], filled)
    own = [sa.KVCache(10) for _ in range(3)]  # empty caches made by hand are claimed by their first forward
    model.forward([1, 2], own)
    np.testing.assert_array_equal(model.forward([3], own), model.forward([3], caches))


def test_len_of_a_sliding_window_cache_is_the_tokens_it_holds():
    cache = sa.SlidingWindowCache(3)
    assert len(cache) == 0
    for t in range(1, 6):
        cache.update(np.zeros((1, 1, 2)), np.zeros((1, 1, 2)))
        assert len(cache) == min(t, 3)


def test_split_over_threads_checks_the_result_with_one_thread_too():
    q = np.ones((2, 3, 4))
    for threads in (1, 2):
        with pytest.raises(ValueError, match=r"attention must return an array, or a tuple of arrays, with the"):
            sa.split_over_threads(lambda q, k, v: 3.0, q, q, q, threads=threads)


def test_attention_rollout_tolerance_follows_the_dtype():
    w = np.full((2, 1, 3, 4, 4), 0.25)
    for dtype in (np.float16, np.float32, np.float64):
        assert sa.attention_rollout(w.astype(dtype)).dtype == dtype
    assert sa.attention_rollout(torch.from_numpy(w).to(torch.bfloat16)).dtype == np.float32
    off = w.copy()
    off[..., 0, 0] += 0.005  # a row summing to 1.005: passed the old float32 tolerance of 1e-2
    with pytest.raises(ValueError, match=r"each row summing to 1 \(within .* for 4 float32 weights\)"):
        sa.attention_rollout(off.astype(np.float32))
    sa.attention_rollout(torch.from_numpy(off).to(torch.bfloat16))  # within bfloat16's rounding


def test_adam_reads_gradients_given_as_lists_or_tensors():
    weights, copy = {"w": np.ones(3)}, {"w": np.ones(3)}
    first, second = sa.Adam(lr=0.1), sa.Adam(lr=0.1)
    first.step(weights, {"w": [1.0, 2.0, 3.0]})
    second.step(copy, {"w": torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)})
    np.testing.assert_array_equal(weights["w"], copy["w"])


def test_a_checker_says_when_an_answer_is_orders_of_magnitude_off():
    from selfattention.exercises._framework import _compare_array

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for answer in ([1e30, 2.0], [1e308, -1e308]):
            message = _compare_array(answer, np.array([1.0, 2.0]), "weights")
            assert "is a division, normalisation or scale missing?" in message
    assert "missing" not in _compare_array([1.0, 2.5], np.array([1.0, 2.0]), "weights")


def test_repeat_kv_refuses_a_copy_that_would_exhaust_memory():
    with pytest.raises(ValueError, match=r"n_rep=1000000000 would make 1.6e\+11 numbers, more than 268,435,456"):
        sa.repeat_kv(np.ones((2, 2, 5, 8)), 10**9)


def test_softmax_backward_takes_a_bfloat16_softmax():
    torch.manual_seed(0)
    y = torch.softmax(torch.randn(16, 8, dtype=torch.bfloat16) * 3, -1)
    assert (y.float().sum(-1) - 1).abs().max() > 1e-3  # beyond the old fixed tolerance
    got = sa.softmax_backward(torch.ones_like(y), y)
    assert np.abs(got).max() < 0.05  # a gradient of all ones: zero up to bfloat16's rounding of y
    with pytest.raises(ValueError, match=r"within 1e-06 for float64; .* slice sums from"):
        sa.softmax_backward(np.ones((2, 3)), np.full((2, 3), 0.3))


@pytest.mark.parametrize("is_causal", [False, True])
def test_the_attention_backward_takes_the_forwards_enable_gqa(is_causal):
    import torch.nn.functional as F

    rng = np.random.default_rng(6)
    q, k, v = rng.standard_normal((2, 6, 3, 4)), rng.standard_normal((2, 2, 5, 4)), rng.standard_normal((2, 2, 5, 3))
    g = rng.standard_normal((2, 6, 3, 3))
    grads = sa.scaled_dot_product_attention_backward(g, q, k, v, is_causal=is_causal, enable_gqa=True)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    mask = torch.from_numpy(sa.causal_mask(3, 5, dtype=bool)) if is_causal else None  # lower-right, as ours
    F.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask, enable_gqa=True).backward(torch.from_numpy(g))
    for got, tensor in zip(grads, (tq, tk, tv), strict=True):
        np.testing.assert_allclose(got, tensor.grad.numpy(), atol=1e-12)


def test_overflows_in_the_newer_modules_are_reported_not_warned():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"the update overflowed float16: .* keep the running state in float32"):
            sa.online_softmax_update(
                np.full((1, 1), -np.inf, np.float16),
                np.zeros((1, 1), np.float16),
                np.zeros((1, 1), np.float16),
                np.zeros((1, 4), np.float16),
                np.full((4, 1), 30000, np.float16),
            )
        with pytest.raises(ValueError, match=r"the attention overflowed float64"):
            sa.memory_efficient_attention(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 3)), scale=1e308)
        blocked = sa.combine_masks(np.array([-6e4], np.float16), np.array([-6e4], np.float16))
        assert np.isneginf(blocked).all()


def test_decoder_block_takes_per_example_positions_and_names_them_when_wrong():
    model = _decoder()
    x = np.random.default_rng(3).standard_normal((2, 3, 16))
    per_example = sa.decoder_block(x, model.blocks[0], 4, positions=np.tile(np.arange(3), (2, 1)))
    np.testing.assert_array_equal(per_example, sa.decoder_block(x, model.blocks[0], 4))
    with pytest.raises(ValueError, match=r"positions of shape \(3, 3\) must be \(t,\) or \(..., t\) with x's leading"):
        sa.decoder_block(x, model.blocks[0], 4, positions=np.ones((3, 3)))
    with pytest.raises(ValueError, match=r"positions must hold one position per new token, shape \(t,\) = \(3,\)"):
        sa.decoder_block(x, model.blocks[0], 4, positions=np.arange(4))


def test_bert_config_reads_any_real_eps():
    from selfattention.pretrained import BertConfig

    assert BertConfig(10, 8, 1, 2, 16, 32, 2, decimal.Decimal("1e-12")).layer_norm_eps == 1e-12
    assert BertConfig(10, 8, 1, 2, 16, 32, 2, np.float32(1e-5)).layer_norm_eps == float(np.float32(1e-5))
    with pytest.raises(ValueError, match=r"layer_norm_eps must be a small positive number; got 2.0"):
        BertConfig(10, 8, 1, 2, 16, 32, 2, 2.0)


# --- Round two, the modules no benchmark times --------------------------------------------------------------


def test_vit_forward_refuses_another_image_grid_or_head_count():
    model = sa.TinyViT(image_size=8, patch_size=2, num_heads=4)
    params = sa.tiny_vit_params(model)
    assert params.image_size == (8, 8) and params.num_heads == 4
    sa.vit_forward(np.zeros((1, 1, 8, 8)), params, num_heads=4)
    with pytest.raises(ValueError, match=r"trained on 8x8 images; got 16x4, whose patches would meet the position"):
        sa.vit_forward(np.zeros((1, 1, 16, 4)), params, num_heads=4)  # also 16 patches of 2x2
    with pytest.raises(ValueError, match=r"the model was trained with num_heads=4; got num_heads=8"):
        sa.vit_forward(np.zeros((1, 1, 8, 8)), params, num_heads=8)
    with pytest.raises(ValueError, match=r"image_size 16x16 in 2x2 patches does not make the position table's 16"):
        dataclasses.replace(params, image_size=(16, 16))


def test_adam_refuses_another_models_arrays_and_steps_that_overflow():
    first, other = {"w": np.ones(3)}, {"w": np.ones(3)}
    opt = sa.Adam(lr=0.1)
    opt.step(first, {"w": np.ones(3)})
    with pytest.raises(ValueError, match=r"params\['w'\] is not the array this Adam stepped before"):
        opt.step(other, {"w": np.ones(3)})
    with pytest.raises(ValueError, match=r"parameter w must hold only finite numbers; found 1 NaN"):
        sa.Adam().step({"w": np.array([1.0, np.nan])}, {"w": np.ones(2)})
    weights = {"w": np.ones(2, np.float16)}
    with pytest.raises(ValueError, match=r"step 1 would make parameter w overflow float16 .* Nothing was updated"):
        sa.Adam(lr=1e5).step(weights, {"w": np.ones(2, np.float16)})
    np.testing.assert_array_equal(weights["w"], np.ones(2, np.float16))


def test_float16_losses_and_gradients_work_in_float32_or_say_they_overflowed():
    assert sa.cross_entropy(np.zeros((1, 70000), np.float16), [0]) == pytest.approx(np.log(70000), rel=1e-6)
    with pytest.raises(ValueError, match=r"grad_loss=65536 times the gradient overflows float16"):
        sa.cross_entropy_backward(65536.0, np.array([[10.0, 0, 0]], np.float16), [1])
    with pytest.raises(ValueError, match=r"the summed gradient of a repeated id overflowed float16"):
        sa.embedding_backward(np.full((3, 2), 40000, np.float16), [0, 0, 0], np.zeros((2, 2), np.float16))


def test_vit_training_reads_tensors_lists_and_big_endian_arrays():
    from selfattention.vit_training import split_validation

    x = np.random.default_rng(0).random((20, 3)).astype(">f4")
    y = np.repeat([0, 1], 10)
    for xs, ys in ((x, y), (torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y)), (x.tolist(), y.tolist())):
        parts = split_validation(xs, ys, fraction=0.2, seed=0)
        assert [len(p) for p in parts] == [16, 4, 16, 4]


def test_learning_curves_draw_a_run_without_held_out_accuracy():
    figure = sa.plot_learning_curves({"run": {"step": [1, 2, 3], "loss": [2.0, 1.5, 1.0], "accuracy": []}})
    assert "no held-out accuracy recorded" in [t.get_text() for t in figure.axes[1].texts]
    with pytest.raises(ValueError, match=r"the loss of run 'run' must be a 1-D sequence"):
        sa.plot_learning_curves({"run": {"step": [1], "loss": [[1.0]], "accuracy": []}})


def test_interactive_figures_refuse_data_that_is_not_json_when_made():
    from selfattention.interactive import InteractiveFigure

    for data in ({"a": np.int64(1)}, {(1, 2): 1}, {"a": {1, 2}}):
        with pytest.raises(ValueError, match=r"data: the figure's data must be JSON"):
            InteractiveFigure("mask", "t", data, {}, b"\x89PNG", "a")


def test_plots_refuse_what_would_take_minutes_to_draw():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"a figure draws at most 16 steps side by side; got 300"):
        sa.plot_block_traversal(64, list(range(300)))
    with pytest.raises(ValueError, match=r"annotate=True writes a number in each of the 90,000 cells"):
        sa.plot_attention(sa.softmax(rng.normal(size=(300, 300))), annotate=True)
    with pytest.raises(ValueError, match=r"the figure draws one panel per head, at most 16; got num_heads=300"):
        sa.plot_head_split(rng.normal(size=(3, 300)), 300)
    ax = sa.plot_similarity(np.eye(40), [f"s{i}" for i in range(40)])  # drawn without numbers past 32 rows
    assert not ax.texts


def test_plots_and_figures_take_numpy_scalars_and_refuse_what_they_cannot_draw():
    from selfattention import interactive

    ax = sa.plot_roofline({"a": (np.float32(2.0), np.int64(10))}, np.float32(100.0), np.int64(10))
    assert ax.get_lines()
    for points, peak, bandwidth in (({"a": (1e308, 10.0)}, 100, 10), ({"a": (1.0, 10.0)}, 1e308, 1e-308)):
        with pytest.raises(ValueError, match=r"must lie between 1e-09 and 1e\+09 to be drawn"):
            sa.plot_roofline(points, peak, bandwidth)
    with pytest.raises(ValueError, match=r"must be a real number; got True"):
        sa.plot_roofline({"a": (True, 10.0)}, 100, 10)
    with pytest.raises(ValueError, match=r"scores must lie within ±1e150 to be drawn"):
        interactive.softmax_stepper([1e308, -1e308, 1], np.ones((3, 1)), 1, title="t", alt="a")
    with pytest.raises(ValueError, match=r"mask must be boolean .* got dtype int64. For a 0/1 mask, pass mask.astype"):
        sa.plot_mask(np.eye(3, dtype=np.int64))
    interactive.mask_builder(5, windows=np.array([2, 3]), title="t", alt="a")


def test_checkers_take_a_tensor_answer_and_hint_at_bfloat16():
    from selfattention.exercises import check_attention_share, check_ntk_base

    def share(s, p, D, F, H):  # attention's share of a block, as a 0-d tensor
        T = (s // p) ** 2 + 1
        return torch.tensor((2 * D + T) / (2 * D + T + F))

    assert check_attention_share(share)
    new_base = lambda base, head_dim, factor: torch.tensor(base * factor ** (head_dim / (head_dim - 2)))  # noqa: E731
    result = check_ntk_base(lambda *args: new_base(*args).bfloat16())
    assert not result and "your answer is bfloat16, which keeps only about 2 significant digits" in str(result)
