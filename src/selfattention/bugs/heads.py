"""Bugs in the scale, the softmax's axis and the head layout: code that runs, keeps its shapes and is wrong.

Written in our own words, the bug kept; each docstring cites its source
(``owner/repository#number``) and the fix. See the bug zoo appendix.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import as_float_array, check_min_ndim
from ._common import qkv, softmax_quiet, weighted_values

__all__ = ["scale_by_model_width", "scale_after_softmax", "softmax_over_queries", "merge_heads_by_reshape"]


def scale_by_model_width(x: Any, w_q: Any, w_k: Any, w_v: Any) -> np.ndarray:
    """One head of a multi-head layer that divides its scores by the square root of the model width.

    Source: karpathy/ng-video-lecture#6. The bug: ``q @ k.T * C**-0.5`` with
    ``C`` the width of the input ``x`` (D), where the head's own width Dh
    (``k.shape[-1]``) belongs; the scores come out sqrt(H) times too small and
    the attention too flat. The fix: ``* k.shape[-1] ** -0.5``.

    Parameters
    ----------
    x : array_like, shape (..., T, D)
    w_q, w_k : array_like, shape (D, Dh)
    w_v : array_like, shape (D, Dv)

    Returns
    -------
    numpy.ndarray, shape (..., T, Dv)
    """
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 2, "(..., T, D)")
    w_q, w_k, w_v = (as_float_array(w, n) for w, n in ((w_q, "w_q"), (w_k, "w_k"), (w_v, "w_v")))
    for w, n in ((w_q, "w_q"), (w_k, "w_k"), (w_v, "w_v")):
        if w.ndim != 2 or w.shape[0] != x.shape[-1]:
            raise ValueError(f"{n} must have shape (D, width) with D = {x.shape[-1]}; got {w.shape}")
    if w_q.shape != w_k.shape:
        raise ValueError(f"w_q and w_k must have the same shape; got {w_q.shape} and {w_k.shape}")
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    C = x.shape[-1]
    weights = softmax_quiet(q @ np.swapaxes(k, -1, -2) * C**-0.5)  # the bug: C is D, not the head width
    return weighted_values(weights, v)


def scale_after_softmax(q: Any, k: Any, v: Any) -> np.ndarray:
    """Attention that multiplies by 1/sqrt(Dk) after the softmax instead of before it.

    Source: FrancescoSaverioZuppichini/ViT#2. The bug:
    ``softmax(q @ k.T) * scaling``: the scores are never scaled, so the
    softmax is too sharp, and each row of weights sums to 1/sqrt(Dk), not 1.
    The fix: ``softmax(q @ k.T * scaling)``.

    Parameters
    ----------
    q, k, v : array_like, shapes (..., T, Dk), (..., S, Dk), (..., S, Dv)

    Returns
    -------
    numpy.ndarray, shape (..., T, Dv)
    """
    q, k, v = qkv(q, k, v)
    weights = softmax_quiet(q @ np.swapaxes(k, -1, -2)) * q.shape[-1] ** -0.5  # the bug: scaled too late
    return weighted_values(weights, v)


def softmax_over_queries(q: Any, k: Any, v: Any) -> np.ndarray:
    """Attention whose softmax normalises each key's column over the queries instead of each query's row.

    Source: labmlai/annotated_deep_learning_paper_implementations#146 (the
    DDPM U-Net's attention). The bug: scores laid out (T, S) and
    ``softmax(dim=1)``, the query axis, so the weights a query gives its keys
    do not sum to 1. The fix: the key axis, the last one here.

    Parameters and returns as :func:`scale_after_softmax`.
    """
    q, k, v = qkv(q, k, v)
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # (..., T, S)
    return weighted_values(softmax_quiet(s, axis=-2), v)  # the bug: over T, the queries


def merge_heads_by_reshape(x: Any) -> np.ndarray:
    """Merge the heads' outputs, (..., H, T, Dh) to (..., T, H*Dh), with a reshape and no transpose.

    Source: jsbaan/transformer-from-scratch#6 (also hackiey/QAnet-pytorch#2).
    The bug: ``values.reshape(B, T, H * Dh)`` straight from (B, H, T, Dh):
    the rows of one head are read as consecutive tokens, so each output token
    gets pieces of several tokens of one head. The fix: move the head axis
    next to Dh first, ``transpose(0, 2, 1, 3)``, then reshape.

    Parameters
    ----------
    x : array_like, shape (..., H, T, Dh)

    Returns
    -------
    numpy.ndarray, shape (..., T, H*Dh)
    """
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 3, "(..., H, T, Dh)")
    H, T, Dh = x.shape[-3:]
    return x.reshape(*x.shape[:-3], T, H * Dh)  # the bug: no transpose of H and T first
