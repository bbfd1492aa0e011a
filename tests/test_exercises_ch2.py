"""Chapter 2's exercise references agree with PyTorch and the package, and the cases are the ones the chapter names.

The generic tests in test_exercises.py run every checker on its reference, a
stub, float32 answers and each declared mistake; these tie the references to
independent implementations (torch.log_softmax, the head built from its four
factors), check what the chapter says of the cases (the generators that fool
one random permutation, T at most 6), and check that correct answers written
differently pass and plausible wrong ones fail.
"""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest

import selfattention as sa
from selfattention.exercises import check_log_softmax, check_merged_head, check_permutation_test
from selfattention.exercises.ch02_single_head import LOG_SOFTMAX, MERGED_HEAD, PERMUTATION_TEST

torch = pytest.importorskip("torch")


def _cases(exercise):
    return exercise.cases(np.random.default_rng(100 * exercise.chapter + exercise.number))


# --- exercise 1: log-softmax ---------------------------------------------------------------


def test_the_log_softmax_reference_is_torch_s_and_finite_where_log_of_softmax_is_not():
    underflowed = 0
    for _, (x,) in _cases(LOG_SOFTMAX):
        ours = LOG_SOFTMAX.reference(x)
        np.testing.assert_allclose(ours, torch.log_softmax(torch.from_numpy(x), dim=-1).numpy(), rtol=1e-6, atol=1e-6)
        assert np.isfinite(ours).all() and ours.dtype == x.dtype
        with np.errstate(divide="ignore"):
            underflowed += int(np.isneginf(np.log(sa.softmax(x))).any())
    assert underflowed >= 2  # the rows like [0, -1000, -2000] and the rows thousands apart


def test_the_log_softmax_cases_are_the_ones_the_chapter_names():
    descriptions = " | ".join(description for description, _ in _cases(LOG_SOFTMAX))
    for named in ("[0, -1000, -2000]", "+1e4", "-1e4", "-5000", "float32 scores in the hundreds", "T=1"):
        assert named in descriptions
    x = _cases(LOG_SOFTMAX)[2][1][0]  # scores around +1e4: exact in float32, so a float32 answer can match
    np.testing.assert_array_equal(x.astype(np.float32).astype(np.float64), x)


def _log_softmax_by_rows(x):
    out = np.empty_like(x)
    for index in np.ndindex(x.shape[:-1]):
        row = x[index]
        m = max(row)
        total = sum(math.exp(value - m) for value in row)
        out[index] = [value - m - math.log(total) for value in row]
    return out


@pytest.mark.parametrize(
    "answer",
    [
        _log_softmax_by_rows,
        lambda x: x - np.logaddexp.reduce(x, axis=-1, keepdims=True),
        lambda x: torch.log_softmax(torch.as_tensor(x, dtype=torch.float32), dim=-1),
    ],
    ids=["python loops", "logaddexp", "torch float32"],
)
def test_correct_log_softmaxes_written_differently_pass(answer):
    result = check_log_softmax(answer)
    assert result, repr(result)


def _shifted(x, shift):
    return x - shift - np.log(np.exp(x - shift).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda x: np.log(np.maximum(sa.softmax(x), 1e-300)), r"case 2 .*: the log-weights do not match"),
        (lambda x: np.log(sa.softmax(x) + 1e-12), r"case 2 .*: the log-weights do not match"),
        (lambda x: _shifted(x, x.mean(axis=-1, keepdims=True)), r"case 2 .*: the log-weights contain NaN or inf"),
        (lambda x: _shifted(x, x.min(axis=-1, keepdims=True)), r"case 2 .*: the log-weights contain NaN or inf"),
        (lambda x: sa.softmax(x), r"case 1 .*: the log-weights do not match"),
        (lambda x: _shifted(x, x.max(axis=0, keepdims=True)), r"case 1 .*: the log-weights do not match"),
    ],
    ids=["clipped", "smoothed", "mean shift", "min shift", "weights, not logs", "axis 0"],
)
def test_plausible_wrong_log_softmaxes_fail(answer, message):
    with np.errstate(all="ignore"):
        result = check_log_softmax(answer)
    assert not result and re.search(message, repr(result)), repr(result)


# --- exercise 2: a permutation-equivariance test -----------------------------------------------


def test_the_verdicts_are_those_the_case_names_promise_and_t_is_at_most_6():
    for description, (f, x, rng) in _cases(PERMUTATION_TEST):
        assert x.shape[1] <= 6
        assert description.endswith(f"expected {PERMUTATION_TEST.reference(f, x, rng)}") or (
            "expected True (" in description and PERMUTATION_TEST.reference(f, x, rng)
        )


def _draws(rng_state, T):
    """The first two permutations each usual way of drawing one gives, from copies of the same generator."""
    ways = {
        "permutation": lambda r: r.permutation(T),
        "shuffle": lambda r: (lambda a: (r.shuffle(a), a)[1])(np.arange(T)),
        "choice": lambda r: r.choice(T, T, replace=False),
        "permuted": lambda r: r.permuted(np.arange(T)),
    }
    out = {}
    for name, draw in ways.items():
        r = np.random.default_rng()
        r.bit_generator.state = rng_state
        out[name] = (draw(r), draw(r))
    return out


def test_one_slot_traps_come_with_a_generator_whose_first_permutation_keeps_that_slot():
    traps = 0
    for description, (f, x, rng) in _cases(PERMUTATION_TEST):
        if getattr(f, "trap", None) != "one position":
            continue
        traps += 1
        slot = f.slot
        assert f"slot {slot}" in description or f"token {slot}" in description or slot == x.shape[1] - 1
        for name, (first, second) in _draws(rng.bit_generator.state, x.shape[1]).items():
            assert first[slot] == slot, (description, name)  # one random permutation leaves it in place
            assert second[slot] != slot, (description, name)  # a second one moves it
    assert traps == 4


def _roll_and_swap(f, x, rng):
    T, y = x.shape[1], f(x)
    orders = [np.roll(np.arange(T), 1)] + ([np.r_[1, 0, np.arange(2, T)]] if T > 1 else [])
    return all(np.allclose(f(x[:, p]), y[:, p], rtol=1e-4, atol=1e-5) for p in orders)


def _random_orders(count):
    def test(f, x, rng):
        y = f(x)
        return all(
            np.allclose(f(x[:, p]), y[:, p], rtol=1e-4, atol=1e-5)
            for p in (rng.permutation(x.shape[1]) for _ in range(count))
        )

    return test


def _every_order_in_torch(f, x, rng):
    y = torch.from_numpy(np.asarray(f(x), dtype=np.float64))
    for order in itertools.permutations(range(x.shape[1])):
        moved = torch.from_numpy(np.asarray(f(x[:, list(order)]), dtype=np.float64))
        if not torch.allclose(moved, y[:, list(order)], rtol=1e-4, atol=1e-5):
            return False
    return True


@pytest.mark.parametrize(
    "test", [_roll_and_swap, _random_orders(5), _random_orders(20), _every_order_in_torch], ids=str
)
def test_correct_permutation_tests_written_differently_pass(test):
    result = check_permutation_test(test)
    assert result, repr(result)


def _one_order(order_of):
    def test(f, x, rng):
        p = order_of(x.shape[1], rng)
        return bool(np.allclose(f(x[:, p]), f(x)[:, p], rtol=1e-4, atol=1e-5))

    return test


def _sorted_rows(f, x, rng):
    p = rng.permutation(x.shape[1])
    return bool(np.allclose(np.sort(f(x[:, p]), axis=1), np.sort(f(x), axis=1), rtol=1e-4, atol=1e-5))


def _identity_replaced_by_a_shift(T, rng):
    p = rng.permutation(T)
    return np.roll(p, 1) if (p == np.arange(T)).all() else p


@pytest.mark.parametrize(
    ("test", "message"),
    [
        (_one_order(lambda T, rng: np.r_[1, 0, np.arange(2, T)] if T > 1 else np.arange(T)), r"case 6 .*left"),
        (_one_order(lambda T, rng: np.r_[1, 0, np.arange(2, T)]), r"case 4 .*raised IndexError"),
        (_one_order(lambda T, rng: np.arange(T)[::-1]), r"case 9 .*only shifts \(np\.roll\) or reverses"),
        (_one_order(_identity_replaced_by_a_shift), r"case 6 .*left the special token"),
        (_one_order(lambda T, rng: rng.choice(T, T, replace=False)), r"case 5 .*left the special token"),
        (_sorted_rows, r"case 5 .*got True"),
        (lambda f, x, rng: bool(np.allclose(f(x[rng.permutation(len(x))]), f(x)[rng.permutation(len(x))])), r"FAIL"),
    ],
    ids=[
        "swap 0 and 1",
        "swap without T=1",
        "reverse",
        "one order, never the identity",
        "rng.choice",
        "sorted",
        "batch",
    ],
)
def test_plausible_wrong_permutation_tests_fail(test, message):
    result = check_permutation_test(test)
    assert not result and re.search(message, repr(result)), repr(result)


# --- exercise 3: a head from its merged matrices ------------------------------------------------


def test_the_merged_reference_is_the_head_built_from_its_four_factors():
    rng = np.random.default_rng(0)
    for shape, d_k in [((5, 8), 2), ((2, 6, 8), 4), ((1, 3, 4, 6), 6), ((1, 12), 3)]:
        D = shape[-1]
        w_q, w_k, w_v = (rng.normal(size=(D, d_k)) for _ in range(3))
        w_o = rng.normal(size=(d_k, D))
        x = rng.normal(size=shape)
        head, _ = sa.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)
        np.testing.assert_allclose(MERGED_HEAD.reference(x, w_q @ w_k.T, w_v @ w_o, d_k), head @ w_o, rtol=1e-10)


def test_the_merged_cases_are_the_ones_the_chapter_names():
    cases = _cases(MERGED_HEAD)
    shapes = [args[0].shape for _, args in cases]
    assert (1, 8) in shapes and any(len(s) == 4 for s in shapes)  # one token; two batch axes
    assert any(args[0].shape[-1] == args[3] for _, args in cases)  # a full-width head
    assert any(args[0].dtype == np.float32 for _, args in cases)
    for _, (_, w_qk, _, d_k) in cases:  # the merged matrices have rank d_k, as the factors do
        assert np.linalg.matrix_rank(w_qk) == d_k
    overflow = {np.float32: np.log(np.finfo(np.float32).max), np.float64: np.log(np.finfo(np.float64).max)}
    large = [
        (x @ w_qk @ np.swapaxes(x, -1, -2) / d_k**0.5).max() > overflow[x.dtype.type] for _, (x, w_qk, _, d_k) in cases
    ]
    assert sum(large) == 2  # in float32 and in float64, a naive softmax overflows


def _merged_by_loops(x, w_qk, w_ov, d_k):
    out = np.empty_like(x)
    for index in np.ndindex(x.shape[:-2]):
        tokens = x[index]
        for t in range(tokens.shape[0]):
            scores = tokens[t] @ w_qk @ tokens.T / math.sqrt(d_k)
            weights = np.exp(scores - scores.max())
            out[index + (t,)] = weights / weights.sum() @ tokens @ w_ov
    return out


def _merged_from_svd(x, w_qk, w_ov, d_k):
    u, s, vt = np.linalg.svd(w_qk.astype(np.float64))
    w_q, w_k = u[:, :d_k] * s[:d_k], vt[:d_k].T  # W_Q W_K^T = w_qk: the head factored again
    q, k = (x @ w.astype(x.dtype) for w in (w_q, w_k))
    return sa.softmax(q @ np.swapaxes(k, -1, -2) / math.sqrt(d_k)) @ (x @ w_ov)


@pytest.mark.parametrize(
    "answer",
    [
        _merged_by_loops,
        _merged_from_svd,
        lambda x, a, b, d_k: sa.scaled_dot_product_attention(x @ a, x, x @ b, scale=d_k**-0.5)[0],
        lambda x, a, b, d_k: np.einsum(
            "...ts,...se,ef->...tf", sa.softmax(np.einsum("...td,de,...se->...ts", x, a, x) / math.sqrt(d_k)), x, b
        ),
    ],
    ids=["loops", "svd", "package attention", "einsum"],
)
def test_correct_merged_heads_written_differently_pass(answer):
    result = check_merged_head(answer)
    assert result, repr(result)


def _naive_softmax(scores):
    e = np.exp(scores)
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda x, a, b, d_k: sa.softmax(x @ a @ x.T / d_k**0.5) @ x @ b, r"case 3 .*raised ValueError.*Hint"),
        (lambda x, a, b, d_k: _naive_softmax(x @ a @ np.swapaxes(x, -1, -2) / d_k**0.5) @ x @ b, r"case 6 .*NaN"),
        (lambda x, a, b, d_k: sa.softmax(x @ a @ np.swapaxes(x, -1, -2) / d_k) @ x @ b, r"case 1 .*does not match"),
        (lambda x, a, b, d_k: sa.softmax(x @ a @ np.swapaxes(x, -1, -2) / d_k**0.5), r"case 1 .*should have shape"),
        (lambda x, a, b, d_k: (x @ a @ np.swapaxes(x, -1, -2) / d_k**0.5) @ x @ b, r"case 1 .*does not match"),
        (
            lambda x, a, b, d_k: MERGED_HEAD.reference(*(v.astype(np.float64) for v in (x, a, b)), d_k),
            r"case 6 .*the output is float64, but x and the weights are float32",
        ),
    ],
    ids=["x.T", "naive softmax", "divide by d_k", "the weights", "no softmax", "float64 inside"],
)
def test_plausible_wrong_merged_heads_fail(answer, message):
    with np.errstate(all="ignore"):
        result = check_merged_head(answer)
    assert not result and re.search(message, repr(result)), repr(result)
