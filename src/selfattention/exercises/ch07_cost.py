"""Chapter 7 exercises: one online-softmax step, the memory of the score matrix, and merging two partial softmaxes."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..efficient import online_softmax_update
from ._framework import SOFTMAX_NAN_HINT, CaseList, CheckResult, Exercise, Mistake, compare_array, compare_count

__all__ = ["check_online_softmax_step", "check_score_memory", "check_merge_states"]


def _online_softmax_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for T, block, Dv, offset in [(1, 4, 2, 0.0), (5, 3, 4, 3.0), (6, 8, 3, -2.0)]:
        running = rng.normal(size=(T, 1)), rng.uniform(1.0, 3.0, size=(T, 1)), rng.normal(size=(T, Dv))  # m, l, o
        scores, values = offset + 2 * rng.normal(size=(T, block)), rng.normal(size=(block, Dv))
        cases.append((f"T={T}, block={block}, Dv={Dv}", (*running, scores, values)))
    return cases


_EMPTY_HINT = (
    "an empty state has m = -inf: exp(m_i - m) must come out 0, not from inf * 0 or -inf - (-inf); "
    "otherwise, did an exponential overflow? Subtract the maximum first"
)


def _compare_online_step(
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


def _online_step_without_rescaling(
    running_max: np.ndarray, running_sum: np.ndarray, out: np.ndarray, scores: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    new_max = np.maximum(running_max, scores.max(axis=-1, keepdims=True))  # (T, 1)
    exps = np.exp(scores - new_max)  # (T, block)
    return new_max, running_sum + exps.sum(axis=-1, keepdims=True), out + exps @ values


ONLINE_SOFTMAX_STEP = Exercise(
    name="online softmax step",
    kind="implement",
    concept="folding one block of keys into the online softmax",
    chapter=7,
    number=1,
    cases=_online_softmax_cases,
    reference=online_softmax_update,
    compare=_compare_online_step,
    mistakes=(
        Mistake(
            _online_step_without_rescaling,
            "It matches adding the block without rescaling: multiply the old l and o by exp(m - m_new) first",
        ),
    ),
)


def check_online_softmax_step(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(m, l, o, scores, values) -> (m, l, o)``: fold one block of keys in.

    ``m`` and ``l`` are (T, 1), ``o`` is (T, Dv), ``scores`` (T, block) and
    ``values`` (block, Dv). Scores are finite here. See chapter 7, exercise 1.
    """
    return ONLINE_SOFTMAX_STEP.check(fn)


def _score_memory(batch: int, heads: int, T: int, S: int, bytes_per_number: int) -> int:
    return batch * heads * T * S * bytes_per_number


SCORE_MEMORY = Exercise(
    name="score memory",
    kind="count",
    concept="the memory of the scores",
    chapter=7,
    number=2,
    cases=lambda rng: [
        (f"B={b}, H={h}, T={t}, S={s}, {n} bytes each", (b, h, t, s, n))
        for b, h, t, s, n in [(32, 1, 1024, 1024, 4), (1, 12, 197, 197, 4), (8, 16, 4096, 4096, 2), (2, 3, 5, 7, 8)]
    ],
    reference=_score_memory,
    compare=compare_count("the number of bytes", "got {got:,} bytes, which is not the size of the scores"),
    mistakes=(
        Mistake(
            lambda b, h, t, s, n: _score_memory(b, 1, t, s, n),
            "It matches leaving out the heads: each head has its own T x S scores, batch * heads * T * S numbers",
        ),
        Mistake(
            lambda b, h, t, s, n: _score_memory(b, h, t, s, 1),
            "It matches counting numbers, not bytes: multiply by bytes_per_number",
        ),
    ),
)


def check_score_memory(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(batch, heads, T, S, bytes_per_number) -> int``: the bytes of the score matrix.

    See chapter 7, exercise 2.
    """
    return SCORE_MEMORY.check(fn)


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
    compare=partial(_compare_online_step, nan_hint=_EMPTY_HINT),
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
