"""`make bench` section "decoding" (chapter 9): one generated token of a small decoder, with and without a KV cache."""

from __future__ import annotations

from bench_common import ROOT  # noqa: F401  (puts src/ on the path)

from selfattention import TinyDecoder
from selfattention.measure import decoding_step_times

#: The package modules whose code this section times.
SOURCES = ("decoding", "measure")

# The decoder: vocabulary, width, query and key/value heads, layers, feed-forward width
DECODER = {
    "vocab_size": 256,
    "d_model": 256,
    "num_heads": 8,
    "num_kv_heads": 2,
    "num_layers": 4,
    "dim_feedforward": 1024,
}
CONTEXT = 1024


def run(repeats: int) -> dict:
    model = TinyDecoder.random(**DECODER, seed=0)
    step = decoding_step_times(model, CONTEXT, repeats)
    return {
        **DECODER,
        "context": CONTEXT,
        "cached_seconds": step["cached"],
        "recomputed_seconds": step["recomputed"],
        "ratios": {"recomputed_over_cached_time": step["recomputed"] / step["cached"]},
    }


def report(result: dict) -> list[str]:
    return [
        f"one generated token at a context of {result['context']} (target: cached >= 20x faster):",
        f"  cached {result['cached_seconds'] * 1e3:.2f} ms, recomputed {result['recomputed_seconds'] * 1e3:.1f} ms, "
        f"ratio {result['ratios']['recomputed_over_cached_time']:.0f}",
    ]
