"""Argument checks shared by the package's public functions.

Every public function validates what it is given and raises ``ValueError``
with a message that names what was expected and what arrived, so that a
learner never has to decode a broadcasting traceback from deep inside NumPy.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__: list[str] = []


def as_float_array(x: Any, name: str) -> np.ndarray:
    """Return ``x`` as a floating-point array; integer input becomes float64.

    Boolean, complex and non-numeric input is rejected with a ``ValueError``.
    Float arrays keep their precision (float32 stays float32).
    """
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name} must be an array of numbers; could not convert it: {exc}") from None
    if arr.dtype == np.bool_:
        raise ValueError(f"{name} must be an array of numbers; got a boolean array (dtype bool)")
    if np.issubdtype(arr.dtype, np.integer):
        return arr.astype(np.float64)
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"{name} must be an array of real numbers; got dtype {arr.dtype}")
    return arr


def check_min_ndim(arr: np.ndarray, name: str, min_ndim: int, layout: str) -> None:
    """Raise if ``arr`` has fewer than ``min_ndim`` axes; ``layout`` describes them."""
    if arr.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} axes {layout}; got shape {arr.shape}")


def check_matrix_shape(arr: np.ndarray, name: str, expected: tuple[int, int], meaning: str) -> None:
    """Raise if the 2-D weight ``arr`` does not have shape ``expected``."""
    if arr.shape != expected:
        raise ValueError(f"{name} must have shape {meaning} = {expected}; got {arr.shape}")


def check_no_nan_or_posinf(arr: np.ndarray, name: str) -> None:
    """Raise if ``arr`` holds NaN or +inf; -inf is allowed (it marks a blocked entry)."""
    if np.isnan(arr).any():
        raise ValueError(f"{name} must not contain NaN; found {int(np.isnan(arr).sum())} NaN value(s)")
    if np.isposinf(arr).any():
        raise ValueError(
            f"{name} must be finite or -inf (for blocked entries); found {int(np.isposinf(arr).sum())} +inf value(s)"
        )


def check_axis(axis: Any, ndim: int, name: str = "axis") -> int:
    """Return ``axis`` as a non-negative index into an array with ``ndim`` axes."""
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, numbers.Integral):
        raise ValueError(f"{name} must be an integer; got {axis!r} of type {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}={axis} is out of range for an array with {ndim} axes")
    return int(axis) % ndim


def check_positive_int(value: Any, name: str) -> int:
    """Return ``value`` as an int, raising unless it is an integer >= 1."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be a positive integer; got {value!r} of type {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be a positive integer; got {value}")
    return int(value)


def check_real_scalar(value: Any, name: str) -> float:
    """Return ``value`` as a finite float, raising for bools, arrays, NaN and infinities."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number; got {value!r} of type {type(value).__name__}")
    value = float(value)  # also turns a Fraction or a Decimal into something np.isfinite takes
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite; got {value}")
    return value


def check_bool(value: Any, name: str) -> bool:
    """Return ``value`` as a bool, raising unless it is True or False (NumPy's bools included)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False; got {value!r}")
    return bool(value)


def check_choice(value: Any, choices: Iterable[str], name: str) -> str:
    """Return ``value`` if it is one of ``choices``; unhashable values are rejected too."""
    choices = sorted(choices)
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}; got {value!r}")
    return value


def check_head_split(width: int, num_heads: Any, width_name: str = "the model width D") -> int:
    """Return the head width ``width // num_heads``, raising unless ``num_heads`` is a positive divisor of ``width``."""
    H = check_positive_int(num_heads, "num_heads")
    if width % H:
        symbol = width_name.split()[-1]
        options = [d for d in range(1, min(width, 16) + 1) if width % d == 0]
        raise ValueError(
            f"{width_name}={width} is not divisible by num_heads={H}; "
            f"each head needs {symbol} // num_heads columns (try num_heads in {options})"
        )
    return width // H


def check_finite(arr: np.ndarray, name: str, purpose: str = "") -> None:
    """Raise if ``arr`` holds NaN or an infinity; ``purpose`` ends the first clause ("to plot")."""
    bad = int(np.size(arr) - np.isfinite(arr).sum())
    if bad:
        raise ValueError(
            f"{name} must be finite{' ' + purpose if purpose else ''}; found {bad} NaN or infinite value(s)"
        )


def check_image_size(height: int, width: int, patch_size: int) -> None:
    """Raise unless ``patch_size`` divides both sides of a ``height x width`` image."""
    if height % patch_size or width % patch_size:

        def fit(side: int) -> int:
            return max(side - side % patch_size, patch_size)

        raise ValueError(
            f"the image size {height}x{width} is not a multiple of patch_size={patch_size}; "
            f"crop or resize it to a multiple (for example {fit(height)}x{fit(width)})"
        )
