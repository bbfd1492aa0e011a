"""Chapter 9 exercises: shared key/value heads, the size of a KV cache, and one decoding step with a cache."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..attention import scaled_dot_product_attention
from ..decoding import kv_cache_bytes
from ..masks import causal_mask
from ..multihead import repeat_kv
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array, compare_count

__all__ = ["check_repeat_kv", "check_kv_cache_bytes", "check_decode_step"]

_NAN_HINT = "check for a division by zero or an exponential of a large score"

REPEAT_KV = Exercise(
    name="repeat_kv",
    kind="implement",
    concept="sharing key/value heads (GQA)",
    chapter=9,
    number=1,
    cases=lambda rng: [
        (f"x {shape}, n_rep={n}", (rng.normal(size=shape), n))
        for shape, n in [((2, 3, 4), 2), ((1, 2, 4, 5, 3), 4), ((4, 2, 2), 1), ((1, 5, 3), 3)]
    ],
    reference=repeat_kv,
    compare=compare_array("repeated heads", _NAN_HINT),
    mistakes=(
        Mistake(
            lambda x, n: np.tile(x, (n, 1, 1)) if x.ndim == 3 else np.concatenate([x] * n, axis=-3),
            "It matches the heads in turn (0, 1, 2, 0, 1, 2, ...); each head must be repeated n_rep times in a row "
            "(0, 0, 1, 1, ...), so that query heads 0 … n_rep-1 share key/value head 0",
        ),
        Mistake(
            lambda x, n: np.repeat(x, n, axis=-2),
            "It matches repeating along the token axis; repeat along the head axis, -3",
        ),
    ),
)


def check_repeat_kv(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, n_rep)``: (..., Hkv, S, Dh) -> (..., Hkv*n_rep, S, Dh), each head repeated in a row.

    See chapter 9, exercise 1.
    """
    return REPEAT_KV.check(fn)


def _cache_bytes(num_layers: int, num_heads: int, num_kv_heads: int, head_dim: int, bytes_per_value: int, tokens: int):
    return kv_cache_bytes(num_layers, num_kv_heads, head_dim, bytes_per_value, tokens)


KV_CACHE_BYTES = Exercise(
    name="KV-cache bytes",
    kind="count",
    concept="the size of a KV cache",
    chapter=9,
    number=2,
    cases=lambda rng: [
        (f"layers={L}, H={H}, Hkv={Hkv}, Dh={Dh}, {b} bytes, {t} tokens", (L, H, Hkv, Dh, b, t))
        for L, H, Hkv, Dh, b, t in [
            (32, 32, 8, 128, 4, 1),  # Llama-3-8B, one token in float32
            (32, 32, 32, 128, 2, 4096),  # Llama-2-7B, a full context
            (32, 71, 1, 64, 2, 2048),  # Falcon-7B
            (2, 4, 2, 16, 4, 10),
        ]
    ],
    reference=_cache_bytes,
    compare=compare_count("the number of bytes", "got {got:,}, which is not the bytes the cache holds"),
    mistakes=(
        Mistake(
            lambda L, H, Hkv, Dh, b, t: kv_cache_bytes(L, H, Dh, b, t),
            "It matches counting the query heads; only the Hkv key/value heads are cached",
        ),
        Mistake(
            lambda L, H, Hkv, Dh, b, t: kv_cache_bytes(L, Hkv, Dh, b, t) // 2,
            "It matches caching only the keys; the values are cached too, hence a factor of 2",
        ),
        Mistake(
            lambda L, H, Hkv, Dh, b, t: kv_cache_bytes(L, Hkv, Dh, b, t) * 8,
            "It matches counting bits; the answer is in bytes",
        ),
    ),
    float32=False,
)


def check_kv_cache_bytes(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(num_layers, num_heads, num_kv_heads, head_dim, bytes_per_value, tokens) -> int``.

    See chapter 9, exercise 2.
    """
    return KV_CACHE_BYTES.check(fn)


def _decode_step(q_new, k_new, v_new, k_cache, v_cache):
    k_all = np.concatenate([k_cache, k_new], axis=-2)  # (S, Dh): the cache, then the new tokens
    v_all = np.concatenate([v_cache, v_new], axis=-2)
    mask = causal_mask(q_new.shape[-2], k_all.shape[-2])  # lower-right: new query i sits at S - t + i
    return scaled_dot_product_attention(q_new, k_all, v_all, mask=mask)[0]


def _decode_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for t, cached, Dh in [(1, 5, 4), (1, 1, 3), (3, 4, 4), (2, 6, 8)]:
        q, k, v = rng.normal(size=(3, t, Dh))
        k_cache, v_cache = rng.normal(size=(2, cached, Dh))
        cases.append((f"t={t} new, {cached} cached, Dh={Dh}", (q, k, v, k_cache, v_cache)))
    return cases


def _decode_without_new(q_new, k_new, v_new, k_cache, v_cache):
    return scaled_dot_product_attention(q_new, k_cache, v_cache)[0]


def _decode_upper_left(q_new, k_new, v_new, k_cache, v_cache):
    k_all, v_all = np.concatenate([k_cache, k_new], axis=-2), np.concatenate([v_cache, v_new], axis=-2)
    t, S = q_new.shape[-2], k_all.shape[-2]
    upper_left = np.tril(np.ones((t, S), dtype=bool))  # query i sees keys 0 … i
    return scaled_dot_product_attention(q_new, k_all, v_all, mask=upper_left)[0]


def _decode_new_only(q_new, k_new, v_new, k_cache, v_cache):
    return scaled_dot_product_attention(q_new, k_new, v_new, mask=causal_mask(q_new.shape[-2]))[0]


def _decode_new_first(q_new, k_new, v_new, k_cache, v_cache):
    k_all, v_all = np.concatenate([k_new, k_cache], axis=-2), np.concatenate([v_new, v_cache], axis=-2)
    return scaled_dot_product_attention(q_new, k_all, v_all, mask=causal_mask(q_new.shape[-2], k_all.shape[-2]))[0]


def _decode_no_mask(q_new, k_new, v_new, k_cache, v_cache):
    k_all, v_all = np.concatenate([k_cache, k_new], axis=-2), np.concatenate([v_cache, v_new], axis=-2)
    return scaled_dot_product_attention(q_new, k_all, v_all)[0]


DECODE_STEP = Exercise(
    name="one decoding step",
    kind="extend",
    concept="attention with a cache and the lower-right mask",
    chapter=9,
    number=3,
    cases=_decode_cases,
    reference=_decode_step,
    compare=compare_array("output", _NAN_HINT),
    mistakes=(
        Mistake(
            _decode_without_new,
            "It matches attending to the cache alone; append the new keys and values first, so each new token "
            "also sees itself",
        ),
        Mistake(
            _decode_new_only,
            "It matches attending to the new tokens alone; the cached keys and values come first, then the new ones",
        ),
        Mistake(
            _decode_new_first,
            "It matches putting the new tokens before the cache; the cache holds the earlier positions, so it "
            "comes first: np.concatenate([k_cache, k_new])",
        ),
        Mistake(
            _decode_upper_left,
            "It matches the upper-left causal mask (np.tril); the new queries are the last t positions, so use "
            "the lower-right mask, causal_mask(t, S)",
        ),
        Mistake(
            _decode_no_mask,
            "It matches no mask: with t > 1 new tokens, each must not see the new tokens after it",
        ),
    ),
)


def check_decode_step(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(q_new, k_new, v_new, k_cache, v_cache) -> (t, Dh)``: attend from t new tokens over cache + new.

    See chapter 9, exercise 3.
    """
    return DECODE_STEP.check(fn)
