"""Chapter 4 exercises: split the heads, merge them back, and multi-head attention."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..attention import scaled_dot_product_attention
from ..multihead import merge_heads, multihead_attention, split_heads
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array, compare_pair

__all__ = ["check_split_heads", "check_merge_heads", "check_multihead"]


def _split_heads_cases(rng: np.random.Generator) -> CaseList:
    shapes = [((4, 8), 2), ((2, 5, 12), 3), ((2, 3, 4, 16), 4), ((3, 6), 1), ((2, 3, 6), 6)]
    return [(f"x {shape}, H={H}", (rng.normal(size=shape), H)) for shape, H in shapes]


SPLIT_HEADS = Exercise(
    name="split heads",
    chapter=4,
    number=1,
    cases=_split_heads_cases,
    reference=split_heads,
    compare=compare_array("heads"),
    mistakes=(
        Mistake(
            lambda x, H: x.reshape(*x.shape[:-2], H, x.shape[-2], x.shape[-1] // H),
            "It matches a reshape alone, which mixes tokens and columns: reshape to (..., T, H, Dh), then swap T and H",
        ),
    ),
)


def check_split_heads(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, num_heads)``: (..., T, D) -> (..., H, T, Dh), consecutive columns per head.

    See chapter 4, exercise 1.
    """
    return SPLIT_HEADS.check(fn)


MERGE_HEADS = Exercise(
    name="merge heads",
    chapter=4,
    number=2,
    cases=lambda rng: [
        (f"x {s}", (rng.normal(size=s),)) for s in [(2, 4, 3), (2, 3, 5, 4), (2, 2, 4, 3, 2), (1, 6, 1)]
    ],
    reference=merge_heads,
    compare=compare_array("merged output"),
    mistakes=(
        Mistake(
            lambda x: x.reshape(*x.shape[:-3], x.shape[-2], -1),
            "It matches a reshape alone; first swap the head and token axes back to (..., T, H, Dh)",
        ),
    ),
)


def check_merge_heads(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x)``: (..., H, T, Dh) -> (..., T, H*Dh), the inverse of splitting.

    See chapter 4, exercise 2.
    """
    return MERGE_HEADS.check(fn)


def _multihead_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for shape, H in [((5, 8), 2), ((2, 6, 12), 3), ((2, 4, 16), 4), ((3, 6), 1)]:
        D = shape[-1]
        x, w_qkv, w_out = rng.normal(size=shape), rng.normal(size=(D, 3 * D)) / np.sqrt(D), rng.normal(size=(D, D))
        cases.append((f"x {shape}, H={H}", (x, w_qkv, w_out, H)))
    return cases


def _multihead_scaled_by_model_width(x: np.ndarray, w_qkv: np.ndarray, w_out: np.ndarray, H: int) -> Any:
    q, k, v = (split_heads(a, H) for a in np.split(x @ w_qkv, 3, axis=-1))  # each (..., H, T, Dh)
    out, weights = scaled_dot_product_attention(q, k, v, scale=x.shape[-1] ** -0.5)  # 1/sqrt(D), not 1/sqrt(Dh)
    return merge_heads(out) @ w_out, weights


MULTIHEAD = Exercise(
    name="multi-head attention",
    chapter=4,
    number=3,
    cases=_multihead_cases,
    reference=multihead_attention,
    compare=compare_pair,
    mistakes=(
        Mistake(
            _multihead_scaled_by_model_width,
            "It matches a scale of 1/sqrt(D); each head scales by 1/sqrt(Dh), its own width",
        ),
    ),
)


def check_multihead(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, w_qkv, w_out, num_heads) -> (y, weights)`` without biases or mask.

    ``weights`` has shape (..., H, T, T); the scale is ``1/sqrt(Dh)``.
    See chapter 4, exercise 3.
    """
    return MULTIHEAD.check(fn)
