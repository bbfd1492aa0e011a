"""Argument checks shared by the package's public functions.

Every public function validates what it is given and raises ``ValueError``
with a message that names what was expected and what arrived, so that a
learner never has to decode a broadcasting traceback from deep inside NumPy.
"""

from __future__ import annotations

import decimal
import math
import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__: list[str] = []


def _from_torch(x: Any, name: str) -> Any:
    """Return a torch tensor as a NumPy array (detached, on the CPU); anything else unchanged.

    torch is never imported here: a tensor is recognised by its type's module,
    so that plain NumPy callers do not pay for loading torch.
    """
    if type(x).__module__.split(".")[0] != "torch" or not hasattr(x, "detach"):
        return x
    t = x.detach()
    if getattr(t, "is_meta", False):
        raise ValueError(f"{name} is a torch tensor on the 'meta' device, which holds no values; give real data")
    if str(t.dtype) == "torch.bfloat16":
        t = t.float()  # NumPy has no bfloat16; float32 holds every bfloat16 value exactly
    try:
        return t.cpu().resolve_conj().resolve_neg().numpy()
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{name} is a torch tensor NumPy cannot read ({t.dtype}): {exc}") from None


def as_array(x: Any, name: str) -> np.ndarray:
    """Return ``x`` as a NumPy array: arrays, nested lists, NumPy scalars and torch tensors (detached)."""
    x = _from_torch(x, name)
    if isinstance(x, (list, tuple)) and any(type(item).__module__.split(".")[0] == "torch" for item in x):
        x = [_from_torch(item, name) for item in x]
    try:
        return np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name} must be an array of numbers; could not convert it: {exc}") from None


def precision_of(values: Any) -> tuple[float, str]:
    """The machine epsilon of an array's or tensor's float dtype, and its name (float64 for anything else).

    Read before :func:`as_float_array`, which turns a bfloat16 tensor into float32.
    """
    dtype = getattr(values, "dtype", None)
    if dtype is not None and type(values).__module__.split(".")[0] == "torch":
        if getattr(dtype, "is_floating_point", False):
            import torch

            return float(torch.finfo(dtype).eps), str(dtype).removeprefix("torch.")
    elif isinstance(dtype, np.dtype) and dtype.kind == "f":
        return float(np.finfo(dtype).eps), dtype.name
    return float(np.finfo(np.float64).eps), "float64"


def row_sum_tolerance(T: int, eps: float) -> float:
    """How far from 1 the row sums of a correct softmax of T weights stored with machine epsilon ``eps`` may be.

    A softmax computed in float32 or wider (torch and this package compute
    float16 and bfloat16 softmaxes in float32) sums to 1 within about T
    float32 epsilons; storing each weight with relative error ``eps / 2``
    moves the sum by at most ``eps / 2``, since the weights sum to 1. The
    floor of 1e-6 admits float32 weights converted to float64.
    """
    return max(1e-6, 2 * eps + T * float(np.finfo(np.float32).eps))


def as_float_array(x: Any, name: str) -> np.ndarray:
    """Return ``x`` as a floating-point array; integer input becomes float64.

    Accepts NumPy arrays, nested lists and torch tensors (detached and copied
    to the CPU; bfloat16 becomes float32). Boolean, complex and non-numeric
    input is rejected with a ``ValueError``. Float arrays keep their precision
    (float16 stays float16, float32 stays float32).
    """
    arr = as_array(x, name)
    if arr.dtype == np.bool_:
        raise ValueError(f"{name} must be an array of numbers; got a boolean array (dtype bool)")
    if np.issubdtype(arr.dtype, np.integer):
        return arr.astype(np.float64)
    if not np.issubdtype(arr.dtype, np.floating):
        if arr.dtype == object:
            raise ValueError(f"{name} must be an array of numbers; got objects such as {_first(arr)!r}")
        raise ValueError(f"{name} must be an array of real numbers; got dtype {arr.dtype}")
    if arr.dtype == np.longdouble and np.dtype(np.longdouble) != np.dtype(np.float64):
        return arr.astype(np.float64)
    return arr


def _first(arr: np.ndarray) -> Any:
    return arr.reshape(-1)[0] if arr.size else None


def check_all_finite(arr: np.ndarray, name: str) -> None:
    """Raise if ``arr`` holds NaN or an infinity (the package's policy for q, k, v, x and weights)."""
    if not np.isfinite(arr).all():
        counts = {"NaN": int(np.isnan(arr).sum()), "infinite": int(np.isinf(arr).sum())}
        found = " and ".join(f"{n} {kind}" for kind, n in counts.items() if n)
        raise ValueError(f"{name} must hold only finite numbers; found {found} value(s)")


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
    axis = _unwrap_scalar(axis, name)
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, numbers.Integral):
        raise ValueError(f"{name} must be an integer; got {axis!r} of type {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}={axis} is out of range for an array with {ndim} axes")
    return int(axis) % ndim


def _unwrap_scalar(value: Any, name: str) -> Any:
    """A 0-d NumPy array or 0-d torch tensor becomes its Python scalar; anything else is unchanged."""
    value = _from_torch(value, name)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    return value


def check_positive_int(value: Any, name: str, *, at_most: int | None = None) -> int:
    """Return ``value`` as an int, raising unless it is an integer >= 1 (a 0-d integer array counts).

    ``at_most`` bounds it too, for sizes that would otherwise exhaust memory.
    """
    value = _unwrap_scalar(value, name)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        hint = f" (write {int(value)})" if isinstance(value, float) and value.is_integer() and value >= 1 else ""
        raise ValueError(f"{name} must be a positive integer; got {value!r} of type {type(value).__name__}{hint}")
    if value < 1:
        raise ValueError(f"{name} must be a positive integer; got {value}")
    if at_most is not None and value > at_most:
        raise ValueError(f"{name} must be at most {at_most:,}; got {value:,}")
    return int(value)


def check_nonnegative_int(value: Any, name: str) -> int:
    """Return ``value`` as an int, raising unless it is an integer >= 0."""
    value = _unwrap_scalar(value, name)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be a non-negative integer; got {value!r} of type {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer; got {value}")
    return int(value)


def check_real_scalar(value: Any, name: str, *, positive: bool = False) -> float:
    """Return ``value`` as a finite float.

    Any real number is accepted: ``int``, ``float``, ``fractions.Fraction``,
    ``decimal.Decimal``, NumPy scalars, 0-d arrays and 0-d tensors.
    Bools, strings, longer arrays, NaN, infinities and numbers too large for a
    float are rejected. ``positive=True`` also rejects values <= 0.
    """
    value = _unwrap_scalar(value, name)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, decimal.Decimal)):
        what = f"an array of shape {np.shape(value)}" if isinstance(value, np.ndarray) else repr(value)
        raise ValueError(f"{name} must be a real number; got {what} of type {type(value).__name__}")
    try:
        result = float(value)
    except (OverflowError, ValueError):
        raise ValueError(f"{name} must be a finite number that fits in a float; got {value!r}") from None
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite; got {result}")
    if positive and result <= 0:
        raise ValueError(f"{name} must be positive; got {result}")
    return result


def check_bool(value: Any, name: str) -> bool:
    """Return ``value`` as a bool, raising unless it is True or False (NumPy's bools included)."""
    value = _unwrap_scalar(value, name)
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
    if height < patch_size or width < patch_size:
        raise ValueError(
            f"the image ({height}x{width}) is smaller than one patch ({patch_size}x{patch_size}); "
            f"use patch_size <= {min(height, width)} or a larger image"
        )
    if height % patch_size or width % patch_size:
        raise ValueError(
            f"the image size {height}x{width} is not a multiple of patch_size={patch_size}; crop or resize it "
            f"to a multiple (for example {height - height % patch_size}x{width - width % patch_size})"
        )
