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
        A float mask of only 0s and 1s is refused (1 would be added, not
        keep): pass it as ``mask.astype(bool)``. When the scores have four or
        more axes, ``(B, H, T, S)``, a mask must be ``(T, S)``, have as many
        axes as the scores, or have only size-1 extra axes: a per-example
        ``(B, 1, S)`` mask would otherwise line up with the heads, so it
        needs ``mask[:, None]`` (PyTorch would apply it to the heads silently).
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
        ``h`` reads key/value head ``h // (H // Hkv)``, as if each were
        repeated by :func:`selfattention.repeat_kv`, but without the copies:
        the H // Hkv query heads of a group meet their one key/value head
        through NumPy's broadcasting. Hkv = 1 is multi-query attention.
        The scores then have a head axis, so the mask rule above for
        four-axis scores applies, as in :func:`selfattention.multihead_attention`.

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
        of integer type, a float mask holds only 0s and 1s, a mask with
        fewer axes than four-axis scores (but more than 2) has an extra axis
        that is not 1, ``scale`` is not a finite real number, or
        ``is_causal`` is not a bool.

    Notes
    -----
    See chapter 1 (one query by hand, then the matrix form), chapter 2, and
    chapter 3 (masks and ``is_causal``).
    """
    if check_bool(enable_gqa, "enable_gqa"):
        return _grouped_query_attention(q, k, v, mask, scale, is_causal)
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


def kv_groups(q: ArrayLike, k: ArrayLike, v: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Check the layout ``enable_gqa`` needs; return q, k, v as arrays and r = H // Hkv, the heads per group."""
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
    return q, k, v, H // Hkv


def _grouped_query_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, mask: ArrayLike | None, scale: float | None, is_causal: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``enable_gqa`` without copying a key or value: each key/value head meets its r query heads in one matmul.

    The queries ``(..., H, T, Dk)`` are viewed as ``(..., Hkv, r, T, Dk)``, and
    k and v gain a size-1 axis, ``(..., Hkv, 1, S, D)``, so that NumPy's
    broadcasting hands each of the r query heads the same key/value head,
    read where it lies, instead of r copies of it (``repeat_kv``'s way).
    """
    q, k, v, r = kv_groups(q, k, v)
    H, Hkv, (T, Dk), S = q.shape[-3], k.shape[-3], q.shape[-2:], k.shape[-2]
    if r == 1:
        return scaled_dot_product_attention(q, k, v, mask=mask, scale=scale, is_causal=is_causal)
    try:  # the scores the caller sees, (..., H, T, S): the mask is checked against them, then grouped alike
        scores_shape = np.broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3]) + (H, T, S)
    except ValueError:
        raise ValueError(
            f"the leading (batch) axes of q {q.shape[:-3]}, k {k.shape[:-3]} and v {v.shape[:-3]} do not "
            "broadcast together"
        ) from None
    mask = check_mask(check_head_axis_mask(mask, len(scores_shape)), scores_shape)
    if mask is not None:
        mask = mask.reshape((1,) * (len(scores_shape) - mask.ndim) + mask.shape)  # every axis named
        heads = mask.shape[-3]
        mask = mask.reshape(*mask.shape[:-3], Hkv, r, *mask.shape[-2:]) if heads == H else mask[..., None, :, :, :]
    out, weights = scaled_dot_product_attention(
        q.reshape(*q.shape[:-3], Hkv, r, T, Dk),  # (..., Hkv, r, T, Dk)
        k[..., None, :, :],  # (..., Hkv, 1, S, Dk): a view
        v[..., None, :, :],
        mask=mask,
        scale=scale,
        is_causal=is_causal,
    )
    return out.reshape(*out.shape[:-4], H, T, -1), weights.reshape(*weights.shape[:-4], H, T, S)


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
    if len(scores_shape) >= 4:  # (..., H, T, S): a per-example (B, 1, S) mask would meet the heads
        mask = check_head_axis_mask(mask, len(scores_shape))
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
