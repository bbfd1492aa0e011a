"""Chapter 3 exercises: batched scores, an additive mask, and the queries left padding leaves with no key."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array, shaped_answer

__all__ = ["check_batched_scores", "check_additive_mask", "check_queries_without_keys"]


def _batched_scores_cases(rng: np.random.Generator) -> CaseList:
    shapes = [((4, 3), (6, 3)), ((2, 5, 4), (2, 5, 4)), ((2, 3, 4, 8), (2, 3, 7, 8)), ((2, 3, 4, 8), (3, 4, 8))]
    return [(f"q {q}, k {k}", (rng.normal(size=q), rng.normal(size=k))) for q, k in shapes]


def _scores(q: np.ndarray, k: np.ndarray, scaled: bool = True) -> np.ndarray:
    scores = np.matmul(q, np.swapaxes(k, -1, -2))  # (..., T, S)
    return scores / np.sqrt(q.shape[-1]) if scaled else scores


BATCHED_SCORES = Exercise(
    name="batched scores",
    kind="implement",
    concept="scores over any batch axes",
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


def _compare_additive_mask(got: Any, expected: np.ndarray) -> str | None:
    """What is wrong with a returned additive mask: its form, its shape, its dtype, then its values."""
    answer, problem = shaped_answer(got, expected, "mask")
    if problem:
        return problem
    if not np.issubdtype(answer.dtype, np.floating):
        return f"an additive mask must be floating (it holds -inf); got dtype {answer.dtype}"
    if not np.array_equal(answer, expected):
        return "the mask should be 0 where the input is False and -inf where it is True"
    return None


ADDITIVE_MASK = Exercise(
    name="additive mask",
    kind="implement",
    concept="boolean and additive mask conventions",
    chapter=3,
    number=2,
    cases=_additive_mask_cases,
    reference=lambda blocked: np.where(blocked, -np.inf, 0.0),
    compare=_compare_additive_mask,
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


def _no_key_cases(rng: np.random.Generator) -> CaseList:
    return [
        ("lengths [5, 3], S=5", (np.array([5, 3]), 5)),
        ("lengths [1], S=4", (np.array([1]), 4)),
        ("lengths [2, 6, 4], S=6", (np.array([2, 6, 4]), 6)),
        ("lengths [7, 1, 3, 5], S=7", (np.array([7, 1, 3, 5]), 7)),
    ]


def _queries_without_keys(lengths: np.ndarray, S: int, shift: int = 0) -> np.ndarray:
    """(B, S): True where query i of a left-padded sequence has only padding at or before it."""
    first_real = S - np.asarray(lengths)[:, None]  # (B, 1): position of the first real token
    return np.arange(S)[None, :] < first_real + shift


def _compare_no_key(got: Any, expected: np.ndarray) -> str | None:
    answer, problem = shaped_answer(got, expected, "answer", shape_note=" (B, S)")
    if problem:
        return problem
    if answer.dtype != np.bool_:
        return f"the answer should be boolean (True = the query has no key); got dtype {answer.dtype}"
    if not np.array_equal(answer, expected):
        b, i = np.argwhere(answer != expected)[0]
        return f"sequence {b}, query {i}: expected {bool(expected[b, i])}, got {bool(answer[b, i])}"
    return None


QUERIES_WITHOUT_KEYS = Exercise(
    name="queries with no key",
    kind="derive",
    concept="padding and the causal mask together",
    chapter=3,
    number=3,
    cases=_no_key_cases,
    reference=_queries_without_keys,
    compare=_compare_no_key,
    mistakes=(
        Mistake(
            lambda lengths, S: np.zeros((len(lengths), S), dtype=bool),
            "No query came out keyless: that is right padding, where key 0 is real. With left padding "
            "the padding comes first, and a causal query sees only keys at or before it",
        ),
        Mistake(
            partial(_queries_without_keys, shift=1),
            "Off by one: the first real token, at position S - length, may attend to itself",
        ),
        Mistake(
            lambda lengths, S: ~_queries_without_keys(lengths, S),
            "True and False are swapped: True should mark the queries that have no key",
        ),
        Mistake(
            lambda lengths, S: np.arange(S)[None, :] < np.asarray(lengths)[:, None],
            "It marks the first `length` queries: the padding is S - length tokens long, not length",
        ),
    ),
    float32=False,  # integer lengths in, a boolean array out: nothing to compute in float32
)


def check_queries_without_keys(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(lengths, S) -> no_key``: which queries of a left-padded, causally masked batch see no key.

    Each sequence ``b`` has ``lengths[b]`` real tokens, left-padded to ``S``
    (the padding comes first). Under the causal mask, query ``i`` may see keys
    ``0 .. i``, and padding keys are blocked. ``no_key`` is a boolean
    (B, S) array, True where every key of query ``i`` is blocked.
    See chapter 3, exercise 3.
    """
    return QUERIES_WITHOUT_KEYS.check(fn)
