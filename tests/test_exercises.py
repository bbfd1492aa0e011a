"""Each exercise checker passes a right answer and fails wrong ones with a useful message."""

from __future__ import annotations

import re

import numpy as np
import pytest

from selfattention import (
    conv_self_attention_forward,
    encoder_block,
    layer_norm,
    multihead_attention,
    patchify,
    scaled_dot_product_attention,
    self_attention,
    softmax,
)
from selfattention import exercises as ex


def _single_query(query, keys, values):
    out, weights = scaled_dot_product_attention(query[None, :], keys, values)
    return out[0], weights[0]


def _attention_matrix(words, w_q, w_k, w_v):
    return scaled_dot_product_attention(words @ w_q, words @ w_k, words @ w_v)


def _single_head(x, w_q, w_k, w_v, w_o):
    out, _ = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)
    return out @ w_o


def _naive_softmax(x):
    e = np.exp(x)  # no max subtraction: overflows on large scores
    return e / e.sum(axis=-1, keepdims=True)


def _split_heads(x, H):
    *batch, T, D = x.shape
    return np.swapaxes(x.reshape(*batch, T, H, D // H), -3, -2)


def _merge_heads(x):
    *batch, H, T, Dh = x.shape
    return np.swapaxes(x, -3, -2).reshape(*batch, T, H * Dh)


def _self_attention_divided_by_d(x, w_qkv, w_out, mask):
    out, weights = scaled_dot_product_attention(*np.split(x @ w_qkv, 3, axis=-1), mask=mask, scale=1.0 / x.shape[-1])
    return out @ w_out, weights


def _split_heads_batched_only(x, H):
    B, T, D = x.shape  # copied from a 3-D example: fails on unbatched input
    return x.reshape(B, T, H, D // H).swapaxes(1, 2)


def _multihead_scaled_by_model_width(x, w_qkv, w_out, H):
    q, k, v = (_split_heads(a, H) for a in np.split(x @ w_qkv, 3, axis=-1))
    weights = softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(x.shape[-1]))  # sqrt(D), should be sqrt(Dh)
    return _merge_heads(weights @ v) @ w_out, weights


def _patchify_channels_last(images, p):
    B, C, H, W = images.shape
    return images.reshape(B, C, H // p, p, W // p, p).transpose(0, 2, 4, 3, 5, 1).reshape(B, -1, p * p * C)


def _conv_attention_unscaled(x, state):
    B, C, H, W = x.shape
    pixels = x.reshape(B, C, H * W).swapaxes(1, 2)
    q, k, v = (pixels @ state[f"{n}.weight"][:, :, 0, 0].T + state[f"{n}.bias"] for n in "qkv")
    out, _ = scaled_dot_product_attention(q, k, v, scale=1.0)
    return state["gamma"] * out.swapaxes(1, 2).reshape(B, C, H, W) + x


RIGHT = [
    (ex.check_single_query, _single_query),
    (ex.check_attention_matrix, _attention_matrix),
    (ex.check_softmax_temperature, lambda s, tau: softmax(np.asarray(s) / tau)),
    (ex.check_stable_softmax, softmax),
    (ex.check_single_head, _single_head),
    (ex.check_head_parameter_count, lambda d_model, d_k: 4 * d_model * d_k),
    (ex.check_batched_scores, lambda q, k: q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])),
    (ex.check_additive_mask, lambda blocked: np.where(blocked, -np.inf, 0.0)),
    (ex.check_self_attention, self_attention),
    (ex.check_split_heads, _split_heads),
    (ex.check_merge_heads, _merge_heads),
    (ex.check_multihead, lambda x, w_qkv, w_out, H: multihead_attention(x, w_qkv, w_out, H)),
    (ex.check_rms_norm, lambda x, w, eps: x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * w),
    (ex.check_pre_norm_block, lambda x, p, H, mask: encoder_block(x, p, H, mask=mask, norm_first=True)),
    (ex.check_encoder_parameter_count, lambda D, F: 4 * D * D + 4 * D + 2 * D * F + F + D + 4 * D),
    (ex.check_patchify, patchify),
    (ex.check_conv_self_attention, lambda x, state: conv_self_attention_forward(x, state)[0]),
    (ex.check_t2t_parameter_count, lambda dim, chan, bias: dim * chan * 3 + (3 * chan if bias else 0) + chan * chan + chan),
    (ex.check_online_softmax_step, ex._online_step),
    (ex.check_score_memory, lambda b, h, t, s, n: b * h * t * s * n),
]


@pytest.mark.parametrize(("check", "answer"), RIGHT)
def test_right_answers_pass(check, answer):
    result = check(answer)
    assert result.passed and bool(result) and result.status == "PASS"
    assert repr(result).startswith("PASS ") and "matches the reference on all" in repr(result)


# Not the parameter count (integers) nor the stable softmax (its float64 cases near
# 1e4 lose their differences when rounded to float32; it has its own float32 case).
FLOAT32_ROUNDING_ALLOWED = [
    pair for pair in RIGHT if pair[0] not in (
        ex.check_head_parameter_count, ex.check_stable_softmax, ex.check_additive_mask, ex.check_t2t_parameter_count,
        ex.check_encoder_parameter_count, ex.check_score_memory,
        ex.check_conv_self_attention,  # its state is a dict, which the float32 wrapper does not convert
    )
]


@pytest.mark.parametrize(("check", "answer"), FLOAT32_ROUNDING_ALLOWED)
def test_answers_computed_in_float32_pass(check, answer):
    def in_float32(*args):
        args = [np.asarray(a, dtype=np.float32) if isinstance(a, np.ndarray) else a for a in args]
        return answer(*args)

    result = check(in_float32)
    assert result.passed, repr(result)


@pytest.mark.parametrize(("check", "_"), RIGHT)
def test_a_stub_is_reported_as_todo_not_as_a_failure(check, _):
    def stub(*args):
        raise NotImplementedError

    result = check(stub)
    assert not result and result.status == "TODO"
    assert repr(result).endswith(": not implemented yet")


def _global_max_softmax(x):
    e = np.exp(x - x.max())  # the maximum of the whole array, not of each row
    return e / e.sum(axis=-1, keepdims=True)


def _single_head_with_plain_transpose(x, w_q, w_k, w_v, w_o):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return softmax(q @ k.T / np.sqrt(q.shape[-1])) @ v @ w_o  # k.T is wrong for 3-D k


@pytest.mark.parametrize(
    ("check", "wrong", "message"),
    [
        (ex.check_single_query, lambda q, k, v: _single_query(q * np.sqrt(q.shape[0]), k, v),
         r"^FAIL single-query attention: case 1 \(word example, query 1\): the weights do not match the reference; the largest difference is [0-9.e+-]+\. It matches unscaled scores: divide each score by sqrt\(Dk\)$"),
        (ex.check_attention_matrix, lambda w, q, k, v: (lambda s: (softmax(s, axis=0) @ (w @ v), softmax(s, axis=0)))((w @ q) @ (w @ k).T / np.sqrt(q.shape[1])),
         r"It matches a softmax over the queries \(axis 0\); each row, one query, must sum to 1 over the keys$"),
        (ex.check_softmax_temperature, lambda s, tau: softmax(np.asarray(s) * tau),
         r"It matches multiplying by tau; divide the scores by tau$"),
        (ex.check_single_query, lambda q, k, v: _single_query(q, k, v)[::-1],
         r"case 1 \(word example, query 1\): the pair looks swapped: return \(output, weights\), output first$"),
        (ex.check_attention_matrix, lambda *a: _attention_matrix(*a)[0],
         r"should return a pair \(output, weights\); got ndarray$"),
        (ex.check_attention_matrix, lambda w, q, k, v: _attention_matrix(w, k, q, v),
         r"case 1 \(word example\): the weights do not match the reference"),
        (ex.check_softmax_temperature, lambda s, tau: softmax(np.asarray(s) * tau),
         r"case 1 \(word scores, tau=sqrt\(3\)\): the weights do not match the reference"),
        (ex.check_stable_softmax, _naive_softmax,
         r"case 2 \(scores around \+1e4\): the weights contain NaN or inf: did an exponential overflow to inf, or did a whole row underflow"),
        (ex.check_stable_softmax, _global_max_softmax,
         r"case 4 \(float32 scores in the hundreds\): the weights contain NaN or inf: .* Subtract each row's own maximum$"),
        (ex.check_stable_softmax, lambda x: softmax(np.asarray(x, dtype=np.float64)),
         r"case 4 \(float32 scores in the hundreds\): float32 scores should give float32 weights; got float64$"),
        (ex.check_single_head, lambda x, wq, wk, wv, wo: x,
         r"case 1 \(B=1, T=1, D=4, Dk=2\): the output does not match the reference|case 1 \(B=1, T=1, D=4, Dk=2\): the output should have shape"),
        (ex.check_single_head, lambda *a: scaled_dot_product_attention(*[a[0] @ w for w in a[1:4]]),
         r"case 1 \(B=1, T=1, D=4, Dk=2\): the output should be one array; got a tuple of 2 \(return only the output\)$"),
        (ex.check_single_head, _single_head_with_plain_transpose,
         r"raised ValueError: .*matmul.*Hint: on a \(B, T, Dk\) array, \.T reverses all three axes; swap only the last two"),
        (ex.check_head_parameter_count, lambda d_model, d_k: 3 * d_model * d_k,
         r"case 1 \(d_model=768, d_k=64\): got 147456, which is not the number of entries"),
        (ex.check_head_parameter_count, lambda d_model, d_k: 4.0 * d_model * d_k,
         r"should return an integer; got float$"),
        (ex.check_batched_scores, lambda q, k: q @ k.T / np.sqrt(q.shape[-1]),
         r"case 2 \(q \(2, 5, 4\), k \(2, 5, 4\)\) raised ValueError: .*Hint: on a \(B, T, Dk\) array, \.T reverses"),
        (ex.check_batched_scores, lambda q, k: q @ np.swapaxes(k, -1, -2),
         r"case 1 \(q \(4, 3\), k \(6, 3\)\): the scores do not match the reference; .*It matches the unscaled scores: divide by sqrt\(Dk\)$"),
        (ex.check_batched_scores, lambda q, k: q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]),
         r"case 1 .* raised ValueError: axes don't match array\. Hint: transpose\(0, 2, 1\) assumes exactly three axes"),
        (ex.check_additive_mask, lambda blocked: np.where(blocked, 0.0, -np.inf),
         r"case 1 \(causal, T=5\): the polarity is flipped: in the input, True means blocked, which becomes -inf$"),
        (ex.check_additive_mask, lambda blocked: np.where(blocked, -1e9, 0.0),
         r"case 1 \(causal, T=5\): the mask should be 0 where the input is False and -inf where it is True$"),
        (ex.check_additive_mask, lambda blocked: ~blocked,
         r"an additive mask must be floating \(it holds -inf\); got dtype bool$"),
        (ex.check_self_attention, lambda x, w_qkv, w_out, mask: self_attention(x, w_qkv[:, [*range(x.shape[-1], 2 * x.shape[-1]), *range(x.shape[-1]), *range(2 * x.shape[-1], 3 * x.shape[-1])]], w_out, mask),
         r"case 1 \(x \(5, 4\), no mask\): the weights do not match the reference; the largest difference is [0-9.e+-]+$"),
        (ex.check_self_attention, lambda x, w_qkv, w_out, mask: self_attention(x, w_qkv, w_out),
         r"case 2 \(x \(5, 4\), causal mask\): .*It matches the output with the mask left out: add the mask to the scores before the softmax$"),
        (ex.check_self_attention, _self_attention_divided_by_d,
         r"It matches dividing by D; divide by sqrt\(D\)$"),
        (ex.check_split_heads, lambda x, H: x.reshape(*x.shape[:-2], H, x.shape[-2], x.shape[-1] // H),
         r"case 1 \(x \(4, 8\), H=2\): the heads do not match the reference; .*It matches a reshape alone, which mixes tokens and columns: reshape to \(\.\.\., T, H, Dh\), then swap T and H$"),
        (ex.check_split_heads, _split_heads_batched_only,
         r"case 1 \(x \(4, 8\), H=2\) raised ValueError: not enough values to unpack .*Hint: the function must also work without batch axes"),
        (ex.check_merge_heads, lambda x: x.reshape(*x.shape[:-3], x.shape[-2], -1),
         r"case 1 \(x \(2, 4, 3\)\): the merged output does not match the reference; .*It matches a reshape alone; first swap the head and token axes back"),
        (ex.check_multihead, _multihead_scaled_by_model_width,
         r"case 1 \(x \(5, 8\), H=2\): the weights do not match the reference; .*It matches a scale of 1/sqrt\(D\); each head scales by 1/sqrt\(Dh\), its own width$"),
        (ex.check_single_head, lambda x, wq, wk, wv, wo: scaled_dot_product_attention(x @ wq, x @ wk, x @ wv, scale=x.shape[-1] ** -0.5)[0] @ wo,
         r"It matches scaling by 1/sqrt\(D\), the model width; scale by 1/sqrt\(Dk\)"),
        (ex.check_rms_norm, lambda x, w, eps: layer_norm(x, w, None, eps),
         r"case 1 \(x \(4, 6\), eps=1e-05\): the output does not match the reference; .*\. It matches LayerNorm: RMSNorm does not subtract the mean$"),
        (ex.check_rms_norm, lambda x, w, eps: x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + 1e-5) * w,
         r"case 3 .*It matches a fixed eps of 1e-5; use the eps argument$"),
        (ex.check_rms_norm, lambda x, w, eps: x / (np.sqrt(np.mean(x**2, axis=-1, keepdims=True)) + eps) * w,
         r"It matches adding eps outside the square root; add it to the mean square, inside$"),
        (ex.check_pre_norm_block, lambda x, p, H, mask: encoder_block(x, p, H, mask=mask),
         r"case 1 .*It matches the post-norm block; pre-norm applies each LayerNorm to the input of its sub-layer"),
        (ex.check_pre_norm_block, lambda x, p, H, mask: x + multihead_attention(layer_norm(x, p.norm1_weight, p.norm1_bias), p.w_qkv, p.w_out, H, mask=mask),
         r"raised ValueError: .*inhomogeneous.*Hint: a function you called returned a tuple; multihead_attention returns \(y, weights\), so take y$"),
        (ex.check_encoder_parameter_count, lambda D, F: 4 * D * D + 4 * D + 2 * D * F + F + D,
         r"case 1 \(d_model=64, dim_feedforward=128\): got 33216: the two LayerNorms are missing"),
        (ex.check_encoder_parameter_count, lambda D, F: 4 * D * D + 2 * D * F,
         r"got 32768: the biases are missing \(attention, feed-forward and LayerNorm\)$"),
        (ex.check_patchify, lambda images, p: images.reshape(images.shape[0], -1, images.shape[1] * p * p),
         r"case 1 .*: the patches do not match the reference; .*It matches a reshape alone, which does not cut square patches"),
        (ex.check_patchify, _patchify_channels_last,
         r"It matches flattening each patch as \(row, column, channel\); flatten it as \(channel, row, column\)"),
        (ex.check_conv_self_attention, _conv_attention_unscaled,
         r"It matches unscaled scores: divide by sqrt\(C // 8\)"),
        (ex.check_conv_self_attention, lambda x, state: conv_self_attention_forward(x, {**state, "gamma": np.array([1.0])})[0],
         r"case 1 \(x \(1, 16, 3, 3\), gamma=0.5\): .*It matches adding the attention without gamma"),
        (ex.check_conv_self_attention, lambda x, state: conv_self_attention_forward(x, state)[0] - x,
         r"It matches gamma \* attention without the input: add x back$"),
        (ex.check_t2t_parameter_count, lambda dim, chan, bias: dim * chan * 3 + 3 * chan + chan * chan + chan,
         r"case 1 .*: got 13760: qkv has a bias of 3\*chan values only when qkv_bias is True$"),
        (ex.check_t2t_parameter_count, lambda dim, chan, bias: dim * chan * 3 + (3 * chan if bias else 0) + chan * chan,
         r"case 1 \(dim=49, chan=64, qkv_bias=False\): got 13504: did you leave out proj's bias \(chan values\)\?$"),
        (ex.check_online_softmax_step, lambda m, l, o, s, v: (np.maximum(m, s.max(-1, keepdims=True)), l + np.exp(s - np.maximum(m, s.max(-1, keepdims=True))).sum(-1, keepdims=True), o + np.exp(s - np.maximum(m, s.max(-1, keepdims=True))) @ v),
         r"It matches adding the block without rescaling: multiply the old l and o by exp\(m - m_new\) first$"),
        (ex.check_score_memory, lambda b, h, t, s, n: b * t * s * n,
         r"case 2 .*: got 155,236 bytes; the scores are batch \* heads \* T \* S numbers$"),
        (ex.check_single_head, lambda *a: 1 / 0,
         r"case 1 \(B=1, T=1, D=4, Dk=2\) raised ZeroDivisionError: division by zero$"),
    ],
)
def test_wrong_answers_fail_with_the_first_bad_case(check, wrong, message):
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        result = check(wrong)
    assert not result.passed and result.status == "FAIL"
    assert repr(result).startswith("FAIL ")
    assert re.search(message, repr(result)), repr(result)


def test_checkers_reject_something_that_is_not_a_function():
    with pytest.raises(ValueError, match=r"expected the function to check for stable softmax; got int"):
        ex.check_stable_softmax(3)


def test_a_stub_called_by_the_answer_is_named_not_reported_as_todo():
    def my_split_heads(x, num_heads):
        raise NotImplementedError

    def my_multihead(x, w_qkv, w_out, num_heads):
        q, k, v = (my_split_heads(a, num_heads) for a in np.split(x @ w_qkv, 3, axis=-1))
        return q, k

    result = ex.check_multihead(my_multihead)
    assert result.status == "FAIL"
    assert repr(result).endswith("my_split_heads(), which your function calls, raised NotImplementedError; finish that exercise first")
