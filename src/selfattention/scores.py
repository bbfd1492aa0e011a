"""From scores to weights: a numerically stable softmax.

Taught in chapter 1 (the softmax over one query's scores) and chapter 2 (why the
softmax must subtract the maximum). Masks are in :mod:`selfattention.masks`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._validation import as_float_array, check_axis, check_no_nan_or_posinf

__all__ = ["softmax"]


def softmax(x: ArrayLike, axis: int = -1) -> np.ndarray:
    r"""Numerically stable softmax along one axis.

    .. math::

        \operatorname{softmax}(x)_i = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}},
        \qquad m = \max_j x_j

    Subtracting the maximum :math:`m` changes nothing mathematically (it cancels
    between numerator and denominator) but keeps every exponent at or below 0, so
    ``exp`` cannot overflow. Scores of ``-inf`` mark blocked entries and get
    weight 0. A slice that is ``-inf`` everywhere has nothing to attend to; it gets
    all-zero weights rather than NaN, the convention of PyTorch's
    ``scaled_dot_product_attention``.

    Parameters
    ----------
    x : array_like
        Scores of any shape with at least one axis. Integers are promoted to
        float64; float32 stays float32. Values must be finite or ``-inf``.
    axis : int, default -1
        The axis to normalise over.

    Returns
    -------
    numpy.ndarray
        Same shape as ``x``. Along ``axis`` the entries are non-negative and
        sum to 1 (or are all 0 where every score was ``-inf``).

    Raises
    ------
    ValueError
        If ``x`` is not real-valued, is 0-dimensional, has length 0 along
        ``axis``, or contains NaN or ``+inf``; or if ``axis`` is out of range.

    Notes
    -----
    See chapter 1 (the word-vector example) and chapter 2 (overflow).
    """
    x = as_float_array(x, "x")
    if x.ndim == 0:
        raise ValueError("x must have at least 1 axis; got a 0-dimensional scalar")
    axis = check_axis(axis, x.ndim)
    if x.shape[axis] == 0:
        raise ValueError(f"x has length 0 along axis {axis} (shape {x.shape}); softmax needs at least one entry")
    check_no_nan_or_posinf(x, "x")
    return _softmax(x, axis)


def _softmax(x: np.ndarray, axis: int, in_place: bool = False) -> np.ndarray:
    """The softmax kernel, without argument checks: every softmax in the package runs this.

    With ``in_place=True`` it overwrites ``x`` (the attention scores are the
    largest array in play, so attention reuses their buffer).
    """
    row_max = np.max(x, axis=axis, keepdims=True)
    # A row that is -inf everywhere would give (-inf) - (-inf) = NaN; shift it by 0
    # instead, so that every exp() is exp(-inf) = 0 and the row sums to 0.
    row_max[np.isneginf(row_max)] = 0.0
    if in_place:
        x -= row_max
        weights = np.exp(x, out=x)
    else:
        weights = np.exp(x - row_max)
    total = weights.sum(axis=axis, keepdims=True)
    # A fully blocked row sums to 0: divide it by 1 instead, so it stays all-zero. (Fixing the small
    # sums costs less than a divide with where=, which takes about 1.6x as long over the large weights.)
    total[total == 0] = 1.0
    weights /= total
    return weights
