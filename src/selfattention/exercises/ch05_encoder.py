"""Chapter 5 exercises: RMSNorm, the pre-norm encoder block, and its parameter count."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..encoder import EncoderParams, encoder_block, layer_norm, relu
from ..masks import causal_mask
from ..multihead import multihead_attention
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array, compare_count

__all__ = ["check_rms_norm", "check_pre_norm_block", "check_encoder_parameter_count"]


def _rms_norm_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for shape, offset, eps in [((4, 6), 0.0, 1e-5), ((2, 3, 8), 3.0, 1e-6), ((2, 16), 0.0, 1e-2), ((3, 4), 0.0, 0.5)]:
        x = offset + rng.normal(size=shape) * (0.05 if eps >= 1e-2 else 2.0)  # small values make eps matter
        cases.append((f"x {shape}, eps={eps:g}", (x, 1.0 + 0.3 * rng.normal(size=shape[-1]), eps)))
    return cases


def _rms_norm(x: np.ndarray, weight: np.ndarray | float, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * weight  # (..., D)


def _rms_norm_eps_outside(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / (np.sqrt(np.mean(x**2, axis=-1, keepdims=True)) + eps) * weight


RMS_NORM = Exercise(
    name="RMSNorm",
    kind="extend",
    concept="a LayerNorm without the mean",
    chapter=5,
    number=1,
    cases=_rms_norm_cases,
    reference=_rms_norm,
    compare=compare_array("output"),
    mistakes=(
        Mistake(
            lambda x, w, eps: layer_norm(x, w, None, eps), "It matches LayerNorm: RMSNorm does not subtract the mean"
        ),
        Mistake(
            _rms_norm_eps_outside, "It matches adding eps outside the square root; add it to the mean square, inside"
        ),
        Mistake(lambda x, w, eps: _rms_norm(x, w, 1e-5), "It matches a fixed eps of 1e-5; use the eps argument"),
        Mistake(
            lambda x, w, eps: _rms_norm(x, 1.0, eps), "It matches leaving out the weight: multiply by it at the end"
        ),
    ),
)


def check_rms_norm(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, weight, eps)``: RMSNorm, ``x / sqrt(mean(x**2) + eps) * weight`` over the last axis.

    See chapter 5, exercise 1.
    """
    return RMS_NORM.check(fn)


def _random_encoder_params(rng: np.random.Generator, D: int, F: int) -> EncoderParams:
    return EncoderParams.from_arrays(
        w_qkv=rng.normal(size=(D, 3 * D)) / np.sqrt(D), b_qkv=0.3 * rng.normal(size=3 * D),
        w_out=rng.normal(size=(D, D)) / np.sqrt(D), b_out=0.3 * rng.normal(size=D),
        w_ff1=rng.normal(size=(D, F)) / np.sqrt(D), b_ff1=0.3 * rng.normal(size=F),
        w_ff2=rng.normal(size=(F, D)) / np.sqrt(F), b_ff2=0.3 * rng.normal(size=D),
        norm1_weight=1 + 0.3 * rng.normal(size=D), norm1_bias=0.3 * rng.normal(size=D),
        norm2_weight=1 + 0.3 * rng.normal(size=D), norm2_bias=0.3 * rng.normal(size=D),
    )  # fmt: skip


def _pre_norm_block_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for shape, H, F, masked in [((5, 8), 2, 16, True), ((2, 4, 8), 4, 8, False), ((2, 6, 12), 3, 24, True)]:
        x, params = rng.normal(size=shape), _random_encoder_params(rng, shape[-1], F)
        mask = causal_mask(shape[-2]) if masked else None
        cases.append((f"x {shape}, H={H}, {'causal mask' if masked else 'no mask'}", (x, params, H, mask)))
    return cases


def _no_second_residual(x: np.ndarray, p: EncoderParams, num_heads: int, mask: np.ndarray | None) -> np.ndarray:
    normed = layer_norm(x, p.norm1_weight, p.norm1_bias)  # (..., T, D)
    h = x + multihead_attention(normed, p.w_qkv, p.w_out, num_heads, mask=mask, b_qkv=p.b_qkv, b_out=p.b_out)[0]
    return relu(layer_norm(h, p.norm2_weight, p.norm2_bias) @ p.w_ff1 + p.b_ff1) @ p.w_ff2 + p.b_ff2  # no h +


PRE_NORM_BLOCK = Exercise(
    name="pre-norm block",
    kind="extend",
    concept="the pre-norm encoder block",
    chapter=5,
    number=2,
    cases=_pre_norm_block_cases,
    reference=lambda x, p, num_heads, mask: encoder_block(x, p, num_heads, mask=mask, norm_first=True),
    compare=compare_array("output"),
    mistakes=(
        Mistake(
            lambda x, p, num_heads, mask: encoder_block(x, p, num_heads, mask=mask),
            "It matches the post-norm block; pre-norm applies each LayerNorm to the input of its sub-layer, "
            "inside the residual branch",
        ),
        Mistake(
            lambda x, p, num_heads, mask: encoder_block(x, p, num_heads, norm_first=True),
            "It matches the output with the mask left out: pass mask to the attention",
        ),
        Mistake(_no_second_residual, "It matches leaving out the second residual: add h to the feed-forward output"),
    ),
)


def check_pre_norm_block(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, params, num_heads, mask)``: the pre-norm encoder block with ReLU.

    ``params`` is an :class:`~selfattention.EncoderParams`. You may use
    ``multihead_attention`` and ``layer_norm``. See chapter 5, exercise 2.
    """
    return PRE_NORM_BLOCK.check(fn)


def _encoder_count(D: int, F: int) -> int:
    return (4 * D * D + 4 * D) + (D * F + F + F * D + D) + 4 * D  # attention, feed-forward, two LayerNorms


ENCODER_PARAMETER_COUNT = Exercise(
    name="encoder parameter count",
    kind="count",
    concept="the weights of an encoder block",
    chapter=5,
    number=3,
    cases=lambda rng: [
        (f"d_model={D}, dim_feedforward={F}", (D, F)) for D, F in [(64, 128), (512, 2048), (768, 3072), (4, 6)]
    ],
    reference=_encoder_count,
    compare=compare_count(
        "the parameter count", "got {got}, which is not the number of parameters of nn.TransformerEncoderLayer"
    ),
    mistakes=(
        Mistake(
            lambda D, F: _encoder_count(D, F) - 4 * D,
            "It matches leaving out the two LayerNorms, a weight and a bias of D values each",
        ),
        Mistake(
            lambda D, F: 4 * D * D + 2 * D * F,
            "It matches the weight matrices alone: add the biases (attention 4D, feed-forward F + D) "
            "and the two LayerNorms (4D)",
        ),
    ),
)


def check_encoder_parameter_count(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(d_model, dim_feedforward) -> int``: every parameter of one encoder block.

    See chapter 5, exercise 3.
    """
    return ENCODER_PARAMETER_COUNT.check(fn)
