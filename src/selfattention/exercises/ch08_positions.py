"""Chapter 8 exercises: RoPE weights for the other layout, rotate-half RoPE, and ALiBi's slopes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..positions import alibi_slopes, apply_rope
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array

# No exponential here: a NaN or inf comes from a division by zero or a wrong power.
_NAN_HINT = "check for a division by zero or a power of the wrong sign (the exponents here are never positive)"

__all__ = ["check_rope_weights", "check_rope", "check_alibi_slopes"]


def _to_rotate_half(weight: np.ndarray, num_heads: int, *, whole_width: bool = False) -> np.ndarray:
    """Reorder a projection's output columns, head by head, from interleaved pairs to rotate-half pairs."""
    width = weight.shape[-1] if whole_width else weight.shape[-1] // num_heads
    order = np.concatenate([np.arange(0, width, 2), np.arange(1, width, 2)])  # (2i, 2i+1) -> (i, i + width/2)
    columns = np.concatenate([order + h * width for h in range(weight.shape[-1] // width)])
    return weight[..., columns]


def _from_rotate_half(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """The inverse reordering: what applying the conversion in the wrong direction gives."""
    width = weight.shape[-1] // num_heads
    order = np.argsort(np.concatenate([np.arange(0, width, 2), np.arange(1, width, 2)]))
    return weight[..., np.concatenate([order + h * width for h in range(num_heads)])]


def _conversion_cases(rng: np.random.Generator) -> CaseList:
    return [
        (f"D={D}, {H} heads of {Dh}", (rng.normal(size=(D, H * Dh)), H))
        for D, H, Dh in [(4, 1, 4), (8, 2, 4), (16, 4, 8), (12, 3, 6)]
    ]


ROPE_WEIGHTS = Exercise(
    name="interleaved weights for rotate-half code",
    kind="extend",
    concept="loading RoPE weights: the per-head reordering",
    chapter=8,
    number=1,
    cases=_conversion_cases,
    reference=_to_rotate_half,
    compare=compare_array("converted weight", _NAN_HINT),
    mistakes=(
        Mistake(
            lambda w, H: _to_rotate_half(w, H, whole_width=True),
            "It matches reordering the whole width at once; each head rotates its own features, so reorder "
            "within every head's columns",
        ),
        Mistake(
            _from_rotate_half,
            "It matches the reordering run backwards (rotate-half to interleaved); new column i must be old "
            "column 2i, and new column i + Dh/2 old column 2i + 1",
        ),
        Mistake(
            lambda w, H: w,
            "It matches the weight unchanged; the rotate-half code pairs feature i with i + Dh/2, so the columns "
            "must move",
        ),
    ),
)


def check_rope_weights(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(w, num_heads) -> w_new``: a query or key projection reordered for rotate-half RoPE.

    ``w`` is (D, num_heads * Dh) in the ``x @ w`` layout, trained for RoPE that
    pairs features (2i, 2i + 1) of each head (interleaved); ``w_new`` must give,
    under rotate-half RoPE (pairs (i, i + Dh/2)), the same scores. See chapter 8,
    exercise 1.
    """
    return ROPE_WEIGHTS.check(fn)


def _rope_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for shape, start in [((3, 2), 0), ((5, 8), 0), ((2, 6, 16), 4), ((2, 3, 4, 8), 100)]:
        T = shape[-2]
        cases.append((f"x {shape}, positions {start}…{start + T - 1}", (rng.normal(size=shape), np.arange(T) + start)))
    return cases


def _rope_backwards(x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    return apply_rope(x, -np.asarray(positions, dtype=float))


def _rope_wrong_frequencies(x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    Dh = x.shape[-1]
    angles = np.asarray(positions, dtype=float)[:, None] * 10000.0 ** (-np.arange(Dh // 2) / Dh)  # i/Dh, not 2i/Dh
    cos, sin = np.cos(angles), np.sin(angles)
    a, b = x[..., : Dh // 2], x[..., Dh // 2 :]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


ROPE = Exercise(
    name="rotate-half RoPE",
    kind="implement",
    concept="rotary positions in the rotate-half layout",
    chapter=8,
    number=2,
    cases=_rope_cases,
    reference=apply_rope,
    compare=compare_array("rotated vectors", _NAN_HINT),
    mistakes=(
        Mistake(
            lambda x, positions: apply_rope(x, positions, interleaved=True),
            "It matches pairing adjacent features (2i, 2i+1); rotate-half pairs feature i with feature i + Dh/2",
        ),
        Mistake(
            _rope_backwards,
            "It matches rotating the other way: the first half becomes a cos - b sin, the second a sin + b cos",
        ),
        Mistake(
            _rope_wrong_frequencies,
            "It matches the frequencies base^(-i/Dh); pair i turns at base^(-2i/Dh) radians per position",
        ),
        Mistake(
            lambda x, positions: x,
            "It returns x unchanged: rotate each pair by position * frequency",
        ),
        Mistake(
            lambda x, positions: apply_rope(x),
            "It matches positions 0 … T-1 whatever positions were given; use the positions argument",
        ),
    ),
)


def check_rope(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, positions) -> (..., T, Dh)``: rotate-half RoPE, base 10000.

    See chapter 8, exercise 2.
    """
    return ROPE.check(fn)


ALIBI_SLOPES = Exercise(
    name="ALiBi slopes",
    kind="implement",
    concept="ALiBi's slopes for any number of heads",
    chapter=8,
    number=3,
    cases=lambda rng: [(f"H={H}", (H,)) for H in (8, 12, 1, 2, 6, 16, 20)],
    reference=alibi_slopes,
    compare=compare_array("slopes", _NAN_HINT),
    mistakes=(
        Mistake(
            lambda H: 2.0 ** (-8.0 * np.arange(1, H + 1) / H),
            "It matches 2^(-8h/H) for every H; when H is not a power of two, take the slopes for the power of two "
            "below it, then every other slope for twice that power",
        ),
        Mistake(
            lambda H: alibi_slopes(H)[::-1],
            "It matches the slopes in reverse; head 1 gets the largest slope, 2^(-8/H) for a power of two",
        ),
        Mistake(
            lambda H: 2.0 ** (-8.0 * np.arange(0, H) / H),
            "It matches starting at h = 0 (slope 1); the heads are numbered from 1, so the first slope is 2^(-8/H)",
        ),
    ),
)


def check_alibi_slopes(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(num_heads) -> (H,)``: ALiBi's slopes, by the recipe of the paper's code.

    See chapter 8, exercise 3.
    """
    return ALIBI_SLOPES.check(fn)
