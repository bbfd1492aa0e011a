r"""What a GGUF file stores instead of float weights: blocks of small integers with a scale (and a minimum).

Taught in chapter 14. llama.cpp's quantized formats cut each row of a weight
matrix into blocks of 32 numbers and store, per block, one or two float16
numbers and 32 small integers:

- **Q8_0** (SmolLM2's embeddings): a scale :math:`d` and 32 signed bytes
  :math:`q_i`; the weights are :math:`w_i = d\, q_i`. 34 bytes for 32 numbers,
  8.5 bits each.
- **Q4_1** (every other matrix): a scale :math:`d`, a minimum :math:`m` and 32
  four-bit integers :math:`q_i \in \{0, \dots, 15\}`, two to a byte;
  :math:`w_i = d\, q_i + m`. 20 bytes for 32 numbers, 5 bits each. The low
  nibbles of the 16 bytes are numbers 0–15 of the block, the high nibbles
  numbers 16–31.

A quantizer picks :math:`m` as the block's smallest weight and :math:`d` so
that the largest maps to 15; every weight is then rounded to the nearest of
the 16 levels, an error of at most :math:`d/2`.

The layouts are ggml's (``ggml-common.h``); the ``gguf`` package's
``gguf.quants.dequantize`` computes the same numbers (tested, bit for bit).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._validation import as_float_array, check_all_finite

__all__ = ["BLOCK_SIZE", "BLOCK_BYTES", "dequantize", "dequantize_q4_1", "dequantize_q8_0", "quantize_q4_1"]

BLOCK_SIZE = 32
"""Numbers per block, in both formats."""

BLOCK_BYTES = {"Q8_0": 2 + BLOCK_SIZE, "Q4_1": 2 + 2 + BLOCK_SIZE // 2}
"""Bytes per block: the float16 scale (and minimum), then the packed integers."""


def _blocks(raw: Any, kind: str) -> np.ndarray:
    """``raw`` as (..., blocks, bytes per block) uint8, or a ValueError naming the layout expected."""
    arr = np.asarray(raw)
    width = BLOCK_BYTES[kind]
    if arr.dtype != np.uint8 or arr.ndim == 0 or arr.shape[-1] == 0 or arr.shape[-1] % width:
        raise ValueError(
            f"{kind} data must be uint8 rows of whole {width}-byte blocks, shape (..., n * {width}); "
            f"got {arr.dtype} of shape {arr.shape}"
        )
    return arr.reshape(*arr.shape[:-1], arr.shape[-1] // width, width)  # (..., blocks, bytes)


def _float16(blocks: np.ndarray, start: int) -> np.ndarray:
    """The float16 stored at bytes ``start, start+1`` of every block, as float32, shape (..., blocks, 1)."""
    return np.ascontiguousarray(blocks[..., start : start + 2]).view(np.float16).astype(np.float32)


def dequantize_q8_0(raw: ArrayLike) -> np.ndarray:
    r"""Q8_0 blocks to float32: :math:`w_i = d\, q_i`, with ``q`` signed bytes.

    Parameters
    ----------
    raw : array_like of uint8, shape (..., n * 34)
        Rows of blocks as stored: a float16 scale ``d``, then 32 int8 ``q``.

    Returns
    -------
    numpy.ndarray of float32, shape (..., n * 32)

    Raises
    ------
    ValueError
        If ``raw`` is not uint8 rows of whole 34-byte blocks.

    Notes
    -----
    See chapter 14 (what the file stores).
    """
    blocks = _blocks(raw, "Q8_0")
    q = np.ascontiguousarray(blocks[..., 2:]).view(np.int8)  # (..., blocks, 32)
    return (q * _float16(blocks, 0)).reshape(*blocks.shape[:-2], blocks.shape[-2] * BLOCK_SIZE)


def dequantize_q4_1(raw: ArrayLike) -> np.ndarray:
    r"""Q4_1 blocks to float32: :math:`w_i = d\, q_i + m`, with ``q`` four-bit, two to a byte.

    Parameters
    ----------
    raw : array_like of uint8, shape (..., n * 20)
        Rows of blocks as stored: float16 ``d`` and ``m``, then 16 bytes whose
        low nibbles are numbers 0–15 of the block and high nibbles 16–31.

    Returns
    -------
    numpy.ndarray of float32, shape (..., n * 32)

    Raises
    ------
    ValueError
        If ``raw`` is not uint8 rows of whole 20-byte blocks.

    Notes
    -----
    See chapter 14 (what the file stores).
    """
    blocks = _blocks(raw, "Q4_1")
    packed = blocks[..., 4:]  # (..., blocks, 16)
    q = np.concatenate([packed & 0x0F, packed >> 4], axis=-1)  # (..., blocks, 32): low nibbles first
    return (q * _float16(blocks, 0) + _float16(blocks, 2)).reshape(*blocks.shape[:-2], blocks.shape[-2] * BLOCK_SIZE)


_DEQUANTIZERS = {"Q8_0": dequantize_q8_0, "Q4_1": dequantize_q4_1}


def dequantize(raw: ArrayLike, kind: str) -> np.ndarray:
    """Float32 weights from stored data of type ``kind``: "F32" (as is), "Q8_0" or "Q4_1".

    Raises
    ------
    ValueError
        If ``kind`` is another type, or the data does not fit it.
    """
    if kind == "F32":
        arr = np.asarray(raw)
        if arr.dtype != np.float32:
            raise ValueError(f"F32 data must be float32; got {arr.dtype}")
        return arr
    if not isinstance(kind, str) or kind not in _DEQUANTIZERS:
        raise ValueError(f"kind must be one of 'F32', 'Q8_0', 'Q4_1' (the types SmolLM2's file uses); got {kind!r}")
    return _DEQUANTIZERS[kind](raw)


def quantize_q4_1(w: ArrayLike) -> np.ndarray:
    r"""Float weights to Q4_1 blocks as llama.cpp's reference quantizer makes them: :math:`d = (\max - m)/15`.

    The minimum :math:`m` of each block maps to 0 and its maximum to 15; each
    weight becomes the nearest level, :math:`\lfloor (w - m)/d + \tfrac12 \rfloor`
    at most 15; ``d`` and ``m`` are stored as float16.

    Parameters
    ----------
    w : array_like, shape (..., n * 32)
        Finite weights, rows whose length is a multiple of 32.

    Returns
    -------
    numpy.ndarray of uint8, shape (..., n * 20)
        :func:`dequantize_q4_1` reads it back.

    Raises
    ------
    ValueError
        If ``w`` is not finite, lies outside float16's range (the minimum and
        scale of each block are stored as float16), or its rows are not whole
        blocks of 32.

    Notes
    -----
    See chapter 14 (what quantizing costs). The levels are computed from the
    float32 ``d`` and ``m`` before they are rounded to float16, as in ggml's
    ``quantize_row_q4_1_ref``.
    """
    w = as_float_array(w, "w")
    if w.ndim == 0 or w.shape[-1] == 0 or w.shape[-1] % BLOCK_SIZE:
        raise ValueError(f"w must have rows of whole blocks of {BLOCK_SIZE} numbers; got shape {w.shape}")
    check_all_finite(w, "w")
    largest, limit = float(np.abs(w).max(initial=0)), float(np.finfo(np.float16).max)
    if largest > limit:
        raise ValueError(
            f"w must lie within +-{limit:,.0f}, float16's range: each block's minimum and scale are stored as "
            f"float16; got a weight of magnitude {largest:.3g}"
        )
    n = w.shape[-1] // BLOCK_SIZE
    blocks = w.astype(np.float32).reshape(*w.shape[:-1], n, BLOCK_SIZE)  # (..., blocks, 32)
    low, high = blocks.min(axis=-1, keepdims=True), blocks.max(axis=-1, keepdims=True)
    d = (high - low) / 15
    inverse = np.divide(1, d, out=np.zeros_like(d), where=d != 0)
    q = np.minimum(np.floor((blocks - low) * inverse + np.float32(0.5)), 15).astype(np.uint8)  # (..., blocks, 32)
    packed = q[..., :16] | (q[..., 16:] << 4)  # (..., blocks, 16)
    header = np.concatenate([d.astype(np.float16), low.astype(np.float16)], axis=-1).view(np.uint8)  # 4 bytes
    return np.concatenate([header, packed], axis=-1).reshape(*w.shape[:-1], n * BLOCK_BYTES["Q4_1"])
