"""Chapter 1 exercises: attention for one query, in matrix form, and with a temperature."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..attention import scaled_dot_product_attention
from ..scores import softmax
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array, compare_pair

__all__ = ["check_single_query", "check_attention_matrix", "check_softmax_temperature"]


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
    chapter=1,
    number=1,
    cases=_single_query_cases,
    reference=_single_query,
    compare=compare_pair,
    mistakes=(Mistake(partial(_single_query, scale=1.0), "It matches unscaled scores: divide each score by sqrt(Dk)"),),
)


def check_single_query(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(query, keys, values) -> (output, weights)`` for one query.

    ``query`` has shape (Dk,), ``keys`` (S, Dk) and ``values`` (S, Dv); the
    answer is the output vector (Dv,) and the weights (S,), scaled by
    ``1/sqrt(Dk)``. See chapter 1, exercise 1.
    """
    return SINGLE_QUERY.check(fn)


def _attention_matrix_cases(rng: np.random.Generator) -> CaseList:
    cases = [("word example", _word_example())]
    for T, D, Dk, Dv in [(1, 3, 3, 3), (6, 4, 2, 5), (9, 8, 8, 8)]:
        args = rng.normal(size=(T, D)), rng.normal(size=(D, Dk)), rng.normal(size=(D, Dk)), rng.normal(size=(D, Dv))
        cases.append((f"random, T={T}, D={D}, Dk={Dk}, Dv={Dv}", args))
    return cases


def _attention_matrix(x: np.ndarray, w_q: np.ndarray, w_k: np.ndarray, w_v: np.ndarray, scale: Any = None) -> Any:
    return scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, scale=scale)  # (T, Dv), (T, T)


def _softmax_over_queries(x: np.ndarray, w_q: np.ndarray, w_k: np.ndarray, w_v: np.ndarray) -> Any:
    q, k = x @ w_q, x @ w_k  # (T, Dk)
    weights = softmax(q @ k.T / np.sqrt(q.shape[-1]), axis=0)  # (T, T); each column sums to 1
    return weights @ (x @ w_v), weights


ATTENTION_MATRIX = Exercise(
    name="attention in matrix form",
    chapter=1,
    number=2,
    cases=_attention_matrix_cases,
    reference=_attention_matrix,
    compare=compare_pair,
    mistakes=(
        Mistake(partial(_attention_matrix, scale=1.0), "It matches unscaled scores: divide Q K^T by sqrt(Dk)"),
        Mistake(
            _softmax_over_queries,
            "It matches a softmax over the queries (axis 0); each row, one query, must sum to 1 over the keys",
        ),
    ),
)


def check_attention_matrix(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(words, w_q, w_k, w_v) -> (output, weights)`` in matrix form.

    ``words`` has shape (T, D) and each weight (D, Dk) or (D, Dv); the answer is
    the output (T, Dv) and the weights (T, T). See chapter 1, exercise 2.
    """
    return ATTENTION_MATRIX.check(fn)


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
    ),
)


def check_softmax_temperature(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(scores, tau)``: a softmax over the last axis of ``scores / tau``.

    See chapter 1, exercise 3.
    """
    return SOFTMAX_TEMPERATURE.check(fn)
