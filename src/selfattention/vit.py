r"""A small Vision Transformer run in NumPy, attention rollout, and the tools of a deletion test.

Taught in chapter 12, which trains :class:`~selfattention.TinyViT` (PyTorch)
on scikit-learn's 8x8 digits, copies its weights into :class:`ViTParams`
(:func:`~selfattention.tiny_vit_params`) and runs the same forward here, built
from chapter 5's :func:`~selfattention.encoder_block` and chapter 6's
:func:`~selfattention.patchify`.

Attention rollout (Abnar & Zuidema, 2020) follows the attention through the
layers: with each layer's weights averaged over heads, :math:`\bar A_l`, and
the residual connection counted as attention to oneself,

.. math::

    \hat A_l = \tfrac12 \bar A_l + \tfrac12 I, \qquad
    R = \hat A_L \hat A_{L-1} \cdots \hat A_1,

so that row ``i`` of :math:`R` says how much of token ``i``'s final state
traces back to each input token, under the assumption that information
mixes linearly. Each row of :math:`R` sums to 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._validation import (
    as_array,
    as_float_array,
    check_all_finite,
    check_bool,
    check_nonnegative_int,
    check_positive_int,
    check_real_scalar,
    precision_of,
    row_sum_tolerance,
)
from .encoder import EncoderParams, encoder_block, layer_norm
from .multihead import multihead_attention
from .params import LayerNormParams, Linear, _Container, _set
from .vision import patchify

__all__ = ["load_digits_split", "ViTParams", "vit_forward", "attention_rollout", "patch_ink", "blank_patches"]


def load_digits_split(test_size: float = 0.25, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 handwritten digits, split into training and test sets, stratified by class.

    The images ship inside the scikit-learn package (``sklearn.datasets.load_digits``):
    nothing is downloaded. Pixels, 0 to 16 in the file, are scaled to [0, 1].

    Parameters
    ----------
    test_size : float, default 0.25
        The fraction held out for testing, in (0, 1).
    seed : int, default 0
        Fixes the split (``train_test_split``'s ``random_state``).

    Returns
    -------
    x_train, x_test : numpy.ndarray of float32, shape (N, 1, 8, 8)
        Channels first, as PyTorch stores images.
    y_train, y_test : numpy.ndarray of int64, shape (N,)

    Raises
    ------
    ValueError
        If ``test_size`` is not strictly between 0 and 1, or ``seed`` is not a non-negative integer.

    Notes
    -----
    See chapter 12.
    """
    test_size = check_real_scalar(test_size, "test_size", positive=True)
    if not test_size < 1:
        raise ValueError(f"test_size must be a fraction between 0 and 1; got {test_size}")
    n_test = int(np.ceil(test_size * 1797))
    if n_test < 10 or 1797 - n_test < 10:
        raise ValueError(
            f"test_size={test_size} leaves {n_test} test and {1797 - n_test} training images; a stratified split "
            "needs at least one image of each of the 10 digits on both sides (0.006 <= test_size <= 0.994)"
        )
    seed = check_nonnegative_int(seed, "seed")
    if seed >= 2**32:
        raise ValueError(f"seed must be below 2**32 (scikit-learn's random_state); got {seed}")
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]  # (1797, 1, 8, 8)
    x_train, x_test, y_train, y_test = train_test_split(
        images, digits.target.astype(np.int64), test_size=test_size, random_state=seed, stratify=digits.target
    )
    return x_train, x_test, y_train, y_test


@dataclass(frozen=True)
class ViTParams(_Container):
    """Every weight of a small Vision Transformer, in the package's ``x @ w`` layout.

    Attributes
    ----------
    patch : Linear, (C*p*p, D)
        The patch embedding, applied to :func:`~selfattention.patchify`'s output.
    cls_token : numpy.ndarray, shape (D,)
        The class token, put in front of the patches.
    positions : numpy.ndarray, shape (N + 1, D)
        Learned position embeddings, class token first.
    blocks : tuple of EncoderParams
        Pre-norm encoder blocks with GELU.
    final_norm : LayerNormParams
    head : Linear, (D, classes)
        Reads the class token's final state.
    patch_size : int
        p.
    image_size : (int, int), optional
        The (height, width) the model was trained on. Other sizes can make
        as many patches (16x4 and 8x8 both make 16 of 2x2), but lay the
        position table over another grid: given, :func:`~selfattention.vit_forward`
        refuses them.
    num_heads : int, optional
        The heads per block the model was trained with; given,
        :func:`~selfattention.vit_forward` refuses another count.

    Raises
    ------
    ValueError
        On construction, if a part has the wrong type or the widths do not agree.

    Notes
    -----
    See chapter 12. :func:`~selfattention.tiny_vit_params` reads one out of a
    :class:`~selfattention.TinyViT`.
    """

    patch: Linear
    cls_token: np.ndarray
    positions: np.ndarray
    blocks: tuple[EncoderParams, ...]
    final_norm: LayerNormParams
    head: Linear
    patch_size: int
    image_size: tuple[int, int] | None = None
    num_heads: int | None = None

    def __post_init__(self) -> None:
        self._require("patch", Linear)
        D = self.patch.d_out
        cls_token = as_float_array(self.cls_token, "cls_token").reshape(-1)
        if cls_token.shape != (D,):
            raise ValueError(f"cls_token must have D={D} values, the patch embedding's width; got {cls_token.size}")
        check_all_finite(cls_token, "cls_token")
        _set(self, "cls_token", cls_token)
        positions = as_float_array(self.positions, "positions")
        if positions.ndim == 3 and positions.shape[0] == 1:
            positions = positions[0]  # PyTorch's (1, N + 1, D)
        if positions.ndim != 2 or positions.shape[1] != D or positions.shape[0] < 2:
            raise ValueError(f"positions must be an (N + 1, D={D}) table; got shape {positions.shape}")
        check_all_finite(positions, "positions")
        _set(self, "positions", positions)
        blocks = tuple(self.blocks) if isinstance(self.blocks, (list, tuple)) else ()
        if not blocks or not all(isinstance(b, EncoderParams) for b in blocks):
            raise ValueError("blocks must be a non-empty list of EncoderParams, one per encoder block")
        _set(self, "blocks", blocks)
        self._require("final_norm", LayerNormParams)
        self._require("head", Linear)
        widths = [b.d_model for b in blocks] + [self.final_norm.d_model, self.head.d_in]
        if any(w != D for w in widths):
            raise ValueError(f"every block, the final norm and the head must have the patch embedding's width D={D}")
        _set(self, "patch_size", check_positive_int(self.patch_size, "patch_size", at_most=1024))
        if self.patch.d_in % (self.patch_size**2):
            raise ValueError(
                f"the patch embedding reads {self.patch.d_in} values per patch, which is not channels * "
                f"patch_size**2 for patch_size={self.patch_size}"
            )
        if self.image_size is not None:
            size = self.image_size
            if not isinstance(size, (tuple, list)) or len(size) != 2:
                raise ValueError(f"image_size must be a (height, width) pair; got {size!r}")
            height, width = (check_positive_int(n, "image_size", at_most=2**16) for n in size)
            p = self.patch_size
            if height % p or width % p or (height // p) * (width // p) != self.num_patches:
                raise ValueError(
                    f"image_size {height}x{width} in {p}x{p} patches does not make the position table's "
                    f"{self.num_patches} patches"
                )
            _set(self, "image_size", (height, width))
        if self.num_heads is not None:
            _set(self, "num_heads", check_positive_int(self.num_heads, "num_heads", at_most=D))
            if D % self.num_heads:
                raise ValueError(f"num_heads={self.num_heads} must divide the width D={D}")

    @property
    def num_patches(self) -> int:
        """N, the patches of one image (the position table holds N + 1 rows)."""
        return self.positions.shape[0] - 1


def vit_forward(
    images: ArrayLike, params: ViTParams, num_heads: int, eps: float = 1e-5
) -> tuple[np.ndarray, np.ndarray]:
    r"""The class scores of a pre-norm ViT, and every block's attention weights.

    .. math::

        \begin{aligned}
        z_0 &= [\,x_{cls};\ \operatorname{patchify}(x) W_p + b_p\,] + P, \\
        z_l &= \operatorname{block}_l(z_{l-1}), \\
        \text{logits} &= \operatorname{LN}(z_L)_{cls}\, W + b.
        \end{aligned}

    Each block is :func:`~selfattention.encoder_block` with ``norm_first=True``
    and exact GELU, as ``nn.TransformerEncoderLayer(norm_first=True, activation="gelu")``.

    Parameters
    ----------
    images : array_like, shape (B, C, H, W)
    params : ViTParams
    num_heads : int
        H, per block.
    eps : float, default 1e-5
        The LayerNorms' epsilon.

    Returns
    -------
    logits : numpy.ndarray, shape (B, classes)
    weights : numpy.ndarray, shape (L, B, H, N + 1, N + 1)
        Block by block; token 0 is the class token, then the patches row by row.

    Raises
    ------
    ValueError
        If the images do not have 4 axes, the patch embedding does not fit
        their channels, they make a different number of patches than the
        position table has, or their size or ``num_heads`` differs from what
        ``params`` records.

    Notes
    -----
    See chapter 12.
    """
    if not isinstance(params, ViTParams):
        raise ValueError(f"params must be a ViTParams; got {type(params).__name__}")
    images = as_float_array(images, "images")
    if images.ndim != 4 or images.shape[0] == 0:
        raise ValueError(f"images must have shape (B, C, H, W) with B >= 1; got shape {images.shape}")
    check_all_finite(images, "images")
    patches = patchify(images, params.patch_size)  # (B, N, C*p*p)
    if patches.shape[-1] != params.patch.d_in:
        raise ValueError(
            f"the patch embedding reads {params.patch.d_in} values per patch; images of {images.shape[1]} "
            f"channel(s) with p={params.patch_size} give {patches.shape[-1]}"
        )
    if patches.shape[1] != params.num_patches:
        raise ValueError(
            f"the position table is for {params.num_patches} patches; images of {images.shape[2]}x{images.shape[3]} "
            f"with p={params.patch_size} give {patches.shape[1]}"
        )
    if params.image_size is not None and images.shape[2:] != params.image_size:
        raise ValueError(
            f"the model was trained on {params.image_size[0]}x{params.image_size[1]} images; got "
            f"{images.shape[2]}x{images.shape[3]}, whose patches would meet the position table on another grid"
        )
    B, T = images.shape[0], params.num_patches + 1
    heads = check_positive_int(num_heads, "num_heads")
    if params.num_heads is not None and heads != params.num_heads:
        raise ValueError(f"the model was trained with num_heads={params.num_heads}; got num_heads={heads}")
    if B * heads * T * T > 2**28:
        raise ValueError(
            f"{B} images of {T} tokens with {heads} heads need {B * heads * T * T:,} attention weights per block, "
            f"more than {2**28:,}; pass fewer images at a time"
        )
    cls = np.broadcast_to(params.cls_token, (B, 1, params.patch.d_out))
    z = np.concatenate([cls, params.patch(patches)], axis=1) + params.positions  # (B, N + 1, D)
    weights = []
    for block in params.blocks:
        normed = layer_norm(z, block.norm1.weight, block.norm1.bias, eps)
        weights.append(multihead_attention(normed, block.attention, num_heads=num_heads)[1])  # (B, H, T, T)
        z = encoder_block(z, block, num_heads, norm_first=True, activation="gelu", eps=eps)
    z = layer_norm(z, params.final_norm.weight, params.final_norm.bias, eps)
    return params.head(z[:, 0]), np.stack(weights)  # (B, classes), (L, B, H, T, T)


def attention_rollout(weights: ArrayLike, residual: bool = True) -> np.ndarray:
    r"""Attention rollout: the product of the layers' head-averaged attention, with the residual as identity.

    Parameters
    ----------
    weights : array_like, shape (L, ..., H, T, T)
        Each layer's attention weights, first layer first (as
        :func:`vit_forward` returns them); rows sum to 1.
    residual : bool, default True
        Mix each layer with the identity, :math:`\tfrac12 \bar A + \tfrac12 I`,
        for the residual connection. Without it, the plain product of the
        head-averaged weights.

    Returns
    -------
    numpy.ndarray, shape (..., T, T)
        :math:`R = \hat A_L \cdots \hat A_1`; row ``i`` sums to 1. Row 0 of a
        ViT's rollout is the class token's, over itself and the patches. In
        the dtype of ``weights`` (float16 is multiplied in float32, bfloat16
        is returned as float32).

    Raises
    ------
    ValueError
        If ``weights`` has fewer than 4 axes, is not square in its last two,
        holds negative or non-finite values, or its rows do not sum to 1
        within what the dtype's rounding allows.

    Notes
    -----
    See chapter 12 and :cite:`abnar2020quantifying`.
    """
    eps, dtype_name = precision_of(weights)  # before the conversion, which reads bfloat16 as float32
    weights = as_float_array(weights, "weights")
    if weights.ndim < 4 or weights.shape[-1] != weights.shape[-2] or 0 in weights.shape:
        raise ValueError(f"weights must have shape (L, ..., H, T, T), square in the last two; got {weights.shape}")
    residual = check_bool(residual, "residual")
    check_all_finite(weights, "weights")
    dtype, T = weights.dtype, weights.shape[-1]
    work = np.float64 if dtype == np.float64 else np.float32  # float16 would round the products away
    tolerance = row_sum_tolerance(T, eps)
    sums = weights.astype(np.float64).sum(axis=-1)
    worst = float(np.abs(sums - 1).max())
    if (weights < 0).any() or worst > tolerance:
        raise ValueError(
            f"weights must be attention weights: non-negative, each row summing to 1 (within {tolerance:.2g} for "
            f"{T} {dtype_name} weights); found row sums from {sums.min():.6g} to {sums.max():.6g} and a smallest "
            f"weight of {weights.min():.3g}"
        )
    eye = np.eye(T, dtype=work)
    rollout = np.broadcast_to(eye, weights.shape[1:-3] + (T, T)).copy()
    for layer in weights.astype(work, copy=False):
        mixed = layer.mean(axis=-3)  # (..., T, T): the heads averaged
        if residual:
            mixed = 0.5 * mixed + 0.5 * eye  # the residual stream carries each token on unchanged
        rollout = mixed @ rollout  # this layer after everything below it
    return rollout.astype(dtype, copy=False)


def _patch_grid(images: Any, patch_size: Any) -> tuple[np.ndarray, int]:
    images = as_float_array(images, "images")
    if images.ndim < 3:
        raise ValueError(f"images must have at least 3 axes (..., C, H, W); got shape {images.shape}")
    check_all_finite(images, "images")
    p = check_positive_int(patch_size, "patch_size")
    return images, p


def patch_ink(images: ArrayLike, patch_size: int) -> np.ndarray:
    """How much ink each patch holds: the sum of its pixel values, patches row by row.

    Parameters
    ----------
    images : array_like, shape (..., C, H, W)
    patch_size : int

    Returns
    -------
    numpy.ndarray, shape (..., N)

    Raises
    ------
    ValueError
        As :func:`~selfattention.patchify`.

    Notes
    -----
    See chapter 12 (the ink baseline of the deletion test).
    """
    images, p = _patch_grid(images, patch_size)
    return patchify(images, p).sum(axis=-1)


def blank_patches(images: ArrayLike, patches: ArrayLike, patch_size: int) -> np.ndarray:
    """A copy of the images with the given patches set to 0 (no ink), one list of patches per image.

    Parameters
    ----------
    images : array_like, shape (B, C, H, W)
    patches : array_like of int, shape (B, k)
        For each image, the indices (row by row, 0 … N-1) of the patches to blank.
    patch_size : int

    Returns
    -------
    numpy.ndarray, the shape of ``images``

    Raises
    ------
    ValueError
        If the shapes do not fit, an index is out of range, or the patch size does not divide the image.

    Notes
    -----
    See chapter 12 (the deletion test).
    """
    images, p = _patch_grid(images, patch_size)
    if images.ndim != 4:
        raise ValueError(f"images must have shape (B, C, H, W); got shape {images.shape}")
    B, C, H, W = images.shape
    patchify(images[:1], p)  # checks that p divides H and W
    cols, N = W // p, (H // p) * (W // p)
    patches = as_array(patches, "patches")
    if patches.dtype == np.bool_ or not np.issubdtype(patches.dtype, np.integer) or patches.ndim != 2:
        raise ValueError(
            f"patches must be a (B, k) integer array of patch indices; got {patches.dtype} {patches.shape}"
        )
    if patches.shape[0] != B:
        raise ValueError(f"patches must list the patches of each of the {B} images; got {patches.shape[0]} rows")
    if patches.size and (patches.min() < 0 or patches.max() >= N):
        raise ValueError(f"patch indices must lie in 0 … {N - 1}; got {patches.min()} … {patches.max()}")
    keep = np.ones((B, N), dtype=bool)
    np.put_along_axis(keep, patches.astype(np.intp), False, axis=1)  # (B, N): False where a patch is blanked
    grid = keep.reshape(B, 1, H // p, 1, cols, 1)  # one flag per patch, stretched over its p x p pixels below
    mask = np.broadcast_to(grid, (B, 1, H // p, p, cols, p)).reshape(B, 1, H, W)
    return np.where(mask, images, 0.0).astype(images.dtype)
