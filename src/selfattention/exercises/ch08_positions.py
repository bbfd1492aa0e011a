"""Chapter 8 exercises: the sinusoidal table, rotate-half RoPE, and ALiBi's slopes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..positions import alibi_slopes, apply_rope, sinusoidal_positions
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array

# No exponential here: a NaN or inf comes from a division by zero or a wrong power.
_NAN_HINT = "check for a division by zero or a power of the wrong sign (the exponents here are never positive)"

__all__ = ["check_sinusoidal_positions", "check_rope", "check_alibi_slopes"]


def _sinusoidal_with(exponent: Callable[[np.ndarray, int], np.ndarray], swap: bool = False) -> Callable[..., Any]:
    """A sinusoidal table whose frequency exponent (or sine/cosine order) a learner got wrong."""

    def table(T: int, D: int) -> np.ndarray:
        angles = np.arange(T)[:, None] * 10000.0 ** -exponent(np.arange(D // 2), D)  # (T, D/2)
        out = np.empty((T, D))
        first, second = (np.cos, np.sin) if swap else (np.sin, np.cos)
        out[:, 0::2], out[:, 1::2] = first(angles), second(angles)
        return out

    return table


SINUSOIDAL = Exercise(
    name="sinusoidal positions",
    kind="implement",
    concept="the sinusoidal position table",
    chapter=8,
    number=1,
    cases=lambda rng: [(f"T={T}, D={D}", (T, D)) for T, D in [(4, 4), (10, 8), (50, 16), (7, 2), (100, 64)]],
    reference=sinusoidal_positions,
    compare=compare_array("table", _NAN_HINT),
    float32=False,
    mistakes=(
        Mistake(
            lambda T, D: sinusoidal_positions(T, D, interleaved=False),
            "It matches the [sin | cos] layout; the paper interleaves them: sine in column 2i, cosine in 2i+1",
        ),
        Mistake(
            _sinusoidal_with(lambda i, D: i / D),
            "It matches the exponent i/D; pair i turns at base^(-2i/D) radians per position",
        ),
        Mistake(
            _sinusoidal_with(lambda i, D: -2 * i / D),
            "It matches a positive exponent, base^(+2i/D): the frequencies must fall, base^(-2i/D)",
        ),
        Mistake(
            lambda T, D: sinusoidal_positions(T + 1, D)[1:],
            "It matches positions 1 … T; the first row is position 0, (0, 1, 0, 1, ...)",
        ),
        Mistake(
            _sinusoidal_with(lambda i, D: 2 * i / D, swap=True),
            "It matches cosine in the even columns; the paper puts the sine in column 2i and the cosine in 2i+1",
        ),
    ),
)


def check_sinusoidal_positions(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(T, D) -> (T, D)``: the sinusoidal table, base 10000, sine and cosine interleaved.

    See chapter 8, exercise 1.
    """
    return SINUSOIDAL.check(fn)


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
