"""Multi-head attention in NumPy: project, split the width into heads, attend, merge, project.

Taught in chapter 4. :func:`multihead_attention` is a short composition of
public steps, so that a later chapter can insert its own between them (rotary
positions between the split and the attention, fewer key/value heads by
repeating them):

1. :func:`selfattention.project_qkv`: ``q, k, v`` from the inputs;
2. :func:`split_heads`: (..., T, H*Dh) -> (..., H, T, Dh);
3. (positions, in chapter 8; :func:`repeat_kv` when Hkv < H);
4. :func:`selfattention.scaled_dot_product_attention`, every head at once;
5. :func:`merge_heads`: (..., H, T, Dv) -> (..., T, H*Dv);
6. the output projection, ``params.out(...)``.

The weights are an :class:`selfattention.AttentionParams`; the fused layout of
``torch.nn.MultiheadAttention`` is accepted too (read one out with
:func:`selfattention.mha_weights`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._validation import as_float_array, check_bool, check_head_split, check_min_ndim, check_positive_int
from .attention import scaled_dot_product_attention
from .masks import check_head_axis_mask
from .params import AttentionParams, project_qkv

__all__ = [
    "split_heads",
    "merge_heads",
    "repeat_kv",
    "multihead_attention",
    "mha_parameter_count",
    "mha_multiply_adds",
]


def split_heads(x: ArrayLike, num_heads: int) -> np.ndarray:
    """Deal the last axis out to ``num_heads`` heads: (..., T, D) -> (..., H, T, Dh).

    Head ``h`` gets columns ``h*Dh`` to ``(h+1)*Dh - 1``, with ``Dh = D // H``;
    this is the order ``torch.nn.MultiheadAttention`` uses.

    Parameters
    ----------
    x : array_like, shape (..., T, D)
        Queries, keys or values of all heads side by side.
    num_heads : int
        H; must divide D.

    Returns
    -------
    numpy.ndarray, shape (..., H, T, Dh)
        A view when possible; :func:`merge_heads` undoes it.

    Raises
    ------
    ValueError
        If ``x`` has fewer than 2 axes, ``num_heads`` is not a positive integer,
        or D is not divisible by ``num_heads``.

    Notes
    -----
    See chapter 4 (split and merge heads).
    """
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 2, "(..., T, D)")
    *batch, T, D = x.shape
    H = num_heads
    Dh = check_head_split(D, H)
    heads = x.reshape(*batch, T, H, Dh)  # (..., T, H, Dh)
    return np.swapaxes(heads, -3, -2)  # (..., H, T, Dh)


def merge_heads(x: ArrayLike) -> np.ndarray:
    """Put the heads back side by side: (..., H, T, Dh) -> (..., T, H*Dh).

    Parameters
    ----------
    x : array_like, shape (..., H, T, Dh)
        One output per head.

    Returns
    -------
    numpy.ndarray, shape (..., T, H*Dh)
        The inverse of :func:`split_heads`.

    Raises
    ------
    ValueError
        If ``x`` has fewer than 3 axes.

    Notes
    -----
    See chapter 4 (split and merge heads).
    """
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 3, "(..., H, T, Dh)")
    *batch, H, T, Dh = x.shape
    side_by_side = np.swapaxes(x, -3, -2)  # (..., T, H, Dh)
    return side_by_side.reshape(*batch, T, H * Dh)  # (..., T, D)


def repeat_kv(x: ArrayLike, n_rep: int) -> np.ndarray:
    """Repeat each key/value head for the query heads that share it: (..., Hkv, S, Dh) -> (..., Hkv*n_rep, S, Dh).

    Head ``j`` of the result is head ``j // n_rep`` of ``x``, so query heads
    ``0 … n_rep-1`` use key/value head 0, the next ``n_rep`` use head 1, and so
    on: the grouping of grouped-query attention, Hugging Face LLaMA's
    ``repeat_kv`` and PyTorch's ``enable_gqa``.

    Parameters
    ----------
    x : array_like, shape (..., Hkv, S, Dh)
        Keys or values, split into heads.
    n_rep : int
        H / Hkv, the query heads per key/value head; 1 returns ``x`` unchanged.

    Returns
    -------
    numpy.ndarray, shape (..., Hkv*n_rep, S, Dh)

    Raises
    ------
    ValueError
        If ``x`` has fewer than 3 axes, ``n_rep`` is not a positive integer,
        or the result would hold more than 2**28 numbers.

    Notes
    -----
    See chapter 4 (the steps of multi-head attention) and chapter 9
    (grouped-query attention).
    """
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 3, "(..., Hkv, S, Dh)")
    r = check_positive_int(n_rep, "n_rep")
    if r * x.size > 2**28:  # 2 GiB of float64: a typo such as 10**9 should not exhaust memory
        raise ValueError(
            f"n_rep={r} would make {r * x.size:.3g} numbers, more than {2**28:,}; it is the query heads per "
            "key/value head (H // Hkv). For long inputs, pass enable_gqa=True to the attention instead of copying"
        )
    return x if r == 1 else np.repeat(x, r, axis=-3)  # (..., Hkv*r, S, Dh)


def multihead_attention(
    x: ArrayLike,
    w_qkv: ArrayLike | AttentionParams,
    w_out: ArrayLike | None = None,
    num_heads: int | None = None,
    mask: ArrayLike | None = None,
    b_qkv: ArrayLike | None = None,
    b_out: ArrayLike | None = None,
    key: ArrayLike | None = None,
    value: ArrayLike | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Multi-head attention, as ``torch.nn.MultiheadAttention`` computes it.

    .. math::

        \mathrm{head}_h = \operatorname{softmax}\!\left(
            \frac{Q_h K_h^\top}{\sqrt{D_h}} + M\right) V_h, \qquad
        Y = [\mathrm{head}_1 \mid \dots \mid \mathrm{head}_H] \, W_{out} + b_{out}

    where :math:`Q = X W_q + b_q`, :math:`K = X_k W_k + b_k` and
    :math:`V = X_v W_v + b_v`, each split column-wise into heads of width
    :math:`D_h`. The weights come either as an :class:`~selfattention.AttentionParams`,
    ``multihead_attention(x, params, num_heads=H)``, or in PyTorch's fused
    layout, ``multihead_attention(x, w_qkv, w_out, H, b_qkv=..., b_out=...)``.
    With fewer key/value heads than query heads in ``params`` (grouped-query
    attention), each key/value head serves ``H / Hkv`` query heads.

    Parameters
    ----------
    x : array_like, shape (..., T, D)
        The tokens that ask (the queries' input).
    w_qkv : array_like, shape (D, 3*D), or AttentionParams
        Column blocks ``[W_q | W_k | W_v]`` (``in_proj_weight.T``), or every
        weight of the layer as an :class:`~selfattention.AttentionParams`.
    w_out : array_like, shape (D, D)
        Output projection, ``out_proj.weight.T``; only with a fused ``w_qkv``.
    num_heads : int
        H; must divide the query width.
    mask : array_like, optional
        Broadcasts to ``(..., H, T, S)``: boolean (True = attend) or float
        (added to the scores). A ``(T, S)`` mask applies to every head and
        batch entry; a per-example ``(B, T, S)`` mask needs ``mask[:, None]``.
    b_qkv : array_like, shape (3*D,), optional
        ``in_proj_bias``; only with a fused ``w_qkv``.
    b_out : array_like, shape (D,), optional
        ``out_proj.bias``; only with a fused ``w_qkv``.
    key, value : array_like, shape (..., S, D), optional
        For cross-attention: keys come from ``key`` and values from ``value``
        (``value`` defaults to ``key``). Both default to ``x`` (self-attention).
    is_causal : bool, default False
        Block later keys, lower-right aligned, as in
        :func:`selfattention.scaled_dot_product_attention`.
    scale : float, optional
        Multiplies every head's scores; defaults to :math:`1/\sqrt{D_h}`.
        Chapter 11 trains with ``scale=1.0`` to show what the default prevents.

    Returns
    -------
    y : numpy.ndarray, shape (..., T, D)
        The output.
    weights : numpy.ndarray, shape (..., H, T, S)
        Per-head attention weights. ``weights.mean(axis=-3)`` is what
        ``nn.MultiheadAttention`` returns with ``average_attn_weights=True``.

    Raises
    ------
    ValueError
        If the head count does not divide the width, a weight or bias has the
        wrong shape, ``key``/``value`` do not fit, or the mask is invalid.

    Notes
    -----
    See chapter 4 (multi-head attention and cross-attention).
    """
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 2, "(..., T, D)")
    if isinstance(w_qkv, AttentionParams):
        if w_out is not None or b_qkv is not None or b_out is not None:
            raise ValueError(
                "with an AttentionParams, pass the head count by keyword and no other weights: "
                "multihead_attention(x, params, num_heads=H)"
            )
        params = w_qkv
        if x.shape[-1] != params.d_model:
            raise ValueError(f"x has width D={x.shape[-1]} but the parameters are for D={params.d_model}")
    else:
        if w_out is None:
            raise ValueError(
                "w_out is missing: pass multihead_attention(x, w_qkv, w_out, num_heads) or (x, params, num_heads=H)"
            )
        params = AttentionParams.from_fused(w_qkv, w_out, b_qkv, b_out, d_model=x.shape[-1])
    if num_heads is None:
        raise ValueError("num_heads is missing: pass the number of query heads, e.g. num_heads=4")
    H, Hkv = params.head_counts(num_heads)
    is_causal = check_bool(is_causal, "is_causal")

    q, k, v = project_qkv(x, params, key, value)  # (..., T, H*Dh), (..., S, Hkv*Dh), (..., S, Hkv*Dv)
    mask = check_head_axis_mask(mask, 1 + max(q.ndim, k.ndim))
    q, k, v = split_heads(q, H), split_heads(k, Hkv), split_heads(v, Hkv)  # (..., heads, T or S, Dh)
    k, v = repeat_kv(k, H // Hkv), repeat_kv(v, H // Hkv)  # (..., H, S, Dh): a no-op when Hkv = H
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask, scale=scale, is_causal=is_causal)  # (..., H, T, Dv)
    return params.out(merge_heads(out)), weights  # (..., T, D), (..., H, T, S)


def mha_parameter_count(d_model: int, bias: bool = True) -> int:
    """Parameters of one multi-head attention layer: ``4 D^2`` weights, plus ``4 D`` biases.

    The number of heads does not change it: the heads share out the width D.

    Parameters
    ----------
    d_model : int
        D.
    bias : bool, default True
        Whether the input and output projections have biases.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        If ``d_model`` is not a positive integer or ``bias`` is not a bool.

    Notes
    -----
    See chapter 4 (cost).
    """
    D = check_positive_int(d_model, "d_model")
    bias = check_bool(bias, "bias")
    return 4 * D * D + (4 * D if bias else 0)


def mha_multiply_adds(T: int, d_model: int, num_heads: int, S: int | None = None) -> dict[str, int]:
    """Multiply-adds of one multi-head attention layer, per sequence, by stage.

    With S key tokens (S = T for self-attention) and biases ignored:

    - projections: ``T*D*D`` for Q, ``2*S*D*D`` for K and V, ``T*D*D`` for the output;
    - scores ``Q K^T``: H heads of ``T*S*Dh``, i.e. ``T*S*D``;
    - weights times V: also ``T*S*D``.

    The head count cancels out of every term; it only changes how many
    softmaxes there are (``H*T`` rows of length S).

    Parameters
    ----------
    T, d_model, num_heads : int
        Query tokens, width D, and H (which must divide D).
    S : int, optional
        Key tokens; defaults to T.

    Returns
    -------
    dict
        ``{"projections": ..., "scores": ..., "weighted_values": ..., "total": ...}``.

    Raises
    ------
    ValueError
        If an argument is not a positive integer or D is not divisible by H.

    Notes
    -----
    See chapter 4 (cost).
    """
    T = check_positive_int(T, "T")
    D = check_positive_int(d_model, "d_model")
    H = check_positive_int(num_heads, "num_heads")
    S = T if S is None else check_positive_int(S, "S")
    Dh = check_head_split(D, H)
    cost = {
        "projections": T * D * D + 2 * S * D * D + T * D * D,
        "scores": H * T * S * Dh,
        "weighted_values": H * T * S * Dh,
    }
    cost["total"] = sum(cost.values())
    return cost
