"""Chapter 14's checkers: their references against gguf, the uncached model and transformers; other answers.

The generic tests in test_exercises.py run every reference, stub and declared
mistake. Here the references are checked against what the exercises claim
(the Q8_0 bytes are ``gguf.quants.quantize``'s; the cached loop's logits are
the uncached forward pass's, whatever origin the positions share; the min-p
distribution is ``transformers``' warpers'), right answers written
differently or in float32 must pass, and plausible wrong answers that match no
declared mistake must still fail.
"""

from __future__ import annotations

import re
import struct

import gguf
import numpy as np
import pytest
import torch

from selfattention import KVCache, next_token_probabilities
from selfattention.exercises import ch14_llm as ch14
from selfattention.exercises import check_cache_offset, check_min_p, check_quantize_q8_0
from selfattention.llm import dequantize_q8_0, llama_block, rms_norm


def _cases(exercise):
    return exercise.cases(np.random.default_rng(100 * exercise.chapter + exercise.number))


# --- Exercise 1: a Q8_0 quantizer, byte for byte -------------------------------------------------------------


def _gguf_q8_0(w):
    return gguf.quants.quantize(np.asarray(w, dtype=np.float32), gguf.GGMLQuantizationType.Q8_0)


def test_the_q8_0_reference_makes_gguf_s_bytes_on_every_case_and_on_random_weights():
    for _, (w,) in _cases(ch14.QUANTIZE_Q8_0):
        np.testing.assert_array_equal(ch14._q8_0(w), _gguf_q8_0(w))
    rng = np.random.default_rng(0)
    for scale in (1e-3, 0.05, 1.0, 300.0):
        w = (scale * rng.standard_t(3, size=(64, 256))).astype(np.float32)  # heavy tails: one large weight a block
        np.testing.assert_array_equal(ch14._q8_0(w), _gguf_q8_0(w))


def test_q8_0_reads_back_within_half_a_step_and_its_own_bytes_come_back():
    rng = np.random.default_rng(1)
    w = rng.normal(scale=0.1, size=(16, 128)).astype(np.float32)
    stored = ch14._q8_0(w)
    back = dequantize_q8_0(stored)
    d = np.abs(w.reshape(16, -1, 32)).max(axis=-1, keepdims=True) / 127  # each block's float32 step
    error = np.abs(back - w).reshape(16, -1, 32)
    assert (error <= 0.5 * d + 127 * d * 2.0**-11).all()  # half a step, and the float16 rounding of d
    np.testing.assert_array_equal(ch14._q8_0(back), stored)  # the chapter's claim: nothing moves


def test_the_halfway_case_holds_exact_halves_that_np_round_takes_to_even():
    (w,) = _cases(ch14.QUANTIZE_Q8_0)[3][1]
    assert np.abs(w).max() == 127  # d = 1: the quants are the weights rounded
    halves = w[np.abs(w - np.trunc(w)) == 0.5]
    assert len(halves) >= 6 and (np.round(halves) != ch14._round_half_away(halves)).sum() >= 4


def _q8_0_by_division(w):
    blocks = w.reshape(*w.shape[:-1], -1, 32)
    d = np.abs(blocks).max(axis=-1, keepdims=True) / 127
    x = np.divide(blocks, d, out=np.zeros_like(blocks), where=d > 0)
    q = np.sign(x) * np.floor(np.abs(x) + 0.5)
    return np.concatenate([d.astype(np.float16).view(np.uint8), q.astype(np.int8).view(np.uint8)], -1).reshape(
        *w.shape[:-1], -1
    )


def _float64_pipeline(w):
    blocks = np.asarray(w, dtype=np.float64).reshape(*np.shape(w)[:-1], -1, 32)
    d = np.abs(blocks).max(axis=-1, keepdims=True) / 127.0
    x = np.divide(blocks, d, out=np.zeros_like(blocks), where=d > 0)
    q = (np.sign(x) * np.floor(np.abs(x) + 0.5)).astype(np.int8)
    scale = d.astype(np.float16).view(np.uint8)
    return np.concatenate([scale, q.view(np.uint8)], axis=-1).reshape(*np.shape(w)[:-1], -1)


def _q8_0_in_torch(w):
    blocks = torch.as_tensor(w).reshape(*w.shape[:-1], -1, 32)
    d = blocks.abs().amax(dim=-1, keepdim=True) / 127
    inverse = torch.where(d > 0, 1 / d, torch.zeros_like(d))
    x = blocks * inverse
    q = (x.sign() * torch.floor(x.abs() + 0.5)).to(torch.int8)
    scale = d.to(torch.float16).view(torch.uint8)
    return torch.cat([scale, q.view(torch.uint8)], dim=-1).reshape(*w.shape[:-1], -1)


def _q8_0_block_by_block(w):
    out = bytearray()
    for block in np.asarray(w, dtype=np.float32).reshape(-1, 32):
        d = float(np.abs(block).max() / np.float32(127))
        inverse = np.float32(1) / np.float32(d) if d else np.float32(0)
        out += struct.pack("<e", d)  # little-endian float16
        for weight in block:
            x = float(np.float32(weight) * inverse)
            out += struct.pack("b", int(np.copysign(np.floor(abs(x) + 0.5), x)))
    return np.frombuffer(bytes(out), dtype=np.uint8).reshape(*w.shape[:-1], -1)


@pytest.mark.parametrize(
    "answer", [_q8_0_by_division, _float64_pipeline, _q8_0_in_torch, _q8_0_block_by_block, _gguf_q8_0]
)
def test_a_right_q8_0_quantizer_written_differently_passes(answer):
    result = check_quantize_q8_0(answer)
    assert result, repr(result)


def test_an_all_zero_block_is_stored_as_zero_bytes():
    # ggml takes 1/d as 0 there. An answer that divides by d = 0 gets NaN, whose cast to int8 is left to the
    # platform (0 on x86): the check cannot tell that 0 from a guarded one.
    (w,) = _cases(ch14.QUANTIZE_Q8_0)[4][1]
    assert not ch14._q8_0(w).reshape(2, 3, 34)[1, 1].any()  # a scale of 0 and 32 zero quants


def _offset_binary(w):  # Q4_0's habit: quants stored as q + 128, unsigned
    blocks = np.asarray(w, dtype=np.float32).reshape(*np.shape(w)[:-1], -1, 32)
    d = np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(127)
    q = ch14._round_half_away(np.divide(blocks, d, out=np.zeros_like(blocks), where=d > 0)) + 128
    return np.concatenate([d.astype(np.float16).view(np.uint8), q.astype(np.uint8)], -1).reshape(*np.shape(w)[:-1], -1)


def _bfloat16_scale(w):
    good = ch14._q8_0(w).reshape(*np.shape(w)[:-1], -1, 34).copy()
    d = np.abs(np.asarray(w, np.float32).reshape(*np.shape(w)[:-1], -1, 32)).max(axis=-1, keepdims=True) / 127
    good[..., :2] = (d.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)  # bfloat16: the top 2 bytes
    return good.reshape(*np.shape(w)[:-1], -1)


def _big_endian_scale(w):
    good = ch14._q8_0(w).reshape(*np.shape(w)[:-1], -1, 34).copy()
    good[..., :2] = good[..., 1::-1]
    return good.reshape(*np.shape(w)[:-1], -1)


def _blocks_down_the_columns(w):
    w = np.asarray(w, dtype=np.float32)
    if w.ndim < 2:
        return ch14._q8_0(w)
    return ch14._q8_0(np.swapaxes(w, -1, -2).reshape(w.shape)).reshape(*w.shape[:-1], -1)


def _max_over_whole_array(w):
    w = np.asarray(w, dtype=np.float32)
    d = np.abs(w).max() / np.float32(127)
    blocks = w.reshape(*w.shape[:-1], -1, 32)
    q = ch14._round_half_away(blocks / d).astype(np.int8).view(np.uint8)
    scale = np.broadcast_to(np.float16(d).reshape(1).view(np.uint8), (*blocks.shape[:-1], 2))
    return np.concatenate([scale, q], axis=-1).reshape(*w.shape[:-1], -1)


def _int8_left_signed(w):
    return ch14._q8_0(w).view(np.int8)  # the same bytes, read as signed


def _quants_only(w):
    return ch14._q8_0(w).reshape(*np.shape(w)[:-1], -1, 34)[..., 2:].reshape(*np.shape(w)[:-1], -1)


# fmt: off
WRONG_Q8_0 = [
    (_offset_binary, r"case 1 \(one block of 32 weights\): 1 of 1 blocks differ from gguf's bytes; in the first, block 0, quant 0 \(byte 2\) is -?\d+ where gguf's is -?\d+$"),
    (_bfloat16_scale, r"case 1 .*: 1 of 1 blocks differ from gguf's bytes; in the first, block 0, its float16 scale is \S+ where gguf's is \S+$"),
    (_big_endian_scale, r"case 1 .*: 1 of 1 blocks differ from gguf's bytes; in the first, block 0, its float16 scale is"),
    (_blocks_down_the_columns, r"case 3 \(3 rows of 4 blocks, .*\): \d+ of 12 blocks differ from gguf's bytes"),
    (_max_over_whole_array, r"case 3 \(3 rows of 4 blocks, .*\): \d+ of 12 blocks differ from gguf's bytes"),
    (_int8_left_signed, r"case 1 .*: bytes lie in 0 \.\.\. 255; yours go from -\d+ to \d+ \(store the int8 quants as their bytes: q\.astype\(np\.int8\)\.view\(np\.uint8\)\)$"),
    (_quants_only, r"case 1 .*: the blocks should have shape \(34,\), 34 bytes for each block of 32 weights; got \(32,\)$"),
    (lambda w: ch14._q8_0(w).astype(np.float32) + 0.5, r"case 1 .*: the blocks should be bytes, whole numbers from 0 to 255 \(uint8\); got float32 with fractions$"),
    (lambda w: "blocks", r"case 1 .*: the blocks should be an array of bytes \(uint8\); got str$"),
]
# fmt: on


@pytest.mark.parametrize(("answer", "message"), WRONG_Q8_0, ids=lambda a: getattr(a, "__name__", ""))
def test_a_wrong_q8_0_quantizer_that_no_mistake_names_fails(answer, message):
    result = check_quantize_q8_0(answer)
    assert not result and re.search(message, repr(result)), repr(result)


def test_torch_s_rounding_earns_the_halves_to_even_hint():
    def with_torch_round(w):
        blocks = torch.as_tensor(w).reshape(*w.shape[:-1], -1, 32)
        d = blocks.abs().amax(dim=-1, keepdim=True) / 127
        q = torch.round(blocks * torch.where(d > 0, 1 / d, torch.zeros_like(d))).to(torch.int8)  # halves to even
        return torch.cat([d.to(torch.float16).view(torch.uint8), q.view(torch.uint8)], -1).reshape(*w.shape[:-1], -1)

    result = check_quantize_q8_0(with_torch_round)
    assert not result and "case 4 " in repr(result) and "It matches rounding halves to even" in repr(result)


# --- Exercise 2: tiny-llm's cache offset ---------------------------------------------------------------------


@pytest.mark.parametrize("origin", [0, 1, 7, 1000])
def test_a_cached_loop_whose_positions_share_any_origin_gives_the_uncached_logits(origin):
    for _, (weights, prompt, following) in _cases(ch14.CACHE_OFFSET):
        got = ch14._offset_schedule(weights, prompt, following, start=origin, after_prompt=len(prompt), step=1)
        want = ch14._without_cache(weights, prompt, following)
        tolerance = 1e-10 if weights.dtype == np.float64 else 1e-4
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


def test_the_original_bug_leaves_the_row_after_the_prompt_right_and_the_later_rows_wrong():
    for _, (weights, prompt, following) in _cases(ch14.CACHE_OFFSET):
        n = len(prompt)
        buggy = ch14._offset_schedule(weights, prompt, following, start=n, after_prompt=1, step=1)
        want = ch14._without_cache(weights, prompt, following)
        gaps = np.abs(buggy - want).max(axis=-1)
        assert gaps[0] < 1e-4  # the prefill is numbered n ... 2n - 1: shifted, but all together
        if n > 1:
            assert (gaps[1:] > 1e-2).all()  # the new tokens from n + 1: off the prompt's origin by n - 1
        else:
            assert (gaps < 1e-4).all()  # a one-token prompt: n + 1 is 2n, the shift is shared


def _step(weights, ids, offset, caches):
    c = weights.config
    x = weights.embedding[ids]
    positions = offset + np.arange(len(ids))
    for block, cache in zip(weights.blocks, caches, strict=True):
        x = llama_block(
            x, block, c.num_heads, positions=positions, cache=cache, eps=c.rms_norm_eps, rope_base=c.rope_base
        )
    return rms_norm(x, weights.final_norm, c.rms_norm_eps) @ weights.embedding.T  # (t, V)


def _caches(weights, prompt_ids, next_ids):
    return [KVCache(len(prompt_ids) + len(next_ids)) for _ in weights.blocks]


def _maintainers_fix(weights, prompt_ids, next_ids):  # tiny-llm's pull request 65
    caches, offset, tokens, rows = _caches(weights, prompt_ids, next_ids), 0, list(prompt_ids), []
    for following in [*next_ids, None]:
        rows.append(_step(weights, tokens, offset, caches)[-1])
        offset += len(tokens)
        tokens = [following]
    return np.stack(rows[: 1 + len(next_ids)])


def _before_pull_request_46(weights, prompt_ids, next_ids):
    caches, offset, tokens, rows = _caches(weights, prompt_ids, next_ids), len(prompt_ids), list(prompt_ids), []
    for following in [*next_ids, None]:
        rows.append(_step(weights, tokens, offset, caches)[-1])
        offset += len(tokens)  # 2n after the prompt: everything shifted by n
        tokens = [following]
    return np.stack(rows[: 1 + len(next_ids)])


def _offset_from_the_cache(weights, prompt_ids, next_ids):
    caches = _caches(weights, prompt_ids, next_ids)
    rows = [_step(weights, list(prompt_ids), len(caches[0]), caches)[-1]]
    rows += [_step(weights, [token], len(caches[0]), caches)[-1] for token in next_ids]
    return np.stack(rows)


def _next_tokens_as_one_chunk(weights, prompt_ids, next_ids):
    caches = _caches(weights, prompt_ids, next_ids)
    rows = _step(weights, list(prompt_ids), 0, caches)[-1:]
    if next_ids:  # a chunk after the cache: the lower-right causal mask gives each row its own prefix
        rows = np.concatenate([rows, _step(weights, list(next_ids), len(prompt_ids), caches)])
    return rows


def _recomputed_every_step(weights, prompt_ids, next_ids):
    ids = [*prompt_ids, *next_ids]
    none = [None] * len(weights.blocks)
    return np.stack([_step(weights, ids[:end], 0, none)[-1] for end in range(len(prompt_ids), len(ids) + 1)])


def _in_float32(weights, prompt_ids, next_ids):
    return _maintainers_fix(weights.astype(np.float32), prompt_ids, next_ids)


@pytest.mark.parametrize(
    "answer",
    [
        _maintainers_fix,
        _before_pull_request_46,
        _offset_from_the_cache,
        _next_tokens_as_one_chunk,
        _recomputed_every_step,
        _in_float32,
    ],
)
def test_a_right_cached_loop_written_differently_passes(answer):
    result = check_cache_offset(answer)
    assert result, repr(result)


def _cache_length_read_inside_the_blocks(weights, prompt_ids, next_ids):
    """Each block reads caches[0]'s length, which block 0 has already advanced: the later blocks are off by t."""
    c = weights.config
    caches, rows = _caches(weights, prompt_ids, next_ids), []
    for ids in [list(prompt_ids), *([token] for token in next_ids)]:
        x = weights.embedding[ids]
        for block, cache in zip(weights.blocks, caches, strict=True):
            positions = len(caches[0]) + np.arange(len(ids))
            x = llama_block(
                x, block, c.num_heads, positions=positions, cache=cache, eps=c.rms_norm_eps, rope_base=c.rope_base
            )
        rows.append(rms_norm(x[-1], weights.final_norm, c.rms_norm_eps) @ weights.embedding.T)
    return np.stack(rows)


def _two_per_token(weights, prompt_ids, next_ids):
    return ch14._offset_schedule(weights, prompt_ids, next_ids, start=0, after_prompt=len(prompt_ids), step=2)


def _chunk_from_zero(weights, prompt_ids, next_ids):
    caches = _caches(weights, prompt_ids, next_ids)
    rows = _step(weights, list(prompt_ids), 0, caches)[-1:]
    return np.concatenate([rows, _step(weights, list(next_ids), 0, caches)]) if next_ids else rows


def _one_cache_for_every_block(weights, prompt_ids, next_ids):
    cache = KVCache(len(weights.blocks) * (len(prompt_ids) + len(next_ids)))
    shared = [cache] * len(weights.blocks)
    rows = [_step(weights, list(prompt_ids), 0, shared)[-1]]
    rows += [_step(weights, [token], len(prompt_ids) + i, shared)[-1] for i, token in enumerate(next_ids)]
    return np.stack(rows)


def _without_the_prompt_s_row(weights, prompt_ids, next_ids):
    return _maintainers_fix(weights, prompt_ids, next_ids)[1:]


# fmt: off
WRONG_OFFSETS = [
    (_cache_length_read_inside_the_blocks, r"case 1 \(a prompt of 3 tokens, .*\): the logits do not match the reference; the largest difference is [\d.]+$"),
    (_two_per_token, r"case 1 .*: the logits do not match the reference; the largest difference is [\d.]+$"),
    (_chunk_from_zero, r"case 1 .*: the logits do not match the reference; the largest difference is [\d.]+$"),
    (_one_cache_for_every_block, r"case 1 .*: the logits do not match the reference; the largest difference is [\d.]+$"),
    (_without_the_prompt_s_row, r"case 1 .*: the logits should have shape \(3, 40\); got \(2, 40\)$"),
]
# fmt: on


@pytest.mark.parametrize(("answer", "message"), WRONG_OFFSETS, ids=lambda a: getattr(a, "__name__", ""))
def test_a_wrong_cached_loop_that_no_mistake_names_fails(answer, message):
    result = check_cache_offset(answer)
    assert not result and re.search(message, repr(result)), repr(result)


def test_the_prefill_row_of_the_in_block_bug_is_right_and_only_the_decoded_rows_are_wrong():
    _, (weights, prompt, following) = _cases(ch14.CACHE_OFFSET)[0]
    gaps = np.abs(
        _cache_length_read_inside_the_blocks(weights, prompt, following)
        - ch14._without_cache(weights, prompt, following)
    ).max(axis=-1)
    assert gaps[0] < 1e-10 and (gaps[1:] > 1e-2).all()  # blocks 1 on shift the whole prompt by n: harmless


# --- Exercise 3: min-p sampling ------------------------------------------------------------------------------


def _transformers_min_p(logits, temperature, min_p):
    from transformers.generation.logits_process import MinPLogitsWarper, TemperatureLogitsWarper

    z = torch.as_tensor(np.asarray(logits, dtype=np.float64))
    rows = z.reshape(-1, z.shape[-1])  # the warpers take (batch, V)
    rows = MinPLogitsWarper(min_p)(None, TemperatureLogitsWarper(temperature)(None, rows))
    return torch.softmax(rows, dim=-1).reshape(z.shape)


def test_the_min_p_reference_is_transformers_temperature_then_min_p_warper():
    for _, (logits, temperature, min_p) in _cases(ch14.MIN_P):
        np.testing.assert_allclose(
            ch14._min_p(logits, temperature, min_p),
            _transformers_min_p(logits, temperature, min_p).numpy(),
            rtol=1e-12,
            atol=1e-15,
        )


def test_no_token_of_a_min_p_case_sits_within_rounding_of_the_cut():
    for description, (logits, temperature, min_p) in _cases(ch14.MIN_P):
        z = np.asarray(logits, dtype=np.float64) / temperature
        log_ratio = z - z.max(axis=-1, keepdims=True)  # ln(p_i / max p)
        if min_p == 0:
            continue
        margins = np.abs(log_ratio[log_ratio < 0] - np.log(min_p))  # the tied maxima sit exactly on 0: kept
        assert margins.min() > 0.01, description  # float32 logits move a log-ratio by far less


def _min_p_as_a_logit_margin(logits, temperature, min_p):
    z = np.asarray(logits, dtype=np.float64)
    with np.errstate(divide="ignore"):
        keep = (z - z.max(axis=-1, keepdims=True)) / temperature >= np.log(min_p)
    e = np.where(keep, np.exp((z - z.max(axis=-1, keepdims=True)) / temperature), 0.0)
    return e / e.sum(axis=-1, keepdims=True)


def _min_p_in_float32(logits, temperature, min_p):
    z = np.asarray(logits, dtype=np.float32) / np.float32(temperature)
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    p = np.where(p >= np.float32(min_p) * p.max(axis=-1, keepdims=True), p, np.float32(0))
    return p / p.sum(axis=-1, keepdims=True)


def _min_p_row_by_row(logits, temperature, min_p):
    z = np.asarray(logits, dtype=np.float64)
    out = np.empty_like(z)
    for index in np.ndindex(z.shape[:-1]):
        probabilities = next_token_probabilities(z[index], temperature=temperature)
        top = max(probabilities)
        kept = [p if p >= min_p * top else 0.0 for p in probabilities]
        out[index] = np.array(kept) / sum(kept)
    return out


@pytest.mark.parametrize(
    "answer", [_min_p_as_a_logit_margin, _min_p_in_float32, _min_p_row_by_row, _transformers_min_p]
)
def test_a_right_min_p_written_differently_passes(answer):
    result = check_min_p(answer)
    assert result, repr(result)


def _strict(logits, temperature, min_p):
    p = next_token_probabilities(logits, temperature=temperature)
    p = np.where(p > min_p * p.max(axis=-1, keepdims=True), p, 0.0)
    with np.errstate(invalid="ignore"):
        return p / p.sum(axis=-1, keepdims=True)


def _no_max_subtracted(logits, temperature, min_p):
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(np.asarray(logits, dtype=np.float64) / temperature)
        p = e / e.sum(axis=-1, keepdims=True)
        p = np.where(p >= min_p * p.max(axis=-1, keepdims=True), p, 0.0)
        return p / p.sum(axis=-1, keepdims=True)


def _temperature_multiplied(logits, temperature, min_p):
    return ch14._min_p(np.asarray(logits) * temperature**2, temperature, min_p)  # softmax(z * T)


def _top_k_of_one_over_min_p(logits, temperature, min_p):
    k = int(round(1 / min_p)) if min_p > 0 else np.shape(logits)[-1]
    return next_token_probabilities(logits, temperature=temperature, top_k=min(k, np.shape(logits)[-1]))


def _softmax_over_the_first_axis(logits, temperature, min_p):
    z = np.asarray(logits, dtype=np.float64) / temperature
    p = np.exp(z - z.max(axis=0, keepdims=True))
    p /= p.sum(axis=0, keepdims=True)
    p = np.where(p >= min_p * p.max(axis=-1, keepdims=True), p, 0.0)
    return p / p.sum(axis=-1, keepdims=True)


def _cut_relative_to_the_mean(logits, temperature, min_p):
    p = next_token_probabilities(logits, temperature=temperature)
    p = np.where(p >= min_p * p.mean(axis=-1, keepdims=True), p, 0.0)
    return p / p.sum(axis=-1, keepdims=True)


# fmt: off
WRONG_MIN_P = [
    (_strict, r"case 5 \(min_p=1: .*\): the probabilities contain NaN or inf: .*a strict > keeps none, and 0/0 is NaN\)$"),
    (_no_max_subtracted, r"case 7 \(logits around 1000 .*\): the probabilities contain NaN or inf: subtract each row's largest logit"),
    (_temperature_multiplied, r"case 2 \(V=12, T=0\.7, min_p=0\.2\): the probabilities do not match the reference; the largest difference is [\d.]+$"),
    (_top_k_of_one_over_min_p, r"case 1 \(V=8, T=1, min_p=0\.1\): the probabilities do not match the reference; the largest difference is [\d.]+$"),
    (_softmax_over_the_first_axis, r"case 4 \(3 rows: .*\): the probabilities do not match the reference; the largest difference is [\d.]+$"),
    (_cut_relative_to_the_mean, r"case 1 .*: the probabilities do not match the reference; the largest difference is [\d.]+$"),
    (lambda logits, temperature, min_p: np.asarray(logits)[..., :-1], r"case 1 .*: the probabilities should have shape \(8,\); got \(7,\)$"),
]
# fmt: on


@pytest.mark.parametrize(("answer", "message"), WRONG_MIN_P, ids=lambda a: getattr(a, "__name__", ""))
def test_a_wrong_min_p_that_no_mistake_names_fails(answer, message):
    with np.errstate(all="ignore"):
        result = check_min_p(answer)
    assert not result and re.search(message, repr(result)), repr(result)
