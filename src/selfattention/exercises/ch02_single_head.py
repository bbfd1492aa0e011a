"""Chapter 2 exercises: a log-softmax that never underflows, a test order cannot fool, a head from two matrices."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..scores import softmax
from ._framework import CaseList, CheckResult, Exercise, Mistake, answer_array, compare_array, compare_verdict

_ArrayFn = Callable[[np.ndarray], np.ndarray]  # an array in, an array out: (B, T, D) -> (B, T, D) for a head

__all__ = [
    "check_log_softmax",
    "check_permutation_test",
    "check_merged_head",
]


# --- Exercise 1: a log-softmax that never underflows ------------------------------------------


def _log_softmax(x: np.ndarray, *, slip: str = "") -> np.ndarray:
    """log softmax(x) over the last axis, as x - m - log(sum(exp(x - m))); ``slip`` makes a known mistake."""
    m = x.max() if slip == "global max" else x.max(axis=-1, keepdims=True)  # each row's maximum
    total = np.exp(x - m).sum(axis=-1, keepdims=slip != "no keepdims")  # at least 1 per row: its log is finite
    if slip == "shift only":
        return x - m
    if slip == "m kept":
        return x - np.log(total)  # x - m was not taken: off by m
    return x - m - np.log(total)


def _log_of_softmax(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(softmax(x))


def _log_of_naive_sum(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _same_including_inf(wrong: _ArrayFn) -> Callable[[Any, tuple[Any, ...]], bool]:
    """Recognise the answer of ``wrong``, which contains inf or NaN, where the comparison refuses to compare."""

    def detect(got: Any, args: tuple[Any, ...]) -> bool:
        answer = answer_array(got)
        with np.errstate(all="ignore"):
            expected = wrong(*args)
        return (
            answer is not None
            and answer.shape == expected.shape
            and not np.isfinite(answer).all()
            and bool(np.allclose(answer.astype(np.float64), expected, rtol=1e-4, atol=1e-4, equal_nan=True))
        )

    return detect


def _log_softmax_cases(rng: np.random.Generator) -> CaseList:
    # Scores near +-1e4 are multiples of 1/4, exact in float32, so a float32 answer can match them.
    near = rng.integers(-8, 9, size=(2, 4, 6)) / 4.0
    return [
        ("small scores, 4 rows of 4", (rng.normal(size=(4, 4)),)),
        (
            "weights that round to 0: [[0, -1000, -2000], [5, 4, -800]]",
            (np.array([[0.0, -1000, -2000], [5, 4, -800]]),),
        ),
        ("scores around +1e4", (1e4 + near[0],)),
        ("scores around -1e4", (-1e4 + near[1],)),
        ("one row near 0, one near -5000", (np.array([[1.0, 0.0, -1.0], [-5000.0, -5001.0, -5003.0]]),)),
        ("float32 scores in the hundreds", ((300.0 * rng.normal(size=(2, 3, 7))).astype(np.float32),)),
        ("one score per row (T=1)", (rng.normal(size=(5, 1)),)),
        ("a single row, shape (6,)", (rng.normal(size=6),)),
    ]


LOG_SOFTMAX = Exercise(
    name="stable log-softmax",
    kind="extend",
    concept="log-weights that never underflow (log-sum-exp)",
    chapter=2,
    number=1,
    cases=_log_softmax_cases,
    reference=_log_softmax,
    compare=compare_array(
        "log-weights",
        "every log-weight here is an ordinary number, at worst a few thousand below 0; -inf is the log of a "
        "weight that rounded to 0, and inf or NaN an exponential that overflowed",
    ),
    # Answers with inf or NaN are recognised by detect: the comparison refuses to compare them.
    mistakes=tuple(
        Mistake(wrong, hint, detect=_same_including_inf(wrong) if not_finite else None)
        for wrong, not_finite, hint in [
            (
                _log_of_softmax,
                True,
                "It matches np.log(softmax(x)): a weight of e^-1000 rounds to 0 before the log sees it. Stay in "
                "logs: log softmax(x)_j = x_j - m - log(sum_k exp(x_k - m)), with m the row's maximum",
            ),
            (
                partial(_log_softmax, slip="global max"),
                True,
                "It matches subtracting the largest score of the whole array: a row far below it underflows to "
                "exp(...) = 0 everywhere. Take each row's own maximum (axis=-1, keepdims=True)",
            ),
            (
                _log_of_naive_sum,
                True,
                "It matches x - log(sum(exp(x))): exp(1e4) overflows to inf. Subtract the row's maximum m inside "
                "the exponential, and take it off again outside: x - m - log(sum(exp(x - m)))",
            ),
            (
                partial(_log_softmax, slip="no keepdims"),
                False,
                "It matches a sum without keepdims=True: the row sums, shape (rows,), broadcast along the last "
                "axis, so entry (i, j) used row j's sum",
            ),
            (
                partial(_log_softmax, slip="shift only"),
                False,
                "It matches x - m alone: that makes the largest log-weight 0, as if it had weight 1; subtract "
                "log(sum(exp(x - m))) as well",
            ),
            (
                partial(_log_softmax, slip="m kept"),
                False,
                "It matches x - log(sum(exp(x - m))): the sum was taken of shifted scores, so shift x too: "
                "x - m - log(sum(exp(x - m)))",
            ),
        ]
    ),
)


def check_log_softmax(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x)``: the log of the softmax over the last axis, finite wherever the scores are.

    ``x`` is an array of scores of any shape, float64 or float32; the answer has
    its shape. The cases include weights that round to 0 (whose logs are still
    ordinary numbers), scores around +-1e4, rows thousands apart, and float32
    scores in the hundreds. See chapter 2, exercise 1.
    """
    return LOG_SOFTMAX.check(fn)


# --- Exercise 2: a permutation-equivariance test that order cannot fool ---------------------------


def _attention_head(D: int, seed: int, dtype: type = np.float64) -> _ArrayFn:
    """One attention head, (B, T, D) -> (B, T, D), with random weights scaled like the chapter's."""
    rng = np.random.default_rng(seed)
    w_q, w_k, w_v, w_o = ((rng.normal(size=(D, D)) / np.sqrt(D)).astype(dtype) for _ in range(4))

    def head(x: np.ndarray) -> np.ndarray:
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        return softmax(q @ np.swapaxes(k, -1, -2) / D**0.5) @ v @ w_o

    return head


def _marked(f: _ArrayFn, trap: str) -> _ArrayFn:
    f.trap = trap  # type: ignore[attr-defined]  # which wrong test this function catches, read by the hints
    return f


def _with_positions(head: _ArrayFn, table: np.ndarray) -> _ArrayFn:
    return _marked(lambda x: head(x + table), "positions")  # slot t always gets table[t]


def _one_slot_special(head: _ArrayFn, slot: int, how: str) -> _ArrayFn:
    """The head, except that one position differs: its input gets an embedding, or its output is zeroed or doubled."""
    bump = np.linspace(-1.0, 1.0, 8)

    def f(x: np.ndarray) -> np.ndarray:
        if how == "embedding":
            x = x.copy()
            x[:, slot] += bump[: x.shape[-1]]
            return head(x)
        out = head(x).copy()
        out[:, slot] *= 0.0 if how == "zeroed" else 2.0
        return out

    f.slot = slot  # type: ignore[attr-defined]
    return _marked(f, "one position")


def _around_a_circle(head: _ArrayFn) -> _ArrayFn:
    """The head after each token is mixed with its two neighbours, the first and last being neighbours too."""
    return _marked(lambda x: head(x + 0.5 * (np.roll(x, 1, axis=1) + np.roll(x, -1, axis=1))), "circle")


def _permutation_cases(rng: np.random.Generator) -> CaseList:
    def tokens(B: int, T: int, D: int) -> np.ndarray:
        return rng.normal(size=(B, T, D))

    head4, head8 = _attention_head(4, 1), _attention_head(8, 2)
    head8_32 = _attention_head(8, 3, np.float32)
    # Each case gets its own generator. Those of cases 5 to 8 are seeded so that the first permutation drawn
    # from them (rng.permutation, rng.shuffle, rng.choice or rng.permuted) leaves the special token in place,
    # as a random permutation of T tokens does one time in T, and the second moves it.
    return [
        ("one attention head, T=6: expected True", (head8, tokens(2, 6, 8), np.random.default_rng(0))),
        (
            "the head with position embeddings, T=6: expected False",
            (_with_positions(head8, rng.normal(size=(6, 8))), tokens(2, 6, 8), np.random.default_rng(0)),
        ),
        (
            "one head on float32 tokens, T=5: expected True",
            (head8_32, tokens(1, 5, 8).astype(np.float32), np.random.default_rng(2)),
        ),
        (
            "the head with position embeddings, T=1: expected True (one token has one order)",
            (_with_positions(head4, rng.normal(size=(1, 4))), tokens(2, 1, 4), np.random.default_rng(3)),
        ),
        (
            "the head with an embedding added to slot 0 only, T=2: expected False",
            (_one_slot_special(head4, 0, "embedding"), tokens(2, 2, 4), np.random.default_rng(9)),
        ),
        (
            "the head with its last output zeroed, T=3: expected False",
            (_one_slot_special(head4, 2, "zeroed"), tokens(2, 3, 4), np.random.default_rng(44)),
        ),
        (
            "the head with token 1's output doubled, T=2: expected False",
            (_one_slot_special(head4, 1, "doubled"), tokens(1, 2, 4), np.random.default_rng(14)),
        ),
        (
            "the head with token 1's output zeroed, T=4: expected False",
            (_one_slot_special(head8, 1, "zeroed"), tokens(2, 4, 8), np.random.default_rng(239)),
        ),
        (
            "the head after mixing each token with its neighbours around a circle, T=5: expected False",
            (_around_a_circle(head8), tokens(2, 5, 8), np.random.default_rng(5)),
        ),
        (
            "the head with its outputs moved one slot along (np.roll), T=5: expected False",
            (_marked(lambda x: np.roll(head8(x), 1, axis=1), "moved"), tokens(2, 5, 8), np.random.default_rng(6)),
        ),
    ]


def _commutes(f: _ArrayFn, x: np.ndarray, perm: Any) -> bool:
    """Whether f(x[:, perm]) equals f(x)[:, perm], within float32 rounding."""
    out = np.asarray(f(x))
    return bool(np.allclose(f(x[:, perm]), out[:, perm], rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(out).max()))))


def _every_permutation(f: _ArrayFn, x: np.ndarray, rng: np.random.Generator) -> bool:
    """The verdict: f commutes with every permutation of the tokens (T is at most 6 here)."""
    return all(_commutes(f, x, list(perm)) for perm in itertools.permutations(range(x.shape[1])))


def _one_random_permutation(f: _ArrayFn, x: np.ndarray, rng: np.random.Generator) -> bool:
    return _commutes(f, x, rng.permutation(x.shape[1]))


def _unpermuted(f: _ArrayFn, x: np.ndarray, rng: np.random.Generator) -> bool:
    perm = rng.permutation(x.shape[1])
    return bool(np.allclose(f(x[:, perm]), f(x), rtol=1e-4, atol=1e-5))  # the outputs left in the old order


def _shift_and_reverse(f: _ArrayFn, x: np.ndarray, rng: np.random.Generator) -> bool:
    T = x.shape[1]
    return _commutes(f, x, np.roll(np.arange(T), 1)) and _commutes(f, x, np.arange(T)[::-1])


def _sums_only(f: _ArrayFn, x: np.ndarray, rng: np.random.Generator) -> bool:
    whole = np.asarray(f(x)).sum(axis=1)  # the sum over the tokens: the same in any order
    return all(
        np.allclose(np.asarray(f(x[:, list(perm)])).sum(axis=1), whole, rtol=1e-4, atol=1e-5)
        for perm in itertools.permutations(range(x.shape[1]))
    )


def _says(verdict: bool, trap: str | None = None) -> Callable[[Any, tuple[Any, ...]], bool]:
    """Recognise a verdict on one kind of case: ``verdict`` for a function marked ``trap`` (or an equivariant one)."""

    def detect(got: Any, args: tuple[Any, ...]) -> bool:
        f = args[0]
        if not isinstance(got, (bool, np.bool_)) or bool(got) != verdict:
            return False
        return getattr(f, "trap", None) == trap if trap else _every_permutation(*args)

    return detect


PERMUTATION_TEST = Exercise(
    name="a permutation-equivariance test",
    kind="test",
    concept="attention ignores order until positions are added; a test must move every token",
    chapter=2,
    number=2,
    cases=_permutation_cases,
    reference=_every_permutation,
    compare=compare_verdict,
    mistakes=(
        Mistake(
            _unpermuted,
            "It matches a test that says False for an equivariant function: compare f(x[:, p]) with f(x)[:, p], "
            "both in the new order, along axis 1 (the tokens), and with a tolerance fit for float32 "
            "(np.allclose(..., rtol=1e-4, atol=1e-5)): the same sums taken in another order differ in their last bits",
            detect=_says(False),
        ),
        Mistake(
            lambda f, x, rng: True,
            "It matches a test that says True for the head with position embeddings: shuffle axis 1 (the tokens), "
            "not axis 0 (the batch), and compare f(x[:, p]) with f(x)[:, p] for a p that moves tokens",
            detect=_says(True, "positions"),
        ),
        Mistake(
            _one_random_permutation,
            "It matches a test whose permutation left the special token where it was: a random permutation of T "
            "tokens does that one time in T, and then a function that treats one position differently looks "
            "equivariant. Try permutations that together move every token, or, for T this small, all of them",
            detect=_says(True, "one position"),
        ),
        Mistake(
            _shift_and_reverse,
            "It matches a test that only shifts (np.roll) or reverses the tokens: mixing each token with its "
            "neighbours around a circle commutes with both. Swapping two neighbouring tokens breaks the circle; "
            "a shift and one swap together generate every permutation",
            detect=_says(True, "circle"),
        ),
        Mistake(
            _sums_only,
            "It matches a test that compares something order cannot change, such as the sum or mean over the "
            "tokens or the sorted rows: equivariance says that each output moves with its own token, so compare "
            "the arrays f(x[:, p]) and f(x)[:, p] themselves",
            detect=_says(True, "moved"),
        ),
    ),
    passes="the right verdict",
)


def check_permutation_test(test: Callable[..., Any]) -> CheckResult:
    """Check ``test(f, x, rng) -> bool``: whether ``f`` is permutation equivariant on ``x`` (B, T, D).

    ``f`` maps (B, T, D) to (B, T, D); ``rng`` is a NumPy generator for any
    random choice. The test must say True when reordering the T tokens of
    ``x`` reorders ``f``'s outputs the same way, for every reordering, and
    False otherwise. The check hands it attention heads (True), the same heads
    with position embeddings (False), functions that treat a single position
    differently, with a generator whose first permutation leaves that token in
    place, and a function that only a non-circular reordering exposes; T is
    at most 6. See chapter 2, exercise 2.
    """
    return PERMUTATION_TEST.check(test)


# --- Exercise 3: a head from its two merged matrices -------------------------------------------


def _merged_head(x: np.ndarray, w_qk: np.ndarray, w_ov: np.ndarray, d_k: int, *, slip: str = "") -> np.ndarray:
    """softmax(x W_QK x^T / sqrt(d_k)) x W_OV, since Q K^T = x W_Q W_K^T x^T and V W_O = x W_V W_O."""
    scale = {"no scale": 1.0, "sqrt(D)": x.shape[-1] ** -0.5}.get(slip, d_k**-0.5)
    if slip == "np.sqrt":
        scale = 1 / np.sqrt(d_k)  # a float64 NumPy scalar: float32 scores become float64
    merged = w_qk.T if slip == "w_qk.T" else w_qk
    scores = x @ merged @ np.swapaxes(x, -1, -2) * scale  # (..., T, T)
    weights = softmax(scores, axis=-2 if slip == "axis" else -1)
    if slip == "no w_ov":
        return weights @ x
    return weights @ x @ (w_ov.T if slip == "w_ov.T" else w_ov)  # (..., T, D)


def _merged_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    # The last two cases have scores past exp's overflow (about 710 in float64, 89 in float32).
    for shape, d_k, dtype, size in [
        ((5, 8), 2, np.float64, 1.0),
        ((4, 3), 3, np.float64, 1.0),
        ((2, 6, 8), 4, np.float64, 1.0),
        ((1, 8), 3, np.float64, 1.0),
        ((2, 3, 4, 6), 2, np.float64, 1.0),
        ((2, 7, 12), 3, np.float32, 2.0),
        ((3, 5), 2, np.float64, 15.0),
    ]:
        D = shape[-1]
        w_q, w_k, w_v = (rng.normal(size=(D, d_k)) for _ in range(3))
        w_o = rng.normal(size=(d_k, D)) / np.sqrt(d_k)
        x = size * rng.normal(size=shape)
        *batch, T, _ = shape
        width = "full width" if d_k == D else f"d_k={d_k}"
        cases.append(
            (
                f"x {shape}, {width}"
                + (", float32" if dtype == np.float32 else "")
                + (f", x scaled by {size:g}: large scores" if size != 1 else ""),
                (x.astype(dtype), (w_q @ w_k.T).astype(dtype), (w_v @ w_o).astype(dtype), d_k),
            )
        )
    return cases


def _compare_merged(got: Any, expected: np.ndarray) -> str | None:
    dtype = str(getattr(got, "dtype", "")).removeprefix("torch.")  # a list or tuple has none and is not judged on it
    if expected.dtype == np.float32 and dtype == "float64" and np.shape(got) == expected.shape:
        return "the output is float64, but x and the weights are float32; keep float32 as float32"
    return compare_array("output")(got, expected)


# The known wrong heads: _merged_head's slip, and the hint it earns.
_MERGED_SLIPS = {
    "w_qk.T": "It matches x W_QK^T x^T, the scores transposed (key i against query j). Q K^T = x W_Q (x W_K)^T "
    "= x (W_Q W_K^T) x^T: w_qk goes between x and x^T as it is",
    "no scale": "It matches scores without the scale: divide x W_QK x^T by sqrt(d_k), as Q K^T was",
    "sqrt(D)": "It matches dividing by sqrt(D), the width of x: the scale belongs to the width of the query and "
    "key vectors, d_k, which the merged matrix hides, so use the d_k argument",
    "axis": "It matches a softmax over axis -2: each query's row of weights (the last axis) must sum to 1",
    "no w_ov": "It matches the weights times x alone: the values are x W_V, and W_O follows, so multiply by w_ov",
    "w_ov.T": "It matches multiplying by w_ov transposed: V W_O = x W_V W_O = x w_ov, with w_ov as given",
    "np.sqrt": "It matches scaling by np.sqrt(d_k), a float64 NumPy scalar, which turns float32 scores into "
    "float64 (NumPy 2); use d_k ** 0.5 or math.sqrt(d_k)",
}


MERGED_HEAD = Exercise(
    name="a head from its merged matrices",
    kind="derive",
    concept="a head is two D x D matrices, W_Q W_K^T and W_V W_O",
    chapter=2,
    number=3,
    cases=_merged_cases,
    reference=_merged_head,
    compare=_compare_merged,
    mistakes=tuple(Mistake(partial(_merged_head, slip=slip), hint) for slip, hint in _MERGED_SLIPS.items()),
)


def check_merged_head(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, w_qk, w_ov, d_k) -> (..., T, D)``: one head's output from its two merged matrices.

    ``x`` is (..., T, D); ``w_qk = W_Q W_K^T`` and ``w_ov = W_V W_O`` are
    (D, D), for a head of width ``d_k`` without biases. The output must equal
    ``softmax(Q K^T / sqrt(d_k)) V W_O``, and stay float32 when the inputs are
    float32. See chapter 2, exercise 3.
    """
    return MERGED_HEAD.check(fn)
