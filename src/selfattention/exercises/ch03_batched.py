"""Chapter 3 exercises: batched scores, an additive mask, and self-attention with a mask."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..attention import scaled_dot_product_attention, self_attention
from ..masks import causal_mask
from ._framework import CaseList, CheckResult, Exercise, Mistake, answer_array, compare_array, compare_pair

__all__ = ["check_batched_scores", "check_additive_mask", "check_self_attention"]


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


def _compare_mask(got: Any, expected: np.ndarray) -> str | None:
    got = answer_array(got)
    if got is None:
        return "the mask should be an array of numbers"
    if got.shape != expected.shape:
        return f"the mask should have shape {expected.shape}; got {got.shape}"
    if not np.issubdtype(got.dtype, np.floating):
        return f"an additive mask must be floating (it holds -inf); got dtype {got.dtype}"
    if not np.array_equal(got, expected):
        return "the mask should be 0 where the input is False and -inf where it is True"
    return None


ADDITIVE_MASK = Exercise(
    name="additive mask",
    chapter=3,
    number=2,
    cases=_additive_mask_cases,
    reference=lambda blocked: np.where(blocked, -np.inf, 0.0),
    compare=_compare_mask,
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


def _self_attention_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for shape, masked in [((5, 4), False), ((5, 4), True), ((3, 6, 8), True), ((2, 2, 4, 4), True), ((1, 1, 6), False)]:
        D, T = shape[-1], shape[-2]
        x, w_qkv, w_out = rng.normal(size=shape), rng.normal(size=(D, 3 * D)) / np.sqrt(D), rng.normal(size=(D, D))
        args = (x, w_qkv, w_out, causal_mask(T) if masked else None)
        cases.append((f"x {shape}, {'causal mask' if masked else 'no mask'}", args))
    return cases


def _self_attention_scaled(x: np.ndarray, w_qkv: np.ndarray, w_out: np.ndarray, mask: Any, power: float) -> Any:
    """Self-attention with the scores divided by ``D ** power`` instead of ``sqrt(D)``."""
    q, k, v = np.split(x @ w_qkv, 3, axis=-1)  # each (..., T, D)
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask, scale=x.shape[-1] ** -power)
    return out @ w_out, weights


SELF_ATTENTION = Exercise(
    name="self-attention",
    chapter=3,
    number=3,
    cases=_self_attention_cases,
    reference=self_attention,
    compare=compare_pair,
    mistakes=(
        Mistake(partial(_self_attention_scaled, power=0), "It matches unscaled scores: divide Q K^T by sqrt(D)"),
        Mistake(partial(_self_attention_scaled, power=1), "It matches dividing by D; divide by sqrt(D)"),
        Mistake(
            lambda x, w_qkv, w_out, mask: self_attention(x, w_qkv, w_out),
            "It matches the output with the mask left out: add the mask to the scores before the softmax",
        ),
    ),
)


def check_self_attention(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, w_qkv, w_out, mask) -> (y, weights)``, batched or not.

    ``x`` is (..., T, D), ``w_qkv`` (D, 3D) in [q | k | v] order, ``w_out``
    (D, D), and ``mask`` is None or an additive float mask (T, T).
    See chapter 3, exercise 3.
    """
    return SELF_ATTENTION.check(fn)
