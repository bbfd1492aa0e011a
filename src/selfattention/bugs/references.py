"""What each bug's function should have returned, from the package's own functions, with the bug's signature.

``REFERENCE[name]`` takes the same arguments as ``bugs.<name>`` and returns the
right answer: the property tests of :mod:`selfattention.bugs.properties`
compare against it, and so do the bug zoo's exercises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..attention import scaled_dot_product_attention
from ..decoding import decoder_block
from ..masks import sliding_window_mask
from ..multihead import merge_heads
from ..positions import apply_rope
from . import batching, heads, masking, positions

__all__ = ["REFERENCE"]


def _attention(q: Any, k: Any, v: Any, mask: Any = None, **options: Any) -> np.ndarray:
    return scaled_dot_product_attention(q, k, v, mask=mask, **options)[0]


def _padded(q: Any, k: Any, v: Any, lengths: Any) -> np.ndarray:
    real = np.arange(np.shape(q)[1]) < np.asarray(lengths)[:, None]  # (B, T): the real tokens
    return _attention(q, k, v, real[:, None, :])  # each query sees its sequence's real keys


def _pooled(q: Any, k: Any, v: Any, lengths: Any) -> np.ndarray:
    real = np.arange(np.shape(q)[1]) < np.asarray(lengths)[:, None]
    return (_padded(q, k, v, lengths) * real[..., None]).sum(axis=1) / real.sum(axis=1, keepdims=True)


def _permute(w: Any, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    heads_in_w = n_head if n_head_kv is None else n_head_kv
    w = np.asarray(w)
    D, width = w.shape
    return w.reshape(D, heads_in_w, width // heads_in_w // 2, 2).transpose(0, 1, 3, 2).reshape(D, width)


def _rope_scores(q: Any, k: Any) -> np.ndarray:
    q, k = apply_rope(q, interleaved=True), apply_rope(k, interleaved=True)
    return q @ np.swapaxes(k, -1, -2) / q.shape[-1] ** 0.5  # a Python float keeps float32 scores float32


def _scaled_head(x: Any, w_q: Any, w_k: Any, w_v: Any) -> np.ndarray:
    x, w_q, w_k, w_v = (np.asarray(a) for a in (x, w_q, w_k, w_v))
    return _attention(x @ w_q, x @ w_k, x @ w_v)  # the scale is 1/sqrt of the head's width, w_k.shape[1]


REFERENCE: dict[str, Callable[..., Any]] = {
    masking.weak_mask_value.__name__: _attention,
    masking.mask_after_softmax.__name__: _attention,
    masking.masked_fill_result_dropped.__name__: _attention,
    masking.nan_for_fully_masked_rows.__name__: _attention,
    masking.additive_mask_cast_to_bool.__name__: _attention,
    masking.blocked_mask_passed_as_keep.__name__: lambda q, k, v: _attention(q, k, v, is_causal=True),
    masking.causal_mask_top_left.__name__: lambda q, k, v: _attention(q, k, v, is_causal=True),
    masking.sliding_window_one_too_wide.__name__: lambda T, window: sliding_window_mask(T, window, dtype=bool),
    batching.padding_mask_on_query_axis.__name__: _padded,
    batching.mean_over_padded_rows.__name__: _pooled,
    batching.batch_mask_on_head_axis.__name__: lambda q, k, v, keep: _attention(q, k, v, np.asarray(keep)[:, None]),
    batching.batch_mask_on_kv_head_axis.__name__: lambda q, k, v, keep: _attention(q, k, v, keep, enable_gqa=True),
    heads.scale_by_model_width.__name__: _scaled_head,
    heads.scale_after_softmax.__name__: _attention,
    heads.softmax_over_queries.__name__: _attention,
    heads.merge_heads_by_reshape.__name__: merge_heads,
    positions.rope_half_split_on_interleaved_pairs.__name__: _rope_scores,
    positions.rope_permutation_wrong_head_count.__name__: _permute,
    positions.cached_positions_restart.__name__: lambda x, params, num_heads, prefill: decoder_block(
        x, params, num_heads
    ),
}
