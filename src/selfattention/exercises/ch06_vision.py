"""Chapter 6 exercises: patchify, convolutional self-attention, and the T2T parameter count."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..attention import scaled_dot_product_attention
from ..vision import conv_self_attention_forward, patchify
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array, compare_count

__all__ = ["check_patchify", "check_conv_self_attention", "check_t2t_parameter_count"]


def _patchify_cases(rng: np.random.Generator) -> CaseList:
    shapes = [((1, 3, 8, 8), 4), ((2, 3, 6, 9), 3), ((2, 1, 4, 4), 2), ((1, 2, 4, 6), 1)]
    return [(f"images {shape}, patch_size={p}", (rng.normal(size=shape), p)) for shape, p in shapes]


def _patchify_channels_last(images: np.ndarray, p: int) -> np.ndarray:
    B, C, H, W = images.shape
    grid = images.reshape(B, C, H // p, p, W // p, p).transpose(0, 2, 4, 3, 5, 1)  # (B, rows, cols, p, p, C)
    return grid.reshape(B, -1, p * p * C)


PATCHIFY = Exercise(
    name="patchify",
    kind="implement",
    concept="an image as a sequence of patches",
    chapter=6,
    number=1,
    cases=_patchify_cases,
    reference=patchify,
    compare=compare_array("patches"),
    mistakes=(
        Mistake(
            lambda images, p: images.reshape(images.shape[0], -1, images.shape[1] * p * p),
            "It matches a reshape alone, which does not cut square patches: "
            "split H and W into (rows, p) and (cols, p) first",
        ),
        Mistake(
            _patchify_channels_last,
            "It matches flattening each patch as (row, column, channel); "
            "flatten it as (channel, row, column), the order of a Conv2d weight",
        ),
    ),
)


def check_patchify(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(images, patch_size)``: (B, C, H, W) -> (B, N, C*p*p), patches row by row,
    each flattened in (channel, row, column) order.

    See chapter 6, exercise 1.
    """
    return PATCHIFY.check(fn)


def _conv_self_attention_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for B, C, H, W, gamma in [(1, 16, 3, 3, 0.5), (2, 32, 4, 5, 1.0), (1, 8, 2, 2, 0.7)]:
        state = {  # the state dict of ConvSelfAttention(C), as NumPy arrays
            "q.weight": rng.normal(size=(C // 8, C, 1, 1)), "q.bias": rng.normal(size=C // 8),
            "k.weight": rng.normal(size=(C // 8, C, 1, 1)), "k.bias": rng.normal(size=C // 8),
            "v.weight": rng.normal(size=(C, C, 1, 1)) / np.sqrt(C), "v.bias": rng.normal(size=C),
            "gamma": np.array([gamma]),
        }  # fmt: skip
        cases.append((f"x {(B, C, H, W)}, gamma={gamma}", (rng.normal(size=(B, C, H, W)), state)))
    return cases


def _conv_attention_with(x: np.ndarray, state: dict[str, np.ndarray], change: str) -> np.ndarray:
    """The block with one ``change``: "unscaled", "sqrt_c", "no_gamma", "no_residual" or "reshape"."""
    B, C, H, W = x.shape
    pixels = x.reshape(B, C, H * W).swapaxes(1, 2)  # (B, N, C)
    q, k, v = (pixels @ state[f"{n}.weight"][:, :, 0, 0].T + state[f"{n}.bias"] for n in "qkv")
    out, _ = scaled_dot_product_attention(q, k, v, scale={"unscaled": 1.0, "sqrt_c": C**-0.5}.get(change))
    out = out.reshape(B, C, H, W) if change == "reshape" else out.swapaxes(1, 2).reshape(B, C, H, W)
    gamma = 1.0 if change == "no_gamma" else state["gamma"]
    return gamma * out + (0.0 if change == "no_residual" else x)


CONV_SELF_ATTENTION = Exercise(
    name="convolutional self-attention",
    kind="implement",
    concept="attention over a feature map",
    chapter=6,
    number=2,
    cases=_conv_self_attention_cases,
    reference=lambda x, state: conv_self_attention_forward(x, state)[0],
    compare=compare_array("output"),
    mistakes=(
        Mistake(
            partial(_conv_attention_with, change="unscaled"),
            "It matches unscaled scores: divide by sqrt(C // 8), the width of the queries and keys",
        ),
        Mistake(
            partial(_conv_attention_with, change="sqrt_c"),
            "It matches dividing by sqrt(C); the queries and keys have C // 8 channels, so divide by sqrt(C // 8)",
        ),
        Mistake(
            partial(_conv_attention_with, change="no_gamma"),
            "It matches adding the attention without gamma: the output is gamma * attention + x",
        ),
        Mistake(
            partial(_conv_attention_with, change="no_residual"),
            "It matches gamma * attention without the input: add x back",
        ),
        Mistake(
            partial(_conv_attention_with, change="reshape"),
            "It matches reshaping (B, N, C) straight to (B, C, H, W); swap the pixel and channel axes first",
        ),
    ),
)


def check_conv_self_attention(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, state) -> out``: the SAGAN-style block in NumPy, output only.

    ``state`` holds ``q.weight`` (C/8, C, 1, 1), ``q.bias``, ``k.weight``,
    ``k.bias``, ``v.weight`` (C, C, 1, 1), ``v.bias`` and ``gamma`` (1,).
    See chapter 6, exercise 2.
    """
    return CONV_SELF_ATTENTION.check(fn)


def _t2t_count(dim: int, chan: int, qkv_bias: bool) -> int:
    return dim * chan * 3 + (3 * chan if qkv_bias else 0) + chan * chan + chan  # qkv, then proj


T2T_PARAMETER_COUNT = Exercise(
    name="T2T parameter count",
    kind="count",
    concept="the weights of T2T attention",
    chapter=6,
    number=3,
    cases=lambda rng: [
        (f"dim={d}, chan={c}, qkv_bias={b}", (d, c, b))
        for d, c, b in [(49, 64, False), (49, 64, True), (147, 64, False), (3, 4, True)]
    ],
    reference=_t2t_count,
    compare=compare_count("the parameter count", "got {got}, which is not the number of entries in qkv and proj"),
    mistakes=(
        Mistake(
            lambda dim, chan, qkv_bias: _t2t_count(dim, chan, True),
            "It matches always counting a bias for qkv: it has 3*chan bias values only when qkv_bias is True",
        ),
        Mistake(
            lambda dim, chan, qkv_bias: _t2t_count(dim, chan, False),
            "It matches never counting a bias for qkv: when qkv_bias is True, it has 3*chan bias values",
        ),
        Mistake(
            lambda dim, chan, qkv_bias: _t2t_count(dim, chan, qkv_bias) - chan,
            "It matches leaving out proj's bias (chan values)",
        ),
    ),
)


def check_t2t_parameter_count(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(dim, chan, qkv_bias) -> int``: the parameters of a T2T attention module.

    See chapter 6, exercise 3.
    """
    return T2T_PARAMETER_COUNT.check(fn)
