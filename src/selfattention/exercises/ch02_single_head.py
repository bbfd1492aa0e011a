"""Chapter 2 exercises: a stable softmax, one attention head, and its parameter count."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..attention import scaled_dot_product_attention
from ..scores import softmax
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array, compare_count

__all__ = ["check_stable_softmax", "check_single_head", "check_head_parameter_count"]


def _stable_softmax_cases(rng: np.random.Generator) -> CaseList:
    return [
        ("small scores", (rng.normal(size=(3, 5)),)),
        ("scores around +1e4", (1e4 + rng.normal(size=(4, 6)),)),
        ("scores around -1e4", (-1e4 + rng.normal(size=(4, 6)),)),
        ("float32 scores in the hundreds", ((300.0 * rng.normal(size=(2, 3, 7))).astype(np.float32),)),
        ("a single score per row", (rng.normal(size=(5, 1)),)),
    ]


STABLE_SOFTMAX = Exercise(
    name="stable softmax",
    chapter=2,
    number=1,
    cases=_stable_softmax_cases,
    reference=softmax,
    # The exercise states no dtype rule, so an answer in float64 (or float32) passes.
    compare=compare_array("weights"),
    float32=False,  # its float64 cases near 1e4 lose their differences in float32; it has its own float32 case
)


def check_stable_softmax(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x)``: a softmax over the last axis that survives huge scores.

    The cases include scores around +-1e4 in float64 and in the hundreds in
    float32, where a softmax that does not subtract the maximum overflows.
    See chapter 2, exercise 1.
    """
    return STABLE_SOFTMAX.check(fn)


def _single_head_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for B, T, D, Dk in [(1, 1, 4, 2), (2, 5, 6, 3), (3, 9, 12, 4)]:
        x = rng.normal(size=(B, T, D))
        w_q, w_k, w_v = (rng.normal(scale=D**-0.5, size=(D, Dk)) for _ in range(3))
        cases.append((f"B={B}, T={T}, D={D}, Dk={Dk}", (x, w_q, w_k, w_v, rng.normal(scale=Dk**-0.5, size=(Dk, D)))))
    return cases


def _single_head(x: np.ndarray, w_q: np.ndarray, w_k: np.ndarray, w_v: np.ndarray, w_o: np.ndarray) -> np.ndarray:
    out, _ = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)  # (B, T, Dk)
    return out @ w_o  # (B, T, D)


def _single_head_scaled_by_model_width(x: np.ndarray, w_q: Any, w_k: Any, w_v: Any, w_o: Any) -> np.ndarray:
    out, _ = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, scale=x.shape[-1] ** -0.5)  # 1/sqrt(D)
    return out @ w_o


SINGLE_HEAD = Exercise(
    name="single head",
    chapter=2,
    number=2,
    cases=_single_head_cases,
    reference=_single_head,
    compare=compare_array("output"),
    mistakes=(
        Mistake(
            _single_head_scaled_by_model_width,
            "It matches scaling by 1/sqrt(D), the model width; "
            "scale by 1/sqrt(Dk), the width of the vectors being dotted",
        ),
    ),
)


def check_single_head(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, w_q, w_k, w_v, w_o) -> output`` for one attention head.

    ``x`` is (B, T, D); ``w_q``, ``w_k``, ``w_v`` are (D, Dk) and ``w_o`` is
    (Dk, D); the output is (B, T, D), with scores scaled by ``1/sqrt(Dk)``.
    See chapter 2, exercise 2.
    """
    return SINGLE_HEAD.check(fn)


HEAD_PARAMETER_COUNT = Exercise(
    name="parameter count",
    chapter=2,
    number=3,
    cases=lambda rng: [(f"d_model={d}, d_k={k}", (d, k)) for d, k in [(768, 64), (512, 64), (3, 3), (10, 7)]],
    reference=lambda d_model, d_k: 4 * d_model * d_k,
    compare=compare_count(
        "the parameter count", "got {got}, which is not the number of entries in W_q, W_k, W_v and W_o"
    ),
    mistakes=(Mistake(lambda d_model, d_k: 3 * d_model * d_k, "It matches W_q, W_k and W_v alone: count W_o too"),),
)


def check_head_parameter_count(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(d_model, d_k) -> int``: the weights in W_q, W_k, W_v and W_o.

    No biases, as in chapter 2. See chapter 2, exercise 3.
    """
    return HEAD_PARAMETER_COUNT.check(fn)
