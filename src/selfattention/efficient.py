"""Memory-efficient attention: keys in blocks, with an online softmax.

Taught in chapter 7. The idea behind FlashAttention (Milakov & Gimelshein
2018; Rabe & Staats 2021; Dao et al. 2022), written in NumPy: the (T, S)
score matrix is never held at once, only a (T, block_size) slice of it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._validation import check_positive_int
from .attention import _apply_mask, _validate_attention_args

__all__ = ["memory_efficient_attention"]


def memory_efficient_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    mask: ArrayLike | None = None,
    scale: float | None = None,
    block_size: int = 512,
) -> np.ndarray:
    r"""Scaled dot-product attention that visits the keys ``block_size`` at a time.

    For each block of keys it computes that block's scores, then updates three
    running quantities per query: the largest score so far :math:`m`, the sum
    of exponentials :math:`\ell` and the unnormalised output :math:`o`. When a
    block raises the maximum from :math:`m` to :math:`m'`, everything so far
    is rescaled by :math:`e^{m - m'}`:

    .. math::

        \ell \leftarrow e^{m - m'} \ell + \sum_j e^{s_j - m'}, \qquad
        o \leftarrow e^{m - m'} o + \sum_j e^{s_j - m'} v_j, \qquad
        \text{output} = o / \ell

    The result equals :func:`selfattention.scaled_dot_product_attention`'s
    output (up to rounding), with the same argument conventions, including
    masks and all-zero output for a query whose every key is blocked. Peak
    memory grows with ``T * block_size`` instead of ``T * S``.

    Parameters
    ----------
    q : array_like, shape (..., T, Dk)
    k : array_like, shape (..., S, Dk)
    v : array_like, shape (..., S, Dv)
    mask : array_like, optional
        Broadcasts to (..., T, S); boolean (True = attend) or additive float.
    scale : float, optional
        Defaults to ``1 / sqrt(Dk)``.
    block_size : int, default 512
        Keys per block.

    Returns
    -------
    numpy.ndarray, shape (..., T, Dv)
        The attention output. The weights are never formed, so none are
        returned.

    Raises
    ------
    ValueError
        As :func:`selfattention.scaled_dot_product_attention` does, or if
        ``block_size`` is not a positive integer.

    Notes
    -----
    See chapter 7 and :cite:`milakov2018online`, :cite:`rabe2021self`,
    :cite:`dao2022flashattention`.
    """
    q, k, v, mask, scale = _validate_attention_args(q, k, v, mask, scale)
    block = check_positive_int(block_size, "block_size")
    dtype = np.result_type(q, k, v)
    S = k.shape[-2]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    T, Dv = q.shape[-2], v.shape[-1]
    scores_shape = np.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (T, S)
    if mask is not None:
        mask = np.broadcast_to(mask, scores_shape)  # a view: blocks of it are sliced below

    q = q * np.asarray(scale, dtype=dtype)  # scale the queries once
    running_max = np.full((*batch, T, 1), -np.inf, dtype=dtype)  # m
    running_sum = np.zeros((*batch, T, 1), dtype=dtype)  # l
    out = np.zeros((*batch, T, Dv), dtype=dtype)  # o, unnormalised

    for start in range(0, S, block):
        stop = min(start + block, S)
        scores = np.matmul(q, np.swapaxes(k[..., start:stop, :], -1, -2))  # (..., T, block)
        if mask is not None:
            _apply_mask(scores, mask[..., start:stop])
        new_max = np.maximum(running_max, scores.max(axis=-1, keepdims=True))
        safe_max = np.where(np.isneginf(new_max), 0.0, new_max)  # all blocked so far: exps are 0, not NaN
        correction = np.exp(running_max - safe_max)  # e^{m - m'}; 0 while m = -inf
        scores -= safe_max
        np.exp(scores, out=scores)  # e^{s_j - m'}
        running_sum *= correction
        running_sum += scores.sum(axis=-1, keepdims=True)
        out *= correction
        out += np.matmul(scores, v[..., start:stop, :])
        running_max = new_max
        del scores  # free this block before the next one is allocated: one block alive at a time

    np.divide(out, running_sum, out=out, where=running_sum > 0)  # fully blocked queries stay 0
    return out
