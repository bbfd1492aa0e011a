"""Issue 11: unusual but reasonable input to the NumPy core gets a ValueError that names the argument.

Each case below was tried as a learner would and, before the fix, escaped as a
foreign exception (TypeError, IndexError, ZeroDivisionError, a NumPy broadcast
error), returned NaN, or ran silently with a wrong answer. The accepted forms
(tensors, lists, exotic real numbers) are tested at the end.
"""

from __future__ import annotations

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
