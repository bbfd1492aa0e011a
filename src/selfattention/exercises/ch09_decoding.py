"""Chapter 9 exercises: a multi-head model turned into GQA, what speculative decoding draws after a rejection, and a
rolling buffer's update."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array

__all__ = ["check_mha_to_gqa", "check_speculative_residual", "check_rolling_buffer"]

# No exponential in these answers: a NaN or inf comes from a division by zero.
_NAN_HINT = "check for a division by zero"


def _floats(a: Any) -> np.ndarray:
    """``a`` as an array of floats, float32 kept as it is."""
    return np.asarray(a, dtype=np.result_type(np.asarray(a).dtype, np.float32))


def _pool_heads(w: np.ndarray, num_heads: int, num_kv_heads: int) -> np.ndarray:
    """Mean-pool a key or value projection's heads in groups: (D, H*Dh) -> (D, Hkv*Dh)."""
    w = _floats(w)
    D, width = w.shape
    group, head_dim = num_heads // num_kv_heads, width // num_heads
    heads = w.reshape(D, num_kv_heads, group, head_dim)  # (D, Hkv, G, Dh): query heads jG ... jG + G - 1 in group j
    return heads.mean(axis=2).reshape(D, num_kv_heads * head_dim)


def _pool_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for D, H, Hkv, Dh, dtype in [
        (8, 4, 2, 2, np.float64),
        (16, 8, 2, 4, np.float64),
        (12, 6, 3, 2, np.float64),
        (8, 4, 1, 4, np.float64),
        (10, 6, 2, 5, np.float32),
        (8, 4, 4, 2, np.float64),
        (6, 1, 1, 3, np.float64),
    ]:
        what = "MQA: " if Hkv == 1 < H else "nothing to pool: " if Hkv == H else ""
        dtype_note = ", float32" if dtype is np.float32 else ""
        w = rng.normal(size=(D, H * Dh)).astype(dtype)
        cases.append((f"{what}D={D}, {H} heads of {Dh} -> {Hkv} key/value heads{dtype_note}", (w, H, Hkv)))
    return cases


def _heads_of(w: np.ndarray, num_heads: int) -> np.ndarray:
    """(D, H*Dh) -> (D, H, Dh)."""
    w = _floats(w)
    return w.reshape(w.shape[0], num_heads, -1)


def _pool_in_turn(w: np.ndarray, num_heads: int, num_kv_heads: int) -> np.ndarray:
    heads = _heads_of(w, num_heads).reshape(w.shape[0], num_heads // num_kv_heads, num_kv_heads, -1)
    return heads.mean(axis=1).reshape(w.shape[0], -1)  # group j: heads j, j + Hkv, j + 2 Hkv, ...


def _pool_sum(w: np.ndarray, num_heads: int, num_kv_heads: int) -> np.ndarray:
    return _pool_heads(w, num_heads, num_kv_heads) * (num_heads // num_kv_heads)


def _pool_first_head(w: np.ndarray, num_heads: int, num_kv_heads: int) -> np.ndarray:
    heads = _heads_of(w, num_heads)[:, :: num_heads // num_kv_heads]  # heads 0, G, 2G, ...
    return heads.reshape(w.shape[0], -1)


def _first_heads(w: np.ndarray, num_heads: int, num_kv_heads: int) -> np.ndarray:
    return _heads_of(w, num_heads)[:, :num_kv_heads].reshape(w.shape[0], -1)  # heads 0 ... Hkv - 1


def _pool_neighbouring_columns(w: np.ndarray, num_heads: int, num_kv_heads: int) -> np.ndarray:
    w = _floats(w)
    return w.reshape(w.shape[0], -1, num_heads // num_kv_heads).mean(axis=-1)  # G neighbouring features


MHA_TO_GQA = Exercise(
    name="MHA to GQA by mean-pooling",
    kind="extend",
    concept="converting a trained MHA model to GQA: which query heads share a key/value head",
    chapter=9,
    number=1,
    cases=_pool_cases,
    reference=_pool_heads,
    compare=compare_array("pooled weight", _NAN_HINT),
    mistakes=(
        Mistake(
            _pool_in_turn,
            "It matches grouping the heads in turn (key/value head j from query heads j, j + Hkv, j + 2 Hkv, ...); "
            "enable_gqa and sa.repeat_kv give key/value head j to query heads jG ... jG + G - 1, G = H / Hkv, so "
            "pool consecutive heads",
        ),
        Mistake(
            _pool_sum,
            "It matches summing each group's heads: that makes every key (or value) G times larger; take the mean",
        ),
        Mistake(
            _pool_first_head,
            "It matches keeping the first head of each group and dropping the rest; Ainslie et al. found that "
            "averaging the group's heads works better, once up-trained, than keeping one: take their mean",
        ),
        Mistake(
            _first_heads,
            "It matches keeping the first Hkv heads and dropping the rest: key/value head j serves query heads "
            "jG ... jG + G - 1, so it must come from those heads; take the mean of each group",
        ),
        Mistake(
            _pool_neighbouring_columns,
            "It matches averaging G neighbouring columns: those are features of one head; a head is Dh "
            "consecutive columns, so average whole heads (cut the columns into heads first, as sa.split_heads does)",
        ),
    ),
)


def check_mha_to_gqa(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(w, num_heads, num_kv_heads) -> (D, num_kv_heads * Dh)``: a key or value projection mean-pooled.

    ``w`` is a trained multi-head model's W_K or W_V, (D, num_heads * Dh) in
    the ``x @ w`` layout, head h in columns h*Dh ... (h+1)*Dh - 1. Key/value head
    j of the answer must be the mean of the heads of the query heads it serves
    under ``enable_gqa`` (and ``repeat_kv``): jG ... jG + G - 1, G = num_heads /
    num_kv_heads. See chapter 9, exercise 1.
    """
    return MHA_TO_GQA.check(fn)


def _normalised(weights: np.ndarray) -> np.ndarray:
    return weights / weights.sum(axis=-1, keepdims=True)


def _residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Speculative sampling's residual: max(p - q, 0), normalised over the vocabulary."""
    return _normalised(np.maximum(_floats(p) - _floats(q), 0.0))  # what the kept draft tokens leave short of p


def _distribution(logits: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """A softmax over the last axis; ``keep``, if given, zeroes the other tokens before normalising."""
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return _normalised(e if keep is None else np.where(keep, e, 0.0))


def _top(logits: np.ndarray, k: int) -> np.ndarray:
    """Where the k largest logits of each row are."""
    return logits >= np.sort(logits, axis=-1)[..., -k][..., None]


def _residual_cases(rng: np.random.Generator) -> CaseList:
    uniform = np.full(4, 0.25)
    z = rng.normal(scale=2.0, size=24)
    near = z + rng.normal(scale=1.0, size=24)  # a draft that roughly agrees with the target
    z_top = rng.normal(scale=2.0, size=12)
    z_p = rng.normal(scale=2.0, size=12)
    batch_p, batch_q = rng.normal(scale=2.0, size=(2, 3, 10))
    grid_p, grid_q = rng.normal(scale=2.0, size=(2, 2, 4, 6))
    wide_p, wide_q = rng.normal(scale=2.0, size=(2, 32))
    return [
        ("V=4, a uniform draft", (np.array([0.5, 0.2, 0.2, 0.1]), uniform)),
        ("V=24, a draft that roughly agrees", (_distribution(z), _distribution(near))),
        ("V=2", (np.array([0.7, 0.3]), np.array([0.4, 0.6]))),
        (
            "V=12, a top-3 draft: q = 0 on 9 tokens",
            (_distribution(z_top), _distribution(z_top + rng.normal(size=12), _top(z_top, 3))),
        ),
        (
            "V=12, a target with 4 tokens left (p = 0 on 8)",
            (_distribution(z_p, _top(z_p, 4)), _distribution(z_p + rng.normal(size=12))),
        ),
        (
            "V=6, no token both can draw: every draft token is rejected",
            (np.array([0.5, 0.3, 0.2, 0.0, 0.0, 0.0]), np.array([0.0, 0.0, 0.0, 0.1, 0.6, 0.3])),
        ),
        ("3 sequences at once, (3, 10)", (_distribution(batch_p), _distribution(batch_q))),
        ("2 sequences, 4 drafted positions each, (2, 4, 6)", (_distribution(grid_p), _distribution(grid_q))),
        (
            "V=32, float32",
            (_distribution(wide_p).astype(np.float32), _distribution(wide_q).astype(np.float32)),
        ),
    ]


def _over_whole_batch(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    extra = np.maximum(_floats(p) - _floats(q), 0.0)
    return extra / extra.sum()


SPECULATIVE_RESIDUAL = Exercise(
    name="what to draw after a rejected draft token",
    kind="derive",
    concept="speculative sampling: a cheap draft, corrected so that the tokens follow the target exactly",
    chapter=9,
    number=2,
    cases=_residual_cases,
    reference=_residual,
    compare=compare_array(
        "residual distribution",
        "did you divide by 0? Each row has p != q, so max(p - q, 0) has a positive sum; a ratio such as p / q "
        "is 0/0 or x/0 where a distribution is 0, as top-k and top-p make many",
    ),
    mistakes=(
        Mistake(
            lambda p, q: _floats(p),
            "It matches drawing the replacement from p itself: the kept draft tokens already give each token "
            "min(p, q), so a token the draft proposes too often (q > p) would come out more often than p; "
            "draw from what the kept tokens leave short, max(p - q, 0), normalised",
        ),
        Mistake(
            lambda p, q: _floats(q),
            "It matches drawing the replacement from the draft q again; the target's p must decide, through "
            "what the kept draft tokens leave short of it",
        ),
        Mistake(
            lambda p, q: _residual(q, p),
            "It matches max(q - p, 0), normalised: that is how the rejected draft tokens are distributed, the "
            "excess of q; the replacement must make up the shortfall instead, max(p - q, 0)",
        ),
        Mistake(
            lambda p, q: np.maximum(_floats(p) - _floats(q), 0.0),
            "It matches max(p - q, 0) not normalised: a distribution sums to 1; divide each row by its sum, which "
            "is the probability of a rejection",
        ),
        Mistake(
            lambda p, q: _normalised(np.abs(_floats(p) - _floats(q))),
            "It matches |p - q|, normalised: tokens the draft proposes too often (q > p) must get nothing more; "
            "keep only the positive part, max(p - q, 0)",
        ),
        Mistake(
            _over_whole_batch,
            "It matches normalising over the whole batch: each row is one sequence's distribution; divide by each "
            "row's own sum (axis=-1, keepdims=True)",
        ),
    ),
)


def check_speculative_residual(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(p, q) -> r``: the distribution speculative sampling draws from after rejecting a draft token.

    ``p`` (the target's) and ``q`` (the draft's) are (..., V), each row a
    distribution over the vocabulary, ``p != q`` in every row. A draft token x
    drawn from q is kept with probability min(1, p(x) / q(x)); ``r``, the same
    shape, must make the token that comes out, kept or drawn from ``r``,
    follow ``p`` exactly. See chapter 9, exercise 2.
    """
    return SPECULATIVE_RESIDUAL.check(fn)


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
