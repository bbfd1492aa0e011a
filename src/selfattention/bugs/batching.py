"""Bugs in padding and batch axes: which axis a padding mask covers, and which axis a batch mask lines up with.

Written in our own words, the bug kept; each docstring cites its source
(``owner/repository#number``) and the fix. See the bug zoo appendix.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import as_array
from ..attention import scaled_dot_product_attention
from ._common import keep_mask, qkv, scores, softmax_quiet, weighted_values

__all__ = [
    "padding_mask_on_query_axis",
    "mean_over_padded_rows",
    "batch_mask_on_head_axis",
    "batch_mask_on_kv_head_axis",
]


def lengths_of(lengths: Any, B: int, T: int) -> np.ndarray:
    lengths = as_array(lengths, "lengths")
    if lengths.shape != (B,) or not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(f"lengths must be {B} integers, one per sequence; got shape {lengths.shape}, {lengths.dtype}")
    if (lengths < 1).any() or (lengths > T).any():
        raise ValueError(f"each length must be between 1 and T = {T}; got {lengths.tolist()}")
    return lengths


def batch_of_sequences(q: Any, k: Any, v: Any, lengths: Any) -> tuple[np.ndarray, ...]:
    q, k, v = qkv(q, k, v)
    if q.ndim != 3 or k.shape[:2] != q.shape[:2]:
        raise ValueError(f"q, k and v must be (B, T, D) self-attention inputs; got {q.shape}, {k.shape}, {v.shape}")
    return q, k, v, lengths_of(lengths, q.shape[0], q.shape[1])


def padding_mask_on_query_axis(q: Any, k: Any, v: Any, lengths: Any) -> np.ndarray:
    """Self-attention over right-padded sequences whose padding mask blocks query rows instead of key columns.

    Source: hyunwoongko/transformer#40. The bug: the mask is
    ``(ids != pad)[:, None, :, None]``, shape (B, 1, T, 1), which lines up
    with the queries. Filled with -10,000 (not -inf), a blocked row is
    uniform rather than NaN, so nothing looks wrong, and real tokens attend
    to the padding. The fix: block the padding's key columns,
    ``[:, None, None, :]``, shape (B, 1, 1, T).

    Parameters
    ----------
    q, k, v : array_like, shape (B, T, D)
        A batch of sequences padded on the right to T tokens.
    lengths : array_like of int, shape (B,)
        Each sequence's real length.

    Returns
    -------
    numpy.ndarray, shape (B, T, D)
    """
    q, k, v, lengths = batch_of_sequences(q, k, v, lengths)
    real = np.arange(q.shape[1]) < lengths[:, None]  # (B, T)
    s = np.where(real[:, :, None], scores(q, k), -10_000.0)  # the bug: (B, T, 1) blocks rows, not columns
    return weighted_values(softmax_quiet(s), v)


def mean_over_padded_rows(q: Any, k: Any, v: Any, lengths: Any) -> np.ndarray:
    """Sentence vectors: self-attention that masks the padding keys, then the mean over every row, padding too.

    Source: huggingface/transformers#17463 (and pytorch/pytorch#41508). A
    padding mask covers key columns only: the padding's own rows still attend
    to the real tokens and come out as ordinary non-zero vectors. The bug:
    averaging every row, so a sentence's vector depends on how much padding
    its batch added. The fix: average the real rows only (``mean_pool``).

    Parameters as :func:`padding_mask_on_query_axis`; returns one vector per
    sequence, shape (B, D).
    """
    q, k, v, lengths = batch_of_sequences(q, k, v, lengths)
    real = np.arange(q.shape[1]) < lengths[:, None]  # (B, T)
    out = scaled_dot_product_attention(q, k, v, mask=real[:, None, :])[0]  # keys masked: right
    return out.mean(axis=1)  # the bug: the padding rows are averaged in


def four_axes(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"q, k and v must be (B, heads, tokens, width); got {q.shape}, {k.shape}, {v.shape}")


def batch_mask_on_head_axis(q: Any, k: Any, v: Any, keep: Any) -> np.ndarray:
    """Multi-head attention given a per-example (B, T, S) mask, applied to the (B, H, T, S) scores as it is.

    Source: lucidrains/vit-pytorch#71. The bug: broadcasting aligns shapes
    from the right, so the mask's batch axis meets the scores' head axis.
    With batch 1 it is right; with B = H it runs and gives example b's mask
    to head b of every example; otherwise it fails as in the report
    ("The size of tensor a (16) must match the size of tensor b (2)"). The
    fix: ``keep[:, None]``, shape (B, 1, T, S).

    Parameters
    ----------
    q, k, v : array_like, shape (B, H, T, Dk), (B, H, S, Dk), (B, H, S, Dv)
    keep : array_like of bool, shape (B, T, S)

    Returns
    -------
    numpy.ndarray, shape (B, H, T, Dv)
    """
    q, k, v = qkv(q, k, v)
    four_axes(q, k, v)
    keep = keep_mask(keep, q.shape[-2], k.shape[-2])
    s = scores(q, k)  # (B, H, T, S)
    np.copyto(s, -np.inf, where=~keep)  # the bug: (B, T, S) is read as (1, B, T, S), like masked_fill_
    return weighted_values(softmax_quiet(s), v)


def batch_mask_on_kv_head_axis(q: Any, k: Any, v: Any, keep: Any) -> np.ndarray:
    """Grouped-query attention that groups the queries into five axes but leaves a (B, 1, T, S) mask in four.

    Source: ml-explore/mlx-lm#1467 (and #1903). The queries are viewed as
    (B, Hkv, r, T, D) so that each key/value head meets its r query heads;
    the scores are then (B, Hkv, r, T, S). The bug: the mask, right-aligned,
    is read as (1, B, 1, T, S): its batch axis meets the key/value heads.
    Batch 1 is right; B = Hkv runs with the masks swapped between examples;
    other batches fail. The fix: ``keep[:, :, None]``, shape (B, 1, 1, T, S).

    Parameters
    ----------
    q : array_like, shape (B, H, T, Dk)
    k, v : array_like, shape (B, Hkv, S, Dk), (B, Hkv, S, Dv)
        H a multiple of Hkv.
    keep : array_like of bool, shape (B, 1, T, S)

    Returns
    -------
    numpy.ndarray, shape (B, H, T, Dv)
    """
    q, k, v = qkv(q, k, v)
    four_axes(q, k, v)
    (B, H, T, Dk), Hkv = q.shape, k.shape[1]
    if H % Hkv or k.shape[0] != B:
        raise ValueError(
            f"q's {H} heads must be a multiple of k's {Hkv}, with the same batch; got {q.shape}, {k.shape}"
        )
    keep = keep_mask(keep, T, k.shape[-2])
    s = scores(q.reshape(B, Hkv, H // Hkv, T, Dk), k[:, :, None])  # (B, Hkv, r, T, S)
    np.copyto(s, -np.inf, where=~keep)  # the bug: (B, 1, T, S) is read as (1, B, 1, T, S)
    out = weighted_values(softmax_quiet(s), v[:, :, None])  # (B, Hkv, r, T, Dv)
    return out.reshape(B, H, T, -1)
