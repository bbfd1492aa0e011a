"""Scaled dot-product attention and single-head self-attention in NumPy.

Shape letters (see the notation page): T query tokens, S key tokens, D model
width, Dk query/key width, Dv value width; ``...`` is any number of leading
batch axes.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from ._validation import as_float_array, check_all_finite, check_bool, check_min_ndim, check_real_scalar
from .masks import apply_causal_tile, apply_mask, check_head_axis_mask, check_mask
from .params import AttentionParams, project_qkv
from .scores import _softmax

__all__ = ["scaled_dot_product_attention", "self_attention"]


def scaled_dot_product_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    mask: ArrayLike | None = None,
    scale: float | None = None,
    is_causal: bool = False,
    enable_gqa: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Scaled dot-product attention, returning the output and the weights.

    .. math::

        \operatorname{Attention}(Q, K, V) =
        \operatorname{softmax}\!\left(s\, Q K^\top + M\right) V,
        \qquad s = \frac{1}{\sqrt{d_k}}

    Parameters
    ----------
    q : array_like, shape (..., T, Dk)
        Queries. Integer arrays are promoted to float64.
    k : array_like, shape (..., S, Dk)
        Keys.
    v : array_like, shape (..., S, Dv)
        Values.
    mask : array_like, optional
        Broadcasts to the scores' shape ``(..., T, S)``. Either boolean, where
        True means *the query may attend to this key* (the convention of
        ``torch.nn.functional.scaled_dot_product_attention``), or floating,
        in which case it is added to the scores (0 keeps, ``-inf`` blocks).
    scale : float, optional
        Multiplies the scores; defaults to ``1 / sqrt(Dk)``.
    is_causal : bool, default False
        Also block every key after the query's own position, without the
        caller building a mask. The alignment is lower-right, as in
        :func:`selfattention.causal_mask`: with S keys and T queries, query
        ``i`` sits at position ``S - T + i`` (the T newest tokens, after a KV
        cache of ``S - T``). PyTorch's ``F.scaled_dot_product_attention(
        is_causal=True)`` aligns upper-left instead; the two agree only when
        T = S. May be combined with ``mask``: a key is then kept only if both
        keep it.
    enable_gqa : bool, default False
        Grouped-query attention, as in PyTorch's ``enable_gqa``: ``q`` has H
        heads on its third-to-last axis, ``(..., H, T, Dk)``, and ``k``, ``v``
        have Hkv, ``(..., Hkv, S, Dk)``, with H a multiple of Hkv. Query head
        ``h`` reads key/value head ``h // (H // Hkv)`` (see
        :func:`selfattention.repeat_kv`). Hkv = 1 is multi-query attention.
        The scores then have a head axis, so a mask must be ``(T, S)`` or
        have as many axes as they do (a per-example ``(B, 1, S)`` padding
        mask needs ``mask[:, None]``), as in
        :func:`selfattention.multihead_attention`.

    Returns
    -------
    out : numpy.ndarray, shape (..., T, Dv)
        The attention output.
    weights : numpy.ndarray, shape (..., T, S)
        The attention weights. Each row is non-negative and sums to 1, except
        a query whose every key is blocked: its weights and output are 0, as in
        PyTorch's ``scaled_dot_product_attention``, with no NaN and no warning.

    Raises
    ------
    ValueError
        If an input has fewer than 2 axes, the last axes of ``q`` and ``k``
        differ, ``k`` and ``v`` hold different numbers of tokens, the batch axes
        do not broadcast, the mask does not broadcast to ``(..., T, S)`` or is
        of integer type (or, with ``enable_gqa``, has between 3 axes and
        fewer than the scores), ``scale`` is not a finite real number, or
        ``is_causal`` is not a bool.

    Notes
    -----
    See chapter 1 (one query by hand, then the matrix form), chapter 2, and
    chapter 3 (masks and ``is_causal``).
    """
    if check_bool(enable_gqa, "enable_gqa"):
        k, v = _share_kv_heads(q, k, v)
        mask = check_head_axis_mask(mask, np.ndim(k))  # the scores (..., H, T, S) have a head axis now
    q, k, v, mask, scale = _validate_attention_args(q, k, v, mask, scale)
    is_causal = check_bool(is_causal, "is_causal")
    dtype, work = _dtypes(q, k, v)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below, once and clearly
        # Scale the (T, Dk) queries rather than the (T, S) scores: far fewer numbers.
        scores = np.matmul((q * np.asarray(scale, dtype=work)).astype(work, copy=False), np.swapaxes(k, -1, -2))
        if mask is not None:
            apply_mask(scores, mask)
        if is_causal:
            apply_causal_tile(scores, k.shape[-2] - q.shape[-2], 0)  # the whole (T, S) matrix, lower-right
        weights = _softmax(scores, -1, in_place=True)  # (..., T, S), in the scores' own buffer
        out = np.matmul(weights, v.astype(work, copy=False))  # (..., T, Dv)
    check_no_overflow(out, dtype)
    return out.astype(dtype, copy=False), weights.astype(dtype, copy=False)


def _share_kv_heads(q: ArrayLike, k: ArrayLike, v: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """For grouped-query attention: k and v with each of their Hkv heads repeated for its H // Hkv query heads."""
    q, k, v = as_float_array(q, "q"), as_float_array(k, "k"), as_float_array(v, "v")
    for name, arr, layout in (
        ("q", q, "(..., H, T, Dk)"),
        ("k", k, "(..., Hkv, S, Dk)"),
        ("v", v, "(..., Hkv, S, Dv)"),
    ):
        check_min_ndim(arr, name, 3, layout + " with enable_gqa=True")
    H, Hkv = q.shape[-3], k.shape[-3]
    if v.shape[-3] != Hkv:
        raise ValueError(f"k has {Hkv} heads but v has {v.shape[-3]}; with enable_gqa=True they must match")
    if Hkv == 0 or H % Hkv:
        raise ValueError(
            f"with enable_gqa=True the query heads must be a multiple of the key/value heads; got H={H} query "
            f"heads (q {q.shape}) and Hkv={Hkv} (k {k.shape})"
        )
    r = H // Hkv
    if r > 1 and r * (k.size + v.size) > 2**28:
        raise ValueError(
            f"enable_gqa would copy each of the {Hkv} key/value heads {r} times, {r * (k.size + v.size):,} numbers; "
            "attend in smaller batches or over fewer keys"
        )
    return (k, v) if r == 1 else (np.repeat(k, r, axis=-3), np.repeat(v, r, axis=-3))  # (..., H, S, D)


def _dtypes(*arrays: np.ndarray) -> tuple[np.dtype, np.dtype]:
    """The result dtype of the inputs, and the dtype to compute in: float16 works in float32.

    float16 tops out at 65504, which the scores of ordinary inputs can pass; torch
    also accumulates half-precision attention in float32 on the CPU.
    """
    dtype = np.result_type(*arrays)
    return dtype, (np.dtype(np.float32) if dtype == np.float16 else dtype)


def check_no_overflow(out: np.ndarray, dtype: np.dtype) -> None:
    """Raise if finite inputs gave a non-finite output: the scores or the output overflowed ``dtype``."""
    if not np.isfinite(out).all():
        advice = "scale the inputs down or pass a smaller scale" + (
            ", or compute in float64" if dtype != np.float64 else ""
        )
        raise ValueError(
            f"the attention overflowed {dtype}: the scores (scale * q @ k.T) or the output are too large to "
            f"represent; {advice}"
        )


def _validate_attention_args(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, mask: ArrayLike | None, scale: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, float]:
    """Check and convert the arguments shared by the attention functions."""
    q = as_float_array(q, "q")
    k = as_float_array(k, "k")
    v = as_float_array(v, "v")
    for name, arr in (("q", q), ("k", k), ("v", v)):
        check_all_finite(arr, name)
    check_min_ndim(q, "q", 2, "(..., T, Dk)")
    check_min_ndim(k, "k", 2, "(..., S, Dk)")
    check_min_ndim(v, "v", 2, "(..., S, Dv)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q has {q.shape[-1]} features but k has {k.shape[-1]}; "
            f"the last axes of q and k must match (q {q.shape}, k {k.shape})"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k has {k.shape[-2]} tokens but v has {v.shape[-2]}; every key needs one value (k {k.shape}, v {v.shape})"
        )
    T, S, Dk = q.shape[-2], k.shape[-2], q.shape[-1]
    if 0 in (T, S, Dk):
        raise ValueError(f"attention needs T, S and Dk of at least 1; got T={T}, S={S}, Dk={Dk}")
    try:
        np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(
            f"the leading (batch) axes of q {q.shape[:-2]}, k {k.shape[:-2]} and "
            f"v {v.shape[:-2]} do not broadcast together"
        ) from None
    scale = 1.0 / math.sqrt(Dk) if scale is None else check_real_scalar(scale, "scale")

    scores_shape = np.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (T, S)
    mask = check_mask(mask, scores_shape)

    return q, k, v, mask, scale


def self_attention(
    x: ArrayLike,
    w_qkv: ArrayLike,
    w_out: ArrayLike,
    mask: ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Single-head self-attention with fused query/key/value projections.

    .. math::

        [Q \mid K \mid V] = X W_{qkv}, \qquad
        Y = \operatorname{softmax}\!\left(\frac{Q K^\top}{\sqrt{D}} + M\right) V \, W_{out}

    The weights follow ``torch.nn.MultiheadAttention(D, 1, bias=False)``:
    ``w_qkv`` is ``in_proj_weight.T`` and ``w_out`` is ``out_proj.weight.T``.

    Parameters
    ----------
    x : array_like, shape (..., T, D)
        Input tokens, with any leading batch axes.
    w_qkv : array_like, shape (D, 3 * D)
        Column blocks ``[W_q | W_k | W_v]``, in that order.
    w_out : array_like, shape (D, D)
        Output projection.
    mask : array_like, optional
        As in :func:`scaled_dot_product_attention`; broadcasts to ``(..., T, T)``.

    Returns
    -------
    y : numpy.ndarray, shape (..., T, D)
        The output, one vector per input token.
    weights : numpy.ndarray, shape (..., T, T)
        The attention weights.

    Raises
    ------
    ValueError
        If ``x`` has fewer than 2 axes, a weight has the wrong shape, or the
        mask is invalid.

    Notes
    -----
    See chapter 2 (single head on ViT-shaped input) and chapter 3 (batched).
    """
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 2, "(..., T, D)")
    params = AttentionParams.from_fused(w_qkv, w_out, d_model=x.shape[-1])
    q, k, v = project_qkv(x, params)  # each (..., T, D)
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    return params.out(out), weights  # (..., T, D), (..., T, T)
