"""Chapter 4 exercises: split the heads, merge them back, and multi-head attention."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..multihead import merge_heads, split_heads
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array, compare_count

__all__ = ["check_split_heads", "check_merge_heads", "check_cross_attention_count"]


def _split_heads_cases(rng: np.random.Generator) -> CaseList:
    shapes = [((4, 8), 2), ((2, 5, 12), 3), ((2, 3, 4, 16), 4), ((3, 6), 1), ((2, 3, 6), 6)]
    return [(f"x {shape}, H={H}", (rng.normal(size=shape), H)) for shape, H in shapes]


SPLIT_HEADS = Exercise(
    name="split heads",
    kind="implement",
    concept="splitting the width into heads",
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
    kind="implement",
    concept="merging heads back",
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


def _cross_attention_count(D: int, kdim: int, vdim: int, bias: bool) -> int:
    weights = D * D + kdim * D + vdim * D + D * D  # W_Q (D, D), W_K (kdim, D), W_V (vdim, D), W_O (D, D)
    return weights + (4 * D if bias else 0)  # every projection's output, and so its bias, is D wide


CROSS_ATTENTION_COUNT = Exercise(
    name="cross-attention parameter count",
    kind="count",
    concept="the weights of cross-attention",
    chapter=4,
    number=3,
    cases=lambda rng: [
        (f"D={D}, kdim={k}, vdim={v}, bias={b}", (D, k, v, b))
        for D, k, v, b in [
            (16, 16, 16, True),
            (16, 8, 12, True),
            (16, 8, 12, False),
            (64, 32, 48, True),
            (768, 1024, 512, True),
        ]
    ],
    reference=_cross_attention_count,
    compare=compare_count(
        "the parameter count", "got {got}, which is not the number of entries in the four weights and biases"
    ),
    mistakes=(
        Mistake(
            lambda D, kdim, vdim, bias: 4 * D * D + (4 * D if bias else 0),
            "It matches the self-attention count; W_K has kdim rows and W_V has vdim rows",
        ),
        Mistake(
            lambda D, kdim, vdim, bias: _cross_attention_count(D, kdim, vdim, bias) - (3 * D if bias else 0),
            "It matches leaving out the input projections' biases, D each",
        ),
        Mistake(
            lambda D, kdim, vdim, bias: (
                _cross_attention_count(D, kdim, vdim, bias) - (2 * D - kdim - vdim if bias else 0)
            ),
            "It matches biases as long as the inputs; a bias is as long as its projection's output, D",
        ),
    ),
)


def check_cross_attention_count(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(D, kdim, vdim, bias) -> int``: the parameters of ``nn.MultiheadAttention(D, H, kdim=, vdim=, bias=)``.

    See chapter 4, exercise 3.
    """
    return CROSS_ATTENTION_COUNT.check(fn)
