"""Chapter 1 exercises: the weights of a summed query, a query that word 2 wins, and a temperature for a target."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..scores import softmax
from ._framework import (
    RTOL_FLOAT32,
    CaseList,
    CheckResult,
    Exercise,
    Mistake,
    answer_array,
    compare_array,
)

__all__ = [
    "check_weights_of_sum",
    "check_query_favouring_word_2",
    "check_temperature_for",
]


def _word_example() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The four one-hot-ish words (4, 3) and the integer W_Q, W_K, W_V (3, 3) of chapter 1."""
    words = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]])
    legacy = np.random.RandomState(42)  # the same stream as np.random.seed(42)
    w_q, w_k, w_v = (legacy.randint(3, size=(3, 3)) for _ in range(3))
    return words, w_q, w_k, w_v


def _word_scores() -> np.ndarray:
    """Chapter 1's (4, 4) integer scores Q K^T, row i for query i."""
    words, w_q, w_k, _ = _word_example()
    return (words @ w_q) @ (words @ w_k).T


def _weights_of(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """softmax(queries @ keys.T / sqrt(Dk)): (..., Dk) queries and (S, Dk) keys give (..., S) weights."""
    return softmax(queries @ keys.T / np.sqrt(keys.shape[-1]))


def _sum_cases(rng: np.random.Generator) -> CaseList:
    weights = softmax(_word_scores() / np.sqrt(3.0))  # (4, 4): the chapter's weights
    cases = [("chapter 1's words 1 and 2, whose sum is word 3", (weights[0], weights[1]))]
    keys, (a, b) = rng.normal(size=(5, 4)), 2 * rng.normal(size=(2, 4))
    cases.append(("random, S=5", (_weights_of(a, keys), _weights_of(b, keys))))
    keys, a = rng.normal(size=(4, 3)), 2 * rng.normal(size=3)
    cases.append(("query b scores every key alike, so w_b is uniform; S=4", (_weights_of(a, keys), np.full(4, 0.25))))
    keys, a = rng.normal(size=(6, 8)), 2 * rng.normal(size=8)
    cases.append(("opposite queries, b = -a; S=6", (_weights_of(a, keys), _weights_of(-a, keys))))
    cases.append(("one key, S=1", (np.ones(1), np.ones(1))))
    keys, (a, b) = rng.normal(size=(7, 4)), 2 * rng.normal(size=(2, 3, 4))
    cases.append(("three pairs of queries at once, shape (3, 7)", (_weights_of(a, keys), _weights_of(b, keys))))
    keys, (a, b) = rng.normal(size=(8, 16)), 3 * rng.normal(size=(2, 16))
    pair = (_weights_of(a, keys).astype(np.float32), _weights_of(b, keys).astype(np.float32))
    cases.append(("float32 weights, S=8", pair))
    return cases


def _weights_of_sum(w_a: np.ndarray, w_b: np.ndarray) -> np.ndarray:
    """The weights of query a + b: exp(s_a + s_b) = exp(s_a) exp(s_b), so the product, renormalised per row."""
    product = np.asarray(w_a) * np.asarray(w_b)
    return product / product.sum(axis=-1, keepdims=True)


WEIGHTS_OF_SUM = Exercise(
    name="the weights of a summed query",
    kind="derive",
    concept="scores add, so weights multiply (and are renormalised)",
    chapter=1,
    number=1,
    cases=_sum_cases,
    reference=_weights_of_sum,
    compare=compare_array("weights"),
    mistakes=(
        Mistake(
            lambda w_a, w_b: (w_a + w_b) / 2,
            "It matches averaging the two weight vectors; the scores add, and exp turns a sum of scores into a "
            "product of weights: multiply them, then divide by the sum",
        ),
        Mistake(
            lambda w_a, w_b: w_a * w_b,
            "It matches the product w_a * w_b without renormalising; divide it by its sum over the keys, so that "
            "the weights sum to 1",
        ),
        Mistake(
            lambda w_a, w_b: softmax(w_a + w_b),
            "It matches a softmax of w_a + w_b; weights are not scores: a score is log(weight) plus a constant "
            "for each query, so add the logs, or multiply the weights",
        ),
        Mistake(
            lambda w_a, w_b: _weights_of_sum(np.sqrt(w_a), np.sqrt(w_b)),
            "It matches the normalised square root of the product, which is the weights of the mean query "
            "(a + b) / 2; the sum a + b has twice its scores, so take the product itself",
        ),
        Mistake(
            lambda w_a, w_b: w_a * w_b / (w_a * w_b).sum(),
            "It matches dividing by the sum of the whole array; each row is one query's weights, so divide each "
            "row by its own sum (axis=-1, keepdims=True)",
        ),
    ),
)


def check_weights_of_sum(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(w_a, w_b) -> w``: the attention weights of query a + b, from those of a and b alone.

    ``w_a`` and ``w_b`` are the weights, shape (S,) or (..., S), that queries
    a and b give the same S keys (softmax over the last axis of the scores
    scaled by ``1/sqrt(Dk)``); the answer is the weights that the query a + b
    gives them, same shape, without the keys. See chapter 1, exercise 1.
    """
    return WEIGHTS_OF_SUM.check(fn)


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


# --- exercise 3: the temperature for a target weight -----------------------------------


def _reachable(scores: np.ndarray, target: float) -> tuple[bool, bool]:
    """Whether ``target`` is below the cap 1/k (k tied largest scores) and above the floor 1/S."""
    s = np.asarray(scores, dtype=np.float64)
    tied = int(np.count_nonzero(s == s.max()))
    return target < 1 / tied, target > 1 / s.size


def _temperature_for(scores: np.ndarray, target: float) -> float | None:
    """The tau at which the largest weight of softmax(scores / tau) is ``target``, or None if none is.

    The largest weight falls from 1/k (k tied largest scores) as tau -> 0 to
    1/S as tau -> inf, strictly when the scores are not all equal; bisection
    on the inverse temperature beta = 1/tau, computed in float64, finds it.
    """
    s = np.asarray(scores, dtype=np.float64)
    if not all(_reachable(s, target)):
        return None

    def largest(beta: float) -> float:  # the largest weight at inverse temperature beta, increasing in beta
        return float(softmax(beta * s).max())

    low, high = 0.0, 1.0
    while largest(high) <= target:
        high *= 2.0
    for _ in range(200):  # far more halvings than float64 has digits
        middle = 0.5 * (low + high)
        low, high = (middle, high) if largest(middle) <= target else (low, middle)
    return 1.0 / (0.5 * (low + high))


def _temperature_cases(rng: np.random.Generator) -> CaseList:
    scores = _word_scores()  # (4, 4) integers
    query_1_largest = float(softmax(scores[0] / np.sqrt(3.0)).max())  # the chapter's 0.7491, unrounded
    cases = [
        ("query 1's scores [8, 2, 10, 2], target its largest weight in the chapter", (scores[0], query_1_largest)),
        ("word 2's scores [4, 0, 4, 0], a tie, target 0.45", (scores[1], 0.45)),
        ("word 2's scores [4, 0, 4, 0], a tie, target 0.6", (scores[1], 0.6)),
        ("word 2's scores [4, 0, 4, 0], a tie, target exactly 1/2", (scores[1], 0.5)),
        ("random, 6 scores, target 0.5", (3 * rng.normal(size=6), 0.5)),
        ("random, 6 scores, target 0.99", (3 * rng.normal(size=6), 0.99)),
        ("random, 4 scores, target 0.2, below 1/4", (rng.normal(size=4), 0.2)),
        ("one key, target 0.7", (rng.normal(size=1), 0.7)),
        ("three equal scores, target 0.5", (np.full(3, 2.0), 0.5)),
        ("float32 scores in the hundreds, target 0.9", ((200 + 5 * rng.normal(size=5)).astype(np.float32), 0.9)),
    ]
    return cases


def _judge_temperature(got: Any, want: float | None) -> str | None:
    """What is wrong with a returned temperature: its form, a missing or extra None, or its value."""
    if want is None:
        return None if got is None else f"no temperature reaches this target, so the answer is None; got {got!r}"
    if got is None:
        return "a temperature reaches this target, so return it; got None"
    tau = answer_array(got)
    if tau is None or tau.size != 1 or tau.dtype.kind == "b":
        return f"the temperature should be one number (or None); got {type(got).__name__}"
    value = float(tau.reshape(()))
    if not np.isfinite(value):
        return f"got tau = {value}, not a finite number"
    if value <= 0:
        return f"got tau = {value:.6g}; a temperature is positive"
    if abs(value - want) <= RTOL_FLOAT32 * want:
        return None
    if value > want:
        problem = f"got tau = {value:.6g}, too large: at your tau the largest weight is below the target"
    else:
        problem = f"got tau = {value:.6g}, too small: at your tau the largest weight is above the target"
    if abs(value - want) < 1e-2 * want:
        problem += " (only just: does your search stop too early? Halve the interval until tau has 6 digits)"
    return problem


def _two_key_temperature(scores: np.ndarray, target: float) -> float | None:
    """The two-key formula: p = 1 / (1 + exp(-(s1 - s2) / tau)), solved for tau, as if the others had no weight."""
    top, second = np.sort(np.asarray(scores, dtype=np.float64))[::-1][:2]
    return None if target <= 0.5 or top == second else float((top - second) / np.log(target / (1 - target)))


def _naive_search(scores: np.ndarray, target: float) -> float | None:
    """A right bisection whose weights use a bare exp, in the scores' own dtype: float32 overflows past 88.7."""
    if _temperature_for(scores, target) is None:
        return None
    low, high = 1e-3, 1e3
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(100):
            tau = (low * high) ** 0.5  # a Python float: float32 scores stay float32
            e = np.exp(np.asarray(scores) / tau)  # inf / inf = NaN, and NaN > target is False
            low, high = (tau, high) if (e / e.sum()).max() > target else (low, tau)
    return (low * high) ** 0.5


def _overflows(scores: np.ndarray, target: float) -> bool:
    """Whether exp(score / tau) at the right tau overflows the scores' float dtype."""
    tau, s = _temperature_for(scores, target), np.asarray(scores)
    dtype = s.dtype if s.dtype.kind == "f" else np.dtype(np.float64)
    return tau is not None and float(np.abs(s).max()) / tau > np.log(float(np.finfo(dtype).max))


TEMPERATURE_FOR = Exercise(
    name="the temperature for a target weight",
    kind="extend",
    concept="temperature: how sharp a softmax can get, and how a tie caps it",
    chapter=1,
    number=3,
    cases=_temperature_cases,
    reference=_temperature_for,
    compare=_judge_temperature,
    mistakes=(
        Mistake(
            lambda scores, target: None if (tau := _temperature_for(scores, target)) is None else 1 / tau,
            "It matches 1/tau, the inverse temperature: the scores are divided by tau, so return tau itself",
        ),
        Mistake(
            lambda scores, target: None if target <= 0.5 else _temperature_for(scores, target),
            "It matches returning None for a target of 1/2 or less; the largest weight takes every value between "
            "1/S (as tau grows) and 1/k (as tau -> 0, k tied largest scores), so with more than two keys a target "
            "below 1/2 can be reached",
            detect=lambda got, args: got is None and args[1] <= 0.5,
        ),
        Mistake(
            _two_key_temperature,
            "It matches the two-key formula tau = (s1 - s2) / ln(p / (1 - p)); with more keys the others take "
            "part of the weight too, so search for tau instead (the largest weight falls as tau grows)",
        ),
        Mistake(
            lambda scores, target: 1e-3 if not _reachable(scores, target)[0] else _temperature_for(scores, target),
            "It matches returning a temperature where a tie caps the weight: k tied largest scores always get "
            "equal weights, so none passes 1/k however small tau is; return None for a target of 1/k or more",
            detect=lambda got, args: got is not None and not _reachable(*args)[0],
        ),
        Mistake(
            lambda scores, target: 1e3 if not _reachable(scores, target)[1] else _temperature_for(scores, target),
            "It matches returning a temperature for a target at or below 1/S: as tau grows the weights only "
            "approach the uniform 1/S each, so no tau reaches such a target; return None",
            detect=lambda got, args: got is not None and not _reachable(*args)[1],
        ),
        Mistake(
            _naive_search,
            "It matches weights from a bare exp(scores / tau): in float32 exp overflows past 88.7 and inf / inf "
            "is NaN; compute the weights with sa.softmax, which subtracts the largest score first",
            detect=lambda got, args: _overflows(*args),
        ),
    ),
)


def check_temperature_for(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(scores, target) -> tau or None``: the temperature that gives the largest weight ``target``.

    ``scores`` has shape (S,) and ``target`` is a number in (0, 1); the answer
    is the ``tau > 0`` at which the largest entry of ``softmax(scores / tau)``
    equals ``target``, within a relative 1e-4, or None when no temperature
    gives it. See chapter 1, exercise 3.
    """
    return TEMPERATURE_FOR.check(fn)
