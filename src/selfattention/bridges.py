"""Bridges from PyTorch modules to the package's NumPy weight layout.

PyTorch stores a linear layer's weight as ``(d_out, d_in)`` and computes
``x @ W.T``; the package uses ``(d_in, d_out)`` and ``x @ w``. The bridges
transpose and copy, so that the NumPy arrays do not share memory with the
module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["mha_weights"]


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
