"""`make bench` section "decoding" (chapter 9): one generated token of a small decoder, with and without a KV cache.

The decoder of chapter 9 (vocabulary 256, width 256, 8 query and 2 key/value heads, 4 blocks, feed-forward
1024), at a context of 1024: the best time of one generated token with the cache, and recomputing the
whole text. With the cached step, in the same interleaved rounds, the same cached step of a decoder with
the same layers and heads but tiny widths (every product then costs almost nothing): its time is at most
the per-call overhead that does not depend on the widths (the attention's argument checks, which read the
whole cache, do).
A cached step takes milliseconds, so it gets CACHED_ROUNDS_PER_REPEAT times as many rounds as the
recomputed one (each appends its token: the context grows by that many, 50 at the default 5 repeats).

Then where each step's time goes, from one run: every call to the functions a decoder block makes (the
projections, the attention's scores, softmax and P V, the feed-forward layer, the LayerNorms, RoPE and
masks) is timed as the step runs, with the attention's argument checks apart (they read the whole cache),
and what is left over is the rest (the logits, the cache's update, reshapes and Python between the
calls); each part's best over the timed steps is kept.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from functools import partial

import numpy as np
from bench_common import ROOT  # noqa: F401  (puts src/ on the path)

from selfattention import TinyDecoder, attention, decoding, params
from selfattention.measure import best_times

#: The package modules whose code this section times.
SOURCES = ("decoding", "measure")

DECODER = {
    "vocab_size": 256,
    "d_model": 256,
    "num_heads": 8,
    "num_kv_heads": 2,
    "num_layers": 4,
    "dim_feedforward": 1024,
}
TINY = {**DECODER, "d_model": 16, "dim_feedforward": 16}  # head width 2: the same calls, almost no arithmetic
CONTEXT = 1024
CACHED_ROUNDS_PER_REPEAT = 10  # a cached step is about 100 times shorter than a recomputed one
PARTS = {  # the names decoder_block calls, by part
    "project_qkv": "projections",
    "scaled_dot_product_attention": "attention (scores, softmax, P V)",  # its argument checks apart: CARVED
    "feed_forward": "feed-forward",
    "layer_norm": "LayerNorms",
    "apply_rope": "RoPE and masks",
    "causal_mask": "RoPE and masks",
}


#: Calls carved out of the part that makes them: their time is their own part's, not the caller's. The
#: attention's argument checks read every cached key and value (is each finite?), so they grow with the
#: context, unlike the rest of a call's overhead.
CARVED = {(attention, "_validate_attention_args"): "attention's argument checks"}


@contextmanager
def timed_parts(totals: dict[str, float]):
    """Time every call decoder_block makes to the functions in PARTS, and to the output projection."""
    originals = {name: getattr(decoding, name) for name in PARTS}
    carved_originals = {key: getattr(*key) for key in CARVED}
    linear_call = params.Linear.__call__

    inside = []  # a call made inside a timed call (feed_forward's Linear) counts for the outer one only...
    given_up = []  # ...unless it is carved out: per open timed call, the seconds its carved-out calls took

    def wrap(function, part, carve_out=False):
        def timed(*args, **kwargs):
            if inside and not carve_out:
                return function(*args, **kwargs)
            inside.append(part)
            given_up.append(0.0)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                inside.pop()
                totals[part] = totals.get(part, 0.0) + elapsed - given_up.pop()
                if given_up:  # the enclosing call gives this time up to this part
                    given_up[-1] += elapsed

        return timed

    for name, function in originals.items():
        setattr(decoding, name, wrap(function, PARTS[name]))
    for (module, name), function in carved_originals.items():
        setattr(module, name, wrap(function, CARVED[module, name], carve_out=True))
    params.Linear.__call__ = wrap(linear_call, "projections")  # the attention's output projection
    try:
        yield totals
    finally:
        for name, function in originals.items():
            setattr(decoding, name, function)
        for (module, name), function in carved_originals.items():
            setattr(module, name, function)
        params.Linear.__call__ = linear_call


def the_text(model: TinyDecoder) -> np.ndarray:
    """CONTEXT + 1 random token ids: the context and the token a step generates after it."""
    return np.random.default_rng(0).integers(0, model.vocab_size, size=CONTEXT + 1)


def cached_step(model: TinyDecoder, calls: int):
    """One generated token after a cached context of CONTEXT tokens, callable `calls` times (each appends one)."""
    text = the_text(model)
    caches = model.new_caches(max_len=CONTEXT + calls)
    model.forward(text[:CONTEXT], caches)  # the prompt, cached once
    return partial(model.forward, text[CONTEXT:], caches)


def breakdown(model: TinyDecoder, repeats: int) -> dict:
    """Seconds per part of one cached and one recomputed step: each part's best over the timed steps.

    A slow spell of the machine hits one part of one step; the best of each part over many steps leaves
    it out. The parts' bests add up to the step's time without such spells ("total"); "best_step" is the
    fastest whole step, for comparison.
    """
    rounds = {"cached": CACHED_ROUNDS_PER_REPEAT * repeats, "recomputed": repeats}
    steps = {"cached": cached_step(model, rounds["cached"] + 1), "recomputed": partial(model.forward, the_text(model))}
    result = {}
    for kind, step in steps.items():
        step()  # warm-up
        best, best_step = {}, float("inf")
        for _ in range(rounds[kind]):
            with timed_parts({}) as parts:
                start = time.perf_counter()
                step()
                total = time.perf_counter() - start
            parts["rest"] = max(total - sum(parts.values()), 0.0)
            best = {part: min(seconds, best.get(part, float("inf"))) for part, seconds in parts.items()}
            best_step = min(best_step, total)
        total = sum(best.values())
        result[kind] = {
            "total": total,
            "best_step": best_step,
            "parts": best,
            "shares": {part: seconds / total for part, seconds in best.items()},
        }
    return result


def run(repeats: int) -> dict:
    model = TinyDecoder.random(**DECODER, seed=0)
    tiny = TinyDecoder.random(**TINY, seed=0)
    rounds = CACHED_ROUNDS_PER_REPEAT * repeats
    cached = best_times({"cached": cached_step(model, rounds + 1), "tiny": cached_step(tiny, rounds + 1)}, rounds)
    recomputed = best_times({"recomputed": partial(model.forward, the_text(model))}, repeats)["recomputed"]
    return {
        **DECODER,
        "context": CONTEXT,
        "cached_seconds": cached["cached"],
        "recomputed_seconds": recomputed,
        "cached_rounds": rounds,
        "breakdown": breakdown(model, repeats),
        "tiny_widths": {"d_model": TINY["d_model"], "dim_feedforward": TINY["dim_feedforward"]},
        "tiny_cached_seconds": cached["tiny"],
        "ratios": {
            "recomputed_over_cached_time": recomputed / cached["cached"],
            "tiny_over_cached_time": cached["tiny"] / cached["cached"],
        },
    }


def report(result: dict) -> list[str]:
    lines = [
        f"one generated token at a context of {result['context']} (target: cached >= 20x faster):",
        f"  cached {result['cached_seconds'] * 1e3:.2f} ms, recomputed {result['recomputed_seconds'] * 1e3:.1f} ms, "
        f"ratio {result['ratios']['recomputed_over_cached_time']:.0f}; the same cached step at tiny widths "
        f"{result['tiny_cached_seconds'] * 1e3:.2f} ms ({result['ratios']['tiny_over_cached_time']:.0%}); "
        f"cached steps best of {result['cached_rounds']} interleaved rounds",
    ]
    for kind, b in result["breakdown"].items():
        shares = ", ".join(f"{part} {share:.0%}" for part, share in b["shares"].items())
        lines.append(f"  {kind} ({b['total'] * 1e3:.1f} ms): {shares}")
    return lines
