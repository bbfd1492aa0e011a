"""Chapter 7's checkers: their yardsticks against the package, and answers the declarations do not list.

The generic tests in test_exercises.py run every reference, stub and declared
mistake. Here the online softmax the first checker runs is checked against
``sa.softmax``, the numbers the exercise texts quote are pinned to the
checkers, other correct answers (other rows, loops, float32, torch rows) must
pass, and plausible wrong answers that match no declared mistake must still
fail. The second checker measures memory, so it is held to NumPy answers: a
conversion to torch, a list or a float32 copy after the softmax costs a copy
of its own or hides the buffer, and a correct NumPy answer in float32 or
float64 passes.
"""

from __future__ import annotations

import re
import tracemalloc

import numpy as np
import pytest
import torch

import selfattention as sa
from selfattention.exercises import ch07_cost as ch07
from selfattention.exercises import check_lean_softmax, check_rescale_rows


def _cases(exercise):
    return exercise.cases(np.random.default_rng(100 * exercise.chapter + exercise.number))


# --- Exercise 1: when the missing rescale shows -----------------------------------------------------------------


@pytest.mark.parametrize("block_size", [1, 3, 4, 7, 12])
def test_the_blocked_weights_are_the_softmax(block_size):
    rng = np.random.default_rng(block_size)
    for scores in (3 * rng.normal(size=12), np.sort(rng.normal(size=12)), np.zeros(12)):
        np.testing.assert_allclose(ch07._blocked_weights(scores, block_size), sa.softmax(scores), rtol=1e-12)


def test_leaving_out_the_rescale_changes_nothing_exactly_when_block_1_holds_the_maximum():
    rng = np.random.default_rng(0)
    for _ in range(200):
        scores, block_size = rng.normal(size=10), int(rng.integers(1, 6))
        first_block_holds_it = scores[:block_size].max() == scores.max()
        assert (ch07._moved(scores, block_size)[0] == 0) == first_block_holds_it


def test_the_numbers_the_first_exercise_quotes():
    sizes = [args for _, args in _cases(ch07.RESCALE_ROWS)]
    assert ch07.SHOWN_BY == 0.5
    assert {block for _, block in sizes} == {1, 3, 4, 16}
    assert any(S % block == 1 and block > 1 for S, block in sizes)  # a last block holding a single key
    assert all(S > block for S, block in sizes)  # a later block always exists


def _sorted_rows(S, block_size):
    row = np.random.default_rng(S).normal(size=S)
    return np.sort(row)[::-1], 10 * np.sort(row)  # decreasing hides, increasing (stretched) shows


OTHER_RIGHT_ROWS = {
    "sorted rows": _sorted_rows,
    "ties in block 1": lambda S, b: (np.ones(S), np.r_[np.zeros(S - 1), 50.0]),
    "one (2, S) array": lambda S, b: np.stack(ch07._rescale_rows(S, b)),
    "float32 rows": lambda S, b: tuple(row.astype(np.float32) for row in ch07._rescale_rows(S, b)),
    "torch rows": lambda S, b: tuple(torch.tensor(row) for row in ch07._rescale_rows(S, b)),
    "plateaus, each block higher": lambda S, b: (np.zeros(S), 20.0 * (np.arange(S) // b)),
    "lists": lambda S, b: [[5.0] + [0.0] * (S - 1), [0.0] * b + [-1.0] * (S - b - 1) + [9.0]],
}


@pytest.mark.parametrize("answer", OTHER_RIGHT_ROWS.values(), ids=OTHER_RIGHT_ROWS)
def test_other_right_rows_pass(answer):
    result = check_rescale_rows(answer)
    assert result.passed, repr(result)


def _random_rows(S, block_size):
    return tuple(np.random.default_rng(S).normal(size=(2, S)))


# Wrong answers a learner might write that no declared mistake names; each must fail, with this message.
# fmt: off
WRONG_ROWS = [
    (_random_rows, r"case 1 \(S=12, blocks of 4\): on `hidden`, leaving out the factor moves the weights by [\d.]+ in all \(key \d+'s most\): the running maximum rises in block \d \(keys \d+-\d+\)\. It matches a `hidden` row whose largest"),
    (lambda S, b: np.zeros(S), r"case 1 \(S=12, blocks of 4\): should return a pair \(hidden, shown\) of score rows; got ndarray$"),
    (lambda S, b: (np.zeros(S), np.zeros(S + 1)), r"case 1 \(.*\): `shown` should be a row of S = 12 scores, shape \(12,\); got shape \(13,\)$"),
    (lambda S, b: (np.zeros(S), np.r_[np.full(b, -np.inf), np.zeros(S - b)]), r"case 1 \(.*\): `shown` must hold finite scores; it has NaN or inf$"),
    (lambda S, b: (np.zeros(S), np.r_[np.zeros(S - 1), 1.0]), r"case 1 \(S=12, blocks of 4\): on `shown`, leaving out the factor moves the weights by only 0.417 in all \(key 11's most\); they must move by at least 0.5\. It matches a `shown` row on which the missing factor matters little"),
    (lambda S, b: (np.zeros(S), np.arange(S, dtype=float)), r"case 5 \(S=2, blocks of 1\): on `shown`, .* by only 0.462 in all"),
    (lambda S, b: (np.zeros(S), "shown"), r"case 1 \(.*\): `shown` should be a row of S = 12 scores, shape \(12,\); got no array of numbers$"),
]
# fmt: on


@pytest.mark.parametrize(("answer", "message"), WRONG_ROWS)
def test_wrong_rows_fail_with_a_message(answer, message):
    result = check_rescale_rows(answer)
    assert result.status == "FAIL" and re.search(message, repr(result)), repr(result)


# --- Exercise 2: a softmax in one copy --------------------------------------------------------------------------


def test_the_numbers_the_second_exercise_quotes():
    assert ch07.BUDGET == 1.25
    cases = [scores for _, (scores,) in _cases(ch07.LEAN_SOFTMAX)]
    assert all(scores.nbytes == 2**20 for scores in cases)  # 1 MiB each
    assert {scores.dtype for scores in cases} == {np.dtype(np.float32), np.dtype(np.float64)}
    for scores in cases:  # large enough that an exp without the maximum subtracted overflows
        assert scores.max() > np.log(np.finfo(scores.dtype).max)
    assert any(scores.ndim == 1 for scores in cases) and any(scores.shape[0] == 1 for scores in cases)


def _loop_in_place(scores):
    weights = scores.copy()
    for row in weights.reshape(-1, weights.shape[-1]):  # each row a view into `weights`
        row -= row.max()
        np.exp(row, out=row)
        row /= row.sum()
    return weights


def _softmax_in(weights):
    """The softmax of ``weights``, written over them: the copy a right answer makes first."""
    weights -= weights.max(axis=-1, keepdims=True)
    np.exp(weights, out=weights)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights


def _with_subtract_out(scores):
    weights = np.empty_like(scores)
    np.subtract(scores, scores.max(axis=-1, keepdims=True), out=weights)
    np.exp(weights, out=weights)
    np.divide(weights, weights.sum(axis=-1, keepdims=True), out=weights)
    return weights


def _in_chunks(scores, rows=64):
    weights = scores.copy().reshape(-1, scores.shape[-1])
    for start in range(0, len(weights), rows):
        chunk = weights[start : start + rows]
        chunk -= chunk.max(axis=-1, keepdims=True)
        np.exp(chunk, out=chunk)
        chunk /= chunk.sum(axis=-1, keepdims=True)
    return weights.reshape(scores.shape)


def _package_kernel_on_a_copy(scores):
    from selfattention.scores import _softmax

    return _softmax(scores.copy(), -1, in_place=True)


OTHER_RIGHT_SOFTMAXES = {
    "a loop over rows, in place": _loop_in_place,
    "float32 first": lambda scores: _softmax_in(scores.astype(np.float32)),
    "subtract with out=": _with_subtract_out,
    "in chunks of rows": _in_chunks,
    "float64 first": lambda scores: _softmax_in(scores.astype(np.float64)),
    "the package's kernel on a copy": _package_kernel_on_a_copy,
}


@pytest.mark.parametrize("answer", OTHER_RIGHT_SOFTMAXES.values(), ids=OTHER_RIGHT_SOFTMAXES)
def test_other_lean_softmaxes_pass(answer):
    result = check_lean_softmax(answer)
    assert result.passed, repr(result)


def _by_rows(scores):
    weights = np.empty_like(scores)
    for i, row in enumerate(scores.reshape(-1, scores.shape[-1])):  # one row's temporaries at a time
        weights.reshape(-1, scores.shape[-1])[i] = sa.softmax(row)
    return weights


def _naive(scores):
    weights = np.exp(scores)  # no maximum subtracted: overflows
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights


def _measured_inside(scores):
    from selfattention.measure import peak_bytes

    kept = {}
    peak_bytes(lambda: kept.setdefault("weights", ch07._lean_softmax(scores)))  # stops tracemalloc when done
    return kept["weights"]


def _kept_shifted(scores):
    shifted = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(shifted)  # `shifted` is still alive
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights


# fmt: off
WRONG_SOFTMAXES = [
    (lambda scores: torch.softmax(torch.from_numpy(scores), dim=-1), r"case 1 \(256 x 1024 float32 scores\): the weights should be a NumPy array, whose memory tracemalloc can count; got Tensor$"),
    (lambda scores: np.asarray(torch.softmax(torch.from_numpy(scores), dim=-1)), r"case 1 .*: the weights were not allocated by NumPy during the call"),
    (lambda scores: ch07._lean_softmax(scores).tolist(), r"case 1 .*: the weights should be a NumPy array, whose memory tracemalloc can count; got list$"),
    (_naive, r"case 1 .*: the weights contain NaN or inf: did an exponential overflow"),
    (_softmax_in, r"case 1 .*: your function changed its argument `weights` in place"),
    (_kept_shifted, r"case 1 .*: at its peak your function held 2.\d\d times the weights' bytes; at most 1.25 may be\. It matches a softmax with two arrays"),
    (sa.softmax, r"case 1 .*: at its peak your function held 2.\d\d times .*It matches a softmax with two arrays"),
    (_measured_inside, r"case 1 .*: your function stopped tracemalloc, which the check measures it with"),
    (_by_rows, None),  # passes where rows are small, fails on the one-query case: one row is the whole array
    (lambda scores: ch07._lean_softmax(scores).astype(np.float16), r"case 1 .*: the weights do not match the reference.*float16"),
    (lambda scores: ch07._lean_softmax(np.swapaxes(scores, -1, -2)).swapaxes(-1, -2) if scores.ndim > 1 else ch07._lean_softmax(scores), r"case 1 .*: the weights do not match the reference"),
]
# fmt: on


@pytest.mark.parametrize(("answer", "message"), WRONG_SOFTMAXES)
def test_wrong_softmaxes_fail_with_a_message(answer, message):
    with np.errstate(over="ignore", invalid="ignore"):
        result = check_lean_softmax(answer)
    if message is None:
        assert re.search(r"case 3 \(1 x 262144 float32 scores, one query\): at its peak .* 3.\d\d times", repr(result))
        return
    assert result.status == "FAIL" and re.search(message, repr(result)), repr(result)


def test_a_stub_is_todo_and_a_stub_it_calls_is_named():
    def lean_softmax(scores):
        raise NotImplementedError

    assert repr(check_lean_softmax(lean_softmax)) == "TODO a softmax in one copy: not implemented yet"
    result = check_lean_softmax(lambda scores: lean_softmax(scores))
    assert result.status == "FAIL" and "lean_softmax(), which your function calls, raised NotImplementedError" in (
        repr(result)
    )


def test_the_measure_leaves_a_running_tracemalloc_running():
    tracemalloc.start()
    try:
        held = np.ones(2**18)  # 2 MiB allocated before the check: not the answer's
        assert check_lean_softmax(ch07._lean_softmax)
        assert not check_lean_softmax(ch07._two_copies)
        assert tracemalloc.is_tracing()
        del held
    finally:
        tracemalloc.stop()
    assert not tracemalloc.is_tracing()
    assert check_lean_softmax(ch07._lean_softmax)
    assert not tracemalloc.is_tracing()
