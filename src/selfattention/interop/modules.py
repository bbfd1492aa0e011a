"""Readers of live ``torch.nn`` modules: check the module and its settings, then read its state dict.

torch is imported inside the functions, on first use, so that the NumPy parts
of the package never load it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import as_array
from ..encoder import EncoderParams
from ..params import AttentionParams, LayerNormParams
from ..vit import ViTParams
from .layout import linear_from_torch
from .state_dict import attention_from_state_dict, encoder_from_state_dict

__all__ = [
    "numpy_state_dict",
    "attention_params",
    "mha_weights",
    "encoder_params",
    "encoder_layer_config",
    "tiny_vit_params",
]


def _require_module(module: Any, kind: str) -> Any:
    """Import torch and check that ``module`` is a ``torch.nn.<kind>``; return torch."""
    import torch

    if not isinstance(module, getattr(torch.nn, kind)):
        raise ValueError(f"expected a torch.nn.{kind}; got {type(module).__name__}")
    return torch


def numpy_state_dict(module: Any) -> dict[str, np.ndarray]:
    """A module's state dict as NumPy arrays (copies), still in PyTorch's layout.

    Raises
    ------
    ValueError
        If ``module`` is not a ``torch.nn.Module``.

    Notes
    -----
    See chapter 6 (the NumPy twins of the vision modules read these).
    """
    _require_module(module, "Module")
    # as_array reads bfloat16 as float32 and refuses a 'meta' tensor, which holds no values
    return {name: np.array(as_array(tensor, name)) for name, tensor in module.state_dict().items()}


def attention_params(module: Any) -> AttentionParams:
    """The weights of a ``torch.nn.MultiheadAttention`` as an :class:`~selfattention.AttentionParams`.

    ``multihead_attention(x, attention_params(m), num_heads=m.num_heads)``
    reproduces ``m(x, x, x)``.

    Parameters
    ----------
    module : torch.nn.MultiheadAttention
        With ``kdim == vdim == embed_dim``, no ``add_bias_kv`` and no
        ``add_zero_attn``.

    Raises
    ------
    ValueError
        If ``module`` is not an ``nn.MultiheadAttention`` or uses a feature the
        NumPy version does not have.

    Notes
    -----
    See chapter 4 (parity with PyTorch).
    """
    _check_mha(module)
    return attention_from_state_dict(numpy_state_dict(module))


def _check_mha(module: Any) -> None:
    """Raise unless ``module`` is an ``nn.MultiheadAttention`` the NumPy version can reproduce."""
    _require_module(module, "MultiheadAttention")
    if not module._qkv_same_embed_dim:
        raise ValueError(
            f"kdim={module.kdim} and vdim={module.vdim} must equal embed_dim={module.embed_dim}: "
            "separate q/k/v projection weights are not supported"
        )
    if module.bias_k is not None or module.add_zero_attn:
        raise ValueError("add_bias_kv=True and add_zero_attn=True are not supported")


def mha_weights(module: Any) -> dict[str, np.ndarray | None]:
    """The weights of a ``torch.nn.MultiheadAttention`` as the keyword arguments of the fused call form.

    ``multihead_attention(x, **mha_weights(m), num_heads=m.num_heads)``
    reproduces ``m(x, x, x)``.

    Returns
    -------
    dict
        ``w_qkv`` (D, 3D) = ``in_proj_weight.T``; ``b_qkv`` (3D,) or None;
        ``w_out`` (D, D) = ``out_proj.weight.T``; ``b_out`` (D,) or None.
        Copies, with the module's dtype.

    Raises
    ------
    ValueError
        As :func:`attention_params`.

    Notes
    -----
    See chapter 4 (parity with PyTorch).
    """
    params = attention_params(module)
    return {"w_qkv": params.w_qkv, "b_qkv": params.b_qkv, "w_out": params.w_out, "b_out": params.b_out}


def encoder_params(layer: Any) -> EncoderParams:
    """Every parameter of a ``torch.nn.TransformerEncoderLayer`` as an :class:`~selfattention.EncoderParams`.

    ``EncoderParams.from_torch(layer)`` calls this. Layers built with
    ``bias=False`` give containers without biases.

    Raises
    ------
    ValueError
        If ``layer`` is not an ``nn.TransformerEncoderLayer``, or its attention
        uses a feature the NumPy version does not have.

    Notes
    -----
    See chapter 5 (parity with PyTorch).
    """
    _require_module(layer, "TransformerEncoderLayer")
    _check_mha(layer.self_attn)
    return encoder_from_state_dict(numpy_state_dict(layer))


def encoder_layer_config(layer: Any) -> dict[str, Any]:
    """The settings of a ``torch.nn.TransformerEncoderLayer`` as ``encoder_block`` keywords.

    Returns ``{"num_heads", "norm_first", "activation", "eps"}``, so that
    ``encoder_block(x, EncoderParams.from_torch(layer), **encoder_layer_config(layer))``
    reproduces ``layer(x)`` (in eval mode or with dropout 0).

    Raises
    ------
    ValueError
        If ``layer`` is not an ``nn.TransformerEncoderLayer``, its activation
        is neither ReLU nor GELU, or its two LayerNorms use different eps.

    Notes
    -----
    See chapter 5.
    """
    torch = _require_module(layer, "TransformerEncoderLayer")
    F = torch.nn.functional
    activation = layer.activation
    if activation is F.relu or isinstance(activation, torch.nn.ReLU):
        name = "relu"
    elif activation is F.gelu or (isinstance(activation, torch.nn.GELU) and activation.approximate == "none"):
        name = "gelu"
    else:
        raise ValueError(f"only ReLU and exact GELU activations are supported; got {activation!r}")
    if layer.norm1.eps != layer.norm2.eps:
        raise ValueError(f"norm1.eps={layer.norm1.eps} and norm2.eps={layer.norm2.eps} differ")
    return {
        "num_heads": layer.self_attn.num_heads,
        "norm_first": bool(layer.norm_first),
        "activation": name,
        "eps": layer.norm1.eps,
    }


def tiny_vit_params(module: Any) -> ViTParams:
    """Every weight of a :class:`~selfattention.TinyViT` as a :class:`~selfattention.ViTParams`.

    ``vit_forward(images, tiny_vit_params(m), m.num_heads)`` computes ``m(images)``
    in NumPy (and also returns the attention weights).

    Raises
    ------
    ValueError
        If ``module`` is not a TinyViT, or a block is not pre-norm with exact GELU.

    Notes
    -----
    See chapter 12.
    """
    import torch

    from ..vision_modules import TinyViT

    if not isinstance(module, TinyViT):
        raise ValueError(f"expected a TinyViT; got {type(module).__name__}")
    for i, block in enumerate(module.blocks):
        if not isinstance(block, torch.nn.TransformerEncoderLayer):
            raise ValueError(f"block {i} must be an nn.TransformerEncoderLayer; got {type(block).__name__}")
        config = encoder_layer_config(block)
        expected = {"norm_first": True, "activation": "gelu", "num_heads": module.num_heads, "eps": 1e-5}
        if {key: config[key] for key in expected} != expected or not block.self_attn.batch_first:
            raise ValueError(
                f"block {i} must be pre-norm, GELU, batch_first, with {module.num_heads} heads and LayerNorm eps 1e-5, "
                f"as vit_forward computes; got {config}, batch_first={block.self_attn.batch_first}"
            )
        _check_mha(block.self_attn)
    for name in ("patch", "head"):
        layer = getattr(module, name)
        if not isinstance(layer, torch.nn.Linear) or layer.bias is None:
            raise ValueError(f"{name} must be an nn.Linear with a bias; got {layer!r}")
    norm = module.norm
    if not isinstance(norm, torch.nn.LayerNorm) or not norm.elementwise_affine or norm.bias is None or norm.eps != 1e-5:
        raise ValueError(f"norm must be an nn.LayerNorm with weight, bias and eps 1e-5; got {norm!r}")
    state = numpy_state_dict(module)
    return ViTParams(
        patch=linear_from_torch(state["patch.weight"], state["patch.bias"]),
        cls_token=state["cls_token"],
        positions=state["positions"],
        blocks=tuple(encoder_from_state_dict(state, f"blocks.{i}.") for i in range(len(module.blocks))),
        final_norm=LayerNormParams(state["norm.weight"], state["norm.bias"]),
        head=linear_from_torch(state["head.weight"], state["head.bias"]),
        patch_size=module.patch_size,
        image_size=(module.image_size, module.image_size),
        num_heads=module.num_heads,
    )
