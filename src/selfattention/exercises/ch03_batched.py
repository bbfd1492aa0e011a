"""Chapter 3 exercises: batched scores, an additive mask, and self-attention with a mask."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..masks import causal_mask
from ._framework import CaseList, CheckResult, Exercise, Mistake, answer_array, compare_array

__all__ = ["check_batched_scores", "check_additive_mask", "check_kv_cache_mask"]


def _batched_scores_cases(rng: np.random.Generator) -> CaseList:
    shapes = [((4, 3), (6, 3)), ((2, 5, 4), (2, 5, 4)), ((2, 3, 4, 8), (2, 3, 7, 8)), ((2, 3, 4, 8), (3, 4, 8))]
    return [(f"q {q}, k {k}", (rng.normal(size=q), rng.normal(size=k))) for q, k in shapes]


def _scores(q: np.ndarray, k: np.ndarray, scaled: bool = True) -> np.ndarray:
    scores = np.matmul(q, np.swapaxes(k, -1, -2))  # (..., T, S)
    return scores / np.sqrt(q.shape[-1]) if scaled else scores


BATCHED_SCORES = Exercise(
    name="batched scores",
    chapter=3,
    number=1,
    cases=_batched_scores_cases,
    reference=_scores,
    compare=compare_array("scores"),
    mistakes=(Mistake(partial(_scores, scaled=False), "It matches the unscaled scores: divide by sqrt(Dk)"),),
)


def check_batched_scores(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(q, k) -> scores``: ``q K^T / sqrt(Dk)`` over any leading batch axes.

    ``q`` is (..., T, Dk) and ``k`` is (..., S, Dk), with batch axes that
    broadcast; the scores are (..., T, S). See chapter 3, exercise 1.
    """
    return BATCHED_SCORES.check(fn)


def _additive_mask_cases(rng: np.random.Generator) -> CaseList:
    return [
        ("causal, T=5", (np.triu(np.ones((5, 5), dtype=bool), k=1),)),
        ("nothing blocked", (np.zeros((3, 4), dtype=bool),)),
        ("random, batched (2, 4, 6)", (rng.random((2, 4, 6)) < 0.5,)),
    ]


def _compare_mask(got: Any, expected: np.ndarray, *, boolean: bool) -> str | None:
    """What is wrong with a returned mask: its form, its shape, its dtype (bool or floating), then its values."""
    answer = answer_array(got)
    if answer is None:
        return f"the mask should be an array; got {type(got).__name__}"
    if answer.shape != expected.shape:
        return f"the mask should have shape {expected.shape}; got {answer.shape}"
    if boolean and answer.dtype != np.bool_:  # exercise 3 asks for a boolean mask
        return f"the mask should be boolean (True = may attend); got dtype {answer.dtype}"
    if not boolean and not np.issubdtype(answer.dtype, np.floating):
        return f"an additive mask must be floating (it holds -inf); got dtype {answer.dtype}"
    if not np.array_equal(answer, expected):
        if boolean:
            return "the mask differs from the lower-right causal mask"
        return "the mask should be 0 where the input is False and -inf where it is True"
    return None


ADDITIVE_MASK = Exercise(
    name="additive mask",
    chapter=3,
    number=2,
    cases=_additive_mask_cases,
    reference=lambda blocked: np.where(blocked, -np.inf, 0.0),
    compare=partial(_compare_mask, boolean=False),
    mistakes=(
        Mistake(
            lambda blocked: np.where(blocked, 0.0, -np.inf),
            "It matches the flipped polarity: in the input, True means blocked, which becomes -inf",
        ),
    ),
)


def check_additive_mask(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(blocked) -> mask``: turn an ``nn.MultiheadAttention`` boolean mask
    (True = blocked) into an additive float mask (0 = keep, -inf = blocked).

    See chapter 3, exercise 2.
    """
    return ADDITIVE_MASK.check(fn)


def _kv_cache_mask_cases(rng: np.random.Generator) -> CaseList:
    return [(f"T={T}, S={S}", (T, S)) for T, S in [(4, 4), (1, 5), (3, 7), (2, 3), (5, 9)]]


KV_CACHE_MASK = Exercise(
    name="KV-cache mask",
    chapter=3,
    number=3,
    cases=_kv_cache_mask_cases,
    reference=lambda T, S: causal_mask(T, S, dtype=bool),
    compare=partial(_compare_mask, boolean=True),
    mistakes=(
        Mistake(
            lambda T, S: np.tril(np.ones((T, S), dtype=bool)),
            "It matches a mask aligned at the upper left (query i sees keys 0..i); "
            "the queries are the last T of S tokens, so query i sits at position S - T + i",
        ),
        Mistake(
            lambda T, S: ~causal_mask(T, S, dtype=bool),
            "It matches the mask with True and False swapped; here True means the query may attend",
        ),
    ),
    float32=False,  # integer sizes in, a boolean mask out: nothing to compute in float32
)


def check_kv_cache_mask(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(T, S) -> mask``: the boolean (T, S) causal mask of T new queries over S keys.

    The queries are the last T of S tokens (after a KV cache of S - T), so
    query ``i`` may attend to keys ``0 .. S - T + i``; True means may attend.
    See chapter 3, exercise 3.
    """
    return KV_CACHE_MASK.check(fn)
