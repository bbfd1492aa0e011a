"""Bugs in rotary positions and cached decoding: pairs of features, weight layouts, positions after a cache.

Written in our own words, the bug kept; each docstring cites its source
(``owner/repository#number``) and the fix. See the bug zoo appendix.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import as_float_array, check_positive_int
from ..decoding import KVCache, decoder_block
from ..encoder import EncoderParams
from ..positions import apply_rope

__all__ = ["rope_half_split_on_interleaved_pairs", "rope_permutation_wrong_head_count", "cached_positions_restart"]


def rope_half_split_on_interleaved_pairs(q: Any, k: Any) -> np.ndarray:
    """One head's scores with rotary positions, the pairs rotated half-split while the weights pair neighbours.

    Source: rasbt/LLMs-from-scratch#746 (Llama 2 from Meta's checkpoint).
    Meta's weights were trained with RoPE rotating neighbouring features
    (0, 1), (2, 3), …; Hugging Face's code rotates (i, i + Dh/2) and reorders
    the checkpoint's Q and K columns to match. The bug: half-split RoPE on
    the queries and keys of Meta's weights, not reordered. Scores at equal
    positions agree in either pairing and every other score differs; the
    report saw outputs that matched "up to certain tokens". The fix: rotate
    the pairs the weights were trained with (``interleaved=True``), or
    reorder the weights once when loading.

    Parameters
    ----------
    q, k : array_like, shape (..., T, Dh)
        One head's queries and keys at positions 0 … T-1, in the interleaved
        layout; Dh even.

    Returns
    -------
    numpy.ndarray, shape (..., T, T)
        The scaled scores, before any mask.
    """
    q, k = as_float_array(q, "q"), as_float_array(k, "k")
    if q.shape != k.shape or q.ndim < 2 or q.shape[-1] % 2:
        raise ValueError(f"q and k must have one shape (..., T, Dh) with Dh even; got {q.shape} and {k.shape}")
    q, k = apply_rope(q), apply_rope(k)  # the bug: half-split pairs, on weights trained for neighbours
    return q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])


def rope_permutation_wrong_head_count(w: Any, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    """Reorder a Q or K projection's columns, within every head, from neighbouring pairs to half-split pairs.

    Source: ggml-org/llama.cpp#3364 (issue #3018: TinyLlama converted to
    gibberish). With grouped-query attention, K has ``n_head_kv`` heads, so
    its columns must be reordered in ``n_head_kv`` blocks. The bug:
    ``if n_head_kv is not None and n_head != n_head_kv: n_head //= n_head_kv``,
    the query heads per key head. It is right only when that quotient equals
    ``n_head_kv``: Llama-2-70B has 64 query and 8 key/value heads, and
    64 / 8 = 8. The fix: ``n_head = n_head_kv``.

    Parameters
    ----------
    w : array_like, shape (D, heads * Dh)
        ``W_Q`` (called with ``n_head``) or ``W_K`` (with ``n_head`` and
        ``n_head_kv``), in the ``x @ w`` layout, pairs of neighbouring columns.
    n_head : int
        Query heads.
    n_head_kv : int, optional
        Key/value heads, when ``w`` is ``W_K`` of a grouped-query layer.

    Returns
    -------
    numpy.ndarray, shape (D, heads * Dh)
        Each head's columns in the order (0, 2, 4, …, 1, 3, 5, …).
    """
    w = as_float_array(w, "w")
    n_head = check_positive_int(n_head, "n_head")
    if n_head_kv is not None and n_head != check_positive_int(n_head_kv, "n_head_kv"):
        n_head //= n_head_kv  # the bug: query heads per key/value head, not the key/value heads
    if w.ndim != 2 or w.shape[1] % (2 * n_head):
        raise ValueError(f"w must be (D, heads * Dh) with {n_head} heads of even width; got {w.shape}")
    D, width = w.shape
    return w.reshape(D, n_head, width // n_head // 2, 2).transpose(0, 1, 3, 2).reshape(D, width)


def cached_positions_restart(x: Any, params: EncoderParams, num_heads: int, prefill: int) -> np.ndarray:
    """Run a decoder block with a KV cache: the first ``prefill`` tokens at once, then one token per step.

    Source: huggingface/transformers#15736, fixed by #15751 (XGLM, with
    ``inputs_embeds``). The bug: every call numbers its tokens from 0,
    ``positions = arange(len(new))``, forgetting the ``past_key_values_length``
    already in the cache; each new token is rotated as if it were the first.
    Cached and uncached decoding then disagree from the second call on. The
    fix: ``past + arange(len(new))`` (``decoder_block``'s default with a cache).

    Parameters
    ----------
    x : array_like, shape (T, D)
        The whole sequence's inputs to the block.
    params : EncoderParams
        The block's weights.
    num_heads : int
    prefill : int
        Tokens in the first call, 1 … T.

    Returns
    -------
    numpy.ndarray, shape (T, D)
        The block's output for every token, gathered over the calls.
    """
    x = as_float_array(x, "x")
    if x.ndim != 2:
        raise ValueError(f"x must be one sequence, (T, D); got shape {x.shape}")
    prefill = check_positive_int(prefill, "prefill", at_most=x.shape[0])
    cache = KVCache(x.shape[0])
    outputs = [decoder_block(x[:prefill], params, num_heads, positions=np.arange(prefill), cache=cache)]
    for t in range(prefill, x.shape[0]):
        new = x[t : t + 1]
        outputs.append(decoder_block(new, params, num_heads, positions=np.arange(1), cache=cache))  # the bug
    return np.concatenate(outputs)
