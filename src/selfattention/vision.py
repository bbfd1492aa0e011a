"""Attention for images in NumPy: patches, and the twins of chapter 6's three attention modules.

Taught in chapter 6. The PyTorch modules (:class:`~selfattention.PatchAttentionBlock`,
:class:`~selfattention.ConvSelfAttention`, :class:`~selfattention.T2TAttention`)
are in :mod:`selfattention.vision_modules`. Each NumPy twin here computes the
same forward pass and also returns the attention weights. A twin takes its
weights as a container in the package's ``x @ w`` layout, or as the module's
state dict in NumPy (``sa.numpy_state_dict(module)``), which
:mod:`selfattention.interop` reads into that container.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._validation import (
    as_array,
    as_float_array,
    check_all_finite,
    check_head_split,
    check_image_size,
    check_positive_int,
    check_real_scalar,
)
from .attention import scaled_dot_product_attention
from .multihead import merge_heads, split_heads
from .params import AttentionParams, Linear, _Container, _set, project_qkv

__all__ = [
    "patchify",
    "PatchAttentionParams",
    "ConvAttentionParams",
    "patch_attention_forward",
    "conv_self_attention_forward",
    "t2t_attention_forward",
]


def patchify(images: ArrayLike, patch_size: int) -> np.ndarray:
    """Cut images into non-overlapping square patches and flatten each one.

    Patches are taken row by row across the image; each is flattened in
    (channel, row, column) order, the order of a ``Conv2d`` weight, so that
    ``patchify(x, p) @ conv.weight.reshape(E, -1).T`` equals a ``Conv2d`` with
    ``kernel_size = stride = p``.

    Parameters
    ----------
    images : array_like, shape (..., C, H, W)
        Channels first, as PyTorch stores images.
    patch_size : int
        p; must divide H and W.

    Returns
    -------
    numpy.ndarray, shape (..., (H/p)*(W/p), C*p*p)

    Raises
    ------
    ValueError
        If ``images`` has fewer than 3 axes or H or W is not a multiple of
        ``patch_size``.

    Notes
    -----
    See chapter 6 (from a photograph to tokens).
    """
    images = as_float_array(images, "images")
    if images.ndim < 3:
        raise ValueError(f"images must have at least 3 axes (..., C, H, W); got shape {images.shape}")
    p = check_positive_int(patch_size, "patch_size")
    *batch, C, H, W = images.shape
    check_image_size(H, W, p)
    rows, cols = H // p, W // p
    grid = images.reshape(*batch, C, rows, p, cols, p)  # (..., C, rows, p, cols, p)
    n = len(batch)
    grid = grid.transpose(*range(n), n + 1, n + 3, n, n + 2, n + 4)  # (..., rows, cols, C, p, p)
    return grid.reshape(*batch, rows * cols, C * p * p)  # (..., N, C*p*p)


@dataclass(frozen=True)
class PatchAttentionParams(_Container):
    """The weights of a :class:`~selfattention.PatchAttentionBlock` in the ``x @ w`` layout.

    - ``patch``: :class:`~selfattention.Linear` (C*p*p, E), the patch embedding
      (its ``Conv2d`` kernel, flattened in (channel, row, column) order);
    - ``attention``: :class:`~selfattention.AttentionParams`, single head, E -> E.

    See chapter 6.
    """

    patch: Linear
    attention: AttentionParams

    def __post_init__(self) -> None:
        self._require("patch", Linear)
        self._require("attention", AttentionParams)
        if self.attention.d_model != self.patch.d_out:
            raise ValueError(
                f"the attention must read the E={self.patch.d_out} features of the patch embedding; "
                f"it reads {self.attention.d_model}"
            )
        a = self.attention
        if not a.q.d_out == a.k.d_out == a.v.d_out == a.out.d_in == a.out.d_out == self.patch.d_out:
            raise ValueError(
                f"the block has one attention head of width E={self.patch.d_out}: q, k, v and out must all map "
                f"E -> E; got q {a.q.weight.shape}, k {a.k.weight.shape}, v {a.v.weight.shape}, "
                f"out {a.out.weight.shape}"
            )


@dataclass(frozen=True)
class ConvAttentionParams(_Container):
    """The weights of a :class:`~selfattention.ConvSelfAttention` in the ``x @ w`` layout.

    - ``q``, ``k``: :class:`~selfattention.Linear` (C, C // 8), the 1x1 convolutions;
    - ``v``: :class:`~selfattention.Linear` (C, C);
    - ``gamma``: shape (1,), the gate on the attention branch.

    See chapter 6.
    """

    q: Linear
    k: Linear
    v: Linear
    gamma: np.ndarray

    def __post_init__(self) -> None:
        for name in "qkv":
            self._require(name, Linear)
        C = self.v.d_in
        if self.q.d_in != C or self.k.d_in != C or self.v.d_out != C or self.q.d_out != self.k.d_out:
            raise ValueError(
                f"q and k must map C -> C//8 and v C -> C; got q {self.q.weight.shape}, "
                f"k {self.k.weight.shape}, v {self.v.weight.shape}"
            )
        gamma = as_float_array(self.gamma, "gamma")
        if gamma.shape != (1,):
            raise ValueError(f"gamma must have shape (1,); got {gamma.shape}")
        check_all_finite(gamma, "gamma")
        _set(self, "gamma", gamma)


def _params(params: Any, kind: type, reader: str, module: str) -> Any:
    """``params`` if it is a ``kind``; a state dict read into one by :mod:`selfattention.interop`."""
    if isinstance(params, kind):
        return params
    if isinstance(params, Mapping):
        from . import interop

        return getattr(interop, reader)(params)
    raise ValueError(
        f"params must be a {kind.__name__} or the state dict of a {module} "
        f"(a mapping of parameter names to arrays); got {type(params).__name__}"
    )


def _check_images(x: ArrayLike, channels: int, why: str = "") -> np.ndarray:
    x = as_float_array(x, "x")
    if x.ndim != 4:
        raise ValueError(f"x must have shape (B, C, H, W); got shape {x.shape}")
    if x.shape[1] != channels:
        raise ValueError(f"x has {x.shape[1]} channels but the weights are for C={channels}{why}; got shape {x.shape}")
    if 0 in x.shape:
        raise ValueError(f"x needs at least one image, channel and pixel; got shape {x.shape}")
    return x


def patch_attention_forward(
    x: ArrayLike, params: PatchAttentionParams | Mapping[str, ArrayLike], patch_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :class:`~selfattention.PatchAttentionBlock`.

    Parameters
    ----------
    x : array_like, shape (B, C, H, W)
    params : PatchAttentionParams or mapping
        The weights, or the module's state dict as NumPy arrays
        (``proj.weight``, ``proj.bias``, ``to_q.weight``, ...).
    patch_size : int

    Returns
    -------
    out : numpy.ndarray, shape (B, N, E)
    weights : numpy.ndarray, shape (B, N, N)

    Raises
    ------
    ValueError
        If the weights are missing or do not fit, ``x`` is not 4-D, or the
        image size is not a multiple of ``patch_size``.

    Notes
    -----
    See chapter 6.
    """
    patch = check_positive_int(patch_size, "patch_size")
    if isinstance(params, Mapping) and "proj.weight" in params:
        kernel = np.shape(as_array(params["proj.weight"], "params['proj.weight']"))  # (E, C, p, p)
        if len(kernel) == 4 and kernel[2:] != (patch, patch):
            raise ValueError(
                f"params['proj.weight'] has shape {kernel}, a {kernel[2]}x{kernel[3]} patch kernel, "
                f"but patch_size={patch}; pass patch_size={kernel[2]} or the state of a block built for {patch}"
            )
    p = _params(params, PatchAttentionParams, "patch_attention_from_state_dict", "PatchAttentionBlock")
    channels, remainder = divmod(p.patch.d_in, patch * patch)
    if remainder:
        raise ValueError(
            f"the patch embedding reads {p.patch.d_in} numbers per patch, which is not C*{patch}*{patch} for "
            f"any channel count C: were the weights made for another patch_size than {patch}?"
        )
    x = _check_images(x, channels, f" (the patch embedding reads {p.patch.d_in} = C*{patch}*{patch} numbers per patch)")
    tokens = p.patch(patchify(x, patch))  # (B, N, E)
    out, weights = scaled_dot_product_attention(*project_qkv(tokens, p.attention))  # scale 1/sqrt(E)
    return p.attention.out(out), weights


def conv_self_attention_forward(
    x: ArrayLike, params: ConvAttentionParams | Mapping[str, ArrayLike]
) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :class:`~selfattention.ConvSelfAttention`.

    A 1x1 convolution is a matrix product over the channel axis at every pixel.

    Parameters
    ----------
    x : array_like, shape (B, C, H, W)
    params : ConvAttentionParams or mapping
        The weights, or the module's state dict as NumPy arrays (``q.weight``,
        ``q.bias``, ``k.weight``, ``k.bias``, ``v.weight``, ``v.bias``, ``gamma``).

    Returns
    -------
    out : numpy.ndarray, shape (B, C, H, W)
    weights : numpy.ndarray, shape (B, H*W, H*W)
        Row ``i`` is pixel ``i``'s attention over all pixels (row-major order).

    Raises
    ------
    ValueError
        If the weights are missing or do not fit, or ``x`` is not (B, C, H, W).

    Notes
    -----
    See chapter 6.
    """
    p = _params(params, ConvAttentionParams, "conv_attention_from_state_dict", "ConvSelfAttention")
    x = _check_images(x, p.v.d_in)
    B, C, H, W = x.shape
    pixels = x.reshape(B, C, H * W).swapaxes(1, 2)  # (B, N, C): one row per pixel
    out, weights = scaled_dot_product_attention(p.q(pixels), p.k(pixels), p.v(pixels))  # scale 1/sqrt(C/8)
    out = out.swapaxes(1, 2).reshape(B, C, H, W)  # (B, C, H, W)
    return p.gamma * out + x, weights


def t2t_attention_forward(
    x: ArrayLike,
    params: AttentionParams | Mapping[str, ArrayLike],
    num_heads: int = 1,
    qk_scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :class:`~selfattention.T2TAttention`.

    Parameters
    ----------
    x : array_like, shape (B, N, dim)
    params : AttentionParams or mapping
        The weights (q, k, v: dim -> chan; out: chan -> chan), or the module's
        state dict as NumPy arrays: ``qkv.weight`` (and ``qkv.bias`` if the
        module has one), ``proj.weight`` and ``proj.bias``.
    num_heads : int, default 1
    qk_scale : float, optional
        Defaults to ``head_dim ** -0.5``.

    Returns
    -------
    out : numpy.ndarray, shape (B, N, chan)
    weights : numpy.ndarray, shape (B, H, N, N)

    Raises
    ------
    ValueError
        If the weights are missing, ``x`` does not fit them, or ``chan`` is
        not divisible by ``num_heads``.

    Notes
    -----
    See chapter 6.
    """
    p = _params(params, AttentionParams, "t2t_attention_from_state_dict", "T2TAttention")
    x = as_float_array(x, "x")
    if x.ndim != 3 or x.shape[-1] != p.d_model:
        raise ValueError(f"x must have shape (B, N, dim={p.d_model}); got shape {x.shape}")
    if not p.q.d_out == p.k.d_out == p.v.d_out == p.out.d_in == p.out.d_out:
        raise ValueError(
            "T2T attention needs q, k and v of the same width chan and out mapping chan -> chan (its skip "
            f"connection adds v to the output); got q {p.q.weight.shape}, k {p.k.weight.shape}, "
            f"v {p.v.weight.shape}, out {p.out.weight.shape}"
        )
    H = num_heads
    head_dim = check_head_split(p.q.d_out, H, "chan")
    scale = head_dim**-0.5 if qk_scale is None else check_real_scalar(qk_scale, "qk_scale")
    q, k, v = project_qkv(x, p)  # each (B, N, chan)
    out, weights = scaled_dot_product_attention(*(split_heads(a, H) for a in (q, k, v)), scale=scale)  # (B, H, N, Dh)
    return v + p.out(merge_heads(out)), weights  # the skip connection adds the full V (chan wide)
