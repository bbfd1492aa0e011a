"""Chapter 9's checkers: their references against what the exercises claim, other right answers, and wrong ones.

The generic tests in test_exercises.py run every reference, stub and declared
mistake. Here the references are checked against what the exercises claim
(the pooled key/value heads serve the query heads ``enable_gqa`` gives them,
so identical heads in a group convert exactly; with the residual, the token
that comes out of speculative sampling follows the target), right answers
written differently or in float32 must pass, and plausible wrong answers that
match no declared mistake must still fail.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import selfattention as sa
from selfattention.exercises import ch09_decoding as ch9
from selfattention.exercises import check_mha_to_gqa, check_speculative_residual


def _cases(exercise):
    return exercise.cases(np.random.default_rng(100 * exercise.chapter + exercise.number))


# --- Exercise 1: MHA to GQA by mean-pooling ------------------------------------------------------------------


def _attention(x, w_q, w_k, w_v, num_heads, num_kv_heads):
    q = sa.split_heads(x @ w_q, num_heads)  # (H, T, Dh)
    k, v = (sa.split_heads(x @ w, num_kv_heads) for w in (w_k, w_v))  # (Hkv, T, Dh)
    return sa.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)[0]


@pytest.mark.parametrize(("H", "Hkv"), [(4, 2), (8, 2), (6, 3), (4, 1), (4, 4), (1, 1)])
def test_pooling_identical_heads_gives_the_multi_head_output_and_distinct_heads_do_not(H, Hkv):
    rng = np.random.default_rng(H * 10 + Hkv)
    D, Dh, T = 12, 3, 5
    x, w_q = rng.normal(size=(T, D)), rng.normal(size=(D, H * Dh))
    one_per_group = rng.normal(size=(2, D, Hkv, 1, Dh))
    w_k, w_v = np.repeat(one_per_group, H // Hkv, axis=3).reshape(2, D, H * Dh)  # each group's heads equal
    pooled = [ch9._pool_heads(w, H, Hkv) for w in (w_k, w_v)]
    np.testing.assert_allclose(
        _attention(x, w_q, *pooled, H, Hkv), _attention(x, w_q, w_k, w_v, H, H), rtol=1e-12, atol=1e-12
    )
    if Hkv < H:  # distinct heads: pooling changes the model (hence the up-training)
        w_k, w_v = rng.normal(size=(2, D, H * Dh))
        pooled = [ch9._pool_heads(w, H, Hkv) for w in (w_k, w_v)]
        assert np.abs(_attention(x, w_q, *pooled, H, Hkv) - _attention(x, w_q, w_k, w_v, H, H)).max() > 0.1


def test_the_pooled_heads_are_those_repeat_kv_hands_out():
    for _, (w, H, Hkv) in _cases(ch9.MHA_TO_GQA):
        heads = sa.split_heads(w.astype(np.float64), H)  # (H, D, Dh): the rows of w as tokens
        pooled = sa.split_heads(ch9._pool_heads(w, H, Hkv), Hkv)  # (Hkv, D, Dh)
        served = sa.repeat_kv(pooled, H // Hkv)  # (H, D, Dh): query head h's key/value head
        for h in range(H):
            group = range(h // (H // Hkv) * (H // Hkv), (h // (H // Hkv) + 1) * (H // Hkv))
            np.testing.assert_allclose(served[h], heads[list(group)].mean(axis=0), rtol=1e-6, atol=1e-6)


def _pool_by_loop(w, num_heads, num_kv_heads):
    D, width = np.shape(w)
    Dh, G = width // num_heads, num_heads // num_kv_heads
    groups = [sum(w[:, h * Dh : (h + 1) * Dh] for h in range(j * G, (j + 1) * G)) / G for j in range(num_kv_heads)]
    return np.concatenate(groups, axis=1)


def _pool_through_split_heads(w, num_heads, num_kv_heads):
    heads = sa.split_heads(w, num_heads)  # (H, D, Dh)
    return sa.merge_heads(heads.reshape(num_kv_heads, num_heads // num_kv_heads, *heads.shape[1:]).mean(axis=1))


def _pool_in_float32(w, num_heads, num_kv_heads):
    w = np.asarray(w, dtype=np.float32)
    return w.reshape(w.shape[0], num_kv_heads, num_heads // num_kv_heads, -1).mean(axis=2).reshape(w.shape[0], -1)


def _pool_in_torch_layout(w, num_heads, num_kv_heads):
    weight = torch.as_tensor(w).T  # (H*Dh, D), as nn.Linear stores it
    Dh = weight.shape[0] // num_heads
    pooled = weight.reshape(num_kv_heads, num_heads // num_kv_heads, Dh, -1).mean(dim=1)
    return pooled.reshape(num_kv_heads * Dh, -1).T


@pytest.mark.parametrize("answer", [_pool_by_loop, _pool_through_split_heads, _pool_in_float32, _pool_in_torch_layout])
def test_right_pooling_written_differently_passes(answer):
    result = check_mha_to_gqa(answer)
    assert result, repr(result)


def _every_gth_column(w, num_heads, num_kv_heads):
    return w[:, :: num_heads // num_kv_heads]


def _mean_of_all_heads_tiled(w, num_heads, num_kv_heads):
    return np.tile(w.reshape(w.shape[0], num_heads, -1).mean(axis=1), num_kv_heads)


def _median(w, num_heads, num_kv_heads):
    return np.median(w.reshape(w.shape[0], num_kv_heads, num_heads // num_kv_heads, -1), axis=2).reshape(w.shape[0], -1)


def _sum_over_all_heads(w, num_heads, num_kv_heads):
    return (
        w.reshape(w.shape[0], num_kv_heads, num_heads // num_kv_heads, -1).sum(axis=2).reshape(w.shape[0], -1)
        / num_heads
    )


def _split_into_kv_heads(w, num_heads, num_kv_heads):
    return sa.split_heads(ch9._pool_heads(w, num_heads, num_kv_heads), num_kv_heads)  # not merged back


# fmt: off
WRONG_POOLING = [
    (_every_gth_column, r"case 1 \(D=8, 4 heads of 2 -> 2 key/value heads\): the pooled weight does not match the reference; the largest difference is [\d.]+$"),
    (_mean_of_all_heads_tiled, r"case 1 .*: the pooled weight does not match the reference; the largest difference is [\d.]+$"),
    (_median, r"case 2 \(D=16, 8 heads of 4 -> 2 key/value heads\): the pooled weight does not match"),
    (_sum_over_all_heads, r"case 1 .*: the pooled weight does not match the reference; the largest difference is [\d.]+$"),
    (_split_into_kv_heads, r"case 1 .*: the pooled weight should have shape \(8, 4\); got \(2, 8, 2\)$"),
]
# fmt: on


@pytest.mark.parametrize(("answer", "message"), WRONG_POOLING, ids=lambda a: getattr(a, "__name__", ""))
def test_wrong_pooling_that_no_mistake_names_fails(answer, message):
    result = check_mha_to_gqa(answer)
    assert not result and re.search(message, repr(result)), repr(result)


# --- Exercise 2: the residual of speculative sampling --------------------------------------------------------


def test_with_the_residual_the_token_that_comes_out_follows_the_target():
    for _, (p, q) in _cases(ch9.SPECULATIVE_RESIDUAL):
        p, q = p.astype(np.float64), q.astype(np.float64)
        np.testing.assert_allclose(p.sum(axis=-1), 1, rtol=1e-6)
        np.testing.assert_allclose(q.sum(axis=-1), 1, rtol=1e-6)
        assert (np.abs(p - q).sum(axis=-1) > 0.1).all()  # p != q in every row, and not nearly equal
        kept = np.minimum(p, q)  # proposed by q and kept with probability min(1, p / q)
        comes_out = kept + (1 - kept.sum(axis=-1, keepdims=True)) * ch9._residual(p, q)
        np.testing.assert_allclose(comes_out, p, atol=1e-12)


def test_speculative_sampling_with_the_residual_draws_from_the_target():
    p, q = np.array([0.5, 0.2, 0.2, 0.1]), np.full(4, 0.25)
    r = ch9._residual(p, q)
    rng = np.random.default_rng(0)
    n = 200_000
    drafted = rng.choice(4, size=n, p=q)
    kept = rng.random(n) < np.minimum(1, p[drafted] / q[drafted])
    tokens = np.where(kept, drafted, rng.choice(4, size=n, p=r))
    frequencies = np.bincount(tokens, minlength=4) / n
    np.testing.assert_allclose(frequencies, p, atol=5e-3)  # about 5 standard errors
    assert abs(kept.mean() - np.minimum(p, q).sum()) < 5e-3  # kept with probability sum(min(p, q))


def _residual_by_rows(p, q):
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    out = np.empty_like(p)
    for index in np.ndindex(p.shape[:-1]):
        short = [max(a - b, 0.0) for a, b in zip(p[index], q[index], strict=True)]
        out[index] = np.array(short) / sum(short)
    return out


def _residual_through_min(p, q):
    kept = np.minimum(p, q)
    return (p - kept) / (1 - kept.sum(axis=-1, keepdims=True))


def _residual_in_float32(p, q):
    short = np.clip(np.asarray(p, dtype=np.float32) - np.asarray(q, dtype=np.float32), 0, None)
    return short / short.sum(axis=-1, keepdims=True)


def _residual_in_torch(p, q):
    short = torch.clamp(torch.as_tensor(p) - torch.as_tensor(q), min=0)
    return short / short.sum(dim=-1, keepdim=True)


@pytest.mark.parametrize("answer", [_residual_by_rows, _residual_through_min, _residual_in_float32, _residual_in_torch])
def test_a_right_residual_written_differently_passes(answer):
    result = check_speculative_residual(answer)
    assert result, repr(result)


def _softmax_of_difference(p, q):
    return sa.softmax(p - q)


def _excess_ratio(p, q):
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = np.maximum(p / q - 1, 0)
    return excess / excess.sum(axis=-1, keepdims=True)


def _target_where_short(p, q):
    short = np.where(q < p, p, 0.0)
    return short / short.sum(axis=-1, keepdims=True)


def _normalised_over_axis_0(p, q):
    short = np.maximum(p - q, 0)
    return short / short.sum(axis=0, keepdims=True)


def _squared(p, q):
    short = np.maximum(p - q, 0) ** 2
    return short / short.sum(axis=-1, keepdims=True)


# fmt: off
WRONG_RESIDUALS = [
    (_softmax_of_difference, r"case 1 \(V=4, a uniform draft\): the residual distribution does not match the reference; the largest difference is [\d.]+$"),
    (_excess_ratio, r"case 2 \(V=24, a draft that roughly agrees\): the residual distribution does not match"),
    (_target_where_short, r"case 2 .*: the residual distribution does not match the reference; the largest difference is [\d.]+$"),
    (_normalised_over_axis_0, r"case 7 \(3 sequences at once, \(3, 10\)\): the residual distribution does not match"),
    (_squared, r"case 2 .*: the residual distribution does not match the reference; the largest difference is [\d.]+$"),
    (lambda p, q: p[..., :-1], r"case 1 .*: the residual distribution should have shape \(4,\); got \(3,\)$"),
]
# fmt: on


@pytest.mark.parametrize(("answer", "message"), WRONG_RESIDUALS, ids=lambda a: getattr(a, "__name__", ""))
def test_a_wrong_residual_that_no_mistake_names_fails(answer, message):
    result = check_speculative_residual(answer)
    assert not result and re.search(message, repr(result)), repr(result)


def test_a_ratio_that_divides_by_zero_earns_the_nan_hint():
    def ratio_without_care(p, q):
        with np.errstate(divide="ignore", invalid="ignore"):
            short = q * np.maximum(p / q - 1, 0)  # q (p/q - 1) = p - q, but 0 * inf where q = 0
        return short / short.sum(axis=-1, keepdims=True)

    result = check_speculative_residual(ratio_without_care)
    assert not result and re.search(
        r"case 4 \(V=12, a top-3 draft: q = 0 on 9 tokens\): .* contains NaN or inf: did you divide by 0", repr(result)
    ), repr(result)
