"""Chapter 1 exercises: attention for one query, in matrix form, and with a temperature."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..attention import scaled_dot_product_attention
from ..scores import softmax
from ._framework import (
    CaseList,
    CheckResult,
    Exercise,
    Mistake,
    answer_array,
    compare_array,
    compare_pair,
)

__all__ = [
    "check_single_query",
    "check_query_favouring_word_2",
    "check_softmax_temperature",
]


def _word_example() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The four one-hot-ish words (4, 3) and the integer W_Q, W_K, W_V (3, 3) of chapter 1."""
    words = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]])
    legacy = np.random.RandomState(42)  # the same stream as np.random.seed(42)
    w_q, w_k, w_v = (legacy.randint(3, size=(3, 3)) for _ in range(3))
    return words, w_q, w_k, w_v


def _single_query_cases(rng: np.random.Generator) -> CaseList:
    words, w_q, w_k, w_v = _word_example()
    cases = [(f"word example, query {i + 1}", (words[i] @ w_q, words @ w_k, words @ w_v)) for i in range(4)]
    for S, Dk, Dv in [(1, 3, 2), (5, 8, 4), (7, 2, 3)]:
        args = rng.normal(size=Dk), rng.normal(size=(S, Dk)), rng.normal(size=(S, Dv))
        cases.append((f"random, S={S}, Dk={Dk}, Dv={Dv}", args))
    return cases


def _single_query(query: np.ndarray, keys: np.ndarray, values: np.ndarray, scale: float | None = None) -> Any:
    out, weights = scaled_dot_product_attention(query[None, :], keys, values, scale=scale)  # (1, Dv), (1, S)
    return out[0], weights[0]


SINGLE_QUERY = Exercise(
    name="single-query attention",
    kind="implement",
    concept="attention for one query",
    chapter=1,
    number=1,
    cases=_single_query_cases,
    reference=_single_query,
    compare=compare_pair,
    mistakes=(
        Mistake(partial(_single_query, scale=1.0), "It matches unscaled scores: divide each score by sqrt(Dk)"),
        Mistake(
            lambda query, keys, values: _single_query(query, keys, values, scale=len(keys) ** -0.5),
            "It matches dividing by sqrt(S), the number of keys; the scale is sqrt(Dk), the width of a key",
        ),
    ),
)


def check_single_query(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(query, keys, values) -> (output, weights)`` for one query.

    ``query`` has shape (Dk,), ``keys`` (S, Dk) and ``values`` (S, Dv); the
    answer is the output vector (Dv,) and the weights (S,), scaled by
    ``1/sqrt(Dk)``. See chapter 1, exercise 1.
    """
    return SINGLE_QUERY.check(fn)


def _softmax_temperature_cases(rng: np.random.Generator) -> CaseList:
    words, w_q, w_k, _ = _word_example()
    word_scores = (words @ w_q) @ (words @ w_k).T  # (4, 4) integers
    cases = [("word scores, tau=sqrt(3)", (word_scores, float(np.sqrt(3.0))))]
    cases.append(("word scores, tau=1", (word_scores, 1.0)))
    for shape, tau in [((5,), 0.5), ((3, 4), 2.0), ((2, 3, 6), 10.0)]:
        cases.append((f"random {shape}, tau={tau}", (rng.normal(scale=3.0, size=shape), tau)))
    return cases


SOFTMAX_TEMPERATURE = Exercise(
    name="softmax with temperature",
    kind="extend",
    concept="how a temperature sharpens or flattens the weights",
    chapter=1,
    number=3,
    cases=_softmax_temperature_cases,
    reference=lambda scores, tau: softmax(np.asarray(scores) / tau),
    compare=compare_array("weights"),
    mistakes=(
        Mistake(
            lambda scores, tau: softmax(np.asarray(scores) * tau),
            "It matches multiplying by tau; divide the scores by tau",
        ),
        Mistake(
            lambda scores, tau: softmax((np.asarray(scores) / tau).reshape(-1)).reshape(np.shape(scores)),
            "It matches one softmax over the whole array; take it over the last axis only, so each row sums to 1",
        ),
    ),
)


def check_softmax_temperature(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(scores, tau)``: a softmax over the last axis of ``scores / tau``.

    See chapter 1, exercise 3.
    """
    return SOFTMAX_TEMPERATURE.check(fn)


def _word_2_weights(q: np.ndarray) -> np.ndarray:
    words, _, w_k, _ = _word_example()
    return softmax((words @ w_k) @ q / np.sqrt(3.0))  # chapter 1's keys, scaled scores


def _judge_word_2_query(got: Any, _example: Any) -> str | None:
    """What is wrong with a proposed query: its form, or the weights it gives (many queries are right)."""
    q = answer_array(got)
    if q is None or q.shape != (3,):
        return f"the query must be an array of 3 numbers; got {'no array' if q is None else f'shape {q.shape}'}"
    q = q.astype(np.float64)
    if not np.isfinite(q).all():
        return "the query must hold finite numbers"
    words, _, w_k, _ = _word_example()
    scores = (words @ w_k) @ q  # the scaling by 1/sqrt(3) changes no order
    others = np.delete(scores, 1)
    margin, tolerance = scores[1] - others.max(), 1e-9 * max(1.0, np.abs(scores).max())
    if margin > tolerance:  # a real win, not a tie that rounding tipped
        return None
    weights = _word_2_weights(q)
    if abs(margin) <= tolerance:
        rival = int(np.delete(np.arange(4), 1)[others.argmax()]) + 1
        return (
            f"word 2 ties word {rival} (the weights are {np.round(weights, 4).tolist()}); it must be the only largest"
        )
    return f"the weights are {np.round(weights, 4).tolist()}; word 2 (index 1) must be the only largest"


QUERY_FAVOURING_WORD_2 = Exercise(
    name="a query that favours word 2",
    kind="search",
    concept="why one key wins, and how to make another win",
    chapter=1,
    number=2,
    cases=lambda rng: [("chapter 1's four keys", ())],
    reference=lambda: np.array([0.0, 1.0, -2.0]),  # one of many: key 2 scores 0, key 3 -2, key 1 -2, key 4 -1
    compare=_judge_word_2_query,
    mistakes=(
        Mistake(
            lambda: np.array([0.0, 1.0, 0.0]),
            "It matches a query with no negative entry: key 3 is key 1 plus key 2, so with a non-negative query "
            "it scores at least as much as key 2 (the argument in the chapter); give the query a negative entry",
            detect=lambda got, args: (
                (q := answer_array(got)) is not None
                and q.shape == (3,)
                and bool(np.isfinite(q).all() and (q >= 0).all())
            ),
        ),
    ),
    passes="word 2 gets the only largest weight",
)


def check_query_favouring_word_2(fn: Callable[[], Any]) -> CheckResult:
    """Check ``fn() -> q``: a query of shape (3,) under which word 2 gets the largest weight.

    The keys are chapter 1's ``K = words @ W_K``, in which key 3 is key 1 plus
    key 2; the weights are ``softmax(K @ q / sqrt(3))``, and word 2 (index 1)
    must be the only largest. Many queries pass: there is no single answer.
    See chapter 1, exercise 2.
    """
    return QUERY_FAVOURING_WORD_2.check(fn)
