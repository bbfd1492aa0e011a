"""Multi-head attention in NumPy: split the width into heads, attend, merge.

Taught in chapter 4. The weight layout follows ``torch.nn.MultiheadAttention``
(read one out with :func:`selfattention.bridges.mha_weights`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._validation import as_float_array, check_matrix_shape, check_min_ndim, check_positive_int
from .attention import scaled_dot_product_attention

__all__ = [
    "split_heads",
    "merge_heads",
    "multihead_attention",
    "mha_parameter_count",
    "mha_multiply_adds",
]


def _check_divisible(D: int, num_heads: int) -> int:
    if D % num_heads != 0:
        raise ValueError(
            f"the model width D={D} is not divisible by num_heads={num_heads}; "
            f"each head needs D // num_heads columns (try num_heads in {_divisors(D)})"
        )
    return D // num_heads


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, min(n, 16) + 1) if n % d == 0]


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
    H = check_positive_int(num_heads, "num_heads")
    *batch, T, D = x.shape
    Dh = _check_divisible(D, H)
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


def multihead_attention(
    x: ArrayLike,
    w_qkv: ArrayLike,
    w_out: ArrayLike,
    num_heads: int,
    mask: ArrayLike | None = None,
    b_qkv: ArrayLike | None = None,
    b_out: ArrayLike | None = None,
    key: ArrayLike | None = None,
    value: ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Multi-head attention, as ``torch.nn.MultiheadAttention`` computes it.

    .. math::

        \mathrm{head}_h = \operatorname{softmax}\!\left(
            \frac{Q_h K_h^\top}{\sqrt{D_h}} + M\right) V_h, \qquad
        Y = [\mathrm{head}_1 \mid \dots \mid \mathrm{head}_H] \, W_{out} + b_{out}

    where :math:`Q = X W_q + b_q`, :math:`K = X_k W_k + b_k` and
    :math:`V = X_v W_v + b_v`, each split column-wise into H heads of width
    :math:`D_h = D / H`.

    Parameters
    ----------
    x : array_like, shape (..., T, D)
        The tokens that ask (the queries' input).
    w_qkv : array_like, shape (D, 3*D)
        Column blocks ``[W_q | W_k | W_v]``: ``in_proj_weight.T``.
    w_out : array_like, shape (D, D)
        Output projection: ``out_proj.weight.T``.
    num_heads : int
        H; must divide D.
    mask : array_like, optional
        Broadcasts to ``(..., H, T, S)``: boolean (True = attend) or float
        (added to the scores). A ``(T, S)`` mask applies to every head and
        batch entry; a per-example ``(B, T, S)`` mask needs ``mask[:, None]``.
    b_qkv : array_like, shape (3*D,), optional
        ``in_proj_bias``.
    b_out : array_like, shape (D,), optional
        ``out_proj.bias``.
    key, value : array_like, shape (..., S, D), optional
        For cross-attention: keys come from ``key`` and values from ``value``
        (``value`` defaults to ``key``). Both default to ``x`` (self-attention).

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
        If D is not divisible by ``num_heads``, a weight or bias has the wrong
        shape, ``key``/``value`` do not fit, or the mask is invalid.

    Notes
    -----
    See chapter 4 (multi-head attention and cross-attention).
    """
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 2, "(..., T, D)")
    D = x.shape[-1]
    H = check_positive_int(num_heads, "num_heads")
    _check_divisible(D, H)
    w_qkv = as_float_array(w_qkv, "w_qkv")
    w_out = as_float_array(w_out, "w_out")
    check_matrix_shape(w_qkv, "w_qkv", (D, 3 * D), f"(D, 3*D) for x with D={D}")
    check_matrix_shape(w_out, "w_out", (D, D), f"(D, D) for x with D={D}")
    b_q = b_k = b_v = b_out_arr = None
    if b_qkv is not None:
        b_qkv = as_float_array(b_qkv, "b_qkv")
        if b_qkv.shape != (3 * D,):
            raise ValueError(f"b_qkv must have shape (3*D,) = ({3 * D},) for x with D={D}; got {b_qkv.shape}")
        b_q, b_k, b_v = np.split(b_qkv, 3)
    if b_out is not None:
        b_out_arr = as_float_array(b_out, "b_out")
        if b_out_arr.shape != (D,):
            raise ValueError(f"b_out must have shape (D,) = ({D},) for x with D={D}; got {b_out_arr.shape}")

    if key is None and value is None:
        q, k, v = np.split(x @ w_qkv, 3, axis=-1)  # each (..., T, D): one fused product
    else:
        if key is None:
            raise ValueError("value was given without key; pass key (and value, if it differs from key)")
        key = as_float_array(key, "key")
        value = key if value is None else as_float_array(value, "value")
        check_min_ndim(key, "key", 2, "(..., S, D)")
        check_min_ndim(value, "value", 2, "(..., S, D)")
        for name, arr in (("key", key), ("value", value)):
            if arr.shape[-1] != D:
                raise ValueError(f"{name} has {arr.shape[-1]} features but x has {D}; they must match")
        if key.shape[-2] != value.shape[-2]:
            raise ValueError(f"key has {key.shape[-2]} tokens but value has {value.shape[-2]}; they must match")
        w_q, w_k, w_v = np.split(w_qkv, 3, axis=-1)  # each (D, D)
        q, k, v = x @ w_q, key @ w_k, value @ w_v  # (..., T, D), (..., S, D), (..., S, D)
    if b_q is not None:
        q, k, v = q + b_q, k + b_k, v + b_v

    q, k, v = (split_heads(a, H) for a in (q, k, v))  # each (..., H, T or S, Dh)
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)  # scale 1/sqrt(Dh)
    y = merge_heads(out) @ w_out  # (..., T, D)
    if b_out_arr is not None:
        y = y + b_out_arr
    return y, weights


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
    if not isinstance(bias, (bool, np.bool_)):
        raise ValueError(f"bias must be True or False; got {bias!r}")
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
    Dh = _check_divisible(D, H)
    cost = {
        "projections": T * D * D + 2 * S * D * D + T * D * D,
        "scores": H * T * S * Dh,
        "weighted_values": H * T * S * Dh,
    }
    cost["total"] = sum(cost.values())
    return cost
