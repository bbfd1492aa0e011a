"""Chapter 9 exercises: shared key/value heads, the size of a KV cache, and one decoding step with a cache."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..attention import scaled_dot_product_attention
from ..masks import causal_mask
from ..multihead import repeat_kv
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array, compare_count

__all__ = ["check_repeat_kv", "check_cache_crossover", "check_decode_step"]

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


def _crossover(
    num_layers: int, num_heads: int, num_kv_heads: int, head_dim: int, num_parameters: int, batch: int, **wrong: Any
) -> int:
    """The fewest tokens per sequence at which a batch's KV cache holds at least as many numbers as the weights."""
    heads = num_heads if wrong.get("query_heads") else num_kv_heads
    sequences = 1 if wrong.get("one") else batch
    per_token = (1 if wrong.get("keys_only") else 2) * num_layers * heads * head_dim * sequences
    return num_parameters // per_token if wrong.get("floor") else -(-num_parameters // per_token)  # ceiling


CACHE_CROSSOVER = Exercise(
    name="when the cache outweighs the weights",
    kind="derive",
    concept="the KV cache against the weights, and what GQA changes",
    chapter=9,
    number=2,
    cases=lambda rng: [
        (f"{name}, batch {batch}", (L, H, Hkv, Dh, params, batch))
        for name, L, H, Hkv, Dh, params, batch in [
            ("Llama-2-7B", 32, 32, 32, 128, 6_738_415_616, 1),
            ("Llama-2-7B", 32, 32, 32, 128, 6_738_415_616, 16),
            ("Llama-3-8B", 32, 32, 8, 128, 8_030_261_248, 1),
            ("Falcon-7B", 32, 71, 1, 64, 6_921_720_704, 8),
            ("a tiny decoder", 2, 4, 2, 16, 10_000, 3),
        ]
    ],
    reference=_crossover,
    compare=compare_count("the number of tokens", "got {got:,} tokens"),
    mistakes=(
        Mistake(
            lambda *a: _crossover(*a, query_heads=True),
            "It matches counting the query heads; only the Hkv key/value heads are cached",
        ),
        Mistake(
            lambda *a: _crossover(*a, keys_only=True),
            "It matches caching only the keys; the values are cached too, hence a factor of 2",
        ),
        Mistake(
            lambda *a: _crossover(*a, one=True),
            "It matches one sequence's cache; every sequence of the batch has its own, the weights are shared",
        ),
        Mistake(
            lambda *a: _crossover(*a, floor=True),
            "It matches rounding down: at that many tokens the cache is still smaller; round up",
        ),
    ),
    float32=False,
)


def check_cache_crossover(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(num_layers, num_heads, num_kv_heads, head_dim, num_parameters, batch) -> int``.

    The fewest tokens per sequence at which a batch's KV cache holds at least
    as many numbers as the model's weights (stored in the same precision).
    See chapter 9, exercise 2.
    """
    return CACHE_CROSSOVER.check(fn)


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
