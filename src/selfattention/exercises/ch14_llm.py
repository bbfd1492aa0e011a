"""Chapter 14 exercises: a Q8_0 quantizer byte for byte, tiny-llm's cache offset, and min-p sampling.

The checkers run no pretrained model: the cache offset's cases are tiny Llama
models with random weights, built from the package's containers.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..decoding import KVCache
from ..llm import LlamaBlock, LlamaConfig, LlamaWeights, llama_block, rms_norm
from ..params import AttentionParams, Linear
from ..sampling import next_token_probabilities
from ._framework import CaseList, CheckResult, Exercise, Mistake, answer_array, compare_array

__all__ = ["check_quantize_q8_0", "check_cache_offset", "check_min_p"]


# --- Exercise 1: a Q8_0 quantizer, byte for byte --------------------------------------------------------

_BLOCK = 32  # weights per block
_BLOCK_BYTES = 2 + _BLOCK  # a float16 scale, then 32 signed bytes


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C's ``roundf``: to the nearest integer, halves away from zero (np.round takes halves to even)."""
    a = np.abs(x)
    floored = np.floor(a)
    return np.sign(x) * (floored + np.floor(2 * (a - floored)))  # exact: no a + 0.5 to round in float32


def _q8_0(w: np.ndarray, *, slip: str = "") -> np.ndarray:
    """Q8_0 blocks as ggml's reference quantizer (and ``gguf.quants.quantize``) writes them.

    Per block of 32: ``d = max|w| / 127`` in float32, ``q = roundf(w * (1/d))``
    as int8 (0 where d = 0), stored as d in float16 then the 32 bytes of q.
    ``slip`` names a mistake.
    """
    w = np.asarray(w, dtype=np.float32)
    blocks = w.reshape(*w.shape[:-1], -1, _BLOCK)  # (..., n, 32)
    if slip == "per row":  # one scale for the whole row, repeated in each block
        largest = np.abs(blocks).max(axis=(-2, -1), keepdims=True) * np.ones_like(blocks[..., :1])
    elif slip == "max":
        largest = blocks.max(axis=-1, keepdims=True)
    else:
        largest = np.abs(blocks).max(axis=-1, keepdims=True)  # (..., n, 1)
    d = largest / np.float32(128 if slip == "128" else 127)
    stored = d.astype(np.float16)
    if slip == "float16 scale":
        d = stored.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        inverse = np.where(d == 0, np.float32(0), np.float32(1) / d)
    scaled = blocks * inverse
    rounding = {"truncate": np.trunc, "to even": np.round}.get(slip, _round_half_away)
    q = rounding(scaled).astype(np.int8).view(np.uint8)  # (..., n, 32)
    scale = (d if slip == "float32 scale" else stored).view(np.uint8)  # (..., n, 2), or 4 bytes in float32
    parts = [q, scale] if slip == "scale last" else [scale, q]
    return np.concatenate(parts, axis=-1).reshape(*w.shape[:-1], -1)  # (..., n * 34)


def _q8_0_cases(rng: np.random.Generator) -> CaseList:
    halves = np.zeros(_BLOCK, dtype=np.float32)
    halves[:9] = [127.0, 2.5, -2.5, 0.5, -0.5, 1.5, 6.5, -7.5, 0.25]  # d = 1: each weight is its own level
    halves[9:] = rng.integers(-120, 121, size=_BLOCK - 9)
    negative = rng.normal(scale=0.02, size=_BLOCK)
    negative[5] = -0.09  # the largest magnitude is a negative weight
    rows = rng.normal(size=(3, 4, _BLOCK)) * np.array([0.01, 0.1, 1.0, 5.0])[:, None]  # blocks of unequal sizes
    with_zeros = rng.normal(scale=0.05, size=(2, 3 * _BLOCK))
    with_zeros[1, _BLOCK : 2 * _BLOCK] = 0.0
    return [
        ("one block of 32 weights", (rng.normal(scale=0.05, size=_BLOCK).astype(np.float32),)),
        ("one block whose largest magnitude is a negative weight", (negative.astype(np.float32),)),
        ("3 rows of 4 blocks, each block of another size: (3, 128)", (rows.reshape(3, -1).astype(np.float32),)),
        ("one block with max |w| = 127, so d = 1, holding 2.5, -2.5, 0.5, -0.5, ...", (halves,)),
        ("(2, 96), the middle block of row 1 all zeros", (with_zeros.astype(np.float32),)),
        (
            "(2, 3, 64): two matrices of 3 rows of 2 blocks",
            (rng.normal(scale=0.5, size=(2, 3, 64)).astype(np.float32),),
        ),
    ]


def _compare_blocks(got: Any, expected: np.ndarray) -> str | None:
    """What is wrong with ``got`` as the bytes of Q8_0 blocks: its form, or the first block that differs."""
    answer = answer_array(got)
    if answer is None or answer.dtype == bool:
        return f"the blocks should be an array of bytes (uint8); got {type(got).__name__}"
    if answer.shape != expected.shape:
        return (
            f"the blocks should have shape {expected.shape}, {_BLOCK_BYTES} bytes for each block of {_BLOCK} "
            f"weights; got {answer.shape}"
        )
    if answer.dtype.kind == "f" and not np.array_equal(answer, np.round(answer)):
        return f"the blocks should be bytes, whole numbers from 0 to 255 (uint8); got {answer.dtype} with fractions"
    if answer.size and (answer.min() < 0 or answer.max() > 255):
        return (
            f"bytes lie in 0 ... 255; yours go from {answer.min():g} to {answer.max():g} (store the int8 quants "
            "as their bytes: q.astype(np.int8).view(np.uint8))"
        )
    if np.array_equal(answer, expected):
        return None
    mine = answer.astype(np.uint8).reshape(-1, _BLOCK_BYTES)
    theirs = expected.reshape(-1, _BLOCK_BYTES)
    wrong = np.flatnonzero((mine != theirs).any(axis=1))
    b = wrong[0]
    i = int(np.flatnonzero(mine[b] != theirs[b])[0])
    if i < 2:
        scale_got, scale_want = (float(row[:2].view(np.float16)[0]) for row in (mine[b], theirs[b]))
        where = f"its float16 scale is {scale_got:.6g} where gguf's is {scale_want:.6g}"
    else:
        q_got, q_want = (int(row[i : i + 1].view(np.int8)[0]) for row in (mine[b], theirs[b]))
        where = f"quant {i - 2} (byte {i}) is {q_got} where gguf's is {q_want}"
    index = np.unravel_index(b, (*expected.shape[:-1], expected.shape[-1] // _BLOCK_BYTES))  # (row..., block)
    block = f"block {index[-1]}" + (f" of row {tuple(map(int, index[:-1]))}" if len(index) > 1 else "")
    return f"{wrong.size} of {len(theirs)} blocks differ from gguf's bytes; in the first, {block}, {where}"


_Q8_0_SLIPS = [
    (
        "max",
        "It matches a scale from the block's largest weight, max(w) / 127; Q8_0 is symmetric around 0, so the "
        "scale comes from the largest magnitude, max(|w|) / 127: a negative weight can be the largest",
    ),
    (
        "128",
        "It matches max(|w|) / 128; the levels run from -127 to 127 (-128 is left unused, so that the range is "
        "symmetric), so the largest magnitude must land on 127: d = max(|w|) / 127",
    ),
    (
        "truncate",
        "It matches truncating w / d toward zero (astype(np.int8) alone); round to the nearest level first",
    ),
    (
        "to even",
        "It matches rounding halves to even (np.round: 2.5 to 2, -0.5 to 0); ggml's roundf takes halves away from "
        "zero (2.5 to 3, -0.5 to -1): sign(x) * floor(|x| + 0.5)",
    ),
    (
        "float16 scale",
        "It matches dividing by the scale rounded to float16; ggml rounds w * (1 / d) with d in float32, and "
        "rounds d to float16 only to store it (dividing by the stored scale would be a fine format too, but not "
        "the one in the file)",
    ),
    (
        "per row",
        "It matches one scale for each whole row; every block of 32 has its own scale, from its own largest magnitude",
    ),
    (
        "float32 scale",
        "It matches storing the scale as float32, 36 bytes a block; Q8_0 stores it as float16 (2 bytes), 34 a block",
    ),
    (
        "scale last",
        "It matches writing the 32 quants before the scale; a block starts with its 2 scale bytes",
    ),
]

QUANTIZE_Q8_0 = Exercise(
    name="a Q8_0 quantizer, byte for byte",
    kind="derive",
    concept="a symmetric 8-bit block format: the scale from the largest magnitude, and ggml's rounding",
    chapter=14,
    number=1,
    cases=_q8_0_cases,
    reference=_q8_0,
    compare=_compare_blocks,
    mistakes=tuple(Mistake(partial(_q8_0, slip=slip), hint) for slip, hint in _Q8_0_SLIPS),
    passes="gives gguf's bytes",
)


def check_quantize_q8_0(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(w) -> uint8 (..., n * 34)``: float32 weights as Q8_0 blocks, the bytes ``gguf`` writes.

    ``w`` is float32 of shape (..., n * 32); each row is cut into blocks of 32,
    and each block becomes a float16 scale ``d`` (2 bytes, little-endian) and
    32 int8 quants ``q`` with ``w ≈ d q``, as ``gguf.quants.quantize(w,
    GGMLQuantizationType.Q8_0)`` makes them. See chapter 14, exercise 1.
    """
    return QUANTIZE_Q8_0.check(fn)


# --- Exercise 2: tiny-llm's cache offset ----------------------------------------------------------------


def _tiny_llama(
    rng: np.random.Generator,
    *,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 4,
    rope_base: float = 10000.0,
    dtype: type = np.float64,
) -> LlamaWeights:
    """A Llama model with random weights: D = heads * head_dim, F = 1.5 D, V = 40."""
    D, F, V = heads * head_dim, 3 * heads * head_dim // 2, 40

    def linear(d_in: int, d_out: int) -> Linear:
        return Linear((rng.normal(size=(d_in, d_out)) / np.sqrt(d_in)).astype(dtype))

    def norm() -> np.ndarray:
        return (1 + 0.1 * rng.normal(size=D)).astype(dtype)

    blocks = tuple(
        LlamaBlock(
            attention_norm=norm(),
            attention=AttentionParams(
                q=linear(D, heads * head_dim),
                k=linear(D, kv_heads * head_dim),
                v=linear(D, kv_heads * head_dim),
                out=linear(heads * head_dim, D),
            ),
            mlp_norm=norm(),
            gate=linear(D, F),
            up=linear(D, F),
            down=linear(F, D),
        )
        for _ in range(layers)
    )
    config = LlamaConfig(
        num_layers=layers,
        d_model=D,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        d_ff=F,
        vocab_size=V,
        context_length=64,
        rope_base=rope_base,
        rms_norm_eps=1e-5,
    )
    return LlamaWeights(config, embedding=rng.normal(size=(V, D)).astype(dtype), blocks=blocks, final_norm=norm())


def _logits(weights: LlamaWeights, ids: list[int], offset: int, caches: list[Any]) -> np.ndarray:
    """Every row's next-token logits for ``ids`` at positions offset, offset + 1, ..., through ``caches``."""
    c = weights.config
    x = weights.embedding[list(ids)]  # (t, D)
    positions = offset + np.arange(len(ids))
    for block, cache in zip(weights.blocks, caches, strict=True):
        x = llama_block(
            x, block, c.num_heads, positions=positions, cache=cache, eps=c.rms_norm_eps, rope_base=c.rope_base
        )
    return rms_norm(x, weights.final_norm, c.rms_norm_eps) @ weights.embedding.T  # (t, V): tied output layer


def _without_cache(weights: LlamaWeights, prompt_ids: list[int], next_ids: list[int]) -> np.ndarray:
    """The reference: one forward pass over the whole sequence, the rows after the prompt's last token on."""
    rows = _logits(weights, [*prompt_ids, *next_ids], 0, [None] * weights.config.num_layers)
    return rows[len(prompt_ids) - 1 :]  # (1 + len(next_ids), V)


def _offset_schedule(
    weights: LlamaWeights, prompt_ids: list[int], next_ids: list[int], *, start: int, after_prompt: int, step: int
) -> np.ndarray:
    """A cached loop: the prompt at ``start``, the first fed token at ``start + after_prompt``, then ``step`` on."""
    caches = [KVCache(len(prompt_ids) + len(next_ids)) for _ in weights.blocks]
    rows = [_logits(weights, prompt_ids, start, caches)[-1]]
    offset = start + after_prompt
    for token in next_ids:
        rows.append(_logits(weights, [token], offset, caches)[-1])
        offset += step
    return np.stack(rows)  # (1 + len(next_ids), V)


def _schedule(offsets: Callable[[int], tuple[int, int, int]]) -> Callable[..., np.ndarray]:
    """A mistake's loop: ``offsets(n)`` gives (start, after_prompt, step) for a prompt of n tokens."""

    def loop(weights: LlamaWeights, prompt_ids: list[int], next_ids: list[int]) -> np.ndarray:
        start, after_prompt, step = offsets(len(prompt_ids))
        return _offset_schedule(weights, prompt_ids, next_ids, start=start, after_prompt=after_prompt, step=step)

    return loop


def _offset_cases(rng: np.random.Generator) -> CaseList:
    def ids(count: int) -> list[int]:
        return rng.integers(40, size=count).tolist()

    small = _tiny_llama(rng)
    return [
        ("a prompt of 3 tokens, then 2 fed one at a time; 2 blocks, 4 query heads over 2", (small, ids(3), ids(2))),
        ("a prompt of 1 token, then 3", (_tiny_llama(rng), ids(1), ids(3))),
        (
            "a prompt of 6, then 4; 3 blocks, 4 query heads over 1 (MQA), RoPE base 100,000 as SmolLM2's",
            (_tiny_llama(rng, layers=3, kv_heads=1, rope_base=1e5), ids(6), ids(4)),
        ),
        ("a prompt of 5 and nothing after it: the prefill's row only", (_tiny_llama(rng), ids(5), [])),
        ("a prompt of 2, then 5; 2 heads, each its own key/value head", (_tiny_llama(rng, heads=2), ids(2), ids(5))),
        ("a prompt of 12, then 3; float32 weights", (_tiny_llama(rng, dtype=np.float32), ids(12), ids(3))),
    ]


# (start, offset of the first fed token, step after it) for a prompt of n tokens; then the hint
_OFFSET_SLIPS = [
    (
        lambda n: (n, 1, 1),
        "It matches the original bug (tiny-llm's loop after its pull request 46): the prompt is numbered n ... "
        "2n - 1, but the first new token is numbered n + 1, not 2n, so the cached keys and the new queries count from "
        "different origins (the same mistake as numbering the prompt from 0 and the first new token 1). Start the "
        "offset at 0, the number of tokens cached, and add the number of tokens each step fed",
    ),
    (
        lambda n: (0, n + 1, 1),
        "It matches numbering the first new token n + 1, as len(ids) counts once the token is appended; token "
        "ids[n] sits at position n: count the tokens already cached, without the new one",
    ),
    (
        lambda n: (0, n - 1, 1),
        "It matches numbering the first new token n - 1, the position of the prompt's last token; the new token "
        "comes after it, at n",
    ),
    (
        lambda n: (0, 0, 0),
        "It matches numbering every step's tokens from 0 (the bug zoo's cached_positions_restart); a step starts "
        "at the number of tokens already in the cache",
    ),
]

CACHE_OFFSET = Exercise(
    name="tiny-llm's cache offset",
    kind="debug",
    concept="RoPE after a KV cache: the cached keys and the new queries numbered from the same origin",
    chapter=14,
    number=2,
    cases=_offset_cases,
    reference=_without_cache,
    compare=compare_array(
        "logits",
        "the model's logits are finite at any positions: did your loop read cache rows that were never written?",
    ),
    mistakes=tuple(Mistake(_schedule(offsets), hint) for offsets, hint in _OFFSET_SLIPS),
    passes="gives the logits of the whole sequence without a cache",
)


def check_cache_offset(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(weights, prompt_ids, next_ids) -> (1 + len(next_ids), V)``: a cached loop's logits.

    ``weights`` is a :class:`~selfattention.llm.LlamaWeights` (tiny, random),
    ``prompt_ids`` and ``next_ids`` lists of token ids. The loop runs the
    prompt through the model with a KV cache per block, then feeds
    ``next_ids`` one token at a time; row 0 is the logits after the prompt,
    row j the logits after ``next_ids[j - 1]``. They must equal the uncached
    forward pass's over the whole sequence. See chapter 14, exercise 2.
    """
    return CACHE_OFFSET.check(fn)


# --- Exercise 3: min-p sampling --------------------------------------------------------------------------


def _min_p(logits: np.ndarray, temperature: float, min_p: float, *, slip: str = "") -> np.ndarray:
    """The distribution min-p sampling draws from: after the temperature, keep p >= min_p * max(p); renormalise.

    As ``transformers``' TemperatureLogitsWarper then MinPLogitsWarper. ``slip`` names a mistake.
    """
    z = np.asarray(logits, dtype=np.float64)
    scaled = z / temperature
    p = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)  # (..., V): softmax(z / T)
    largest = p.max(axis=-1, keepdims=True)
    if slip == "batch max":
        largest = p.max()
    if slip == "absolute":
        keep = p >= min_p
    elif slip in ("temperature after", "margin / T"):  # the cut made at temperature 1, or with the margin / T
        with np.errstate(divide="ignore"):  # ln 0 = -inf: min_p = 0 keeps every token
            margin = np.log(min_p) / (temperature if slip == "margin / T" else 1.0)
        keep = z - z.max(axis=-1, keepdims=True) >= margin
    else:
        keep = p >= min_p * largest
    if slip == "inverted":
        keep = ~keep
    kept = np.where(keep, p, 0.0)
    return kept if slip == "not renormalised" else kept / kept.sum(axis=-1, keepdims=True)


def _min_p_cases(rng: np.random.Generator) -> CaseList:
    confident = rng.normal(size=10)
    confident[3] += 5.0  # one token near 0.9
    flat = 0.3 * rng.normal(size=10)
    middle = rng.normal(scale=1.5, size=10)
    return [
        ("V=8, T=1, min_p=0.1", (3.0 + rng.normal(scale=2.0, size=8), 1.0, 0.1)),
        ("V=12, T=0.7, min_p=0.2", (3.0 + rng.normal(scale=2.0, size=12), 0.7, 0.2)),
        ("V=12, a high temperature: T=2.5, min_p=0.05", (rng.normal(scale=3.0, size=12), 2.5, 0.05)),
        (
            "3 rows: a confident one, a flat one, one between; T=1.5, min_p=0.1",
            (np.stack([confident, flat, middle]), 1.5, 0.1),
        ),
        ("min_p=1: only the most likely tokens, two of them tied", (np.array([1.0, 3.0, 0.5, 3.0, -2.0]), 0.8, 1.0)),
        ("min_p=0: nothing is cut; T=2", (rng.normal(size=6), 2.0, 0.0)),
        (  # eighths: exact in float32 too, so a float32 answer can match
            "logits around 1000 (an exponential without the max subtracted overflows), T=0.5, min_p=0.1",
            (1000.0 + rng.integers(-16, 17, size=8) / 8, 0.5, 0.1),
        ),
        (
            "(2, 2, 6): two sequences, two rows each; T=1.2, min_p=0.15",
            (rng.normal(scale=2.0, size=(2, 2, 6)), 1.2, 0.15),
        ),
        (
            "float32 logits, (2, 16); T=0.8, min_p=0.1",
            (rng.normal(scale=2.0, size=(2, 16)).astype(np.float32), 0.8, 0.1),
        ),
    ]


def _top_p_instead(logits: np.ndarray, temperature: float, min_p: float) -> np.ndarray:
    return next_token_probabilities(logits, temperature=temperature, top_p=min_p)


_MIN_P_SLIPS = [
    (
        "absolute",
        "It matches keeping the tokens with p >= min_p; min-p scales the threshold by the most likely token's "
        "probability, p >= min_p * max(p), so a confident model keeps few tokens and an unsure one many",
    ),
    (
        "temperature after",
        "It matches choosing the tokens at temperature 1 and dividing by T afterwards; transformers applies the "
        "temperature first, and the kept set depends on it: p_i / max(p) = exp((z_i - max z) / T)",
    ),
    (
        "margin / T",
        "It matches keeping z_i - max z >= ln(min_p) / T; from (z_i - max z) / T >= ln(min_p), the margin on the "
        "logits is T ln(min_p): a higher temperature lets more tokens in",
    ),
    (
        "not renormalised",
        "It matches the kept probabilities as they were; what is kept must be renormalised to sum to 1",
    ),
    (
        "batch max",
        "It matches one threshold for the whole batch, from the largest probability of any row; each row's "
        "threshold scales with its own most likely token (max over axis=-1, keepdims=True)",
    ),
    (
        "inverted",
        "It matches keeping the tokens below the threshold; min-p removes them and keeps the likely ones",
    ),
]

MIN_P = Exercise(
    name="min-p sampling",
    kind="extend",
    concept="min-p sampling: a cut relative to the most likely token, after the temperature",
    chapter=14,
    number=3,
    cases=_min_p_cases,
    reference=_min_p,
    compare=compare_array(
        "probabilities",
        "subtract each row's largest logit before the exponential; and with min_p = 1 only the tokens tied with "
        "the most likely one stay, so compare with >= (a strict > keeps none, and 0/0 is NaN)",
    ),
    mistakes=(
        *(Mistake(partial(_min_p, slip=slip), hint) for slip, hint in _MIN_P_SLIPS),
        Mistake(
            _top_p_instead,
            "It matches top-p with p = min_p: top-p keeps the most likely tokens until their probabilities add "
            "up to p; min-p keeps every token at least min_p times as likely as the most likely one, however "
            "many there are",
        ),
    ),
)


def check_min_p(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(logits, temperature, min_p) -> (..., V)``: the distribution min-p sampling draws from.

    ``logits`` is (..., V), ``temperature`` > 0, ``min_p`` in [0, 1]. After the
    temperature, a token is kept when its probability is at least ``min_p``
    times that of the row's most likely token; the kept ones are renormalised,
    as ``transformers``' ``TemperatureLogitsWarper`` then ``MinPLogitsWarper``.
    See chapter 14, exercise 3.
    """
    return MIN_P.check(fn)
