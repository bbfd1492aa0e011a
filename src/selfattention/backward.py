r"""The backward pass by hand: gradients of softmax, attention, LayerNorm and a multi-head layer.

Taught in chapter 10. Each gradient is a plain function named after its
forward, ``<forward>_backward(grad_out, <forward's inputs>)``, returning the
gradients of the inputs in the forward's order, each with its input's shape.
Every one is checked against ``torch.autograd`` in float64 and against central
finite differences (``tests/test_backward.py``).

For attention, with :math:`S = s\,QK^\top + M`, :math:`P = \operatorname{softmax}(S)`
and :math:`O = PV`:

.. math::

    dV = P^\top dO, \quad dP = dO\,V^\top, \quad
    dS = P \circ (dP - \delta), \quad \delta = \operatorname{rowsum}(dO \circ O), \quad
    dQ = s\, dS\, K, \quad dK = s\, dS^\top Q.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._validation import (
    as_float_array,
    check_all_finite,
    check_axis,
    check_bool,
    check_min_ndim,
    check_positive_int,
    check_real_scalar,
    precision_of,
    row_sum_tolerance,
)
from .attention import _dtypes, _validate_attention_args, kv_groups, scaled_dot_product_attention
from .encoder import moments
from .masks import apply_causal_tile, apply_mask, check_head_axis_mask, fully_blocked_rows
from .multihead import merge_heads, repeat_kv, split_heads
from .params import AttentionParams, Linear, project_qkv

__all__ = [
    "softmax_backward",
    "scaled_dot_product_attention_backward",
    "memory_efficient_attention_backward",
    "linear_backward",
    "layer_norm_backward",
    "multihead_attention_backward",
]


def _grad(grad: Any, shape: tuple[int, ...], name: str, of: str) -> np.ndarray:
    """``grad`` as a finite float array of exactly ``shape`` (the shape of the forward's ``of``)."""
    grad = as_float_array(grad, name)
    if grad.shape != tuple(shape):
        raise ValueError(f"{name} must have the shape of {of}, {tuple(shape)}; got {grad.shape}")
    check_all_finite(grad, name)
    return grad


def _sum_to_shape(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Undo broadcasting: sum ``grad`` over the axes its input was stretched along, back to ``shape``."""
    extra = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(extra))) if extra else grad
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=stretched, keepdims=True) if stretched else grad


def softmax_backward(grad_y: ArrayLike, y: ArrayLike, axis: int = -1) -> np.ndarray:
    r"""The gradient through a softmax, from its output: :math:`y \circ (g - \sum g \circ y)`.

    The Jacobian of :math:`y = \operatorname{softmax}(x)` along the axis is
    :math:`\operatorname{diag}(y) - y y^\top`; multiplying it by the upstream
    gradient :math:`g` gives the formula above, so the Jacobian is never formed.

    Parameters
    ----------
    grad_y : array_like
        :math:`\partial L / \partial y`, the shape of ``y``.
    y : array_like
        The softmax's output (each slice along ``axis`` sums to 1, or is all 0
        for a fully masked row, whose gradient is then 0).
    axis : int, default -1

    Returns
    -------
    numpy.ndarray
        :math:`\partial L / \partial x`, the shape of ``y``.

    Raises
    ------
    ValueError
        If the shapes differ, ``axis`` is out of range, or an input is not finite.

    Notes
    -----
    See chapter 10 (the softmax backward).
    """
    eps, dtype_name = precision_of(y)  # before the conversion, which reads bfloat16 as float32
    y = as_float_array(y, "y")
    check_min_ndim(y, "y", 1, "(..., n)")
    check_all_finite(y, "y")
    grad_y = _grad(grad_y, y.shape, "grad_y", "y")
    axis = check_axis(axis, y.ndim)
    if y.size == 0:  # as softmax refuses it: there is no distribution to differentiate
        raise ValueError(f"y must hold at least one entry along each axis; got shape {y.shape}")
    sums = y.astype(np.float64).sum(axis=axis)
    # what a softmax in y's precision may be off by, and never stricter than before for float32
    tol = max(1e-3 if y.dtype != np.float64 else 1e-6, row_sum_tolerance(y.shape[axis], eps))
    if y.min() < -tol or y.max() > 1 + tol or not (np.isclose(sums, 1, atol=tol) | np.isclose(sums, 0, atol=tol)).all():
        raise ValueError(
            "y must be the softmax's output: entries in [0, 1], each slice along the axis summing to 1 (or all 0 "
            f"for a fully masked row), within {tol:.2g} for {dtype_name}; got entries from {y.min():.3g} to "
            f"{y.max():.3g} and slice sums from {sums.min():.6g} to {sums.max():.6g}. Did you pass the logits?"
        )
    return y * (grad_y - (grad_y * y).sum(axis=axis, keepdims=True))


def _attention_backward_core(
    grad_out: np.ndarray,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    weights: np.ndarray,
    out: np.ndarray,
    scale: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dQ, dK, dV on broadcast batch axes, from the weights P and the output O."""
    grad_v = np.swapaxes(weights, -1, -2) @ grad_out  # dV = P^T dO: (..., S, Dv)
    delta = (grad_out * out).sum(axis=-1, keepdims=True)  # delta = rowsum(dO * O) = rowsum(P * dP): (..., T, 1)
    grad_s = grad_out @ np.swapaxes(v, -1, -2)  # dP = dO V^T: (..., T, S), all batch axes
    grad_s -= delta  # then in place, no second (T, S) array:
    grad_s *= weights  # dS = P * (dP - delta); 0 wherever P is 0 (masked keys, blocked rows)
    grad_q = grad_s @ k  # (..., T, Dk)
    grad_k = np.swapaxes(grad_s, -1, -2) @ q  # (..., S, Dk)
    grad_q *= scale
    grad_k *= scale
    return grad_q, grad_k, grad_v


def scaled_dot_product_attention_backward(
    grad_out: ArrayLike,
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    mask: ArrayLike | None = None,
    scale: float | None = None,
    is_causal: bool = False,
    enable_gqa: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Gradients of :func:`~selfattention.scaled_dot_product_attention`'s output with respect to q, k and v.

    Recomputes the forward (the weights P and output O), then

    .. math::

        dV = P^\top dO,\quad dP = dO\,V^\top,\quad dS = P \circ (dP - \delta),\quad
        \delta = \operatorname{rowsum}(dO \circ O),\quad dQ = s\,dS\,K,\quad dK = s\,dS^\top Q.

    Parameters
    ----------
    grad_out : array_like, shape (..., T, Dv)
        :math:`\partial L / \partial O`, the shape of the forward's output.
    q, k, v, mask, scale, is_causal, enable_gqa
        The forward's arguments, with its shapes, broadcasting and mask
        conventions (see :func:`~selfattention.scaled_dot_product_attention`).
        With ``enable_gqa`` each key/value head serves H // Hkv query heads,
        so its gradient is the sum of what each of them sends it.

    Returns
    -------
    grad_q, grad_k, grad_v : numpy.ndarray
        The shapes of ``q``, ``k`` and ``v``: where a batch axis was broadcast
        in the forward, its gradient is summed back. A query whose every key
        is blocked gets zero gradients, and its keys none from it.

    Raises
    ------
    ValueError
        As the forward does, or if ``grad_out`` does not have the output's shape.

    Notes
    -----
    See chapter 10 (the attention backward).
    """
    if check_bool(enable_gqa, "enable_gqa"):
        q, k, v, r = kv_groups(q, k, v)
        grads = scaled_dot_product_attention_backward(
            grad_out, q, repeat_kv(k, r), repeat_kv(v, r), mask=mask, scale=scale, is_causal=is_causal
        )  # dQ, and dK, dV for every query head's copy of its key/value head: (..., H, S, Dh)
        q_grad, (k_grad, v_grad) = grads[0], (g.reshape(*g.shape[:-3], -1, r, *g.shape[-2:]) for g in grads[1:])
        return q_grad, k_grad.sum(axis=-3), v_grad.sum(axis=-3)  # each group's copies summed: (..., Hkv, S, Dh)
    q_, k_, v_, mask_, scale_ = _validate_attention_args(q, k, v, mask, scale)
    out, weights = scaled_dot_product_attention(q_, k_, v_, mask=mask_, scale=scale_, is_causal=is_causal)
    grad_out = _grad(grad_out, out.shape, "grad_out", "the attention output")
    dtype, work = _dtypes(q_, k_, v_)
    grad_q, grad_k, grad_v = _attention_backward_core(
        grad_out.astype(work, copy=False),
        q_.astype(work, copy=False),
        k_.astype(work, copy=False),
        v_.astype(work, copy=False),
        weights.astype(work, copy=False),
        out.astype(work, copy=False),
        scale_,
    )
    return _finished(grad_q, grad_k, grad_v, q_, k_, v_)


def _finished(
    grad_q: np.ndarray, grad_k: np.ndarray, grad_v: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The gradients summed back to their inputs' shapes and dtypes; raise if finite inputs overflowed."""
    grads = []
    for name, grad, array in (("grad_q", grad_q, q), ("grad_k", grad_k, k), ("grad_v", grad_v, v)):
        with np.errstate(over="ignore"):
            grad = _sum_to_shape(grad, array.shape).astype(array.dtype, copy=False)
        if not np.isfinite(grad).all():
            raise ValueError(
                f"{name} overflowed {grad.dtype}: the scores, grad_out or the values are too large for its range; "
                "scale them down or compute in a wider dtype"
            )
        grads.append(grad)
    return grads[0], grads[1], grads[2]


def memory_efficient_attention_backward(
    grad_out: ArrayLike,
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    out: ArrayLike,
    lse: ArrayLike,
    mask: ArrayLike | None = None,
    scale: float | None = None,
    is_causal: bool = False,
    block_size: int = 512,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""The attention backward without a T × S array: each score tile is recomputed from q, k and the lse.

    The FlashAttention-2 scheme. The forward keeps only its output O and, per
    query, the log-sum-exp :math:`\ell = \log \sum_j e^{S_{ij}}` of the scaled,
    masked scores (``memory_efficient_attention(..., return_lse=True)``). For
    each (query block, key block) tile the backward recomputes
    :math:`P = e^{S - \ell}` exactly, then adds the tile's share of dQ, dK and
    dV with the formulas of :func:`scaled_dot_product_attention_backward`;
    :math:`\delta = \operatorname{rowsum}(dO \circ O)` needs only O. Under
    ``is_causal`` the tiles the mask blanks are skipped.

    Parameters
    ----------
    grad_out : array_like, shape (..., T, Dv)
    q, k, v, mask, scale, is_causal
        The forward's arguments.
    out : array_like, shape (..., T, Dv)
        The forward's output.
    lse : array_like, shape (..., T)
        The forward's log-sum-exp per query (``-inf`` for a fully masked one).
        ``out`` and ``lse`` must come from the forward call with these same
        q, k, v, mask and scale: the weights are rebuilt from them. An ``lse``
        from another call shows as weights that do not sum to 1 (checked
        relatively: within a factor of about ``1 ± 16 eps |lse|``), which is
        refused, as is ``-inf`` on a query that sees some key; an ``out``
        from another call cannot be detected.
    block_size : int, default 512
        Queries and keys per tile.

    Returns
    -------
    grad_q, grad_k, grad_v : numpy.ndarray
        The shapes of ``q``, ``k`` and ``v``.

    Raises
    ------
    ValueError
        As the forward does, if ``grad_out``, ``out`` or ``lse`` has the
        wrong shape, or if ``lse`` does not fit the scores.

    Notes
    -----
    See chapter 10 (a backward that recomputes) and :cite:`dao2022flashattention`.
    """
    q_, k_, v_, mask_, scale_ = _validate_attention_args(q, k, v, mask, scale)
    validated_mask = mask_
    is_causal = check_bool(is_causal, "is_causal")
    block = check_positive_int(block_size, "block_size")
    dtype, work = _dtypes(q_, k_, v_)
    T, S, Dv = q_.shape[-2], k_.shape[-2], v_.shape[-1]
    batch = np.broadcast_shapes(q_.shape[:-2], k_.shape[:-2], v_.shape[:-2])
    out = _grad(out, (*batch, T, Dv), "out", "the attention output").astype(work, copy=False)
    grad_out = _grad(grad_out, (*batch, T, Dv), "grad_out", "the attention output").astype(work, copy=False)
    lse = as_float_array(lse, "lse")
    if lse.shape != (*batch, T):
        raise ValueError(f"lse must have one entry per query, shape {(*batch, T)}; got {lse.shape}")
    if np.isnan(lse).any() or np.isposinf(lse).any():
        raise ValueError("lse must hold finite numbers or -inf (a fully masked query); found NaN or +inf")
    lse = lse.astype(work, copy=False)[..., None]  # (..., T, 1)
    scores_shape = np.broadcast_shapes(q_.shape[:-2], k_.shape[:-2]) + (T, S)
    if mask_ is not None:
        mask_ = np.broadcast_to(mask_, scores_shape)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow shows as an lse that does not fit
        qs = np.broadcast_to(q_, (*batch, T, q_.shape[-1])).astype(work) * scale_  # scaled once, as in the forward
    kb = np.broadcast_to(k_, (*batch, S, k_.shape[-1])).astype(work, copy=False)
    vb = np.broadcast_to(v_, (*batch, S, Dv)).astype(work, copy=False)
    delta = (grad_out * out).sum(axis=-1, keepdims=True)  # delta: (..., T, 1)
    shift = np.where(np.isneginf(lse), 0.0, lse)  # a fully masked query: its scores are all -inf, so P = e^-inf = 0
    grad_q = np.zeros(qs.shape, dtype=work)  # summed without the scale, applied once at the end
    grad_k = np.zeros(kb.shape, dtype=work)
    grad_v = np.zeros(vb.shape, dtype=work)
    row_total = np.zeros((*batch, T), dtype=np.float64)  # each query's rebuilt weights must sum to 1
    tile = (*batch, min(block, T), min(block, S))
    p_full, grad_s_full = np.empty(tile, dtype=work), np.empty(tile, dtype=work)  # reused by every full tile
    with np.errstate(over="ignore", invalid="ignore"):
        for q_start in range(0, T, block):
            rows = slice(q_start, min(q_start + block, T))
            first_position = S - T + q_start
            key_stop = min(S, S - T + rows.stop) if is_causal else S
            q_rows, grad_out_rows = qs[..., rows, :], grad_out[..., rows, :]
            for start in range(0, max(key_stop, 0), block):
                cols = slice(start, min(start + block, key_stop))
                k_cols, v_cols = kb[..., cols, :], vb[..., cols, :]
                full = (rows.stop - rows.start, cols.stop - cols.start) == tile[-2:]
                p = np.matmul(q_rows, np.swapaxes(k_cols, -1, -2), out=p_full if full else None)  # the scores
                if mask_ is not None:
                    apply_mask(p, mask_[..., rows, cols])
                if is_causal and cols.stop - 1 > first_position:
                    apply_causal_tile(p, first_position, start)
                p -= shift[..., rows, :]
                np.exp(p, out=p)  # the exact weights of this tile, in place of its scores
                row_total[..., rows] += p.sum(axis=-1)
                grad_v[..., cols, :] += np.swapaxes(p, -1, -2) @ grad_out_rows
                grad_s = np.matmul(grad_out_rows, np.swapaxes(v_cols, -1, -2), out=grad_s_full if full else None)
                grad_s -= delta[..., rows, :]
                grad_s *= p  # dS = P * (dP - delta), in place
                grad_q[..., rows, :] += grad_s @ k_cols
                grad_k[..., cols, :] += np.swapaxes(grad_s, -1, -2) @ q_rows  # q_rows holds the scale
    grad_q *= scale_
    _check_lse_fits(row_total, lse[..., 0], validated_mask, is_causal, (T, S), work)
    return _finished(grad_q, grad_k, grad_v, q_, k_, v_)


def _check_lse_fits(
    row_total: np.ndarray,
    lse: np.ndarray,
    mask: np.ndarray | None,
    is_causal: bool,
    shape: tuple[int, int],
    work: np.dtype,
) -> None:
    """Refuse an lse that is not the forward's: the weights rebuilt from it must sum to 1 on every query.

    ``row_total`` holds each query's rebuilt weights summed, ``lse`` the lse
    given, shape (..., T); ``shape`` is (T, S). The check is relative, in the
    log domain, since rounding scores of size |lse| moves every weight by a
    factor of about ``1 ± eps * |lse|``: a made-up lse far from the true one rebuilds weights
    that sum to 0 or to a large number, and is refused however large it is.
    A query may have an lse of ``-inf`` only if the mask blocks its every key
    (its sum is then 0 whatever the lse): a visible key whose scores
    underflow would otherwise pass as blocked and get no gradient.
    """
    given_blocked = np.isneginf(lse)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_total = np.log(row_total)
    size = np.abs(np.where(given_blocked, 0.0, lse))
    tol = np.maximum(1e-6 if work == np.float64 else 1e-3, 16 * float(np.finfo(work).eps) * (size + 1))
    wrong = ~given_blocked & ~(np.abs(log_total) <= tol)  # written so that a NaN counts as wrong
    if wrong.any():
        first = tuple(int(i) for i in np.argwhere(wrong)[0])
        raise ValueError(
            "lse does not fit these scores: the weights rebuilt from it must sum to 1 for every query, but "
            f"query {first} sums to {float(row_total[first]):.6g} (allowed: a factor within "
            f"e^±{float(tol[first]):.3g}); "
            "pass the lse and out of the forward call with the same q, k, v, mask and scale"
        )
    if given_blocked.any():
        T, S = shape
        sees_a_key = given_blocked & ~np.broadcast_to(fully_blocked_rows(mask, is_causal, T, S), lse.shape)
        if sees_a_key.any():
            first = tuple(int(i) for i in np.argwhere(sees_a_key)[0])
            raise ValueError(
                f"lse is -inf for query {first}, which the mask lets see some key: -inf is the lse of a fully "
                "masked query only; pass the lse of the forward call with the same q, k, v, mask and scale"
            )


def linear_backward(
    grad_y: ArrayLike, x: ArrayLike, weight: ArrayLike, bias: ArrayLike | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    r"""Gradients of :math:`y = x W + b`: :math:`dx = dy\,W^\top`, :math:`dW = x^\top dy`, :math:`db = \sum dy`.

    The sums run over every token and batch entry.

    Parameters
    ----------
    grad_y : array_like, shape (..., d_out)
    x : array_like, shape (..., d_in)
    weight : array_like, shape (d_in, d_out)
    bias : array_like, shape (d_out,), optional

    Returns
    -------
    grad_x, grad_weight, grad_bias : numpy.ndarray
        Shapes of ``x``, ``weight`` and ``bias`` (``grad_bias`` is None without a bias).

    Raises
    ------
    ValueError
        If the shapes do not fit or an input is not finite.

    Notes
    -----
    See chapter 10 (the multi-head layer's backward).
    """
    layer = Linear(weight, bias)
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 1, "(..., d_in)")
    if x.shape[-1] != layer.d_in:
        raise ValueError(f"x has {x.shape[-1]} features but weight expects d_in={layer.d_in}")
    check_all_finite(x, "x")
    grad_y = _grad(grad_y, (*x.shape[:-1], layer.d_out), "grad_y", "the layer's output")
    flat_x, flat_g = x.reshape(-1, layer.d_in), grad_y.reshape(-1, layer.d_out)
    with np.errstate(over="ignore", invalid="ignore"):
        grads = (grad_y @ layer.weight.T, flat_x.T @ flat_g, None if layer.bias is None else flat_g.sum(axis=0))
    for name, grad in zip(("grad_x", "grad_weight", "grad_bias"), grads, strict=True):
        if grad is not None and not np.isfinite(grad).all():
            raise ValueError(f"{name} overflowed {grad.dtype}; scale the inputs down or compute in a wider dtype")
    return grads


def layer_norm_backward(
    grad_y: ArrayLike, x: ArrayLike, weight: ArrayLike | None = None, bias: ArrayLike | None = None, eps: float = 1e-5
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    r"""Gradients of :func:`~selfattention.layer_norm` with respect to x, its weight and its bias.

    With :math:`\hat x = (x - \mu)/\sigma`, :math:`\sigma = \sqrt{\operatorname{var}(x) + \varepsilon}`
    and :math:`g = dy \circ \gamma`:

    .. math::

        dx = \frac{1}{\sigma}\left(g - \operatorname{mean}(g) - \hat x \operatorname{mean}(g \circ \hat x)\right),
        \qquad d\gamma = \sum dy \circ \hat x, \qquad d\beta = \sum dy.

    Parameters
    ----------
    grad_y : array_like, shape (..., D)
    x : array_like, shape (..., D)
    weight, bias : array_like, shape (D,), optional
    eps : float, default 1e-5

    Returns
    -------
    grad_x, grad_weight, grad_bias
        ``grad_weight`` and ``grad_bias`` are None when the forward had none.

    Raises
    ------
    ValueError
        As :func:`~selfattention.layer_norm` does, or if ``grad_y`` does not have ``x``'s shape.

    Notes
    -----
    See chapter 10.
    """
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 1, "(..., D)")
    if x.shape[-1] == 0:  # as layer_norm refuses it
        raise ValueError(f"x must have at least one feature to normalise; its last axis is empty (shape {x.shape})")
    eps = check_real_scalar(eps, "eps", positive=True)
    check_all_finite(x, "x")
    grad_y = _grad(grad_y, x.shape, "grad_y", "x")
    D = x.shape[-1]
    params = {}
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None:
            param = as_float_array(param, name)
            if param.shape != (D,):
                raise ValueError(f"{name} must have shape (D,) = ({D},) for x with D={D}; got {param.shape}")
            check_all_finite(param, name)
            params[name] = param
    if x.dtype == np.float16:  # float16's range ends at 65,504: a variance passes it easily
        grads = layer_norm_backward(grad_y.astype(np.float32), x.astype(np.float32), weight, bias, eps)
        return tuple(None if g is None else g.astype(np.float16) for g in grads)  # type: ignore[return-value]
    mean, var = moments(x)  # refuses a variance that overflowed, as the forward does
    sigma = np.sqrt(var + eps)
    x_hat = (x - mean) / sigma
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below, once and clearly
        g = grad_y * params["weight"] if "weight" in params else grad_y
        grad_x = (g - g.mean(axis=-1, keepdims=True) - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) / sigma
        flat = grad_y.reshape(-1, D)
        grad_weight = (flat * x_hat.reshape(-1, D)).sum(axis=0) if "weight" in params else None
        grad_bias = flat.sum(axis=0) if "bias" in params else None
    if any(g is not None and not np.isfinite(g).all() for g in (grad_x, grad_weight, grad_bias)):
        raise ValueError(f"layer_norm_backward overflowed {x.dtype}: grad_y (or grad_y * weight) is too large")
    return grad_x, grad_weight, grad_bias


def multihead_attention_backward(
    grad_y: ArrayLike,
    x: ArrayLike,
    params: AttentionParams,
    num_heads: int,
    mask: ArrayLike | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[np.ndarray, AttentionParams]:
    r"""Gradients of self-attention :func:`~selfattention.multihead_attention` w.r.t. x and every weight and bias.

    Runs the forward's steps again, then goes back through them: the output
    projection (:func:`linear_backward`), the merge of the heads, the attention
    (:func:`scaled_dot_product_attention_backward`; with fewer key/value heads
    the gradients of the query heads that shared one are summed), the split,
    and the three input projections, whose contributions to :math:`dx` add up.

    Parameters
    ----------
    grad_y : array_like, shape (..., T, D_out)
        :math:`\partial L / \partial Y`.
    x : array_like, shape (..., T, D)
        The layer's input (self-attention: queries, keys and values all come from it).
    params : AttentionParams
    num_heads : int
    mask, is_causal, scale
        As in the forward.

    Returns
    -------
    grad_x : numpy.ndarray, shape of ``x``
    grad_params : AttentionParams
        The gradients, in the same structure: ``grad_params.q.weight`` is
        :math:`\partial L / \partial W_q`, and so on (biases None where the layer has none).

    Raises
    ------
    ValueError
        As the forward does, or if ``grad_y`` does not have the output's shape.

    Notes
    -----
    See chapter 10 (the multi-head layer's backward); chapter 11 trains with it.
    """
    if not isinstance(params, AttentionParams):
        raise ValueError(f"params must be an AttentionParams; got {type(params).__name__}")
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 2, "(..., T, D)")
    if x.shape[-1] != params.d_model:
        raise ValueError(f"x has width D={x.shape[-1]} but the parameters are for D={params.d_model}")
    check_all_finite(x, "x")
    H, Hkv = params.head_counts(num_heads)
    r = H // Hkv
    mask = check_head_axis_mask(mask, 1 + x.ndim)  # the forward's check: a (B, T, S) mask would meet the heads
    q, k, v = project_qkv(x, params)  # (..., T, H*Dh), (..., T, Hkv*Dh), (..., T, Hkv*Dv)
    qh, kh, vh = split_heads(q, H), split_heads(k, Hkv), split_heads(v, Hkv)  # (..., heads, T, Dh)
    if r > 1:
        kh, vh = np.repeat(kh, r, axis=-3), np.repeat(vh, r, axis=-3)  # (..., H, T, Dh)
    out, _ = scaled_dot_product_attention(qh, kh, vh, mask=mask, scale=scale, is_causal=is_causal)
    merged = merge_heads(out)  # (..., T, H*Dv)
    grad_y = _grad(grad_y, (*merged.shape[:-1], params.out.d_out), "grad_y", "the layer's output")

    grad_merged, grad_w_out, grad_b_out = linear_backward(grad_y, merged, params.out.weight, params.out.bias)
    grad_qh, grad_kh, grad_vh = scaled_dot_product_attention_backward(
        split_heads(grad_merged, H), qh, kh, vh, mask=mask, scale=scale, is_causal=is_causal
    )
    if r > 1:  # each key/value head served r query heads: its gradient is the sum of theirs
        grad_kh = grad_kh.reshape(*grad_kh.shape[:-3], Hkv, r, *grad_kh.shape[-2:]).sum(axis=-3)
        grad_vh = grad_vh.reshape(*grad_vh.shape[:-3], Hkv, r, *grad_vh.shape[-2:]).sum(axis=-3)
    grads, grad_x = {}, np.zeros_like(x)
    for name, grad_heads in (("q", grad_qh), ("k", grad_kh), ("v", grad_vh)):
        layer = getattr(params, name)
        gx, gw, gb = linear_backward(merge_heads(grad_heads), x, layer.weight, layer.bias)
        grad_x += gx  # x feeds all three projections
        grads[name] = Linear(gw, gb)
    grads["out"] = Linear(grad_w_out, grad_b_out)
    return grad_x, AttentionParams(**grads)
