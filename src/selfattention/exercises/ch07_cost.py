"""Chapter 7 exercises: one online-softmax step, and the memory of the score matrix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..efficient import online_softmax_update
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array, compare_count

__all__ = ["check_online_softmax_step", "check_score_memory"]


def _online_softmax_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for T, block, Dv, offset in [(1, 4, 2, 0.0), (5, 3, 4, 3.0), (6, 8, 3, -2.0)]:
        running = rng.normal(size=(T, 1)), rng.uniform(1.0, 3.0, size=(T, 1)), rng.normal(size=(T, Dv))  # m, l, o
        scores, values = offset + 2 * rng.normal(size=(T, block)), rng.normal(size=(block, Dv))
        cases.append((f"T={T}, block={block}, Dv={Dv}", (*running, scores, values)))
    return cases


def _compare_online_step(got: Any, expected: tuple[np.ndarray, np.ndarray, np.ndarray]) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return f"should return a tuple (m, l, o); got {type(got).__name__}"
    names = ("new maximum m", "new sum l", "new output o")
    problems = (compare_array(name)(value, ref) for name, value, ref in zip(names, got, expected, strict=True))
    return next((problem for problem in problems if problem is not None), None)


def _online_step_without_rescaling(
    running_max: np.ndarray, running_sum: np.ndarray, out: np.ndarray, scores: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    new_max = np.maximum(running_max, scores.max(axis=-1, keepdims=True))  # (T, 1)
    exps = np.exp(scores - new_max)  # (T, block)
    return new_max, running_sum + exps.sum(axis=-1, keepdims=True), out + exps @ values


ONLINE_SOFTMAX_STEP = Exercise(
    name="online softmax step",
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
