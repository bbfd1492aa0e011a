"""Memory-efficient attention: keys in blocks, with an online softmax.

Taught in chapter 7. The idea behind FlashAttention (Milakov & Gimelshein
2018; Rabe & Staats 2021; Dao et al. 2022), written in NumPy: the (T, S)
score matrix is never held at once, only a (block_size, block_size) tile of it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._validation import (
    as_float_array,
    check_all_finite,
    check_bool,
    check_min_ndim,
    check_no_nan_or_posinf,
    check_positive_int,
)
from .attention import _dtypes, _validate_attention_args, check_no_overflow
from .masks import apply_causal_tile, apply_mask

__all__ = ["memory_efficient_attention", "online_softmax_update"]


def memory_efficient_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    mask: ArrayLike | None = None,
    scale: float | None = None,
    block_size: int = 512,
    is_causal: bool = False,
    return_lse: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
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
    memory grows with ``block_size**2`` (one tile of scores per sequence)
    and ``T * Dv`` (the output) instead of ``T * S``.

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
        Queries and keys per block: each step computes one
        ``(block_size, block_size)`` tile of scores per sequence.
    is_causal : bool, default False
        Block later keys, with the lower-right alignment of
        :func:`selfattention.scaled_dot_product_attention`. Each query
        block then stops at the last key it may see: tiles the mask would blank entirely are
        never computed (about half of them when T = S), and only a
        ``(block_size, block_size)`` boolean pattern is built, on the diagonal
        tiles. See chapter 9.
    return_lse : bool, default False
        Also return the log-sum-exp of each query's scaled, masked scores,
        :math:`m + \log \ell`, which is all the backward pass needs to
        recompute the weights (:func:`selfattention.memory_efficient_attention_backward`).

    Returns
    -------
    numpy.ndarray, shape (..., T, Dv)
        The attention output. The weights are never formed, so none are
        returned. With ``return_lse``, the pair ``(out, lse)``, ``lse`` of
        shape ``(..., T)`` and ``-inf`` for a query whose every key is blocked.
        ``lse`` is float32 for float16 inputs: float16's spacing (0.0625 near
        100) and range would spoil the weights the backward recomputes.

    Raises
    ------
    ValueError
        As :func:`selfattention.scaled_dot_product_attention` does, or if
        ``block_size`` is not a positive integer or ``is_causal`` not a bool.

    Notes
    -----
    See chapter 7 and :cite:`milakov2018online`, :cite:`rabe2021self`,
    :cite:`dao2022flashattention`.
    """
    q, k, v, mask, scale = _validate_attention_args(q, k, v, mask, scale)
    block = check_positive_int(block_size, "block_size")
    is_causal = check_bool(is_causal, "is_causal")
    return_lse = check_bool(return_lse, "return_lse")
    dtype, work = _dtypes(q, k, v)
    S = k.shape[-2]
    T, Dv = q.shape[-2], v.shape[-1]
    # Every running quantity has the batch axes of all three inputs (v may add axes
    # that q and k lack), so the blocks' scores must have them too: broadcast the
    # queries, a view, before scaling them once.
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    scores_shape = np.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (T, S)
    if mask is not None:
        mask = np.broadcast_to(mask, scores_shape)  # a view: blocks of it are sliced below
    with np.errstate(over="ignore", invalid="ignore"):  # a scale that overflows is reported below, clearly
        q = (np.broadcast_to(q, (*batch, T, q.shape[-1])) * np.asarray(scale, dtype=work)).astype(work, copy=False)
    k, v = k.astype(work, copy=False), v.astype(work, copy=False)

    running_max = np.full((*batch, T, 1), -np.inf, dtype=work)  # m
    running_sum = np.zeros((*batch, T, 1), dtype=work)  # l
    out = np.zeros((*batch, T, Dv), dtype=work)  # o, unnormalised

    # The queries are cut into blocks too, so that one (block, block) tile of scores per sequence is alive
    # at a time, whatever T is (a (T, block) slice grows with the queries). Whether the tiles stay in the
    # CPU's caches depends on the batch: one call holds a tile for every sequence at once (32 MiB for
    # B*H = 32 at block 512 in float32); chapter 7's block sweep measures the sizes. With a causal
    # mask, each query block stops at the last key it may see: the tiles above the diagonal, about half
    # of them for T = S, are never computed.
    query_blocks = [(i, min(i + block, T)) for i in range(0, T, block)]
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below, once and clearly
        for q_start, q_stop in query_blocks:
            rows = slice(q_start, q_stop)
            first_position = S - T + q_start  # lower-right alignment: query i sits at position S - T + i
            key_stop = min(S, S - T + q_stop) if is_causal else S  # one past the last key this block may see
            for start in range(0, max(key_stop, 0), block):
                stop = min(start + block, key_stop)
                scores = np.matmul(q[..., rows, :], np.swapaxes(k[..., start:stop, :], -1, -2))  # (..., rows, block)
                if mask is not None:
                    apply_mask(scores, mask[..., rows, start:stop])
                if is_causal and stop - 1 > first_position:  # a tile on the diagonal: some keys come later
                    apply_causal_tile(scores, first_position, start)
                new_max, _, _ = _online_softmax_update(
                    running_max[..., rows, :],
                    running_sum[..., rows, :],  # views: updated in place
                    out[..., rows, :],
                    scores,
                    v[..., start:stop, :],
                    in_place=True,
                )
                running_max[..., rows, :] = new_max
                del scores  # free this block before the next one is allocated: one block alive at a time

    blocked = running_sum == 0  # a query whose every key is blocked: output 0, lse -inf
    running_sum[blocked] = 1.0
    out /= running_sum
    check_no_overflow(out, dtype)
    if not return_lse:
        return out.astype(dtype, copy=False)
    lse = np.where(blocked, -np.inf, running_max + np.log(running_sum))[..., 0]  # (..., T)
    return out.astype(dtype, copy=False), lse  # lse stays in the working dtype: float16 would round it away


def online_softmax_update(
    running_max: np.ndarray,
    running_sum: np.ndarray,
    out: np.ndarray,
    scores: np.ndarray,
    values: np.ndarray,
    *,
    in_place: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Fold one block of keys into the running maximum, sum and unnormalised output.

    .. math::

        m' = \max(m, \max_j s_j), \qquad
        \ell' = e^{m - m'} \ell + \sum_j e^{s_j - m'}, \qquad
        o' = e^{m - m'} o + \sum_j e^{s_j - m'} v_j

    Start from :math:`m = -\infty`, :math:`\ell = 0`, :math:`o = 0`; after the
    last block, :math:`o / \ell` is the softmax-weighted sum of the values.
    While every score so far is ``-inf`` (a blocked query), the shift is 0
    instead of :math:`-\infty`, so nothing becomes NaN and the query keeps
    :math:`\ell = 0`.

    Parameters
    ----------
    running_max, running_sum : numpy.ndarray, shape (..., T, 1)
        :math:`m` and :math:`\ell` so far.
    out : numpy.ndarray, shape (..., T, Dv)
        :math:`o` so far, not yet divided by :math:`\ell`.
    scores : numpy.ndarray, shape (..., T, block)
        This block's (scaled, masked) scores.
    values : numpy.ndarray, shape (..., block, Dv)
        This block's values.
    in_place : bool, default False
        Update ``running_sum`` and ``out`` in place and reuse ``scores``'
        memory for its exponentials, as :func:`memory_efficient_attention`
        does to hold one block at a time. The arithmetic is the same.

    Returns
    -------
    tuple of numpy.ndarray
        The new ``(running_max, running_sum, out)``.

    Raises
    ------
    ValueError
        If the shapes do not fit together, ``scores`` or ``values`` hold NaN
        or ``+inf`` (``-inf`` scores are blocked keys), ``running_sum`` or
        ``out`` is not finite, ``running_sum`` is negative or non-zero on a row
        whose ``running_max`` is ``-inf``, the batch axes do not broadcast,
        or ``in_place`` is not a bool, or is True while ``running_sum``,
        ``out`` or ``scores`` is not a writeable floating NumPy array with
        every batch axis; or if the new sum or output overflows its dtype
        (float16 state does at sums past 65,504).

    Notes
    -----
    See chapter 7 (exercise 1 asks for this step) and :cite:`milakov2018online`.
    :func:`memory_efficient_attention` runs the same step without re-checking
    its already validated arguments.
    """
    in_place = check_bool(in_place, "in_place")
    arrays = {}
    for name, value in (
        ("running_max", running_max),
        ("running_sum", running_sum),
        ("out", out),
        ("scores", scores),
        ("values", values),
    ):
        arrays[name] = as_float_array(value, name)
        check_min_ndim(arrays[name], name, 2, "(..., rows, columns)")
    m, total, o, s, vals = arrays.values()
    T, block, Dv = s.shape[-2], s.shape[-1], vals.shape[-1]
    expected = {"running_max": (T, 1), "running_sum": (T, 1), "out": (T, Dv), "values": (block, Dv)}
    for name, last_two in expected.items():
        if arrays[name].shape[-2:] != last_two:
            raise ValueError(
                f"{name} must end in shape {last_two} for scores of shape (..., T, block) = {s.shape} and "
                f"values of width Dv={Dv}; got {arrays[name].shape}"
            )
    try:
        batch = np.broadcast_shapes(*(a.shape[:-2] for a in arrays.values()))
    except ValueError:
        leading = {name: a.shape[:-2] for name, a in arrays.items()}
        raise ValueError(f"the leading (batch) axes must broadcast together; got {leading}") from None
    if in_place:
        for name, value in (("running_sum", running_sum), ("out", out), ("scores", scores)):
            if arrays[name] is not value or not value.flags.writeable:
                raise ValueError(
                    "in_place=True updates running_sum and out and reuses scores, so each must be a writeable "
                    "floating NumPy array; "
                    + (
                        f"{name} is an array of dtype {value.dtype}"
                        if isinstance(value, np.ndarray)
                        else f"{name} is a {type(value).__name__}"
                    )
                    + (" that is read-only" if isinstance(value, np.ndarray) and not value.flags.writeable else "")
                    + "; pass in_place=False to get new arrays"
                )
            if value.shape[:-2] != batch:
                raise ValueError(
                    f"in_place=True writes the result into {name}, so it needs every batch axis {batch}; got shape "
                    f"{value.shape}; pass in_place=False to broadcast"
                )
    check_no_nan_or_posinf(s, "scores")
    check_all_finite(vals, "values")
    check_no_nan_or_posinf(m, "running_max")
    check_all_finite(total, "running_sum")
    check_all_finite(o, "out")
    if (total < 0).any():
        raise ValueError(
            "running_sum must be a sum of exponentials, never negative; "
            f"got a smallest entry of {float(total.min()):.3g}"
        )
    unseen = np.broadcast_to(np.isneginf(m), np.broadcast_shapes(m.shape, total.shape))
    if (unseen & (np.broadcast_to(total, unseen.shape) != 0)).any():
        raise ValueError(
            "running_sum must be 0 on rows whose running_max is -inf (no key folded in yet); start a new query "
            "with running_max = -inf, running_sum = 0 and out = 0"
        )
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below, once and clearly
        new_max, new_sum, new_out = _online_softmax_update(m, total, o, s, vals, in_place=in_place)
    if not (np.isfinite(new_sum).all() and np.isfinite(new_out).all()):
        raise ValueError(
            f"the update overflowed {new_out.dtype}: the running sum or output is too large to represent; keep the "
            "running state in float32 or float64 (memory_efficient_attention keeps float16's in float32)"
        )
    return new_max, new_sum, new_out


def _online_softmax_update(
    running_max: np.ndarray,
    running_sum: np.ndarray,
    out: np.ndarray,
    scores: np.ndarray,
    values: np.ndarray,
    *,
    in_place: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The step of :func:`online_softmax_update`, without argument checks."""
    new_max = np.maximum(running_max, scores.max(axis=-1, keepdims=True, initial=-np.inf))  # m'; a block may be empty
    shift = np.where(np.isneginf(new_max), 0.0, new_max)  # all blocked so far: exps are 0, not NaN
    correction = np.exp(running_max - shift)  # e^{m - m'}; 0 while m = -inf
    if in_place:
        exps = scores
        exps -= shift
    else:
        exps = scores - shift  # a new array, with the batch axes of every input
    np.exp(exps, out=exps)  # e^{s_j - m'}
    if not in_place:
        return new_max, running_sum * correction + exps.sum(axis=-1, keepdims=True), out * correction + exps @ values
    running_sum *= correction
    running_sum += exps.sum(axis=-1, keepdims=True)
    out *= correction
    out += np.matmul(exps, values)
    return new_max, running_sum, out
