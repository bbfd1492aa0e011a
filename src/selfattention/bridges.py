"""Bridges from PyTorch modules to the package's NumPy weight layout.

PyTorch stores a linear layer's weight as ``(d_out, d_in)`` and computes
``x @ W.T``; the package uses ``(d_in, d_out)`` and ``x @ w``. The bridges
transpose and copy, so that the NumPy arrays do not share memory with the
module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["mha_weights", "encoder_layer_weights", "encoder_layer_config", "numpy_state_dict"]


def _to_numpy(tensor: Any) -> np.ndarray | None:
    return None if tensor is None else tensor.detach().cpu().numpy().copy()


def mha_weights(module: Any) -> dict[str, np.ndarray | None]:
    """Read the weights of a ``torch.nn.MultiheadAttention`` in the package's layout.

    ``multihead_attention(x, **mha_weights(m), num_heads=m.num_heads)``
    reproduces ``m(x, x, x)``.

    Parameters
    ----------
    module : torch.nn.MultiheadAttention
        With ``kdim == vdim == embed_dim``, no ``add_bias_kv`` and no
        ``add_zero_attn``.

    Returns
    -------
    dict
        ``w_qkv`` (D, 3D) = ``in_proj_weight.T``; ``b_qkv`` (3D,) or None;
        ``w_out`` (D, D) = ``out_proj.weight.T``; ``b_out`` (D,) or None.
        Arrays have the module's dtype.

    Raises
    ------
    ValueError
        If ``module`` is not an ``nn.MultiheadAttention`` or uses a feature the
        NumPy version does not have.

    Notes
    -----
    See chapter 4 (parity with PyTorch).
    """
    import torch  # imported here: the NumPy parts of the package do not need torch

    if not isinstance(module, torch.nn.MultiheadAttention):
        raise ValueError(f"expected a torch.nn.MultiheadAttention; got {type(module).__name__}")
    if not module._qkv_same_embed_dim:
        raise ValueError(
            f"kdim={module.kdim} and vdim={module.vdim} must equal embed_dim={module.embed_dim}: "
            "separate q/k/v projection weights are not supported"
        )
    if module.bias_k is not None or module.add_zero_attn:
        raise ValueError("add_bias_kv=True and add_zero_attn=True are not supported")
    return {
        "w_qkv": np.ascontiguousarray(_to_numpy(module.in_proj_weight).T),  # (D, 3D)
        "b_qkv": _to_numpy(module.in_proj_bias),  # (3D,) or None
        "w_out": np.ascontiguousarray(_to_numpy(module.out_proj.weight).T),  # (D, D)
        "b_out": _to_numpy(module.out_proj.bias),  # (D,) or None
    }


def encoder_layer_weights(layer: Any) -> dict[str, np.ndarray]:
    """Read every parameter of a ``torch.nn.TransformerEncoderLayer`` in the package's layout.

    Returns the keyword arguments of :class:`selfattention.EncoderParams`;
    ``EncoderParams.from_torch(layer)`` wraps this.

    Raises
    ------
    ValueError
        If ``layer`` is not an ``nn.TransformerEncoderLayer``, or its attention
        or LayerNorms have no biases (``bias=False``).

    Notes
    -----
    See chapter 5 (parity with PyTorch).
    """
    import torch

    if not isinstance(layer, torch.nn.TransformerEncoderLayer):
        raise ValueError(f"expected a torch.nn.TransformerEncoderLayer; got {type(layer).__name__}")
    attention = mha_weights(layer.self_attn)
    if attention["b_qkv"] is None or layer.linear1.bias is None or layer.norm1.bias is None:
        raise ValueError("layers built with bias=False are not supported: every block here has biases")
    return {
        "w_qkv": attention["w_qkv"], "b_qkv": attention["b_qkv"],
        "w_out": attention["w_out"], "b_out": attention["b_out"],
        "w_ff1": np.ascontiguousarray(_to_numpy(layer.linear1.weight).T),  # (D, F)
        "b_ff1": _to_numpy(layer.linear1.bias),
        "w_ff2": np.ascontiguousarray(_to_numpy(layer.linear2.weight).T),  # (F, D)
        "b_ff2": _to_numpy(layer.linear2.bias),
        "norm1_weight": _to_numpy(layer.norm1.weight), "norm1_bias": _to_numpy(layer.norm1.bias),
        "norm2_weight": _to_numpy(layer.norm2.weight), "norm2_bias": _to_numpy(layer.norm2.bias),
    }


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
    import torch
    import torch.nn.functional as F

    if not isinstance(layer, torch.nn.TransformerEncoderLayer):
        raise ValueError(f"expected a torch.nn.TransformerEncoderLayer; got {type(layer).__name__}")
    activation = layer.activation
    if activation is F.relu or isinstance(activation, torch.nn.ReLU):
        name = "relu"
    elif activation is F.gelu or (isinstance(activation, torch.nn.GELU) and activation.approximate == "none"):
        name = "gelu"
    else:
        raise ValueError(f"only ReLU and exact GELU activations are supported; got {activation!r}")
    if layer.norm1.eps != layer.norm2.eps:
        raise ValueError(f"norm1.eps={layer.norm1.eps} and norm2.eps={layer.norm2.eps} differ")
    return {"num_heads": layer.self_attn.num_heads, "norm_first": bool(layer.norm_first), "activation": name, "eps": layer.norm1.eps}


def numpy_state_dict(module: Any) -> dict[str, np.ndarray]:
    """A module's state dict as NumPy arrays (copies), for the NumPy twins of chapter 6.

    Raises
    ------
    ValueError
        If ``module`` is not a ``torch.nn.Module``.

    Notes
    -----
    See chapter 6.
    """
    import torch

    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"expected a torch.nn.Module; got {type(module).__name__}")
    return {name: _to_numpy(tensor) for name, tensor in module.state_dict().items()}
