"""Reading PyTorch weights into the package's containers: every transpose in one place.

PyTorch stores a linear layer's weight as ``(d_out, d_in)`` and computes
``x @ W.T``; the package's containers hold ``(d_in, d_out)`` and compute
``x @ w``. The one function that turns the first into the second is
:func:`selfattention.interop.layout.linear_from_torch`; everything here goes
through it. Split by what they read:

- :mod:`~selfattention.interop.state_dict`: name-to-array mappings in PyTorch's
  layout (a module's ``state_dict()`` as NumPy arrays, or a checkpoint file
  read with NumPy), into :class:`~selfattention.AttentionParams`,
  :class:`~selfattention.EncoderParams` and the vision containers. No torch needed.
- :mod:`~selfattention.interop.modules`: live ``torch.nn`` modules, whose type and
  settings (head count, activation, norm placement) are checked before their
  state dict is read. torch is imported on first use.
- :mod:`~selfattention.interop.sdpa`: PyTorch's ``scaled_dot_product_attention``
  as a baseline, laid out 4-D for its fused kernel, and which kernel ran.

Taught in chapters 2–7, wherever a NumPy result is checked against PyTorch.
"""

from . import llama, modules, sdpa, state_dict
from .llama import *  # noqa: F403
from .modules import *  # noqa: F403
from .sdpa import *  # noqa: F403
from .state_dict import *  # noqa: F403

__all__ = [*llama.__all__, *modules.__all__, *sdpa.__all__, *state_dict.__all__]
