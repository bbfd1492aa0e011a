"""Chapter 1's exercise references are what attention computes, and the checkers tell right answers from wrong.

The generic tests in test_exercises.py run every checker on its reference, a
stub, float32 answers and each declared mistake. These tie the two references
to attention itself (the weights of a summed query, computed from its keys;
the largest weight at the returned temperature), check the facts the chapter's
exercise text states, and check that correct answers written differently pass
and plausible wrong ones that match no declared mistake fail.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy.optimize import brentq

import selfattention as sa
from selfattention.exercises import check_temperature_for, check_weights_of_sum
from selfattention.exercises.ch01_word_vectors import (
    TEMPERATURE_FOR,
    WEIGHTS_OF_SUM,
    _temperature_for,
    _weights_of_sum,
    _word_example,
)


def _cases(exercise):
    return [args for _, args in exercise.cases(np.random.default_rng(100 * exercise.chapter + exercise.number))]


@pytest.mark.parametrize(("S", "Dk", "batch"), [(1, 3, ()), (4, 3, ()), (7, 16, ()), (5, 8, (3,)), (6, 4, (2, 3))])
def test_the_summed_query_reference_is_the_attention_of_the_sum(S, Dk, batch):
    rng = np.random.default_rng(S * Dk)
    keys, values = rng.normal(size=(S, Dk)), rng.normal(size=(S, 2))
    a, b = 2 * rng.normal(size=(2, *batch, 1, Dk))  # one query each, with leading axes
    _, w_a = sa.scaled_dot_product_attention(a, keys, values)
    _, w_b = sa.scaled_dot_product_attention(b, keys, values)
    _, w_sum = sa.scaled_dot_product_attention(a + b, keys, values)
    np.testing.assert_allclose(_weights_of_sum(w_a, w_b), w_sum, rtol=1e-12, atol=1e-15)


def test_the_first_case_turns_the_chapter_s_rows_1_and_2_into_row_3():
    words, w_q, w_k, w_v = _word_example()
    Q, K, V = words @ w_q, words @ w_k, words @ w_v
    np.testing.assert_array_equal(Q[2], Q[0] + Q[1])  # word 3 = word 1 + word 2
    _, weights = sa.scaled_dot_product_attention(Q, K, V)
    w_a, w_b = _cases(WEIGHTS_OF_SUM)[0]
    np.testing.assert_array_equal(np.stack([w_a, w_b]), weights[:2])
    np.testing.assert_allclose(_weights_of_sum(w_a, w_b), weights[2], rtol=1e-12)


def test_the_temperature_reference_gives_the_target_or_none_outside_the_reachable_range():
    for scores, target in _cases(TEMPERATURE_FOR):
        s = np.asarray(scores, dtype=np.float64)
        tied, S = int((s == s.max()).sum()), s.size
        tau = _temperature_for(scores, target)
        if tau is None:
            assert not 1 / S < target < 1 / tied
            continue
        assert 1 / S < target < 1 / tied
        np.testing.assert_allclose(sa.softmax(s / tau).max(), target, rtol=1e-12)
        # the largest weight falls as tau grows, from near 1/k to near 1/S
        largest = [sa.softmax(s / t).max() for t in np.geomspace(tau / 1e3, tau * 1e3, 61)]
        assert np.all(np.diff(largest) <= 1e-15) and largest[0] > target > largest[-1]


def test_the_exercise_text_s_facts():
    scores, target = _cases(TEMPERATURE_FOR)[0]
    assert math.isclose(_temperature_for(scores, target), math.sqrt(3), rel_tol=1e-12)  # the chapter's scale
    tie = _cases(TEMPERATURE_FOR)[1][0]
    np.testing.assert_array_equal(tie, [4, 0, 4, 0])
    assert max(sa.softmax(tie / t).max() for t in (1e-3, 0.1, 1.0)) <= 0.5  # a tie caps the largest weight at 1/2
    # the float32 case: at the right tau a bare exp overflows float32 (exp(z) is inf once z > 88.72)
    (scores, target), *_ = [args for args in _cases(TEMPERATURE_FOR) if np.asarray(args[0]).dtype == np.float32]
    assert scores.max() / _temperature_for(scores, target) > np.log(np.finfo(np.float32).max)
    with np.errstate(over="ignore"):
        assert np.isinf(np.exp(scores / np.float32(_temperature_for(scores, target)))).any()


# --- correct answers written differently ------------------------------------------------


def _normalised(p):
    return p / p.sum(axis=-1, keepdims=True)


def _loops(w_a, w_b):
    rows_a, rows_b = np.atleast_2d(w_a), np.atleast_2d(w_b)
    out = np.empty(rows_a.shape)
    for i, (row_a, row_b) in enumerate(zip(rows_a, rows_b, strict=True)):
        products = [x * y for x, y in zip(row_a, row_b, strict=True)]
        out[i] = [p / sum(products) for p in products]
    return out.reshape(np.shape(w_a))


def _torch_logs(w_a, w_b):
    import torch

    return torch.softmax(torch.log(torch.as_tensor(w_a)) + torch.log(torch.as_tensor(w_b)), dim=-1)


@pytest.mark.parametrize(
    "answer",
    [
        lambda w_a, w_b: _normalised(w_a * w_b),
        lambda w_a, w_b: sa.softmax(np.log(w_a) + np.log(w_b)),
        _loops,
        lambda w_a, w_b: _normalised(w_a.astype(np.float32) * w_b.astype(np.float32)),
        lambda w_a, w_b: sa.softmax(np.log(w_a.astype(np.float32)) + np.log(w_b.astype(np.float32))),
        _torch_logs,
    ],
    ids=["normalised product", "softmax of summed logs", "loops", "float32", "float32 logs", "torch"],
)
def test_correct_sums_pass(answer):
    result = check_weights_of_sum(answer)
    assert result, repr(result)


def _reachable(s, target):
    return 1 / s.size < target < 1 / np.sum(s == s.max())


def _geometric_bisection(scores, target, dtype=np.float64):
    s = np.asarray(scores).astype(dtype)
    if not _reachable(s, target):
        return None
    low, high = dtype(1e-4), dtype(1e4)
    for _ in range(100):
        tau = dtype(np.sqrt(low * high))
        low, high = (tau, high) if sa.softmax(s / tau).max() > target else (low, tau)
    return dtype(np.sqrt(low * high))


def _brent(scores, target):
    s = np.asarray(scores, dtype=float)
    if not _reachable(s, target):
        return None
    return float(np.exp(brentq(lambda log_tau: sa.softmax(s / np.exp(log_tau)).max() - target, -20, 20)))


def _stops_near_the_target(scores, target):
    s = np.asarray(scores, dtype=float)
    if not _reachable(s, target):
        return None
    low, high = 0.0, 1000.0
    while True:  # plain bisection on tau, stopping when the weight is within 1e-7 of the target
        tau = (low + high) / 2
        largest = sa.softmax(s / tau).max()
        if abs(largest - target) < 1e-7:
            return tau
        low, high = (tau, high) if largest > target else (low, tau)


def _newton_on_beta(scores, target):
    s = np.asarray(scores, dtype=float)
    if not _reachable(s, target):
        return None
    gaps, beta, low, high = s.max() - s, 1.0, 0.0, np.inf
    for _ in range(200):  # f(beta) = log sum exp(-beta gaps) + log target, safeguarded by a bracket
        e = np.exp(-beta * gaps)
        f, df = np.log(e.sum()) + np.log(target), -(gaps * e).sum() / e.sum()
        low, high = (beta, high) if f > 0 else (low, beta)
        step = beta - f / df
        beta = step if low < step < high else ((low + high) / 2 if np.isfinite(high) else 2 * beta)
    return 1 / beta


def _torch_scalar(scores, target):
    import torch

    tau = _brent(scores, target)
    return None if tau is None else torch.tensor(tau)


@pytest.mark.parametrize(
    "answer",
    [
        _geometric_bisection,
        lambda scores, target: _geometric_bisection(scores, target, np.float32),  # returns np.float32
        lambda scores, target: None if (t := _geometric_bisection(scores, target, np.float32)) is None else float(t),
        _brent,
        _stops_near_the_target,
        _newton_on_beta,
        _torch_scalar,
        lambda scores, target: None if (t := _brent(scores, target)) is None else [t],
    ],
    ids=["bisection", "float32", "float32 as a float", "brentq", "stops near", "newton", "torch", "list of one"],
)
def test_correct_temperatures_pass(answer):
    result = check_temperature_for(answer)
    assert result, repr(result)


# --- plausible wrong answers that match no declared mistake --------------------------------


def _reversed_search(scores, target):
    s = np.asarray(scores, dtype=float)
    if not _reachable(s, target):
        return None
    low, high = 1e-6, 1e6
    for _ in range(200):  # believes a larger tau sharpens the weights
        tau = math.sqrt(low * high)
        low, high = (tau, high) if sa.softmax(s / tau).max() < target else (low, tau)
    return math.sqrt(low * high)


def _twelve_steps(scores, target):
    s = np.asarray(scores, dtype=float)
    if not _reachable(s, target):
        return None
    low, high = 0.0, 10.0
    for _ in range(12):
        tau = (low + high) / 2
        low, high = (tau, high) if sa.softmax(s / tau).max() > target else (low, tau)
    return (low + high) / 2


def _near_ties(scores, target):
    s = np.asarray(scores, dtype=float)
    if not 1 / s.size < target < 1 / np.isclose(s, s.max(), atol=0.5).sum():  # counts near-ties as ties
        return None
    return _brent(s, target)


def _grid(scores, target):
    s = np.asarray(scores, dtype=float)
    if not _reachable(s, target):
        return None
    grid = np.linspace(0.01, 10, 1000)
    return float(grid[np.argmin([abs(sa.softmax(s / t).max() - target) for t in grid])])


# fmt: off
WRONG = [
    (check_weights_of_sum, lambda w_a, w_b: _normalised(np.maximum(w_a, w_b)), r"case 1 .*: the weights do not match the reference; the largest difference is 0\.18$"),
    (check_weights_of_sum, lambda w_a, w_b: w_a * w_b / (w_a * w_b).sum(axis=0, keepdims=True), r"case 6 \(three pairs of queries at once, shape \(3, 7\)\): the weights do not match"),
    (check_weights_of_sum, lambda w_a, w_b: sa.softmax(w_a * w_b), r"case 1 .*: the weights do not match the reference; the largest difference is 0\.448$"),
    (check_weights_of_sum, lambda w_a, w_b: w_a, r"case 1 .*: the weights do not match the reference; the largest difference is 0\.0101$"),
    (check_weights_of_sum, lambda w_a, w_b: _normalised(1 / (1 / w_a + 1 / w_b)), r"case 1 .*: the weights do not match"),
    (check_weights_of_sum, lambda w_a, w_b: sa.softmax((np.log(w_a) + np.log(w_b)) / np.sqrt(2)), r"case 1 .*: the weights do not match"),
    (check_temperature_for, _reversed_search, r"case 1 .*: got tau = 1e-06, too small: at your tau the largest weight is above the target$"),
    (check_temperature_for, _twelve_steps, r"case 2 .*: got tau = 1\.82007, too small: .*\(only just: does your search stop too early\?"),
    (check_temperature_for, lambda s, t: None if (tau := _brent(s, t)) is None else tau / math.sqrt(3), r"case 1 .*: got tau = 1, too small"),
    (check_temperature_for, lambda s, t: float("nan") if (tau := _brent(s, t)) is None else tau, r"case 3 .*: no temperature reaches this target, so the answer is None; got nan\. It matches returning a temperature where a tie caps"),
    (check_temperature_for, _near_ties, r"case 5 \(random, 6 scores, target 0\.5\): a temperature reaches this target, so return it; got None"),
    (check_temperature_for, _grid, r"case 1 .*: got tau = 1\.73, too small: .*\(only just"),
    (check_temperature_for, lambda s, t: True, r"case 1 .*: the temperature should be one number \(or None\); got bool$"),
    (check_temperature_for, lambda s, t: -_brent(s, t) if _brent(s, t) else None, r"case 1 .*: got tau = -1\.73205; a temperature is positive$"),
]
# fmt: on


@pytest.mark.parametrize(("check", "wrong", "message"), WRONG)
def test_plausible_wrong_answers_fail_with_the_first_bad_case(check, wrong, message):
    with np.errstate(all="ignore"):
        result = check(wrong)
    assert not result and result.status == "FAIL", repr(result)
    assert re.search(message, repr(result)), repr(result)
