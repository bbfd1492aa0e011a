"""The PyTorch modules of chapters 6 and 12: patch attention, SAGAN-style and Tokens-to-Token attention, a tiny ViT.

They keep the parameter names of the code they follow (sources 001 and 004 of
the course), so a state dict saved from that code loads unchanged. Each has a
NumPy twin in :mod:`selfattention.vision` that computes the same forward pass
and also returns the attention weights. This module imports torch; ``import
selfattention`` loads it only when one of these classes is first used.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ._validation import check_bool, check_head_split, check_image_size, check_positive_int, check_real_scalar

__all__ = ["PatchAttentionBlock", "ConvSelfAttention", "T2TAttention", "TinyViT"]


def _check_tensor(x: torch.Tensor, module: nn.Module, name: str) -> None:
    """Raise unless ``x`` is a floating tensor of the module's own dtype (torch does not convert)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} expects a torch.Tensor; got {type(x).__name__} (use torch.as_tensor(x))")
    weight = next(module.parameters())
    if x.dtype != weight.dtype:
        convert = {torch.float64: ".double()", torch.float32: ".float()", torch.float16: ".half()"}.get(x.dtype)
        advice = f"call module{convert} to match x, or " if convert else ""
        raise ValueError(
            f"{name}'s weights are {weight.dtype} but x is {x.dtype}; {advice}convert x with x.to({weight.dtype})"
        )
    if x.device != weight.device:
        raise ValueError(f"{name}'s weights are on {weight.device} but x is on {x.device}; move one to the other")


def _check_image_input(x: torch.Tensor, module: nn.Module, in_channels: int, name: str) -> None:
    _check_tensor(x, module, name)
    if x.ndim != 4:
        raise ValueError(f"{name} expects input of shape (B, C, H, W); got {x.ndim} axes, shape {tuple(x.shape)}")
    if x.shape[1] != in_channels:
        raise ValueError(f"{name} was built for {in_channels} input channels; got {x.shape[1]}")
    if 0 in x.shape:
        raise ValueError(f"{name} needs at least one image, channel and pixel; got shape {tuple(x.shape)}")


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
    See chapter 6. Its NumPy twin is :func:`selfattention.patch_attention_forward`.
    """

    def __init__(self, in_channels: int = 3, patch_size: int = 4, embed_dim: int = 64) -> None:
        super().__init__()
        self.in_channels = check_positive_int(in_channels, "in_channels", at_most=2**20)
        self.patch_size = check_positive_int(patch_size, "patch_size", at_most=2**20)
        self.embed_dim = check_positive_int(embed_dim, "embed_dim", at_most=2**20)
        self.proj = nn.Conv2d(in_channels, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.to_q = nn.Linear(embed_dim, embed_dim)
        self.to_k = nn.Linear(embed_dim, embed_dim)
        self.to_v = nn.Linear(embed_dim, embed_dim)
        self.to_out = nn.Linear(embed_dim, embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_image_input(x, self, self.in_channels, "PatchAttentionBlock")
        check_image_size(*x.shape[-2:], self.patch_size)
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
    :func:`selfattention.conv_self_attention_forward`.
    """

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        in_channels = check_positive_int(in_channels, "in_channels", at_most=2**20)
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
        _check_image_input(x, self, self.in_channels, "ConvSelfAttention")
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
    :func:`selfattention.t2t_attention_forward`.
    """

    def __init__(
        self, dim: int, chan: int, num_heads: int = 1, qkv_bias: bool = False, qk_scale: float | None = None
    ) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim", at_most=2**20)
        self.chan = check_positive_int(chan, "chan", at_most=2**20)
        self.num_heads = check_positive_int(num_heads, "num_heads", at_most=2**20)
        self.head_dim = check_head_split(self.chan, self.num_heads, "chan")
        qkv_bias = check_bool(qkv_bias, "qkv_bias")
        self.scale = self.head_dim**-0.5 if qk_scale is None else check_real_scalar(qk_scale, "qk_scale")
        self.qkv = nn.Linear(dim, chan * 3, bias=qkv_bias)
        self.proj = nn.Linear(chan, chan)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_tensor(x, self, "T2TAttention")
        if x.ndim != 3 or x.shape[-1] != self.dim or 0 in x.shape:
            raise ValueError(f"T2TAttention expects input of shape (B, N, dim={self.dim}); got shape {tuple(x.shape)}")
        B, N, _ = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (3, B, H, N, Dh)
        q, k, v = qkv[0], qkv[1], qkv[2]
        weights = torch.softmax((q * self.scale) @ k.transpose(-2, -1), dim=-1)  # (B, H, N, N)
        out = self.proj((weights @ v).transpose(1, 2).reshape(B, N, self.chan))  # (B, N, chan)
        return v.transpose(1, 2).reshape(B, N, self.chan) + out  # skip connection through V


class TinyViT(nn.Module):
    """A small Vision Transformer: patches, a class token, learned positions, pre-norm blocks, a linear head.

    The parts are PyTorch's own (``nn.Linear`` on the flattened patches,
    ``nn.TransformerEncoderLayer`` with ``norm_first=True``, exact GELU and no
    dropout, ``nn.LayerNorm``), so the model trains with any PyTorch optimiser;
    :func:`selfattention.vit_forward` is its NumPy twin, with the weights read
    by :func:`selfattention.tiny_vit_params`.

    Parameters
    ----------
    image_size : int
        H = W.
    patch_size : int
        p; must divide ``image_size``.
    channels, d_model, num_heads, num_layers, dim_feedforward, num_classes : int
        C, D, H, L, F and the number of classes.

    Raises
    ------
    ValueError
        If a size is not a positive integer, p does not divide the image, or H does not divide D.

    Notes
    -----
    See chapter 12. ``forward(images)`` takes (B, C, H, W) and returns (B, classes) logits.
    """

    def __init__(
        self,
        image_size: int = 8,
        patch_size: int = 2,
        channels: int = 1,
        d_model: int = 32,
        num_heads: int = 4,
        num_layers: int = 2,
        dim_feedforward: int = 64,
        num_classes: int = 10,
    ) -> None:
        super().__init__()
        size = check_positive_int(image_size, "image_size", at_most=1024)
        p = check_positive_int(patch_size, "patch_size")
        check_image_size(size, size, p)
        C = check_positive_int(channels, "channels", at_most=64)
        D = check_positive_int(d_model, "d_model", at_most=2048)
        H = check_positive_int(num_heads, "num_heads")
        check_head_split(D, H)
        L = check_positive_int(num_layers, "num_layers", at_most=64)
        F = check_positive_int(dim_feedforward, "dim_feedforward", at_most=8192)
        classes = check_positive_int(num_classes, "num_classes", at_most=100_000)
        N = (size // p) ** 2
        if N > 4096:
            raise ValueError(
                f"{size}x{size} images in {p}x{p} patches make {N:,} patches, more than 4,096; use larger patches"
            )
        if (C * p * p + N + 1 + L * (4 * D + 2 * F) + classes) * D > 2**27:
            raise ValueError("these sizes make more than 2**27 weights; choose a smaller model")
        self.image_size, self.patch_size, self.channels, self.num_heads = size, p, C, H
        self.patch = nn.Linear(C * p * p, D)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        self.positions = nn.Parameter(0.02 * torch.randn(1, N + 1, D))
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(D, H, F, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
            for _ in range(L)
        )
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Class logits (B, classes) for images (B, C, H, W)."""
        _check_image_input(images, self, self.channels, "TinyViT")
        if not torch.isfinite(images).all():
            raise ValueError("TinyViT's images must hold only finite numbers; got NaN or infinity")
        B, C, H, W = images.shape
        if H != self.image_size or W != self.image_size:
            raise ValueError(f"TinyViT was built for {self.image_size}x{self.image_size} images; got {H}x{W}")
        p = self.patch_size
        patches = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, p, p)
        tokens = self.patch(patches.reshape(B, (H // p) * (W // p), C * p * p))  # (B, N, D)
        z = torch.cat([self.cls_token.expand(B, -1, -1), tokens], dim=1) + self.positions  # (B, N + 1, D)
        for block in self.blocks:
            z = block(z)
        return self.head(self.norm(z)[:, 0])
