"""Chapter 7 exercises: when the online softmax's rescale matters, a softmax in one copy, and merging two states."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ._framework import (
    SOFTMAX_NAN_HINT,
    CaseList,
    CheckResult,
    Exercise,
    Mistake,
    _check_callable,
    answer_array,
    compare_array,
)

__all__ = ["check_rescale_rows", "check_lean_softmax", "check_merge_states"]


# --- Exercise 1: two score rows, one that hides the missing rescale and one that shows it ----------------------

SHOWN_BY = 0.5  # on `shown`, leaving out the factor must move the weights by at least this much, summed over keys


def _blocked_weights(scores: np.ndarray, block_size: int, *, rescale: bool = True) -> np.ndarray:
    """One row's online softmax with the values V = I, so that o / l is the row of weights.

    Without ``rescale`` the factor exp(m - m') is left out: the bug the exercise is about. Both versions do
    the same arithmetic otherwise, so where every factor is exactly 1 they agree to the last bit.
    """
    m, total, out = -np.inf, 0.0, np.zeros(len(scores))
    with np.errstate(over="ignore"):  # a difference of two huge scores may round to -inf; its exp is 0
        for start in range(0, len(scores), block_size):
            block = scores[start : start + block_size]
            m_new = max(m, float(block.max()))
            factor = np.exp(m - m_new) if rescale else 1.0  # exp(-inf) = 0 for the first block
            exps = np.exp(block - m_new)
            total = factor * total + exps.sum()
            out = factor * out  # the keys before `start`, re-based to m_new
            out[start : start + block_size] = exps  # with V = I, key j's value adds only to entry j
            m = m_new
    return out / total


def _moved(scores: np.ndarray, block_size: int) -> tuple[float, int]:
    """How far leaving out the rescale moves the weights, summed over the keys, and whose weight moves most."""
    change = np.abs(_blocked_weights(scores, block_size, rescale=False) - _blocked_weights(scores, block_size))
    return float(change.sum()), int(change.argmax())


def _rescale_rows(S: int, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """One answer of many: the maximum in the first block, then a later block far above it."""
    hidden, shown = np.zeros(S), np.zeros(S)
    hidden[0] = 1.0
    shown[block_size] = 10.0  # the first key of block 2; the comparison reads block_size off this
    return hidden, shown


def _rows_of(got: Any, S: int) -> tuple[tuple[np.ndarray, np.ndarray] | None, str | None]:
    """The learner's two rows as float64 arrays of shape (S,), or what is wrong with their form."""
    if isinstance(got, (tuple, list)) and len(got) == 2:
        rows = [answer_array(row) for row in got]
    else:
        array = answer_array(got)
        rows = list(array) if array is not None and array.ndim == 2 and len(array) == 2 else None
    if rows is None:
        return None, f"should return a pair (hidden, shown) of score rows; got {type(got).__name__}"
    for name, row in zip(("hidden", "shown"), rows, strict=True):
        if row is None or row.shape != (S,):
            form = "no array of numbers" if row is None else f"shape {row.shape}"
            return None, f"`{name}` should be a row of S = {S} scores, shape ({S},); got {form}"
        if not np.isfinite(row).all():
            return None, f"`{name}` must hold finite scores; it has NaN or inf"
    hidden, shown = (row.astype(np.float64) for row in rows)
    return (hidden, shown), None


def _keys_of_block(scores: np.ndarray, block_size: int) -> str:
    """Which block first raises the running maximum, as "block 2 (keys 4-7)"."""
    running = np.maximum.accumulate([scores[i : i + block_size].max() for i in range(0, len(scores), block_size)])
    block = int(np.flatnonzero(running[1:] > running[:-1])[0]) + 1
    last = min(len(scores), (block + 1) * block_size) - 1
    return f"block {block + 1} (keys {block * block_size}-{last})"


def _judge_rows(got: Any, expected: tuple[np.ndarray, np.ndarray]) -> str | None:
    S, block_size = len(expected[0]), int(np.argmax(expected[1]))  # the reference's spike opens block 2
    rows, problem = _rows_of(got, S)
    if problem:
        return problem
    hidden, shown = rows
    moved, key = _moved(hidden, block_size)
    if moved > 0:
        return (
            f"on `hidden`, leaving out the factor moves the weights by {moved:.3g} in all (key {key}'s most): the "
            f"running maximum rises in {_keys_of_block(hidden, block_size)}"
        )
    moved, key = _moved(shown, block_size)
    if moved == 0:
        return "on `shown`, leaving out the factor changes no weight at all"
    if moved < SHOWN_BY:
        return (
            f"on `shown`, leaving out the factor moves the weights by only {moved:.3g} in all (key {key}'s most); "
            f"they must move by at least {SHOWN_BY}"
        )
    return None


def _rows_hold(got: Any, args: tuple[int, int], test: Callable[[np.ndarray, np.ndarray, int], bool]) -> bool:
    rows, problem = _rows_of(got, args[0])
    return problem is None and test(*rows, args[1])


def _hides(row: np.ndarray, block_size: int) -> bool:
    return _moved(row, block_size)[0] == 0


def _shows(row: np.ndarray, block_size: int) -> bool:
    return _moved(row, block_size)[0] >= SHOWN_BY


def _with_spike(S: int, at: int, height: float) -> np.ndarray:
    row = np.zeros(S)
    row[at] = height
    return row


RESCALE_ROWS = Exercise(
    name="when the rescale shows",
    kind="search",
    concept="when the online softmax's factor exp(m - m') matters",
    chapter=7,
    number=1,
    cases=lambda rng: [
        (f"S={S}, blocks of {block}{note}", (S, block))
        for S, block, note in [
            (12, 4, ""),
            (10, 3, ", the last holds one key"),
            (6, 1, ", every key its own block"),
            (64, 16, ""),
            (2, 1, ""),
        ]
    ],
    reference=_rescale_rows,
    compare=_judge_rows,
    mistakes=(
        Mistake(
            lambda S, block: _rescale_rows(S, block)[::-1],
            "It matches the two rows swapped: return (hidden, shown), the row that hides the bug first",
            detect=lambda got, args: _rows_hold(got, args, lambda h, s, b: _shows(h, b) and _hides(s, b)),
        ),
        Mistake(
            lambda S, block: (np.arange(S, dtype=float), _rescale_rows(S, block)[1]),
            "It matches a `hidden` row whose largest score comes after the first block (scores in increasing "
            "order, for one): whenever a block raises the running maximum, exp(m - m') < 1 rescales all that came "
            "before, and leaving it out weights the earlier keys too much; put the row's largest score in block 1",
            detect=lambda got, args: _rows_hold(got, args, lambda h, s, b: not _hides(h, b)),
        ),
        Mistake(
            lambda S, block: (_rescale_rows(S, block)[0], _with_spike(S, 0, 10.0)),
            "It matches a `shown` row whose largest score is in the first block: a large score alone does not "
            "show the bug, because the running maximum never rises after block 1 and every factor is exactly 1; "
            "put a much larger score in a later block",
            detect=lambda got, args: _rows_hold(got, args, lambda h, s, b: _hides(h, b) and _hides(s, b)),
        ),
        Mistake(
            lambda S, block: (_rescale_rows(S, block)[0], _with_spike(S, block, 0.01)),
            "It matches a `shown` row on which the missing factor matters little: without it, the keys before a "
            "rise keep exps measured against their own, lower maximum, which counts only when the rise is large "
            "(several units) and those keys are not negligible next to the later ones; raise one later key far "
            "above block 1",
            detect=lambda got, args: _rows_hold(
                got, args, lambda h, s, b: _hides(h, b) and 0 < _moved(s, b)[0] < SHOWN_BY
            ),
        ),
    ),
    passes="hides, then shows, the missing rescale",
)


def check_rescale_rows(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(S, block_size) -> (hidden, shown)``: two rows of S finite scores, each of shape (S,).

    The check runs the online softmax over each row's keys in blocks of
    ``block_size`` (the last may be shorter), with the values V = I so that
    ``o / l`` is the row of weights, once with the factor ``exp(m - m')`` and
    once without it. On ``hidden`` the two must agree exactly; on ``shown``,
    leaving the factor out must move the weights by at least 0.5 in all
    (the sum over the keys of each weight's change).
    Many answers pass. See chapter 7, exercise 1.
    """
    return RESCALE_ROWS.check(fn)


# --- Exercise 2: a softmax whose peak memory is one copy of the scores ------------------------------------------

BUDGET = 1.25  # the peak may be at most this many times the weights' bytes


@dataclass(frozen=True)
class _Measured:
    """What the learner's function returned, and the memory it allocated (tracemalloc), in bytes."""

    answer: Any
    peak: int  # at the peak of the call, above what was allocated before it
    held: int  # still allocated when it returned: the answer's buffer, if NumPy allocated it in the call
    traced: bool = True  # False if the function stopped tracemalloc itself, so that nothing was measured


class _Measuring:
    """Calls the learner's function under tracemalloc, which counts the bytes NumPy asks for whatever the load.

    The framework reads the learner's function through it: its parameter names (``__wrapped__``) and its
    code, so that the stub's NotImplementedError still reads as TODO.
    """

    def __init__(self, function: Callable[..., Any]) -> None:
        self.__wrapped__ = function
        self.__code__ = getattr(function, "__code__", None)

    def __call__(self, *args: Any) -> _Measured:
        already = tracemalloc.is_tracing()  # then measure from where it stands, and leave it running
        if not already:
            tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            answer = self.__wrapped__(*args)
            held, peak = tracemalloc.get_traced_memory()
            traced = tracemalloc.is_tracing()
        finally:
            if not already:
                tracemalloc.stop()
        return _Measured(answer, peak - before, held - before, traced)


class _MeasuredExercise(Exercise):
    """An exercise whose answer must also stay within a memory budget: every call is measured."""

    def check(self, candidate: Any) -> CheckResult:
        _check_callable(candidate, self.name)
        return super().check(_Measuring(candidate))


def _copies(got: _Measured) -> float:
    """The peak as a multiple of the returned weights' bytes."""
    return got.peak / max(1, answer_array(got.answer).nbytes)


def _judge_lean(got: _Measured, expected: np.ndarray) -> str | None:
    problem = compare_array("weights")(got.answer, expected)
    if problem:
        return problem
    weights = got.answer
    if not got.traced:
        return "your function stopped tracemalloc, which the check measures it with; measure outside the function"
    if not isinstance(weights, np.ndarray):
        return f"the weights should be a NumPy array, whose memory tracemalloc can count; got {type(weights).__name__}"
    if got.held < 0.9 * weights.nbytes:  # a view of torch's memory, or of a buffer made before the call
        return (
            "the weights were not allocated by NumPy during the call, so their memory cannot be measured "
            "(tracemalloc does not see torch's); compute them with NumPy"
        )
    if _copies(got) > BUDGET:
        return f"at its peak your function held {_copies(got):.2f} times the weights' bytes; at most {BUDGET} may be"
    return None


def _lean_softmax(scores: np.ndarray, *, whole: bool = False) -> np.ndarray:
    weights = scores - scores.max(axis=-1, keepdims=True)  # the one new array
    np.exp(weights, out=weights)
    weights /= weights.sum() if whole else weights.sum(axis=-1, keepdims=True)
    return weights


def _two_copies(scores: np.ndarray) -> np.ndarray:
    exps = np.exp(scores - scores.max(axis=-1, keepdims=True))  # x - m and its exp: both alive during exp
    exps /= exps.sum(axis=-1, keepdims=True)
    return exps


def _three_copies(scores: np.ndarray) -> np.ndarray:
    shifted = scores - scores.max(axis=-1, keepdims=True)
    exps = np.exp(shifted)
    return exps / exps.sum(axis=-1, keepdims=True)  # shifted, exps and the quotient, all alive


def _lean_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for shape, dtype, scale, apart, note in [
        ((256, 1024), np.float32, 30.0, 0.0, ""),
        ((4, 128, 512), np.float32, 30.0, 300.0, ", a batch axis, rows hundreds apart"),
        ((1, 262144), np.float32, 30.0, 0.0, ", one query"),
        ((512, 256), np.float64, 300.0, 0.0, ""),
        ((131072,), np.float64, 300.0, 0.0, ", one row without a query axis"),
    ]:
        scores = scale * rng.standard_normal(shape)  # large enough to overflow a bare exp
        scores += apart * rng.uniform(-1, 1, size=(*shape[:-1], 1))  # the whole array's maximum underflows rows
        scores = scores.astype(dtype)
        cases.append((f"{' x '.join(map(str, shape))} {np.dtype(dtype).name} scores{note}", (scores,)))
    return cases


def _measured_copies(low: float, high: float) -> Callable[[Any, tuple[Any, ...]], bool]:
    """Whether an answer has the right weights and a peak of between ``low`` and ``high`` times their bytes."""

    def detect(got: Any, args: tuple[Any, ...]) -> bool:
        right = compare_array("weights")(got.answer, _lean_softmax(*args)) is None
        return right and isinstance(got.answer, np.ndarray) and low <= _copies(got) < high

    return detect


LEAN_SOFTMAX = _MeasuredExercise(
    name="a softmax in one copy",
    kind="extend",
    concept="the temporaries of a softmax: in-place operations and out=",
    chapter=7,
    number=2,
    cases=_lean_cases,
    reference=_lean_softmax,
    compare=_judge_lean,
    mistakes=(
        Mistake(
            _two_copies,
            "It matches a softmax with two arrays the size of the scores alive at once, as in sa.softmax (x - m, "
            "then its exp): make the one new array first, then write each step into it, with np.exp(w, out=w) and "
            "w /= total",
            detect=_measured_copies(1.75, 2.75),
        ),
        Mistake(
            _three_copies,
            "It matches three or more arrays the size of the scores alive at once, such as x - m, its exp and "
            "their quotient (or the output and the two a softmax call makes inside it): a name keeps an array "
            "alive, and each operation without out= allocates a new one; write every step into one array",
            detect=_measured_copies(2.75, np.inf),
        ),
        Mistake(
            partial(_lean_softmax, whole=True),
            "It matches dividing by the sum of the whole array: each query's row must sum to 1, so sum along "
            "the last axis with keepdims=True",
        ),
    ),
    passes="matches the reference within the memory budget",
    # A float32 answer made from float32 copies of the scores holds those copies too, inside the measured call;
    # one that converts as its first step and then works in place passes (tests/test_exercises_ch7.py).
    float32=False,
)


def check_lean_softmax(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(scores) -> weights``: the softmax over the last axis, at a peak of at most 1.25 copies.

    ``scores`` is a float32 or float64 array of 1 MiB, with at least one
    axis, and must be left unchanged; ``weights`` must be a NumPy array of
    its shape. The check measures the call's peak with tracemalloc, which
    counts the bytes NumPy allocates (not torch's), and the peak may be at
    most 1.25 times the weights' bytes. See chapter 7, exercise 2.
    """
    return LEAN_SOFTMAX.check(fn)


# --- Exercise 3: merging two workers' online-softmax states -----------------------------------------------------

_EMPTY_HINT = (
    "an empty state has m = -inf: exp(m_i - m) must come out 0, not from inf * 0 or -inf - (-inf); "
    "otherwise, did an exponential overflow? Subtract the maximum first"
)


def _compare_state(
    got: Any, expected: tuple[np.ndarray, np.ndarray, np.ndarray], nan_hint: str = SOFTMAX_NAN_HINT
) -> str | None:
    if not isinstance(got, (tuple, list)):
        return f"should return a tuple (m, l, o); got {type(got).__name__}"
    if len(got) != 3:
        return f"should return a tuple of three, (m, l, o); got {len(got)} values"
    names = ("new maximum m", "new sum l", "new output o")
    compare = (compare_array(name, nan_hint) for name in names)
    problems = (c(value, ref) for c, value, ref in zip(compare, got, expected, strict=True))
    return next((problem for problem in problems if problem is not None), None)


def _state_of(scores: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The online softmax's (m, l, o) after folding in ``scores`` (T, n) and ``values`` (n, Dv) from empty."""
    m = scores.max(axis=-1, keepdims=True)
    exps = np.exp(scores - m)
    return m, exps.sum(axis=-1, keepdims=True), exps @ values


def _merge_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for T, n1, n2, Dv, shift in [(1, 3, 2, 2, 0.0), (4, 5, 6, 3, 4.0), (6, 2, 7, 4, -3.0)]:
        values = rng.normal(size=(n1 + n2, Dv))
        scores = 2 * rng.normal(size=(T, n1 + n2))
        scores[:, n1:] += shift  # the second worker's keys score higher (or lower) on the whole
        first, second = _state_of(scores[:, :n1], values[:n1]), _state_of(scores[:, n1:], values[n1:])
        cases.append((f"T={T}, keys {n1} + {n2}, Dv={Dv}", (*first, *second)))
    T, Dv = 3, 2  # one worker had no keys at all: its state is still the empty one
    empty = np.full((T, 1), -np.inf), np.zeros((T, 1)), np.zeros((T, Dv))
    second = _state_of(rng.normal(size=(T, 4)), rng.normal(size=(4, Dv)))
    cases.append(("the first worker saw no keys", (*empty, *second)))
    cases.append(("the second worker saw no keys", (*second, *empty)))
    return cases


def _merge(m1, l1, o1, m2, l2, o2, rescale: str = "both"):
    m = np.maximum(m1, m2)
    a, b = (np.exp(m1 - m), np.exp(m2 - m)) if rescale != "none" else (1.0, 1.0)
    if rescale == "l only":
        return m, a * l1 + b * l2, o1 + o2
    return m, a * l1 + b * l2, a * o1 + b * o2


MERGE_STATES = Exercise(
    name="merging two partial softmaxes",
    kind="derive",
    concept="combining online-softmax states",
    chapter=7,
    number=3,
    cases=_merge_cases,
    reference=_merge,
    compare=partial(_compare_state, nan_hint=_EMPTY_HINT),
    mistakes=(
        Mistake(
            lambda *state: _merge(*state, rescale="none"),
            "It matches adding the two states as they are: each was computed against its own maximum, so "
            "multiply each l and o by exp(m_i - m) first",
        ),
        Mistake(
            lambda *state: _merge(*state, rescale="l only"),
            "It matches rescaling l but not o: the output sums carry the same factor exp(m_i - m)",
        ),
        Mistake(
            lambda m1, l1, o1, m2, l2, o2: (np.maximum(m1, m2), (l1 + l2) / 2, (o1 + o2) / 2),
            "It matches averaging the two states: the workers saw different keys, so their sums add, after rescaling",
        ),
    ),
)


def check_merge_states(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(m1, l1, o1, m2, l2, o2) -> (m, l, o)``: the online softmax's state over two disjoint sets of keys.

    Each ``(m_i, l_i, o_i)`` is the state after folding in one set of keys:
    ``m_i`` (T, 1) the largest score, ``l_i`` (T, 1) the sum of
    ``exp(s - m_i)``, ``o_i`` (T, Dv) the sum of ``exp(s - m_i)`` times the
    values. A worker that saw no keys has ``m = -inf``, ``l = 0``, ``o = 0``.
    See chapter 7, exercise 3.
    """
    return MERGE_STATES.check(fn)
