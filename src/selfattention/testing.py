"""Helpers for checking NumPy results against PyTorch, shared by ``tests/``, the chapters and ``benchmarks/``.

- :func:`randomise_parameters`: every parameter of a module random, so that a
  comparison cannot pass because a bias is still zero or a LayerNorm scale one;
- :data:`TOLERANCES` and :func:`tolerance`: how close is close enough, per dtype;
- :func:`assert_parity`: compare, and on failure say where and by how much.

This module imports torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._validation import as_array, as_float_array, check_nonnegative_int, check_real_scalar

__all__ = ["TOLERANCES", "tolerance", "randomise_parameters", "assert_parity", "to_torch"]

#: ``(rtol, atol)`` for comparing a NumPy result with PyTorch's, by dtype: float64
#: agrees to rounding; float32 accumulates rounding over a layer's sums, and the
#: order of those sums depends on the CPU's BLAS kernels: on an AVX-512 machine a
#: multi-head output near 0.1 differed from torch's by 6.6e-6, where the terms
#: summed are of order 1, so float32's absolute tolerance is 1e-5.
#: float16 keeps about three significant digits, and its results are rounded once more.
TOLERANCES: dict[np.dtype, tuple[float, float]] = {
    np.dtype(np.float64): (1e-10, 1e-12),
    np.dtype(np.float32): (1e-5, 1e-5),
    np.dtype(np.float16): (1e-2, 1e-3),
}

_NORMS = (torch.nn.LayerNorm, torch.nn.RMSNorm, torch.nn.GroupNorm, torch.nn.modules.batchnorm._NormBase)


def tolerance(dtype: Any) -> dict[str, float]:
    """``{"rtol": ..., "atol": ...}`` for ``dtype`` (a NumPy or torch dtype), from :data:`TOLERANCES`."""
    if isinstance(dtype, torch.dtype):
        dtype = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}.get(dtype, dtype)
    try:
        rtol, atol = TOLERANCES[np.dtype(dtype)] if dtype is not None else (None, None)
    except (KeyError, TypeError, ValueError):
        rtol = None
    if rtol is None:
        raise ValueError(f"dtype must be float16, float32 or float64; got {dtype!r}")
    return {"rtol": rtol, "atol": atol}


def randomise_parameters(module: torch.nn.Module, *, seed: int | None = None, scale: float = 0.3) -> torch.nn.Module:
    """Set every parameter to random values, then put the module in eval mode.

    Weights and biases become ``scale * N(0, 1)``; the scales of normalisation
    layers (LayerNorm, RMSNorm, ...) become ``1 + scale * N(0, 1)``. PyTorch
    starts biases at 0 and LayerNorm at scale 1 and shift 0, so a comparison
    with a fresh module cannot tell whether they are applied at all.

    Parameters
    ----------
    module : torch.nn.Module
    seed : int, optional
        Draw from a private generator with this seed; by default from torch's
        global generator (seed it with ``torch.manual_seed``).
    scale : float, default 0.3

    Returns
    -------
    torch.nn.Module
        ``module`` itself, in eval mode (dropout off), so comparisons are deterministic.

    Raises
    ------
    ValueError
        If ``module`` is not a ``torch.nn.Module`` or ``scale`` is not a finite number.

    Notes
    -----
    See chapter 5 (why a fresh layer proves little).
    """
    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"module must be a torch.nn.Module; got {type(module).__name__}")
    scale = check_real_scalar(scale, "scale")
    if seed is not None:
        seed = check_nonnegative_int(seed, "seed")
        if seed >= 2**64:
            raise ValueError(f"seed must be below 2**64 (torch's seeds are 64-bit); got {seed}")
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    norm_scales = {id(m.weight) for m in module.modules() if isinstance(m, _NORMS) and m.weight is not None}
    with torch.no_grad():
        for parameter in module.parameters():
            noise = torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype)
            parameter.copy_((1.0 if id(parameter) in norm_scales else 0.0) + scale * noise)
    return module.eval()


def _tolerance_value(value: Any, name: str) -> float:
    value = check_real_scalar(value, name)
    if value < 0:
        raise ValueError(f"{name} must be zero or positive; got {value}")
    return value


def assert_parity(
    actual: Any,
    expected: Any,
    dtype: Any = None,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    what: str = "result",
) -> None:
    """Assert that ``actual`` matches ``expected`` (arrays or tensors) within the tolerance for ``dtype``.

    On failure the message names the largest absolute difference, where it is,
    and the two values there.

    Parameters
    ----------
    actual, expected : array_like or torch.Tensor
    dtype : dtype, optional
        Chooses the tolerance from :data:`TOLERANCES`; defaults to ``expected``'s dtype.
    rtol, atol : float, optional
        Override the tolerance.
    what : str
        Names the compared quantity in the message.

    Raises
    ------
    AssertionError
        If the shapes differ or any element is outside ``atol + rtol * |expected|``.
    """
    actual, expected = as_float_array(actual, "actual"), as_float_array(expected, "expected")
    if not isinstance(what, str):
        raise ValueError(f"what must be a string naming the compared quantity; got {type(what).__name__}")
    tol = tolerance(expected.dtype if dtype is None else dtype)
    rtol = tol["rtol"] if rtol is None else _tolerance_value(rtol, "rtol")
    atol = tol["atol"] if atol is None else _tolerance_value(atol, "atol")
    if actual.shape != expected.shape:
        raise AssertionError(f"{what}: shape {actual.shape} differs from the expected {expected.shape}")
    difference = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    allowed = atol + rtol * np.abs(expected.astype(np.float64))
    if not (difference <= allowed).all():  # NaN fails here too
        where = np.unravel_index(np.nanargmax(np.where(np.isnan(difference), np.inf, difference)), difference.shape)
        raise AssertionError(
            f"{what}: the largest difference is {difference[where]:.3g} at index {tuple(int(i) for i in where)} "
            f"(got {actual[where]:.6g}, expected {expected[where]:.6g}; rtol={rtol:g}, atol={atol:g}); "
            f"{int((~(difference <= allowed)).sum())} of {difference.size} elements are outside the tolerance "
            "(a NaN counts as outside)"
        )


def to_torch(*arrays: np.ndarray) -> tuple[torch.Tensor, ...]:
    """NumPy arrays as tensors with the same dtype (contiguous copies where needed)."""
    tensors = []
    for index, array in enumerate(arrays):
        array = as_array(array, f"arrays[{index}]")
        if array.dtype.kind not in "biuf":
            raise ValueError(f"arrays[{index}] must hold numbers or booleans; got dtype {array.dtype}")
        tensors.append(torch.from_numpy(np.ascontiguousarray(array)))
    return tuple(tensors)
