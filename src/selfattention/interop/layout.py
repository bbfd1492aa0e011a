"""The one place where PyTorch's weight layout meets the package's: ``(d_out, d_in)`` <-> ``(d_in, d_out)``.

Like the list of transposed keys in nanoGPT's ``from_pretrained``, but as one
function that every reader in :mod:`selfattention.interop` calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..params import Linear

__all__: list[str] = []


def linear_from_torch(weight: Any, bias: Any = None) -> Linear:
    """A :class:`~selfattention.Linear` from a PyTorch weight of shape ``(d_out, d_in, ...)`` and its bias.

    Trailing kernel axes are flattened first, so this also reads a
    ``Conv2d`` whose kernel equals its stride (a patch embedding, flattened in
    (channel, row, column) order, see :func:`selfattention.patchify`) or a 1x1
    convolution (a linear map at every pixel). The arrays are copied: the
    result shares no memory with the module or the state dict.
    """
    weight = np.asarray(weight)
    matrix = weight.reshape(weight.shape[0], -1)  # (d_out, d_in): a Conv2d kernel flattened to (C_out, C*kh*kw)
    return Linear(matrix.T.copy(), None if bias is None else np.array(bias))  # the transpose, as a C-ordered copy


def linear_to_torch(layer: Linear) -> tuple[np.ndarray, np.ndarray | None]:
    """The inverse of :func:`linear_from_torch`: ``(weight.T, bias)`` in PyTorch's ``(d_out, d_in)`` layout, copied."""
    return layer.weight.T.copy(), None if layer.bias is None else layer.bias.copy()
