"""Attention for images: patches, a patch attention block, SAGAN-style and Tokens-to-Token attention.

Taught in chapter 6. The three ``torch.nn.Module`` classes keep the parameter
names of the code they follow (sources 001 and 004 of the course), so a state
dict saved from that code loads unchanged. Each has a NumPy twin that computes
the same forward pass from a NumPy copy of the state dict (see
:func:`selfattention.bridges.numpy_state_dict`) and also returns the
attention weights.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
import torch.nn as nn
from numpy.typing import ArrayLike

from ._validation import as_float_array, check_positive_int, check_real_scalar
from .attention import scaled_dot_product_attention
from .multihead import merge_heads, split_heads

__all__ = [
    "patchify",
    "PatchAttentionBlock",
    "ConvSelfAttention",
    "T2TAttention",
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
    if H % p or W % p:
        raise ValueError(
            f"the image size {H}x{W} is not a multiple of patch_size={p}; crop or resize it to a multiple "
            f"(for example {max(H - H % p, p)}x{max(W - W % p, p)})"
        )
    rows, cols = H // p, W // p
    grid = images.reshape(*batch, C, rows, p, cols, p)  # (..., C, rows, p, cols, p)
    n = len(batch)
    grid = grid.transpose(*range(n), n + 1, n + 3, n, n + 2, n + 4)  # (..., rows, cols, C, p, p)
    return grid.reshape(*batch, rows * cols, C * p * p)  # (..., N, C*p*p)


def _check_image_input(x: torch.Tensor, in_channels: int, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} expects a torch.Tensor; got {type(x).__name__}")
    if x.ndim != 4:
        raise ValueError(f"{name} expects input of shape (B, C, H, W); got {x.ndim} axes, shape {tuple(x.shape)}")
    if x.shape[1] != in_channels:
        raise ValueError(f"{name} was built for {in_channels} input channels; got {x.shape[1]}")


class PatchAttentionBlock(nn.Module):
    """Patch embedding by ``Conv2d``, then single-head attention and an output projection.

    ``(B, C, H, W)`` -> ``(B, N, E)`` with ``N = (H/p)(W/p)`` patch tokens of
    width ``E = embed_dim``. Parameters: ``proj`` (the patch ``Conv2d``),
    ``to_q``, ``to_k``, ``to_v`` and ``to_out`` (``nn.Linear(E, E)``).

    Parameters
    ----------
    in_channels : int, default 3
    patch_size : int, default 4
    embed_dim : int, default 64

    Raises
    ------
    ValueError
        If an argument is not a positive integer, or the input to
        ``forward`` is not ``(B, in_channels, H, W)`` with H and W multiples
        of ``patch_size``.

    Notes
    -----
    See chapter 6. Its NumPy twin is :func:`patch_attention_forward`.
    """

    def __init__(self, in_channels: int = 3, patch_size: int = 4, embed_dim: int = 64) -> None:
        super().__init__()
        self.in_channels = check_positive_int(in_channels, "in_channels")
        self.patch_size = check_positive_int(patch_size, "patch_size")
        self.embed_dim = check_positive_int(embed_dim, "embed_dim")
        self.proj = nn.Conv2d(in_channels, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.to_q = nn.Linear(embed_dim, embed_dim)
        self.to_k = nn.Linear(embed_dim, embed_dim)
        self.to_v = nn.Linear(embed_dim, embed_dim)
        self.to_out = nn.Linear(embed_dim, embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_image_input(x, self.in_channels, "PatchAttentionBlock")
        H, W = x.shape[-2:]
        if H % self.patch_size or W % self.patch_size:
            raise ValueError(f"the image size {H}x{W} is not a multiple of patch_size={self.patch_size}")
        tokens = self.proj(x).flatten(2).transpose(1, 2)  # (B, E, H/p, W/p) -> (B, N, E)
        q, k, v = self.to_q(tokens), self.to_k(tokens), self.to_v(tokens)  # each (B, N, E)
        weights = torch.softmax(q @ k.transpose(-2, -1) / self.embed_dim**0.5, dim=-1)  # (B, N, N)
        return self.to_out(weights @ v)  # (B, N, E)


class ConvSelfAttention(nn.Module):
    """Self-attention over the pixels of a feature map, SAGAN style, with a learned gate.

    1x1 convolutions give queries and keys with ``C // 8`` channels and values
    with ``C``; every one of the ``H*W`` positions attends to every other, and
    the result is added back scaled by ``gamma``, which starts at 0, so the
    block is the identity when it is created. Parameters: ``q``, ``k``, ``v``
    (``nn.Conv2d`` with ``kernel_size=1``) and ``gamma`` (shape (1,)).
    Scores are scaled by ``1/sqrt(C // 8)``, as in the code this follows
    (the SAGAN paper does not scale them).

    Parameters
    ----------
    in_channels : int
        C; at least 8, so that ``C // 8 >= 1``.

    Raises
    ------
    ValueError
        If ``in_channels`` is smaller than 8, or the input to ``forward`` is
        not ``(B, in_channels, H, W)``.

    Notes
    -----
    See chapter 6 and :cite:`zhang2019self`. Its NumPy twin is
    :func:`conv_self_attention_forward`.
    """

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        in_channels = check_positive_int(in_channels, "in_channels")
        if in_channels < 8:
            raise ValueError(
                f"in_channels must be at least 8, because queries and keys get in_channels // 8 channels; "
                f"got in_channels={in_channels}"
            )
        self.in_channels = in_channels
        self.q = nn.Conv2d(in_channels, in_channels // 8, kernel_size=1)
        self.k = nn.Conv2d(in_channels, in_channels // 8, kernel_size=1)
        self.v = nn.Conv2d(in_channels, in_channels, kernel_size=1)
        self.gamma = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_image_input(x, self.in_channels, "ConvSelfAttention")
        B, C, H, W = x.shape
        q = self.q(x).reshape(B, -1, H * W).transpose(1, 2)  # (B, N, C/8)
        k = self.k(x).reshape(B, -1, H * W)  # (B, C/8, N)
        v = self.v(x).reshape(B, C, H * W).transpose(1, 2)  # (B, N, C)
        weights = torch.softmax(q @ k / q.shape[-1] ** 0.5, dim=-1)  # (B, N, N)
        out = (weights @ v).transpose(1, 2).reshape(B, C, H, W)  # (B, C, H, W)
        return self.gamma * out + x


class T2TAttention(nn.Module):
    """The attention of Tokens-to-Token ViT: tokens of length ``dim`` in, ``chan`` out.

    One ``nn.Linear(dim, 3*chan)`` (``qkv``) makes queries, keys and values of
    width ``chan``, split into ``num_heads`` heads; after attention and the
    output projection ``proj`` (``nn.Linear(chan, chan)``), the **values**
    are added as the skip connection, because the input's width ``dim``
    differs from ``chan``.

    Parameters
    ----------
    dim : int
        Length of each input token.
    chan : int
        Length of each output token (channels); divisible by ``num_heads``.
    num_heads : int, default 1
    qkv_bias : bool, default False
        Whether ``qkv`` has a bias.
    qk_scale : float, optional
        Scale of the scores; defaults to ``head_dim ** -0.5``.

    Raises
    ------
    ValueError
        If ``chan`` is not divisible by ``num_heads``, an argument has the
        wrong type, or the input to ``forward`` is not ``(B, N, dim)``.

    Notes
    -----
    See chapter 6 and :cite:`yuan2021tokens`. Its NumPy twin is
    :func:`t2t_attention_forward`.
    """

    def __init__(self, dim: int, chan: int, num_heads: int = 1, qkv_bias: bool = False, qk_scale: float | None = None) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.chan = check_positive_int(chan, "chan")
        self.num_heads = check_positive_int(num_heads, "num_heads")
        if chan % num_heads:
            raise ValueError(f"chan={chan} is not divisible by num_heads={num_heads}; every head needs chan // num_heads channels")
        if not isinstance(qkv_bias, (bool, np.bool_)):
            raise ValueError(f"qkv_bias must be True or False; got {qkv_bias!r}")
        self.head_dim = chan // num_heads
        self.scale = self.head_dim**-0.5 if qk_scale is None else check_real_scalar(qk_scale, "qk_scale")
        self.qkv = nn.Linear(dim, chan * 3, bias=qkv_bias)
        self.proj = nn.Linear(chan, chan)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"T2TAttention expects a torch.Tensor; got {type(x).__name__}")
        if x.ndim != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"T2TAttention expects input of shape (B, N, dim={self.dim}); got shape {tuple(x.shape)}")
        B, N, _ = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (3, B, H, N, Dh)
        q, k, v = qkv[0], qkv[1], qkv[2]
        weights = torch.softmax((q * self.scale) @ k.transpose(-2, -1), dim=-1)  # (B, H, N, N)
        out = self.proj((weights @ v).transpose(1, 2).reshape(B, N, self.chan))  # (B, N, chan)
        return v.transpose(1, 2).reshape(B, N, self.chan) + out  # skip connection through V


# --- NumPy twins ---------------------------------------------------------------


def _state(state: Mapping[str, ArrayLike], required: list[str], module: str) -> dict[str, np.ndarray]:
    if not isinstance(state, Mapping):
        raise ValueError(f"state must be a mapping of parameter names to arrays; got {type(state).__name__}")
    missing = [name for name in required if name not in state]
    if missing:
        raise ValueError(f"state is missing {missing} for {module}; expected the keys {required}")
    return {name: as_float_array(state[name], name) for name in required}


def _linear(x: np.ndarray, state: dict[str, np.ndarray], name: str) -> np.ndarray:
    out = x @ state[f"{name}.weight"].T  # PyTorch stores (d_out, d_in)
    bias = state.get(f"{name}.bias")
    return out if bias is None else out + bias


def patch_attention_forward(x: ArrayLike, state: Mapping[str, ArrayLike], patch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :class:`PatchAttentionBlock`.

    Parameters
    ----------
    x : array_like, shape (B, C, H, W)
    state : mapping
        The module's state dict as NumPy arrays (``proj.weight``, ``proj.bias``,
        ``to_q.weight``, ...).
    patch_size : int

    Returns
    -------
    out : numpy.ndarray, shape (B, N, E)
    weights : numpy.ndarray, shape (B, N, N)

    Raises
    ------
    ValueError
        If the state lacks a parameter, ``x`` is not 4-D, or the image size is
        not a multiple of ``patch_size``.

    Notes
    -----
    See chapter 6.
    """
    names = [f"{layer}.{kind}" for layer in ("proj", "to_q", "to_k", "to_v", "to_out") for kind in ("weight", "bias")]
    s = _state(state, names, "PatchAttentionBlock")
    x = as_float_array(x, "x")
    if x.ndim != 4:
        raise ValueError(f"x must have shape (B, C, H, W); got shape {x.shape}")
    E = s["proj.weight"].shape[0]
    tokens = patchify(x, patch_size) @ s["proj.weight"].reshape(E, -1).T + s["proj.bias"]  # (B, N, E)
    q, k, v = (_linear(tokens, s, name) for name in ("to_q", "to_k", "to_v"))  # each (B, N, E)
    out, weights = scaled_dot_product_attention(q, k, v)  # scale 1/sqrt(E)
    return _linear(out, s, "to_out"), weights


def conv_self_attention_forward(x: ArrayLike, state: Mapping[str, ArrayLike]) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :class:`ConvSelfAttention`.

    A 1x1 convolution is a matrix product over the channel axis at every pixel.

    Parameters
    ----------
    x : array_like, shape (B, C, H, W)
    state : mapping
        ``q.weight``, ``q.bias``, ``k.weight``, ``k.bias``, ``v.weight``,
        ``v.bias`` and ``gamma`` as NumPy arrays.

    Returns
    -------
    out : numpy.ndarray, shape (B, C, H, W)
    weights : numpy.ndarray, shape (B, H*W, H*W)
        Row ``i`` is pixel ``i``'s attention over all pixels (row-major order).

    Raises
    ------
    ValueError
        If the state lacks a parameter or ``x`` is not 4-D.

    Notes
    -----
    See chapter 6.
    """
    names = ["q.weight", "q.bias", "k.weight", "k.bias", "v.weight", "v.bias", "gamma"]
    s = _state(state, names, "ConvSelfAttention")
    x = as_float_array(x, "x")
    if x.ndim != 4:
        raise ValueError(f"x must have shape (B, C, H, W); got shape {x.shape}")
    B, C, H, W = x.shape
    pixels = x.reshape(B, C, H * W).swapaxes(1, 2)  # (B, N, C): one row per pixel

    def conv1x1(name: str) -> np.ndarray:
        weight = s[f"{name}.weight"]  # (C_out, C, 1, 1)
        return pixels @ weight.reshape(weight.shape[0], -1).T + s[f"{name}.bias"]  # (B, N, C_out)

    out, weights = scaled_dot_product_attention(conv1x1("q"), conv1x1("k"), conv1x1("v"))  # scale 1/sqrt(C/8)
    out = out.swapaxes(1, 2).reshape(B, C, H, W)  # (B, C, H, W)
    return s["gamma"] * out + x, weights


def t2t_attention_forward(
    x: ArrayLike,
    state: Mapping[str, ArrayLike],
    num_heads: int = 1,
    qk_scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :class:`T2TAttention`.

    Parameters
    ----------
    x : array_like, shape (B, N, dim)
    state : mapping
        ``qkv.weight`` (and ``qkv.bias`` if the module has one), ``proj.weight``
        and ``proj.bias`` as NumPy arrays.
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
        If the state lacks a parameter, ``x`` does not fit ``qkv.weight``, or
        ``chan`` is not divisible by ``num_heads``.

    Notes
    -----
    See chapter 6.
    """
    names = ["qkv.weight", "proj.weight", "proj.bias"] + (["qkv.bias"] if "qkv.bias" in state else [])
    s = _state(state, names, "T2TAttention")
    x = as_float_array(x, "x")
    dim = s["qkv.weight"].shape[1]
    if x.ndim != 3 or x.shape[-1] != dim:
        raise ValueError(f"x must have shape (B, N, dim={dim}); got shape {x.shape}")
    chan = s["proj.weight"].shape[0]
    H = check_positive_int(num_heads, "num_heads")
    if chan % H:
        raise ValueError(f"chan={chan} is not divisible by num_heads={H}")
    scale = (chan // H) ** -0.5 if qk_scale is None else check_real_scalar(qk_scale, "qk_scale")
    q, k, v = np.split(_linear(x, s, "qkv"), 3, axis=-1)  # each (B, N, chan)
    out, weights = scaled_dot_product_attention(*(split_heads(a, H) for a in (q, k, v)), scale=scale)  # (B, H, N, Dh)
    out = _linear(merge_heads(out), s, "proj")  # (B, N, chan)
    return v + out, weights  # merge_heads(split_heads(v)) is v itself: the skip adds the full V
