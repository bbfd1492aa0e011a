"""Chapter 9 exercises: shared key/value heads, the size of a KV cache, and one decoding step with a cache."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..multihead import repeat_kv
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array, compare_count

__all__ = ["check_repeat_kv", "check_cache_crossover", "check_rolling_buffer"]

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
            ("a tiny decoder whose cache divides its weights", 2, 4, 2, 16, 12_288, 3),
        ]
    ],
    reference=_crossover,
    compare=compare_count("the number of tokens", "got {got:,} tokens"),
    mistakes=(
        *(
            Mistake(partial(_crossover, **{slip: True}), hint)
            for slip, hint in [
                ("query_heads", "It matches counting the query heads; only the Hkv key/value heads are cached"),
                ("keys_only", "It matches caching only the keys; the values are cached too, hence a factor of 2"),
                (
                    "one",
                    "It matches one sequence's cache; every sequence of the batch has its own, the weights are shared",
                ),
                ("floor", "It matches rounding down: at that many tokens the cache is still smaller; round up"),
            ]
        ),
        Mistake(
            lambda *a: _crossover(*a, floor=True) + 1,
            "It matches rounding down and adding one: when the division is exact, the cache already equals the "
            "weights at num_parameters / per_token tokens; 'at least as many' includes equality",
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


def _rolling_update(
    buffer: np.ndarray, position: int, new: np.ndarray, window: int, *, slot_order: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """A rolling buffer's update: the cached keys oldest first, then the new ones; and the buffer afterwards."""
    kept = min(position, window)
    if slot_order:  # the mistake: the slots as they lie, which is position order only until the buffer wraps
        cached = buffer[:kept]
    else:
        cached = buffer[np.arange(position - kept, position) % window]  # token p lives in slot p % window
    after = buffer.copy()
    for offset, key in enumerate(new):
        after[(position + offset) % window] = key  # later tokens overwrite earlier ones in a long chunk
    return np.concatenate([cached, new]), after


def _rolling_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for window, position, t in [(3, 0, 2), (3, 2, 1), (3, 5, 1), (4, 6, 2), (4, 6, 6), (2, 7, 3), (2, 1, 5), (1, 3, 2)]:
        buffer = np.zeros((window, 2))
        for p in range(position):  # the buffer as it stands after `position` tokens: token p in slot p % window
            buffer[p % window] = rng.normal(size=2)
        new = rng.normal(size=(t, 2))
        cases.append((f"window {window}, {position} tokens so far, {t} new", (buffer, position, new, window)))
    return cases


def _compare_rolling(got: Any, expected: tuple[np.ndarray, np.ndarray]) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"should return a pair (keys, new_buffer); got {type(got).__name__}"
    hint = "no NaN belongs in a key buffer: the slots no token was written to keep what `buffer` had"
    return compare_array("keys", hint)(got[0], expected[0]) or compare_array("new buffer", hint)(got[1], expected[1])


ROLLING_BUFFER = Exercise(
    name="a rolling buffer's update",
    kind="extend",
    concept="the index arithmetic of a sliding-window cache",
    chapter=9,
    number=3,
    cases=_rolling_cases,
    reference=_rolling_update,
    compare=_compare_rolling,
    mistakes=(
        Mistake(
            lambda *args: _rolling_update(*args, slot_order=True),
            "It matches reading the slots in slot order; once the buffer has wrapped, slot order is not position "
            "order: token p lives in slot p % window, so read positions position - kept ... position - 1",
        ),
        Mistake(
            lambda buffer, position, new, window: (np.concatenate([buffer, new]), buffer),
            "It matches returning every slot and leaving the buffer unchanged; before the buffer is full only "
            "`position` slots hold tokens, and the new tokens must be written in",
        ),
    ),
)


def check_rolling_buffer(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(buffer, position, new, window) -> (keys, new_buffer)``: one update of a rolling key buffer.

    ``buffer`` is (window, Dh) and holds token ``p`` in slot ``p % window`` for
    the last ``min(position, window)`` tokens; ``new`` is (t, Dh), the keys
    of tokens ``position ... position + t - 1``. ``keys`` is the cached keys,
    oldest first, followed by the new ones; ``new_buffer`` is a new array, the
    buffer after writing the new tokens in (``buffer`` itself unchanged).
    See chapter 9, exercise 3.
    """
    return ROLLING_BUFFER.check(fn)
