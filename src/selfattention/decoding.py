"""Generating one token at a time: the KV cache, shared key/value heads, sliding windows, a tiny decoder.

Taught in chapter 9. A language model generates greedily by running its
causal forward pass on the text so far and appending the most likely next
token. Recomputing every earlier token's keys and values at every step is
wasted work: they never change, because a causal layer's output at position
``p`` depends only on positions ``0 … p``. A :class:`KVCache` keeps them, so
each step computes the new token only. A :class:`SlidingWindowCache` keeps the
last ``window`` of them, for models whose queries see only that far back.

The decoder block here is pre-norm, with rotary positions (chapter 8) and
grouped-query attention (fewer key/value heads than query heads); its weights
are an :class:`~selfattention.EncoderParams`, the same four parts as an encoder
block's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._validation import (
    as_array,
    as_float_array,
    check_all_finite,
    check_bool,
    check_min_ndim,
    check_nonnegative_int,
    check_positive_int,
    check_real_scalar,
)
from .attention import scaled_dot_product_attention
from .encoder import EncoderParams, feed_forward, layer_norm
from .masks import causal_mask, sliding_window_mask
from .multihead import merge_heads, split_heads
from .params import AttentionParams, FeedForwardParams, LayerNormParams, Linear, project_qkv
from .positions import apply_rope

__all__ = ["KVCache", "SlidingWindowCache", "kv_cache_bytes", "decoder_block", "TinyDecoder"]

_MAX_CACHE_ENTRIES = 2**28  # 2 GiB of float64 per buffer: a typo in max_len should not exhaust memory


def _new_entries(k_new: Any, v_new: Any) -> tuple[np.ndarray, np.ndarray]:
    k_new, v_new = as_float_array(k_new, "k_new"), as_float_array(v_new, "v_new")
    check_min_ndim(k_new, "k_new", 2, "(..., t, Dh)")
    check_min_ndim(v_new, "v_new", 2, "(..., t, Dv)")
    if k_new.shape[:-1] != v_new.shape[:-1]:
        raise ValueError(
            f"k_new {k_new.shape} and v_new {v_new.shape} must have the same leading axes and number of new "
            "tokens t: every key needs its value"
        )
    if k_new.shape[-2] == 0 or 0 in (k_new.shape[-1], v_new.shape[-1]):
        raise ValueError(f"an update needs at least one token and one feature; got k_new {k_new.shape}")
    if k_new.dtype != v_new.dtype:
        raise ValueError(f"k_new and v_new must have the same dtype; got {k_new.dtype} and {v_new.dtype}")
    check_all_finite(k_new, "k_new")
    check_all_finite(v_new, "v_new")
    return k_new, v_new


def _read_only(view: np.ndarray) -> np.ndarray:
    """``view`` marked read-only, so that changing what it shows raises instead of corrupting the cache."""
    view.flags.writeable = False
    return view


class _Cache:
    """What both caches share: the layout fixed by the first update, and the position counter."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._keys: np.ndarray | None = None
        self._values: np.ndarray | None = None
        self._position = 0
        self._undo: tuple | None = None  # how to take back the last update, if a later step of its call fails
        self._owner: tuple[int, int] | None = None  # (id of a TinyDecoder, block index), once one has used it

    def _take_back(self) -> None:
        """Undo the last :meth:`update`: a call that failed after updating the cache leaves it as it was."""
        if self._undo is None:
            return
        position, slots, old_keys, old_values = self._undo
        if slots is not None:
            self._keys[..., slots, :] = old_keys
            self._values[..., slots, :] = old_values
        self._position, self._undo = position, None
        if position == 0:  # the failed update was the first: let the next one set the layout afresh
            self._keys = self._values = None

    @property
    def position(self) -> int:
        """How many tokens have been added so far: the position the next new token will have."""
        return self._position

    def _check_layout(self, k_new: np.ndarray, v_new: np.ndarray) -> None:
        """Allocate the buffers on the first update; later updates must match its layout."""
        if self._keys is None:
            lead, dk, dv = k_new.shape[:-2], k_new.shape[-1], v_new.shape[-1]
            entries = int(np.prod(lead, dtype=object)) * self._capacity * max(dk, dv)
            if entries > _MAX_CACHE_ENTRIES:
                raise ValueError(
                    f"a cache of {self._capacity:,} tokens for keys {k_new.shape[:-2]} x {dk} would hold "
                    f"{entries:,} numbers per buffer; use a smaller max_len or window"
                )
            self._keys = np.empty((*lead, self._capacity, dk), dtype=k_new.dtype)  # (..., capacity, Dh)
            self._values = np.empty((*lead, self._capacity, dv), dtype=v_new.dtype)  # (..., capacity, Dv)
            return
        expected = (self._keys.shape[:-2], self._keys.shape[-1], self._values.shape[-1], self._keys.dtype)
        got = (k_new.shape[:-2], k_new.shape[-1], v_new.shape[-1], k_new.dtype)
        if got != expected:
            raise ValueError(
                "this update does not match the cache's first one: it had leading axes {}, key width {}, value "
                "width {} and dtype {}; this one has {}, {}, {} and {}".format(*expected, *got)
            )


class KVCache(_Cache):
    """The keys and values of every token so far, for one attention layer, with room for ``max_len``.

    The buffers are allocated by the first :meth:`update`, with that call's
    leading axes, widths and dtype, so that appending never copies what is
    already there: each update writes its ``t`` new rows and returns views of
    the filled part. Appending N tokens one at a time costs O(N) in all.

    Parameters
    ----------
    max_len : int
        The most tokens the cache can hold (prompt and generated ones together).

    Raises
    ------
    ValueError
        If ``max_len`` is not a positive integer.

    Notes
    -----
    See chapter 9 (the KV cache). ``KVCache(max_len).update(k, v)`` takes keys
    already rotated by RoPE, so that cached keys are never rotated again.
    """

    def __init__(self, max_len: int) -> None:
        super().__init__(check_positive_int(max_len, "max_len", at_most=2**24))

    @property
    def max_len(self) -> int:
        """The capacity in tokens."""
        return self._capacity

    def __len__(self) -> int:
        return self._position

    def __repr__(self) -> str:
        return f"KVCache({self._position} of {self._capacity} tokens)"

    def update(self, k_new: ArrayLike, v_new: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Append ``t`` new keys and values; return every cached key and value, the new ones last.

        Parameters
        ----------
        k_new : array_like, shape (..., t, Dh)
            Keys of the new tokens (t >= 1), e.g. ``(B, Hkv, t, Dh)``.
        v_new : array_like, shape (..., t, Dv)
            Their values.

        Returns
        -------
        k_all, v_all : numpy.ndarray, shapes (..., L, Dh) and (..., L, Dv)
            Read-only views of the cache's first ``L = len(cache)`` rows, this
            update's last.

        Raises
        ------
        ValueError
            If the shapes or dtypes differ from the first update's, ``k_new``
            and ``v_new`` do not fit together, or the cache would pass ``max_len``.
        """
        k_new, v_new = _new_entries(k_new, v_new)
        t, start = k_new.shape[-2], self._position
        if start + t > self._capacity:  # checked first: a refused update leaves the cache as it was
            raise ValueError(
                f"the cache is full: it holds up to max_len={self._capacity} tokens, has {start}, and this update "
                f"adds {t}; make a cache with a larger max_len"
            )
        self._check_layout(k_new, v_new)
        self._keys[..., start : start + t, :] = k_new  # writes t rows; nothing already cached moves
        self._values[..., start : start + t, :] = v_new
        self._position, self._undo = start + t, (start, None, None, None)  # rows past the position are unused
        return _read_only(self._keys[..., : self._position, :]), _read_only(self._values[..., : self._position, :])


class SlidingWindowCache(_Cache):
    """A rolling buffer of the last ``window`` keys and values, for sliding-window attention.

    A query at position ``p`` with a window of ``w`` sees keys ``p - w + 1 … p``.
    So after any step only the last ``w`` tokens can still be seen, and the
    buffer holds exactly those: token ``p`` is written to slot ``p % w``,
    overwriting token ``p - w``. Memory stays ``w`` tokens however long the text.

    :meth:`update` returns the cached tokens (at most ``w``) followed by the
    new ones, oldest first: ``S = min(position, w) + t`` keys. Pair them with
    ``sliding_window_mask(t, w, S)``; the oldest cached key is already out of
    the first new query's reach, and the mask blocks it.

    Parameters
    ----------
    window : int
        w, the number of positions a query sees, its own included.

    Raises
    ------
    ValueError
        If ``window`` is not a positive integer.

    Notes
    -----
    See chapter 9 (sliding windows) and Mistral 7B's rolling buffer cache.
    """

    def __init__(self, window: int) -> None:
        super().__init__(check_positive_int(window, "window", at_most=2**24))

    @property
    def window(self) -> int:
        """w, the buffer's size in tokens."""
        return self._capacity

    def __repr__(self) -> str:
        return f"SlidingWindowCache(window={self._capacity}, {self._position} tokens seen)"

    def update(self, k_new: ArrayLike, v_new: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Return the cached keys and values (at most ``window``), then the new ones; keep the last ``window``.

        Parameters
        ----------
        k_new : array_like, shape (..., t, Dh)
        v_new : array_like, shape (..., t, Dv)

        Returns
        -------
        k_all, v_all : numpy.ndarray, shapes (..., S, Dh) and (..., S, Dv)
            ``S = min(position before the update, window) + t``, in order of position.

        Raises
        ------
        ValueError
            If the shapes or dtypes differ from the first update's, or ``k_new``
            and ``v_new`` do not fit together.
        """
        k_new, v_new = _new_entries(k_new, v_new)
        self._check_layout(k_new, v_new)
        w, seen, t = self._capacity, self._position, k_new.shape[-2]
        kept = np.arange(max(0, seen - w), seen) % w  # slots of the cached tokens, oldest first
        k_all = np.concatenate([self._keys[..., kept, :], k_new], axis=-2)  # (..., S, Dh)
        v_all = np.concatenate([self._values[..., kept, :], v_new], axis=-2)
        last = np.arange(max(seen, seen + t - w), seen + t)  # the positions to keep: the last w
        slots = last % w
        self._undo = (seen, slots, self._keys[..., slots, :], self._values[..., slots, :])  # copies of what goes
        self._keys[..., slots, :] = k_new[..., last - seen, :]
        self._values[..., slots, :] = v_new[..., last - seen, :]
        self._position = seen + t
        return k_all, v_all

    def __len__(self) -> int:
        """How many tokens the buffer holds: ``min(position, window)``."""
        return min(self._position, self._capacity)


def kv_cache_bytes(num_layers: int, num_kv_heads: int, head_dim: int, bytes_per_value: int = 2, tokens: int = 1) -> int:
    r"""Bytes a KV cache needs: :math:`2 \cdot \text{layers} \cdot H_{kv} \cdot D_h \cdot \text{bytes}` per token.

    The 2 counts keys and values. The number of *query* heads does not enter:
    grouped-query attention shrinks the cache by ``H / Hkv``.

    Parameters
    ----------
    num_layers : int
        Attention layers, each with its own cache.
    num_kv_heads : int
        Hkv, key/value heads per layer.
    head_dim : int
        Dh.
    bytes_per_value : int, default 2
        2 for float16 or bfloat16, 4 for float32, 1 for an 8-bit cache.
    tokens : int, default 1
        Tokens cached (per sequence).

    Returns
    -------
    int

    Raises
    ------
    ValueError
        If an argument is not a positive integer.

    Notes
    -----
    See chapter 9 (how big the cache is).
    """
    sizes = [
        check_positive_int(value, name)
        for name, value in (
            ("num_layers", num_layers),
            ("num_kv_heads", num_kv_heads),
            ("head_dim", head_dim),
            ("bytes_per_value", bytes_per_value),
            ("tokens", tokens),
        )
    ]
    return 2 * int(np.prod(sizes, dtype=object))


def decoder_block(
    x: ArrayLike,
    params: EncoderParams,
    num_heads: int,
    *,
    positions: ArrayLike | None = None,
    cache: KVCache | SlidingWindowCache | None = None,
    window: int | None = None,
    activation: str = "gelu",
    eps: float = 1e-5,
    rope_base: float = 10000.0,
) -> np.ndarray:
    r"""One pre-norm decoder block with rotary positions: causal self-attention, then the feed-forward layer.

    .. math::

        h = x + \operatorname{Attn}\big(\operatorname{LN}_1(x)\big), \qquad
        y = h + \operatorname{FFN}\big(\operatorname{LN}_2(h)\big)

    where the attention rotates the queries and keys of every head by RoPE at
    their positions and lets each query see only the keys at or before its own
    position (and within ``window`` of it, if given). With fewer key/value
    heads than query heads in ``params.attention``, they are shared
    (grouped-query attention).

    Given a cache, ``x`` holds only the new tokens: their keys and values are
    appended to the cache and the queries attend to everything cached. One new
    query needs no mask at all: it is the last position, so every cached key
    is at or before it.

    Parameters
    ----------
    x : array_like, shape (..., t, D)
        The tokens to process: a whole sequence, or the new ones after a cache.
    params : EncoderParams
        The block's weights (attention, feed-forward, two LayerNorms).
    num_heads : int
        H, the query heads.
    positions : array_like, shape (t,) or (..., t), optional
        Defaults to ``cache.position + 0 … t-1`` (0 … t-1 without a cache).
        Per-example positions have the leading axes of ``x``.
    cache : KVCache or SlidingWindowCache, optional
        This layer's cache; updated in place.
    window : int, optional
        Sliding-window attention: each query sees its last ``window`` positions.
        Required with a :class:`SlidingWindowCache` (and equal to its window).
    activation : {"gelu", "relu"}, default "gelu"
    eps : float, default 1e-5
        The LayerNorms' epsilon.
    rope_base : float, default 10000.0

    Returns
    -------
    numpy.ndarray, shape (..., t, D)
        In the result dtype of ``x`` and the weights (float64 weights make a
        float64 result, and a float64 cache).

    Raises
    ------
    ValueError
        If the widths or head counts do not fit, a cache of the wrong kind or
        window is given, or an argument is invalid.

    Notes
    -----
    See chapter 9 (a decoder that generates).
    """
    if not isinstance(params, EncoderParams):
        raise ValueError(f"params must be an EncoderParams (the block's four parts); got {type(params).__name__}")
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 2, "(..., t, D)")
    if x.shape[-1] != params.attention.d_model:
        raise ValueError(f"x has width D={x.shape[-1]} but the block's weights are for D={params.attention.d_model}")
    if cache is not None and not isinstance(cache, (KVCache, SlidingWindowCache)):
        raise ValueError(f"cache must be a KVCache, a SlidingWindowCache or None; got {type(cache).__name__}")
    if window is not None:
        window = check_positive_int(window, "window")
    if isinstance(cache, SlidingWindowCache) and window != cache.window:
        raise ValueError(f"a SlidingWindowCache of window {cache.window} needs window={cache.window}; got {window}")
    H, Hkv = params.attention.head_counts(num_heads)
    t = x.shape[-2]
    if t == 0:
        raise ValueError(f"x has no tokens: shape {x.shape}, with t = 0 in (..., t, D)")
    past = 0 if cache is None else cache.position
    if positions is None:
        positions = past + np.arange(t)
    else:
        positions = as_float_array(positions, "positions")
        if positions.ndim == 0 or positions.shape[-1] != t:
            raise ValueError(
                f"positions must hold one position per new token, shape (t,) = ({t},); got {positions.shape}"
            )
        if positions.ndim > 1:  # per example, (..., t) like x's leading axes: the heads' axis goes in between
            if positions.shape[:-1] != x.shape[:-2]:
                raise ValueError(
                    f"positions of shape {positions.shape} must be (t,) or (..., t) with x's leading axes "
                    f"{x.shape[:-2]}; got leading axes {positions.shape[:-1]}"
                )
            positions = positions[..., None, :]  # (..., 1, t), for the (..., heads, t, Dh) queries and keys

    h = layer_norm(x, params.norm1.weight, params.norm1.bias, eps=eps)
    q, k, v = project_qkv(h, params.attention)  # (..., t, H*Dh), (..., t, Hkv*Dh), (..., t, Hkv*Dv)
    q, k, v = split_heads(q, H), split_heads(k, Hkv), split_heads(v, Hkv)  # (..., heads, t, Dh)
    q, k = apply_rope(q, positions, base=rope_base), apply_rope(k, positions, base=rope_base)  # not v
    if cache is not None:
        k, v = cache.update(k, v)  # (..., Hkv, S, Dh): every cached key, the new ones last
    try:
        S = k.shape[-2]
        if window is not None:
            mask = sliding_window_mask(t, window, S)
        else:
            mask = None if t == 1 else causal_mask(t, S)  # one new query is the last position: it sees every key
        out, _ = scaled_dot_product_attention(q, k, v, mask=mask, enable_gqa=True)  # (..., H, t, Dv)
        x = x + params.attention.out(merge_heads(out))  # (..., t, D)
        h = layer_norm(x, params.norm2.weight, params.norm2.bias, eps=eps)
        return x + feed_forward(h, params.feed_forward, activation)
    except Exception:
        if cache is not None:
            cache._take_back()  # a failed call leaves the cache as it found it
        raise


@dataclass(frozen=True)
class TinyDecoder:
    """A small language model from the package's pieces: embeddings, decoder blocks, a final LayerNorm.

    The output layer reuses the embedding matrix (weight tying, as in GPT-2):
    the logits are ``LN(x) @ embedding.T``.

    Attributes
    ----------
    embedding : numpy.ndarray, shape (V, D)
        One row per token of the vocabulary.
    blocks : tuple of EncoderParams
        The decoder blocks' weights.
    final_norm : LayerNormParams
    num_heads : int
        H, query heads per block.

    Notes
    -----
    See chapter 9. :meth:`random` makes one with random weights.
    """

    embedding: np.ndarray
    blocks: tuple[EncoderParams, ...]
    final_norm: LayerNormParams
    num_heads: int

    def __post_init__(self) -> None:
        embedding = as_float_array(self.embedding, "embedding")
        if embedding.ndim != 2 or 0 in embedding.shape:
            raise ValueError(f"embedding must be a (V, D) matrix; got shape {embedding.shape}")
        check_all_finite(embedding, "embedding")
        object.__setattr__(self, "embedding", embedding)
        blocks = tuple(self.blocks) if isinstance(self.blocks, (list, tuple)) else None
        if not blocks or not all(isinstance(b, EncoderParams) for b in blocks):
            raise ValueError("blocks must be a non-empty list of EncoderParams, one per decoder block")
        object.__setattr__(self, "blocks", blocks)
        if not isinstance(self.final_norm, LayerNormParams):
            raise ValueError(f"final_norm must be a LayerNormParams; got {type(self.final_norm).__name__}")
        D = embedding.shape[1]
        if any(b.attention.d_model != D for b in blocks) or self.final_norm.d_model != D:
            raise ValueError(f"every block and the final norm must have the embedding's width D={D}")
        for block in blocks:
            block.attention.head_counts(self.num_heads)
        object.__setattr__(self, "num_heads", check_positive_int(self.num_heads, "num_heads"))

    @classmethod
    def random(
        cls,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        num_kv_heads: int,
        num_layers: int,
        dim_feedforward: int,
        seed: int = 0,
        scale: float = 0.3,
    ) -> TinyDecoder:
        """A decoder with random weights: ``scale`` times normal numbers (LayerNorm scales near 1)."""
        V = check_positive_int(vocab_size, "vocab_size", at_most=2**20)
        D = check_positive_int(d_model, "d_model", at_most=2**14)
        H, Hkv = check_positive_int(num_heads, "num_heads"), check_positive_int(num_kv_heads, "num_kv_heads")
        layers = check_positive_int(num_layers, "num_layers", at_most=256)
        F = check_positive_int(dim_feedforward, "dim_feedforward", at_most=2**16)
        scale = check_real_scalar(scale, "scale", positive=True)
        if D % H or H % Hkv:
            raise ValueError(f"d_model={D} must be a multiple of num_heads={H}, and num_heads of num_kv_heads={Hkv}")
        if (D // H) % 2:
            raise ValueError(f"the head width d_model / num_heads = {D // H} must be even: RoPE rotates feature pairs")
        weights = V * D + layers * (2 * D * D + 2 * D * D * Hkv // H + 2 * D * F)
        if weights > 2**28:
            raise ValueError(f"these sizes make {weights:,} weights, more than {2**28:,}; choose a smaller model")
        rng = np.random.default_rng(check_nonnegative_int(seed, "seed"))
        Dh = D // H

        def linear(d_in: int, d_out: int) -> Linear:
            return Linear(scale * rng.standard_normal((d_in, d_out)), scale * rng.standard_normal(d_out))

        def norm() -> LayerNormParams:
            return LayerNormParams(1 + 0.1 * rng.standard_normal(D), 0.1 * rng.standard_normal(D))

        blocks = [
            EncoderParams(
                attention=AttentionParams(linear(D, H * Dh), linear(D, Hkv * Dh), linear(D, Hkv * Dh), linear(D, D)),
                feed_forward=FeedForwardParams(linear(D, F), linear(F, D)),
                norm1=norm(),
                norm2=norm(),
            )
            for _ in range(layers)
        ]
        return cls(rng.standard_normal((V, D)), tuple(blocks), norm(), H)

    @property
    def vocab_size(self) -> int:
        """V."""
        return self.embedding.shape[0]

    def _tokens(self, tokens: Any) -> np.ndarray:
        tokens = as_array(tokens, "tokens")
        if tokens.ndim != 1 or tokens.size == 0 or not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(
                f"tokens must be a non-empty 1-D array of token ids; got shape {tokens.shape}, dtype {tokens.dtype}"
            )
        if tokens.min() < 0 or tokens.max() >= self.vocab_size:
            raise ValueError(f"token ids must lie in 0 … {self.vocab_size - 1}; got {tokens.min()} … {tokens.max()}")
        return tokens

    def new_caches(self, max_len: int | None = None, window: int | None = None) -> list[KVCache | SlidingWindowCache]:
        """One empty cache per block: a :class:`KVCache` of ``max_len``, or a :class:`SlidingWindowCache`."""
        if (max_len is None) == (window is None):
            raise ValueError("pass exactly one of max_len (a KVCache per block) and window (a SlidingWindowCache)")
        caches = [SlidingWindowCache(window) if window is not None else KVCache(max_len) for _ in self.blocks]
        for i, cache in enumerate(caches):
            cache._owner = (id(self), i)  # block i's keys and values only
        return caches

    def forward(
        self,
        tokens: ArrayLike,
        caches: list[KVCache | SlidingWindowCache] | None = None,
        window: int | None = None,
    ) -> np.ndarray:
        """Logits for every position of ``tokens``: shape (t, V).

        Without caches, ``tokens`` is the whole text. With them (one per
        block, from :meth:`new_caches`), it is the tokens after the cached
        ones, which the caches then also hold.

        Raises
        ------
        ValueError
            If a token id is out of range, or the caches do not match the blocks.
        """
        tokens = self._tokens(tokens)
        if caches is not None and (not isinstance(caches, (list, tuple)) or len(caches) != len(self.blocks)):
            raise ValueError(f"caches must be a list of {len(self.blocks)} caches, one per block (see new_caches)")
        if caches is not None and len({id(c) for c in caches}) != len(caches):
            raise ValueError(
                "caches must be distinct, one per block: the same cache twice would mix two layers' keys; "
                "make them with new_caches"
            )
        if caches is not None:
            self._check_caches(caches, len(tokens))
            for i, cache in enumerate(caches):
                cache._owner = (id(self), i)
        x = self.embedding[tokens]  # (t, D)
        done: list[KVCache | SlidingWindowCache] = []
        try:
            for i, block in enumerate(self.blocks):
                cache = None if caches is None else caches[i]
                x = decoder_block(x, block, self.num_heads, cache=cache, window=window)
                if cache is not None:
                    done.append(cache)
            x = layer_norm(x, self.final_norm.weight, self.final_norm.bias)
            return x @ self.embedding.T  # (t, V): the embedding, reused as the output layer
        except Exception:
            for cache in done:  # the failing block took its own update back; take back the earlier ones
                cache._take_back()
            raise

    def _check_caches(self, caches: list[KVCache | SlidingWindowCache], t: int) -> None:
        """Refuse caches that cannot take these ``t`` tokens before any of them is changed."""
        for i, cache in enumerate(caches):
            if not isinstance(cache, (KVCache, SlidingWindowCache)):
                raise ValueError(f"caches[{i}] must be a KVCache or a SlidingWindowCache; got {type(cache).__name__}")
        kinds = {type(cache).__name__ for cache in caches}
        positions = [cache.position for cache in caches]
        if len(kinds) > 1 or len(set(positions)) > 1:
            raise ValueError(
                f"the caches must be of one kind and at one position, as new_caches makes them and forward keeps "
                f"them; got {sorted(kinds)} at positions {positions}"
            )
        for i, cache in enumerate(caches):
            if cache._owner not in (None, (id(self), i)):
                whose = f"block {cache._owner[1]} of " + ("this decoder" if cache._owner[0] == id(self) else "another")
                raise ValueError(
                    f"caches[{i}] holds the keys and values of {whose}; pass this decoder's caches in block order, "
                    "as new_caches made them"
                )
            if cache._owner is None and cache.position:
                raise ValueError(
                    f"caches[{i}] already holds {cache.position} tokens from outside this decoder; start from "
                    "new_caches (or empty caches)"
                )
        first = caches[0]
        if isinstance(first, KVCache) and first.position + t > first.max_len:
            raise ValueError(
                f"the caches are full: they hold up to max_len={first.max_len} tokens, have {first.position}, and "
                f"these tokens add {t}; make caches with a larger max_len"
            )

    def generate(
        self, prompt: ArrayLike, steps: int, *, use_cache: bool = True, window: int | None = None
    ) -> list[int]:
        """Greedy generation: append the most likely next token ``steps`` times; return the new tokens.

        With ``use_cache`` the prompt is processed once and each step runs
        one token through the blocks; without it, every step recomputes the
        whole text so far. The two give the same tokens.
        """
        tokens = list(self._tokens(prompt))
        steps = check_positive_int(steps, "steps", at_most=2**20)
        use_cache = check_bool(use_cache, "use_cache")  # "no" is truthy: it would run with the cache
        if not use_cache:
            new = []
            for _ in range(steps):
                new.append(int(self.forward(tokens + new, window=window)[-1].argmax()))
            return new
        caches = self.new_caches(max_len=len(tokens) + steps) if window is None else self.new_caches(window=window)
        logits = self.forward(tokens, caches, window)
        new = [int(logits[-1].argmax())]
        while len(new) < steps:
            new.append(int(self.forward(new[-1:], caches, window)[-1].argmax()))
        return new
