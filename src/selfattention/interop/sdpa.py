"""PyTorch's ``scaled_dot_product_attention`` as a baseline: its fused kernel, and which kernel ran.

``torch.nn.functional.scaled_dot_product_attention`` is one name for several
kernels. On a CPU it runs a fused FlashAttention-style kernel, which never
holds the whole score matrix, only when query, key and value are 4-D
``(batch, heads, T, Dh)`` tensors; given 2-D or 3-D tensors it falls back,
without a word, to its unfused "math" path, which builds the ``(T, S)`` scores
like the course's NumPy reference. A comparison with "torch SDPA" must say
which one it measured. :func:`torch_sdpa` lays NumPy arrays out as 4-D
tensors and runs them on a kernel it names (refusing to fall back), and
:func:`sdpa_kernel_used` reports which kernel PyTorch picks for inputs as
given, with PyTorch's own reason when it refuses the fused one.

Taught in chapters 2 and 7; ``make bench`` times the fused kernel. torch is
imported on first use.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .._validation import as_float_array, check_bool, check_choice, check_min_ndim

__all__ = ["torch_sdpa", "as_4d_tensors", "sdpa_kernel_used"]

#: The kernels :func:`torch_sdpa` can run on a CPU, by the name PyTorch's ``SDPBackend`` gives them.
SDPA_KERNELS = {"flash": "FLASH_ATTENTION", "math": "MATH"}


def as_4d_tensors(q: Any, k: Any, v: Any) -> tuple[Any, Any, Any]:
    """``q``, ``k``, ``v`` of shape ``(..., T, D)`` as ``(1, N, T, D)`` torch tensors, N the batch axes' product.

    The arrays share memory with the tensors when they are C-contiguous (no
    copy); the batch axes, whatever their number, become the head axis.

    Raises
    ------
    ValueError
        If an input is not a float32 or float64 array of at least 2 dimensions,
        the batch axes of the three differ, or the widths do not fit
        (``q`` and ``k`` share Dk, ``k`` and ``v`` share S).
    """
    import torch

    arrays = []
    for name, value in (("q", q), ("k", k), ("v", v)):
        arr = as_float_array(value, name)
        check_min_ndim(arr, name, 2, "(..., T, D)")
        if arr.dtype not in (np.float32, np.float64):
            raise ValueError(f"{name} must be float32 or float64 for PyTorch's CPU kernels; got {arr.dtype}")
        arrays.append(arr)
    q, k, v = arrays
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(
            f"q, k and v must have the same batch axes to be laid out as (1, heads, T, D); got "
            f"{q.shape[:-2]}, {k.shape[:-2]} and {v.shape[:-2]}"
        )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2] or not q.dtype == k.dtype == v.dtype:
        raise ValueError(
            f"q (..., T, Dk), k (..., S, Dk) and v (..., S, Dv) must fit together and share a dtype; got "
            f"{q.shape} {q.dtype}, {k.shape} {k.dtype} and {v.shape} {v.dtype}"
        )
    return tuple(torch.from_numpy(np.ascontiguousarray(a).reshape(1, -1, *a.shape[-2:])) for a in (q, k, v))


def _backend(kernel: str) -> Any:
    from torch.nn.attention import SDPBackend

    return getattr(SDPBackend, SDPA_KERNELS[check_choice(kernel, SDPA_KERNELS, "kernel")])


def torch_sdpa(q: Any, k: Any, v: Any, *, is_causal: bool = False, kernel: str = "flash") -> np.ndarray:
    """PyTorch's attention of NumPy arrays on a named kernel, as a NumPy array of ``q``'s batch shape.

    Parameters
    ----------
    q, k, v : array_like, shapes (..., T, Dk), (..., S, Dk), (..., S, Dv)
        float32 or float64, with the same batch axes.
    is_causal : bool, default False
        PyTorch's causal mask (upper-left aligned: query i sees keys 0..i).
    kernel : {"flash", "math"}, default "flash"
        ``"flash"`` is PyTorch's fused CPU kernel; ``"math"`` its unfused path.
        The call runs under ``torch.nn.attention.sdpa_kernel``, so PyTorch
        cannot fall back to another kernel: it raises instead.

    Returns
    -------
    numpy.ndarray, shape (..., T, Dv)

    Raises
    ------
    ValueError
        As :func:`as_4d_tensors`, or for an unknown ``kernel`` or a non-bool ``is_causal``.
    """
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    is_causal = check_bool(is_causal, "is_causal")
    backend = _backend(kernel)
    batch = np.shape(q)[:-2] if np.ndim(q) >= 2 else ()
    tq, tk, tv = as_4d_tensors(q, k, v)
    with torch.no_grad(), sdpa_kernel(backend):
        out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=is_causal)
    return out.numpy().reshape(*batch, *out.shape[-2:])


def sdpa_kernel_used(q: Any, k: Any, v: Any, *, is_causal: bool = False) -> tuple[str, str]:
    """Which kernel PyTorch's SDPA runs for these tensors as given, and why not the fused one.

    PyTorch's CPU dispatcher takes the fused kernel whenever it can and the
    math path otherwise; this asks the fused kernel alone to run the call
    and reports the outcome.

    Parameters
    ----------
    q, k, v : torch.Tensor or array_like
        Any number of dimensions, as one would pass them to PyTorch.
    is_causal : bool, default False

    Returns
    -------
    tuple of str
        ``("flash", "")`` or ``("math", reason)``, the reason in PyTorch's words.

    Raises
    ------
    ValueError
        For a non-bool ``is_causal``.
    """
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    is_causal = check_bool(is_causal, "is_causal")
    tensors = [t if isinstance(t, torch.Tensor) else torch.from_numpy(as_float_array(t, "q, k, v")) for t in (q, k, v)]
    with warnings.catch_warnings(record=True) as caught, torch.no_grad(), sdpa_kernel(_backend("flash")):
        warnings.simplefilter("always")
        try:
            F.scaled_dot_product_attention(*tensors, is_causal=is_causal)
        except RuntimeError:
            reasons = [str(w.message).split(" (Triggered internally")[0] for w in caught]
            return "math", " ".join(r for r in reasons if r and not r.endswith("because:"))
    return "flash", ""
