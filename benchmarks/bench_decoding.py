"""`make bench` section "decoding" (chapter 9): one generated token of a small decoder, with and without a KV cache.

The decoder of chapter 9 (vocabulary 256, width 256, 8 query and 2 key/value heads, 4 blocks, feed-forward
1024), at a context of 1024: the best time of one generated token with the cache, and recomputing the
whole text. Then where each step's time goes, from one run: every call to the functions a decoder block
makes (the projections, the attention's scores, softmax and P V, the feed-forward layer, the LayerNorms,
RoPE and masks) is timed as the step runs, and what is left over is the rest (the logits, the cache's
update, reshapes and Python between the calls). Last, the same cached step of a decoder with the same
layers and heads but tiny widths (every product then costs almost nothing): its time is the per-call
overhead of the Python and the argument checks that every step pays whatever the model's size.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np
from bench_common import ROOT  # noqa: F401  (puts src/ on the path)

from selfattention import TinyDecoder, decoding, params
from selfattention.measure import decoding_step_times

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
PARTS = {  # the names decoder_block calls, by part
    "project_qkv": "projections",
    "scaled_dot_product_attention": "attention (scores, softmax, P V)",
    "feed_forward": "feed-forward",
    "layer_norm": "LayerNorms",
    "apply_rope": "RoPE and masks",
    "causal_mask": "RoPE and masks",
}


@contextmanager
def timed_parts(totals: dict[str, float]):
    """Time every call decoder_block makes to the functions in PARTS, and to the output projection."""
    originals = {name: getattr(decoding, name) for name in PARTS}
    linear_call = params.Linear.__call__

    inside = []  # a call made inside a timed call (feed_forward's Linear) counts for the outer one only

    def wrap(function, part):
        def timed(*args, **kwargs):
            if inside:
                return function(*args, **kwargs)
            inside.append(part)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                totals[part] = totals.get(part, 0.0) + time.perf_counter() - start
                inside.pop()

        return timed

    for name, function in originals.items():
        setattr(decoding, name, wrap(function, PARTS[name]))
    params.Linear.__call__ = wrap(linear_call, "projections")  # the attention's output projection
    try:
        yield totals
    finally:
        for name, function in originals.items():
            setattr(decoding, name, function)
        params.Linear.__call__ = linear_call


def breakdown(model: TinyDecoder, repeats: int) -> dict:
    """Seconds per part of one cached and one recomputed step, from the fastest of `repeats` timed steps."""
    text = np.random.default_rng(0).integers(0, model.vocab_size, size=CONTEXT + 1)
    caches = model.new_caches(max_len=CONTEXT + repeats + 2)
    model.forward(text[:CONTEXT], caches)
    steps = {"cached": lambda: model.forward(text[CONTEXT:], caches), "recomputed": lambda: model.forward(text)}
    result = {}
    for kind, step in steps.items():
        step()  # warm-up
        best = None
        for _ in range(repeats):
            with timed_parts({}) as parts:
                start = time.perf_counter()
                step()
                total = time.perf_counter() - start
            if best is None or total < best[0]:
                best = (total, dict(parts))
        total, parts = best
        parts["rest"] = max(total - sum(parts.values()), 0.0)
        result[kind] = {"total": total, "parts": parts, "shares": {p: s / total for p, s in parts.items()}}
        if kind == "cached":
            caches = model.new_caches(max_len=CONTEXT + repeats + 2)  # the cached runs appended tokens
    return result


def run(repeats: int) -> dict:
    model = TinyDecoder.random(**DECODER, seed=0)
    step = decoding_step_times(model, CONTEXT, repeats)
    tiny = decoding_step_times(TinyDecoder.random(**TINY, seed=0), CONTEXT, repeats)
    return {
        **DECODER,
        "context": CONTEXT,
        "cached_seconds": step["cached"],
        "recomputed_seconds": step["recomputed"],
        "breakdown": breakdown(model, repeats),
        "tiny_widths": {"d_model": TINY["d_model"], "dim_feedforward": TINY["dim_feedforward"]},
        "tiny_cached_seconds": tiny["cached"],
        "ratios": {
            "recomputed_over_cached_time": step["recomputed"] / step["cached"],
            "tiny_over_cached_time": tiny["cached"] / step["cached"],
        },
    }


def report(result: dict) -> list[str]:
    lines = [
        f"one generated token at a context of {result['context']} (target: cached >= 20x faster):",
        f"  cached {result['cached_seconds'] * 1e3:.2f} ms, recomputed {result['recomputed_seconds'] * 1e3:.1f} ms, "
        f"ratio {result['ratios']['recomputed_over_cached_time']:.0f}; the same cached step at tiny widths "
        f"{result['tiny_cached_seconds'] * 1e3:.2f} ms ({result['ratios']['tiny_over_cached_time']:.0%})",
    ]
    for kind, b in result["breakdown"].items():
        shares = ", ".join(f"{part} {share:.0%}" for part, share in b["shares"].items())
        lines.append(f"  {kind} ({b['total'] * 1e3:.1f} ms): {shares}")
    return lines
