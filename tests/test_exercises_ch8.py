"""Chapter 8's checkers: their references against the package, other right answers, and wrong ones no mistake names.

The generic tests in test_exercises.py run every reference, stub and declared
mistake. Here the references are checked against what the exercises claim
(the reordered weights give the interleaved scores, with grouped key heads;
the new base slows the slowest pair by the factor, per ``sa.rope_angles``;
the values make ``sa.scaled_dot_product_attention`` output the chosen rows),
right answers written differently or in float32 must pass, and plausible
wrong answers that match no declared mistake must still fail.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import selfattention as sa
from selfattention.exercises import ch08_positions as ch8
from selfattention.exercises import check_ntk_base, check_rope_weights, check_values_for_outputs


def _cases(exercise):
    return exercise.cases(np.random.default_rng(100 * exercise.chapter + exercise.number))


# --- Exercise 1 ----------------------------------------------------------------------------------------------


def _scores(w_q, w_k, num_heads, num_kv_heads, x, *, interleaved):
    q = sa.apply_rope(sa.split_heads(x @ w_q, num_heads), interleaved=interleaved)  # (H, T, Dh)
    k = sa.apply_rope(sa.split_heads(x @ w_k, num_kv_heads), interleaved=interleaved)  # (Hkv, T, Dh)
    k = np.repeat(k, num_heads // num_kv_heads, axis=0)  # query heads 0 ... H/Hkv - 1 read key head 0
    return q @ np.swapaxes(k, -1, -2)  # (H, T, T)


def test_the_converted_weights_give_the_interleaved_scores():
    rng = np.random.default_rng(0)
    for _, (w_q, w_k, H, Hkv) in _cases(ch8.ROPE_WEIGHTS):
        x = rng.normal(size=(7, w_q.shape[0]))
        new_q, new_k = ch8._convert_pair(w_q, w_k, H, Hkv)
        want = _scores(w_q, w_k, H, Hkv, x, interleaved=True)
        np.testing.assert_allclose(_scores(new_q, new_k, H, Hkv, x, interleaved=False), want, atol=1e-4)
        if w_q.shape[1] // H > 2:  # one pair per head: both layouts pair the same two features
            assert not np.allclose(_scores(w_q, w_k, H, Hkv, x, interleaved=False), want, atol=1e-3)


def _by_reshape(w_q, w_k, num_heads, num_kv_heads):
    def convert(w, heads):
        D = w.shape[0]
        Dh = w.shape[1] // heads
        pairs = w.reshape(D, heads, Dh // 2, 2)  # (D, heads, pairs, 2): interleaved pairs
        return np.swapaxes(pairs, -1, -2).reshape(D, heads * Dh)  # evens first, then odds, head by head

    return convert(w_q, num_heads), convert(w_k, num_kv_heads)


def _in_torch(w_q, w_k, num_heads, num_kv_heads):
    Dh = w_q.shape[1] // num_heads
    order = torch.cat([torch.arange(0, Dh, 2), torch.arange(1, Dh, 2)])
    q_cols = torch.cat([order + h * Dh for h in range(num_heads)])
    k_cols = torch.cat([order + h * Dh for h in range(num_kv_heads)])
    return torch.from_numpy(w_q)[:, q_cols], torch.from_numpy(w_k)[:, k_cols]


def _rows_reordered(w_q, w_k, num_heads, num_kv_heads):
    new_q, new_k = ch8._convert_pair(w_q.T, w_k.T, 1, 1)
    return new_q.T, new_k.T


def _odds_first(w_q, w_k, num_heads, num_kv_heads):
    def convert(w, heads):
        Dh = w.shape[1] // heads
        order = np.concatenate([np.arange(1, Dh, 2), np.arange(0, Dh, 2)])
        return w[:, np.concatenate([order + h * Dh for h in range(heads)])]

    return convert(w_q, num_heads), convert(w_k, num_kv_heads)


@pytest.mark.parametrize("answer", [_by_reshape, _in_torch, lambda *a: [w.astype(np.float32) for w in _by_reshape(*a)]])
def test_other_right_conversions_pass(answer):
    result = check_rope_weights(answer)
    assert result, repr(result)


@pytest.mark.parametrize(
    "wrong",
    [
        _rows_reordered,  # rows (the input features) moved instead of columns
        _odds_first,  # the odd features first
        lambda w_q, w_k, H, Hkv: (ch8._to_rotate_half(w_q, H), w_k),  # W_K forgotten
        lambda w_q, w_k, H, Hkv: (ch8._to_rotate_half(w_q, H)[:, ::-1], ch8._to_rotate_half(w_k, Hkv)[:, ::-1]),
        lambda w_q, w_k, H, Hkv: tuple(_by_reshape(w_q, w_k, H, Hkv))[::-1],  # the pair swapped
    ],
)
def test_wrong_conversions_that_match_no_mistake_still_fail(wrong):
    result = check_rope_weights(wrong)
    assert not result and result.status == "FAIL", repr(result)


# --- Exercise 2 ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("base", "head_dim", "factor"), [args for _, args in _cases(ch8.NTK_BASE)])
def test_the_new_base_slows_the_slowest_pair_by_the_factor_and_keeps_pair_0(base, head_dim, factor):
    new_base = float(ch8._ntk_base(float(base), head_dim, float(factor)))
    old, new = sa.rope_angles([1.0], head_dim, base=float(base))[0], sa.rope_angles([1.0], head_dim, base=new_base)[0]
    assert old[0] == new[0] == 1.0
    np.testing.assert_allclose(old[-1] / new[-1], factor, rtol=1e-12)
    pairs = np.arange(head_dim // 2)  # pair i slows by factor^(2i / (Dh - 2)): the fast pairs barely
    np.testing.assert_allclose(old / new, float(factor) ** (2 * pairs / (head_dim - 2)), rtol=1e-12)


def test_the_numbers_the_solution_prints():
    new_base = float(ch8._ntk_base(10000.0, 128, 4.0))
    slowdown = sa.rope_angles([1.0], 128)[0] / sa.rope_angles([1.0], 128, base=new_base)[0]
    assert round(new_base) == 40890 and f"{slowdown[1]:.3f}" == "1.022" and np.isclose(slowdown[-1], 4.0)


def _by_bisection(base, head_dim, factor):
    """The base found numerically from sa.rope_angles: no formula."""
    target = sa.rope_angles([1.0], head_dim, base=float(base))[0, -1] / float(factor)
    low, high = float(base), float(base) * float(factor) ** 3
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if sa.rope_angles([1.0], head_dim, base=middle)[0, -1] > target else (low, middle)
    return (low + high) / 2


@pytest.mark.parametrize(
    "answer",
    [
        _by_bisection,
        lambda base, head_dim, factor: np.float32(base) * np.float32(factor) ** np.float32(head_dim / (head_dim - 2)),
        lambda base, head_dim, factor: torch.tensor(float(base)) * float(factor) ** (1 / (1 - 2 / head_dim)),
        lambda base, head_dim, factor: np.exp(np.log(base) + np.log(factor) * head_dim / (head_dim - 2)),
    ],
)
def test_other_right_bases_pass(answer):
    result = check_ntk_base(answer)
    assert result, repr(result)


@pytest.mark.parametrize(
    "wrong",
    [
        lambda base, head_dim, factor: base * factor ** (head_dim / (head_dim + 2)),
        lambda base, head_dim, factor: base * factor**2,
        lambda base, head_dim, factor: base**factor,
        lambda base, head_dim, factor: base * factor ** (head_dim / (head_dim - 1)),
        lambda base, head_dim, factor: base * factor ** ((head_dim - 2) / (head_dim - 4)) if head_dim > 4 else base,
    ],
)
def test_wrong_bases_that_match_no_mistake_still_fail(wrong):
    with np.errstate(all="ignore"):
        result = check_ntk_base(wrong)
    assert not result and result.status == "FAIL", repr(result)


# --- Exercise 3 ----------------------------------------------------------------------------------------------


def _head_output(values, slope):
    """Causal attention with equal scores and an ALiBi bias of the given slope: the head of the exercise."""
    T = len(values)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    same = np.zeros((T, 4))  # every query and key alike
    mask = sa.combine_masks(-slope * (i - j).astype(float), sa.causal_mask(T))
    return sa.scaled_dot_product_attention(same, same, np.asarray(values, dtype=float), mask=mask)[0]


def test_the_values_make_the_head_output_the_chosen_rows():
    cases = _cases(ch8.VALUES_FOR_OUTPUTS)
    for _, (y, slope) in cases:
        np.testing.assert_allclose(_head_output(ch8._values_for(y, slope), slope), y, rtol=1e-5, atol=1e-5)
    (y, _), (y_position, _) = cases[0][1], cases[1][1]
    np.testing.assert_allclose(ch8._values_for(y, 0.0)[:, 0], np.eye(6)[0], atol=1e-15)  # the single 1 comes back
    np.testing.assert_allclose(ch8._values_for(y_position, 0.0)[:, 0], 2 * np.arange(5))  # v_p = 2p gives y_p = p


def _by_solving(y, slope):
    """The head's weight matrix (identity values read it out), then a linear solve: no recurrence."""
    T = len(y)
    weights = _head_output(np.eye(T), slope)  # (T, T): row p holds query p's weights
    return np.linalg.solve(weights.astype(np.asarray(y).dtype), y)


def _by_loops(y, slope):
    T, Dv = np.shape(y)
    v = np.zeros((T, Dv))
    for p in range(T):
        weights = np.exp(-slope * (p - np.arange(p + 1)))
        weights /= weights.sum()
        v[p] = (y[p] - weights[:-1] @ v[:p]) / weights[-1]  # the newest value is what the others leave over
    return v


def _closed_form_normaliser(y, slope):
    decay = np.exp(-slope)
    Z = (1 - decay ** np.arange(1, len(y) + 1)) / (1 - decay)  # 0/0 at slope 0
    totals = Z[:, None] * y
    return totals - decay * np.concatenate([np.zeros_like(totals[:1]), totals[:-1]])


@pytest.mark.parametrize(
    "answer",
    [
        _by_solving,
        _by_loops,
        lambda y, slope: torch.linalg.solve(
            torch.from_numpy(_head_output(np.eye(len(y)), slope)).float(), torch.as_tensor(y).float()
        ),
        lambda y, slope: _by_solving(np.asarray(y, dtype=np.float32), slope),
    ],
)
def test_other_right_values_pass(answer):
    result = check_values_for_outputs(answer)
    assert result, repr(result)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (_closed_form_normaliser, r"case 1 .*NaN or inf: a slope of 0 makes 1 - e\^\(-slope\) zero"),
        (lambda y, s: (y - np.exp(-s) * np.r_[np.zeros_like(y[:1]), y[:-1]]) / (1 - np.exp(-s)), r"case 1 .*NaN"),
        (lambda y, s: np.linalg.solve(_head_output(np.eye(len(y)), s).T, y), r"case 1 .*do not match"),
        (lambda y, s: _values_no_damping(y, s), r"case 3 .*do not match"),
        (lambda y, s: np.linalg.solve(_no_mask_weights(len(y), s), y), r"case 1 .*(do not match|raised LinAlgError)"),
    ],
)
def test_wrong_values_that_match_no_mistake_still_fail(wrong, message):
    with np.errstate(all="ignore"):
        result = check_values_for_outputs(wrong)
    assert not result and re.search(message, repr(result)), repr(result)


def _values_no_damping(y, slope):
    """The decaying normaliser, but the previous sum subtracted undamped."""
    decay = np.exp(-slope)
    totals = np.cumsum(decay ** np.arange(len(y)))[:, None] * y
    return totals - np.concatenate([np.zeros_like(totals[:1]), totals[:-1]])


def _no_mask_weights(T, slope):
    """ALiBi's -slope |i - j| over every key, the future included: no causal mask."""
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    return sa.softmax(-slope * np.abs(i - j).astype(float), axis=-1)


def test_the_cases_are_those_the_exercise_texts_promise():
    heads = [(H, Hkv, w_q.dtype) for _, (w_q, _, H, Hkv) in _cases(ch8.ROPE_WEIGHTS)]
    assert (1, 1, np.float64) in heads and any(1 < Hkv < H for H, Hkv, _ in heads)
    assert any(Hkv == 1 < H for H, Hkv, _ in heads) and any(dtype == np.float32 for *_, dtype in heads)
    bases = [args for _, args in _cases(ch8.NTK_BASE)]
    assert any(base == 500000.0 for base, _, _ in bases) and min(Dh for _, Dh, _ in bases) == 4
    assert any(factor == 1 for *_, factor in bases) and any(isinstance(b, np.float32) for b, _, _ in bases)
    values = _cases(ch8.VALUES_FOR_OUTPUTS)
    (y, slope), (y_position, _) = values[0][1], values[1][1]
    np.testing.assert_allclose(y[:, 0], 1 / np.arange(1, 7))
    assert slope == 0
    np.testing.assert_array_equal(y_position[:, 0], np.arange(5))
    slopes = [s for _, (_, s) in values]
    assert any(len(y) == 1 for _, (y, _) in values) and min(s for s in slopes if s > 0) < 0.01 < 1 < max(slopes)
    assert any(y.dtype == np.float32 for _, (y, _) in values)
