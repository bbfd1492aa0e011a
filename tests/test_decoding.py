"""Chapter 9: the KV cache, grouped-query attention, sliding windows and the tiny decoder.

References: torch's ``F.scaled_dot_product_attention(enable_gqa=True)``,
Hugging Face LLaMA's ``repeat_kv`` and ``apply_rotary_pos_emb``, and, for the
decoder, the full causal forward recomputed on the growing text.
"""

from __future__ import annotations

import os
import tracemalloc

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import selfattention as sa
from selfattention.measure import decoding_step_times

# Hugging Face's Llama code comes from the hf fixture (tests/conftest.py): imported on first use.

RNG = np.random.default_rng(0)


# --- grouped-query attention ---------------------------------------------------------------


@pytest.mark.parametrize(("H", "Hkv"), [(8, 8), (8, 2), (8, 1), (6, 3), (4, 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_enable_gqa_matches_torch(H, Hkv, causal):
    q = RNG.normal(size=(2, H, 5, 8))
    k, v = RNG.normal(size=(2, 2, Hkv, 5, 8))
    ours, weights = sa.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    theirs = F.scaled_dot_product_attention(*map(torch.from_numpy, (q, k, v)), is_causal=causal, enable_gqa=True)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12, atol=1e-13)
    assert weights.shape == (2, H, 5, 5)


def test_query_head_h_reads_key_value_head_h_over_the_group_size():
    q = RNG.normal(size=(6, 3, 4))
    k, v = RNG.normal(size=(2, 2, 7, 4))
    out, _ = sa.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    for h in range(6):
        np.testing.assert_allclose(out[h], sa.scaled_dot_product_attention(q[h], k[h // 3], v[h // 3])[0], rtol=1e-13)


@pytest.mark.parametrize("n_rep", [1, 2, 4])
def test_repeat_kv_matches_hugging_face_llama(n_rep, hf):
    x = RNG.normal(size=(2, 3, 5, 4))
    np.testing.assert_array_equal(sa.repeat_kv(x, n_rep), hf.llama.repeat_kv(torch.from_numpy(x), n_rep).numpy())


def test_kv_cache_bytes_of_published_models():
    per_token = {  # (layers, KV heads, head width): bytes per token in float16
        "Llama-2-7B": (sa.kv_cache_bytes(32, 32, 128), 524_288),
        "Llama-3-8B": (sa.kv_cache_bytes(32, 8, 128), 131_072),
        "Mistral-7B": (sa.kv_cache_bytes(32, 8, 128), 131_072),
        "Falcon-7B": (sa.kv_cache_bytes(32, 1, 64), 8_192),
    }
    for name, (got, want) in per_token.items():
        assert got == want, name
    assert sa.kv_cache_bytes(32, 32, 128, tokens=4096) == 2 * 2**30  # Llama-2-7B: 2 GiB for a 4096-token context


# --- sliding windows -------------------------------------------------------------------------


@given(T=st.integers(1, 12), extra=st.integers(0, 12), window=st.integers(1, 30))
def test_sliding_window_mask_follows_its_definition(T, extra, window):
    S = T + extra
    mask = sa.sliding_window_mask(T, window, S, dtype=bool)
    for i in range(T):
        for j in range(S):
            assert mask[i, j] == (0 <= (S - T + i) - j < window)
    if window >= S:
        np.testing.assert_array_equal(mask, sa.causal_mask(T, S, dtype=bool))
    np.testing.assert_array_equal(sa.sliding_window_mask(T, window, S) == 0, mask)  # the float form


# --- the caches --------------------------------------------------------------------------------


def test_kv_cache_returns_views_of_what_was_appended():
    cache = sa.KVCache(max_len=10)
    k1, v1 = RNG.normal(size=(2, 2, 3, 4)), RNG.normal(size=(2, 2, 3, 5))
    k2, v2 = RNG.normal(size=(2, 2, 1, 4)), RNG.normal(size=(2, 2, 1, 5))
    cache.update(k1, v1)
    k_all, v_all = cache.update(k2, v2)
    np.testing.assert_array_equal(k_all, np.concatenate([k1, k2], axis=-2))
    np.testing.assert_array_equal(v_all, np.concatenate([v1, v2], axis=-2))
    assert k_all.base is not None and len(cache) == cache.position == 4 and cache.max_len == 10
    assert repr(cache) == "KVCache(4 of 10 tokens)"


def test_appending_to_the_kv_cache_copies_nothing_already_there():
    """N one-token appends allocate O(1) each: the peak stays a few tokens' worth, whatever N."""
    Dh, heads = 64, 8
    token = RNG.normal(size=(heads, 1, Dh))
    peaks = []
    for n in (100, 1000):
        cache = sa.KVCache(max_len=n + 1)
        cache.update(token, token)  # allocates the buffers
        tracemalloc.start()
        for _ in range(n):
            cache.update(token, token)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    buffer_bytes = 2 * heads * 1001 * Dh * 8
    assert peaks[1] < 20 * heads * Dh * 8 < buffer_bytes / 50  # a few tokens, not the cache
    assert peaks[1] < 2 * peaks[0] + 4096  # the same peak for 10x the appends


@pytest.mark.parametrize("window", [1, 2, 3, 5, 50])
def test_sliding_window_cache_gives_the_full_cache_with_the_window_mask(window):
    model = sa.TinyDecoder.random(40, 16, 4, 2, 2, 32, seed=window)
    text = list(RNG.integers(0, 40, size=12))
    full = model.forward(text, window=window)  # no cache: the whole text with sliding_window_mask
    for chunks in ([12], [5, 1, 1, 1, 4], [1] * 12, [3, 3, 6]):
        caches, start, rows = model.new_caches(window=window), 0, []
        for size in chunks:
            rows.append(model.forward(text[start : start + size], caches, window=window))
            start += size
        np.testing.assert_allclose(np.concatenate(rows), full, rtol=1e-10, atol=1e-10)
    assert all(c._keys.shape[-2] == window for c in caches)  # the buffer never grows past the window


def test_sliding_window_cache_keeps_the_last_window_tokens_in_slot_p_mod_window():
    cache = sa.SlidingWindowCache(window=3)
    for p in range(7):
        k_all, _ = cache.update(np.full((1, 2), float(p)), np.full((1, 2), float(p)))
        np.testing.assert_array_equal(k_all[:, 0], np.arange(max(0, p - 3), p + 1))
    np.testing.assert_array_equal(cache._keys[:, 0], [6, 4, 5])  # slots 0, 1, 2 hold positions 6, 4, 5
    assert cache.position == 7 and repr(cache) == "SlidingWindowCache(window=3, 7 tokens seen)"


# --- the decoder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("H", "Hkv"), [(4, 4), (4, 2), (4, 1)])
def test_cached_decoding_equals_recomputing_the_whole_text(H, Hkv):
    model = sa.TinyDecoder.random(30, 16, H, Hkv, 3, 32, seed=H + Hkv)
    text = list(RNG.integers(0, 30, size=15))
    full = model.forward(text)
    caches, start, rows = model.new_caches(max_len=15), 0, []
    for size in (6, 1, 1, 1, 4, 1, 1):  # a prompt, single tokens, then a chunk
        rows.append(model.forward(text[start : start + size], caches))
        start += size
        np.testing.assert_allclose(np.concatenate(rows), model.forward(text[:start]), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.concatenate(rows), full, rtol=1e-10, atol=1e-10)
    assert model.generate(text[:5], 6) == model.generate(text[:5], 6, use_cache=False)


def test_decoder_block_matches_a_torch_composition(hf):
    """LayerNorm, LLaMA's rotate-half RoPE, torch SDPA with enable_gqa and is_causal, a GELU feed-forward."""
    model = sa.TinyDecoder.random(10, 16, 4, 2, 1, 24, seed=5)
    p = model.blocks[0]
    x = RNG.normal(size=(7, 16))
    ours = sa.decoder_block(x, p, 4)

    def t(a):
        return torch.from_numpy(np.asarray(a))

    xt = t(x)
    h = F.layer_norm(xt, (16,), t(p.norm1.weight), t(p.norm1.bias), eps=1e-5)
    q = (h @ t(p.attention.q.weight) + t(p.attention.q.bias)).view(7, 4, 4).transpose(0, 1)  # (H, T, Dh)
    k = (h @ t(p.attention.k.weight) + t(p.attention.k.bias)).view(7, 2, 4).transpose(0, 1)  # (Hkv, T, Dh)
    v = (h @ t(p.attention.v.weight) + t(p.attention.v.bias)).view(7, 2, 4).transpose(0, 1)
    angles = t(sa.rope_angles(np.arange(7), 4))
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    q, k = hf.llama.apply_rotary_pos_emb(q[None], k[None], cos[None], sin[None])
    attn = F.scaled_dot_product_attention(q, k, v[None], is_causal=True, enable_gqa=True)[0]  # (H, T, Dh)
    xt = xt + attn.transpose(0, 1).reshape(7, 16) @ t(p.attention.out.weight) + t(p.attention.out.bias)
    h = F.layer_norm(xt, (16,), t(p.norm2.weight), t(p.norm2.bias), eps=1e-5)
    ff = F.gelu(h @ t(p.feed_forward.up.weight) + t(p.feed_forward.up.bias))
    expected = xt + ff @ t(p.feed_forward.down.weight) + t(p.feed_forward.down.bias)
    np.testing.assert_allclose(ours, expected.numpy(), rtol=1e-10, atol=1e-10)


# --- bad input -------------------------------------------------------------------------------------

_MODEL = sa.TinyDecoder.random(10, 8, 2, 1, 1, 8, seed=0)
_TWO = sa.TinyDecoder.random(10, 8, 2, 1, 2, 8, seed=0)  # two blocks
_SHARED = sa.KVCache(8)


def _full_cache():
    cache = sa.KVCache(2)
    cache.update(np.ones((1, 2, 4)), np.ones((1, 2, 4)))
    return cache


def _first(shape=(2, 1, 4), dtype=np.float64):
    cache = sa.KVCache(8)
    cache.update(np.ones(shape, dtype), np.ones(shape, dtype))
    return cache


BAD_INPUT = [
    (
        lambda: sa.scaled_dot_product_attention(
            np.ones((6, 2, 4)), np.ones((4, 2, 4)), np.ones((4, 2, 4)), enable_gqa=True
        ),
        r"query heads must be a multiple of the key/value heads; got H=6 .* Hkv=4",
    ),
    (
        lambda: sa.scaled_dot_product_attention(np.ones((2, 4)), np.ones((2, 4)), np.ones((2, 4)), enable_gqa=True),
        r"q must have at least 3 axes \(\.\.\., H, T, Dk\) with enable_gqa=True",
    ),
    (
        lambda: sa.scaled_dot_product_attention(
            np.ones((4, 2, 4)), np.ones((2, 2, 4)), np.ones((1, 2, 4)), enable_gqa=True
        ),
        r"k has 2 heads but v has 1",
    ),
    (
        lambda: sa.scaled_dot_product_attention(np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), enable_gqa="yes"),
        r"enable_gqa must be True or False",
    ),
    (lambda: sa.repeat_kv(np.ones((2, 3, 4)), 0), r"n_rep must be a positive integer; got 0"),
    (lambda: sa.sliding_window_mask(4, 0), r"window must be a positive integer; got 0"),
    (lambda: sa.sliding_window_mask(4, 2.5), r"window must be a positive integer"),
    (lambda: sa.sliding_window_mask(2**21, 2), r"T must be at most 1,048,576"),
    (lambda: sa.sliding_window_mask(4, 2, dtype=int), r"dtype must be bool .* or a floating dtype"),
    (lambda: sa.KVCache(0), r"max_len must be a positive integer; got 0"),
    (lambda: sa.KVCache(10**9), r"max_len must be at most 16,777,216"),
    (
        lambda: _full_cache().update(np.ones((1, 1, 4)), np.ones((1, 1, 4))),
        r"the cache is full: it holds up to max_len=2 tokens, has 2, and this update adds 1",
    ),
    (
        lambda: _first().update(np.ones((3, 1, 4)), np.ones((3, 1, 4))),
        r"does not match the cache's first one: it had leading axes \(2,\), .* this one has \(3,\)",
    ),
    (
        lambda: _first().update(np.ones((2, 1, 5)), np.ones((2, 1, 4))),
        r"it had leading axes \(2,\), key width 4, .* this one has \(2,\), 5",
    ),
    (
        lambda: _first().update(np.ones((2, 1, 4), np.float32), np.ones((2, 1, 4), np.float32)),
        r"dtype float64; this one has .* float32",
    ),
    (
        lambda: sa.KVCache(4).update(np.ones((2, 1, 4)), np.ones((2, 2, 4))),
        r"must have the same leading axes and number of new tokens",
    ),
    (lambda: sa.KVCache(4).update(np.ones((2, 0, 4)), np.ones((2, 0, 4))), r"an update needs at least one token"),
    (lambda: sa.KVCache(4).update(np.ones(4), np.ones(4)), r"k_new must have at least 2 axes"),
    (lambda: sa.KVCache(4).update(np.full((1, 4), np.nan), np.ones((1, 4))), r"k_new must hold only finite numbers"),
    (
        lambda: sa.KVCache(4).update(np.ones((1, 4), np.float32), np.ones((1, 4))),
        r"k_new and v_new must have the same dtype",
    ),
    (
        lambda: sa.KVCache(2**24).update(np.ones((64, 1, 128)), np.ones((64, 1, 128))),
        r"would hold .* numbers per buffer",
    ),
    (lambda: sa.SlidingWindowCache(0), r"window must be a positive integer; got 0"),
    (lambda: sa.kv_cache_bytes(32, 0, 128), r"num_kv_heads must be a positive integer; got 0"),
    (lambda: sa.kv_cache_bytes(32, 8, 128, bytes_per_value=0.5), r"bytes_per_value must be a positive integer"),
    (lambda: sa.decoder_block(np.ones((3, 8)), _MODEL.blocks[0].attention, 2), r"params must be an EncoderParams"),
    (
        lambda: sa.decoder_block(np.ones((3, 6)), _MODEL.blocks[0], 2),
        r"x has width D=6 but the block's weights are for D=8",
    ),
    (lambda: sa.decoder_block(np.ones((3, 8)), _MODEL.blocks[0], 3), r"num_heads"),
    (
        lambda: sa.decoder_block(np.ones((3, 8)), _MODEL.blocks[0], 2, cache=[]),
        r"cache must be a KVCache, a SlidingWindowCache or None",
    ),
    (
        lambda: sa.decoder_block(np.ones((3, 8)), _MODEL.blocks[0], 2, cache=sa.SlidingWindowCache(4)),
        r"a SlidingWindowCache of window 4 needs window=4; got None",
    ),
    (lambda: sa.decoder_block(np.ones((3, 8)), _MODEL.blocks[0], 2, window=0), r"window must be a positive integer"),
    (lambda: _MODEL.forward([1, 10]), r"token ids must lie in 0 … 9; got 1 … 10"),
    (lambda: _MODEL.forward([1.5]), r"tokens must be a non-empty 1-D array of token ids"),
    (lambda: _MODEL.forward([1], caches=[]), r"caches must be a list of 1 caches, one per block"),
    (lambda: _MODEL.new_caches(), r"pass exactly one of max_len .* and window"),
    (lambda: _MODEL.generate([1], 0), r"steps must be a positive integer; got 0"),
    (lambda: sa.TinyDecoder.random(10, 8, 3, 1, 1, 8), r"d_model=8 must be a multiple of num_heads=3"),
    (
        lambda: sa.TinyDecoder(np.ones((4, 8)), [], _MODEL.final_norm, 2),
        r"blocks must be a non-empty list of EncoderParams",
    ),
    (
        lambda: sa.TinyDecoder(np.ones((4, 6)), _MODEL.blocks, _MODEL.final_norm, 2),
        r"every block and the final norm must have the embedding's width D=6",
    ),
    # found by an adversarial review
    (lambda: _TWO.forward([1, 2], [_SHARED, _SHARED]), r"caches must be distinct, one per block"),
    (lambda: sa.TinyDecoder.random(10**12, 8, 2, 1, 1, 8), r"vocab_size must be at most 1,048,576"),
    (lambda: sa.TinyDecoder.random(10, 8, 2, 1, 10**9, 8), r"num_layers must be at most 256"),
    (lambda: sa.TinyDecoder.random(10, 8, 2, 1, 1, 10**12), r"dim_feedforward must be at most 65,536"),
    (lambda: sa.TinyDecoder.random(2**20, 2**14, 2, 1, 1, 8), r"these sizes make .* weights"),
    (lambda: sa.TinyDecoder.random(10, 6, 2, 1, 1, 8), r"the head width d_model / num_heads = 3 must be even"),
    (lambda: _MODEL.generate([1], 10**9), r"steps must be at most 1,048,576"),
    (lambda: sa.decoder_block(np.zeros((0, 8)), _MODEL.blocks[0], 2), r"x has no tokens: shape \(0, 8\)"),
    (lambda: decoding_step_times("model", 10), r"model must be a TinyDecoder; got str"),
    (lambda: decoding_step_times(_MODEL, 0), r"context must be a positive integer; got 0"),
    (lambda: decoding_step_times(_MODEL, 10, repeats=0), r"repeats must be a positive integer; got 0"),
]


def test_decoding_step_times_returns_both_times():
    times = decoding_step_times(_MODEL, 16, repeats=2)
    assert set(times) == {"cached", "recomputed"} and all(t > 0 for t in times.values())


@pytest.mark.parametrize(("call", "message"), BAD_INPUT, ids=[m for _, m in BAD_INPUT])
def test_bad_input_gets_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_refused_first_update_leaves_the_cache_empty_and_unshaped():
    cache = sa.KVCache(4)
    with pytest.raises(ValueError, match="the cache is full"):
        cache.update(np.zeros((1, 6, 2)), np.zeros((1, 6, 2)))
    k_all, _ = cache.update(np.zeros((3, 1, 4)), np.zeros((3, 1, 4)))  # another layout is still welcome
    assert k_all.shape == (3, 1, 4) and len(cache) == 1


def test_the_returned_views_are_read_only():
    cache = sa.KVCache(4)
    k_all, v_all = cache.update(np.ones((2, 1, 4)), np.ones((2, 1, 4)))
    with pytest.raises(ValueError, match="read-only"):
        k_all *= 5
    np.testing.assert_array_equal(cache.update(np.ones((2, 1, 4)), np.ones((2, 1, 4)))[0], 1.0)
