"""What the buggy functions share: checked inputs, and attention written out by hand as the projects wrote it."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import as_array, as_float_array, check_min_ndim

__all__: list[str] = []


def qkv(q: Any, k: Any, v: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q (..., T, Dk), k (..., S, Dk), v (..., S, Dv) as float arrays, or a ValueError naming the mismatch."""
    q, k, v = (as_float_array(a, n) for a, n in ((q, "q"), (k, "k"), (v, "v")))
    for a, n, layout in ((q, "q", "(..., T, Dk)"), (k, "k", "(..., S, Dk)"), (v, "v", "(..., S, Dv)")):
        check_min_ndim(a, n, 2, layout)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last axis Dk; got q {q.shape} and k {k.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must hold the same number of tokens S; got k {k.shape} and v {v.shape}")
    return q, k, v


def keep_mask(keep: Any, T: int, S: int) -> np.ndarray:
    """A boolean (..., T, S) mask, True where a query may attend, or a ValueError."""
    keep = as_array(keep, "keep")
    if keep.dtype != np.bool_:
        raise ValueError(f"keep must be boolean (True = may attend); got dtype {keep.dtype}")
    if keep.ndim < 2 or keep.shape[-2:] != (T, S):
        raise ValueError(f"keep must end in the scores' (T, S) = {(T, S)}; got shape {keep.shape}")
    return keep


def scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """q k^T / sqrt(Dk): the scaled scores, (..., T, S)."""
    return q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])


def weighted_values(weights: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The attention output, weights @ v, with NumPy's warnings about inf and NaN silenced (they are the bugs)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return weights @ v


def softmax_quiet(s: np.ndarray, axis: int = -1) -> np.ndarray:
    """A softmax that lets -inf rows become NaN, as torch's did: the shifted exponentials divided by their sum."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        shifted = np.exp(s - s.max(axis=axis, keepdims=True))
        return shifted / shifted.sum(axis=axis, keepdims=True)
