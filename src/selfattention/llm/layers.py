r"""What changes from chapter 9's decoder block to a Llama block: RMSNorm, SwiGLU, and the block itself.

Taught in chapter 14.

- **RMSNorm** replaces LayerNorm: no mean is subtracted and there is no bias,
  :math:`\operatorname{RMSNorm}(x) = x / \sqrt{\overline{x^2} + \epsilon} \odot g`.
- **SwiGLU** replaces the GELU feed-forward: two projections up, one gated by
  the other, :math:`(\operatorname{SiLU}(x W_{gate}) \odot x W_{up}) W_{down}`.

The block reuses chapter 8's :func:`~selfattention.apply_rope`, chapter 9's
``enable_gqa`` of :func:`~selfattention.scaled_dot_product_attention` and
:class:`~selfattention.KVCache`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import expit

from .._validation import (
    as_float_array,
    check_all_finite,
    check_bool,
    check_min_ndim,
    check_real_scalar,
)
from ..attention import scaled_dot_product_attention
from ..decoding import KVCache
from ..multihead import merge_heads, split_heads
from ..params import Linear, project_qkv
from ..positions import apply_rope
from .weights import LlamaBlock

__all__ = ["rms_norm", "silu", "swiglu", "llama_block"]


def rms_norm(x: ArrayLike, weight: ArrayLike, eps: float = 1e-5) -> np.ndarray:
    r"""Root-mean-square normalisation: :math:`x / \sqrt{\operatorname{mean}(x^2) + \epsilon} \odot g`.

    LayerNorm without the centring and without the shift :cite:`zhang2019root`.

    Parameters
    ----------
    x : array_like, shape (..., D)
    weight : array_like, shape (D,)
        The scale ``g``.
    eps : float, default 1e-5
        Added to the mean square; positive.

    Returns
    -------
    numpy.ndarray, shape (..., D)
        In the result dtype of ``x`` and ``weight``.

    Raises
    ------
    ValueError
        If the widths differ, ``eps`` is not positive, an input is not finite,
        or the mean square or the result overflows.

    Notes
    -----
    See chapter 14 (from LayerNorm to RMSNorm). float16 input is normalised
    in float32 (its squares pass float16's range from 256 on), as
    :func:`~selfattention.layer_norm` does.
    """
    x, weight = as_float_array(x, "x"), as_float_array(weight, "weight")
    check_min_ndim(x, "x", 1, "(..., D)")
    if x.shape[-1] == 0:
        raise ValueError(f"x must have at least one feature to normalise; its last axis is empty (shape {x.shape})")
    if weight.ndim != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight must have shape (D,) = ({x.shape[-1]},) for x {x.shape}; got {weight.shape}")
    eps = check_real_scalar(eps, "eps", positive=True)
    check_all_finite(x, "x")
    check_all_finite(weight, "weight")
    dtype = np.result_type(x, weight)
    work = np.promote_types(dtype, np.float32)  # float32 or float64: the dtype of the computation
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
        mean_square = np.mean(np.square(x, dtype=work), axis=-1, keepdims=True)  # (..., 1)
        if not np.isfinite(mean_square).all():
            raise ValueError(
                f"x is too large to normalise in {work}: its mean square overflowed (largest |x| = "
                f"{float(np.abs(x).max()):.3g}); scale x down"
                + (", or compute in float64" if work != np.float64 else "")
            )
        y = (x / np.sqrt(mean_square + work.type(eps)) * weight).astype(dtype, copy=False)
    if not np.isfinite(y).all():
        raise ValueError(f"rms_norm overflowed {dtype}: weight * x / rms(x) is too large to represent")
    return y


def silu(x: ArrayLike) -> np.ndarray:
    r"""The sigmoid-weighted linear unit, :math:`x\,\sigma(x)` (also called swish).

    Raises
    ------
    ValueError
        If ``x`` is not an array of numbers.

    Notes
    -----
    See chapter 14 (SwiGLU). Never overflows: :math:`\sigma` is
    ``scipy.special.expit``.
    """
    x = as_float_array(x, "x")
    return x * expit(x)


def swiglu(x: ArrayLike, gate: Linear, up: Linear, down: Linear) -> np.ndarray:
    r"""The gated feed-forward layer of Llama: :math:`(\operatorname{SiLU}(x W_{gate}) \odot x W_{up})\, W_{down}`.

    :cite:`shazeer2020glu`. D -> F (twice) -> D.

    Parameters
    ----------
    x : array_like, shape (..., D)
    gate, up : Linear
        (D, F) each.
    down : Linear
        (F, D).

    Returns
    -------
    numpy.ndarray, shape (..., D)

    Raises
    ------
    ValueError
        If a part is not a :class:`~selfattention.Linear` or the widths do not fit.

    Notes
    -----
    See chapter 14.
    """
    for name, part in (("gate", gate), ("up", up), ("down", down)):
        if not isinstance(part, Linear):
            raise ValueError(f"{name} must be a Linear; got {type(part).__name__}")
    if gate.weight.shape != up.weight.shape or down.weight.shape != (gate.d_out, gate.d_in):
        raise ValueError(
            f"gate and up must be (D, F) and down (F, D); got {gate.weight.shape}, {up.weight.shape}, "
            f"{down.weight.shape}"
        )
    return down(silu(gate(x)) * up(x), "the gated hidden layer")  # (..., F) -> (..., D)


def llama_block(
    x: ArrayLike,
    block: LlamaBlock,
    num_heads: int,
    *,
    positions: ArrayLike | None = None,
    cache: KVCache | None = None,
    eps: float = 1e-5,
    rope_base: float = 10000.0,
    return_weights: bool = False,
) -> Any:
    r"""One Llama decoder block: pre-norm causal attention with RoPE and shared key/value heads, then SwiGLU.

    .. math::

        h = x + \operatorname{Attn}\big(\operatorname{RMSNorm}_1(x)\big), \qquad
        y = h + \operatorname{SwiGLU}\big(\operatorname{RMSNorm}_2(h)\big)

    Parameters
    ----------
    x : array_like, shape (t, D)
        The tokens to process: a whole sequence, or the new ones after a cache.
    block : LlamaBlock
    num_heads : int
        H, the query heads; the key/value heads are read from the weights' widths.
    positions : array_like, shape (t,), optional
        Defaults to ``cache.position + 0 … t-1`` (0 … t-1 without a cache).
    cache : KVCache, optional
        This block's cache, updated in place.
    eps : float, default 1e-5
    rope_base : float, default 10000.0
    return_weights : bool, default False
        Also return the attention weights, (H, t, S).

    Returns
    -------
    numpy.ndarray, shape (t, D), or (that, weights)

    Raises
    ------
    ValueError
        If the widths or head counts do not fit, or an argument is invalid.

    Notes
    -----
    See chapter 14. The queries see the keys at or before their own position
    (lower-right causal alignment, so a cache needs no other mask).
    """
    if not isinstance(block, LlamaBlock):
        raise ValueError(f"block must be a LlamaBlock; got {type(block).__name__}")
    if cache is not None and not isinstance(cache, KVCache):
        raise ValueError(f"cache must be a KVCache or None; got {type(cache).__name__}")
    return_weights = check_bool(return_weights, "return_weights")
    x = as_float_array(x, "x")
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] != block.attention.d_model:
        raise ValueError(f"x must be (t, D) with t >= 1 and D = {block.attention.d_model}; got shape {x.shape}")
    H, Hkv = block.attention.head_counts(num_heads)
    t = x.shape[0]
    if positions is None:
        positions = (0 if cache is None else cache.position) + np.arange(t)
    h = rms_norm(x, block.attention_norm, eps)
    q, k, v = project_qkv(h, block.attention)  # (t, H*Dh), (t, Hkv*Dh), (t, Hkv*Dh)
    q, k, v = split_heads(q, H), split_heads(k, Hkv), split_heads(v, Hkv)  # (heads, t, Dh)
    q, k = apply_rope(q, positions, base=rope_base), apply_rope(k, positions, base=rope_base)
    if cache is not None:
        k, v = cache.update(k, v)  # (Hkv, S, Dh): every cached key, the new ones last
    try:
        out, weights = scaled_dot_product_attention(q, k, v, is_causal=t > 1, enable_gqa=True)  # (H, t, Dh)
        x = x + block.attention.out(merge_heads(out))  # (t, D)
        y = x + swiglu(rms_norm(x, block.mlp_norm, eps), block.gate, block.up, block.down)
    except Exception:
        if cache is not None:
            cache._take_back()  # a failed call leaves the cache as it found it
        raise
    return (y, weights) if return_weights else y
