"""The README's performance section quotes the recorded run: each number it gives is computed here from
``bench-2core.json`` and must appear in the README as written. Re-recording a section fails this test
until the README says what the new run measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from selfattention.recorded import recorded_run

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
SECTION = README[README.index("## Performance (`make bench`)") : README.index("## The chapters")]


def _quotes() -> list[tuple[str, str]]:
    """(what, the text the README must hold) for every number it quotes from the recorded run."""
    attention, causal = recorded_run("attention"), recorded_run("causal")
    decoding, backward, minilm = recorded_run("decoding"), recorded_run("backward"), recorded_run("minilm")
    ratios, seconds = attention["ratios"], {(r["T"], r["implementation"]): r for r in attention["rows"]}
    mib = {key: row["peak_extra_bytes"] / 2**20 for key, row in seconds.items() if row["peak_extra_bytes"]}
    parts = attention["reference_breakdown"]["seconds"]
    share = {name: parts[name] / parts["total"] for name in ("products", "exp", "rest")}
    c, cs, cb = causal["ratios"], causal["seconds"], causal["breakdown"]["seconds"]
    b, step = backward["ratios"], decoding["breakdown"]
    return [
        ("commit", f"at commit {attention['measured']['commit'][:7]}"),
        ("GEMM rate", f"float32 GEMM {attention['gemm_gflops']:.0f} GFLOP/s"),
        ("copy rate", f"one-thread copy\n{attention['copy_gbytes_one_thread']:.1f} GB/s"),
        ("reference / fused", f"{ratios['1024']['numpy_over_fused_time']:.2f}× ("),
        (
            "reference times",
            f"{seconds[1024, 'numpy']['seconds']:.3f} s against {seconds[1024, 'torch_flash']['seconds']:.3f} s",
        ),
        (
            "split reference / fused",
            f"split over the two cores, {ratios['1024']['numpy_threads_over_fused_time']:.2f}×",
        ),
        ("blocked one call", f"one call {c['efficient_over_fused_time']:.2f}× (missed)"),
        ("blocked split", f"`split_over_threads`) {c['threads_over_fused_time']:.3f}×"),
        (
            "block sweep noise",
            f"took {causal['block_sweep_threads_seconds']['noncausal']['512'] / cs['threads_noncausal']:.0%} of that time",
        ),
        ("B·H = 32", f"at B·H = 32, {ratios['4096']['efficient_threads_over_fused_time']:.2f}×"),
        ("causal one call", f"one call {c['efficient_causal_over_fused_causal_time']:.2f}×; split"),
        ("causal split", f"split over the cores {c['threads_causal_over_fused_causal_time']:.2f}× (the same"),
        (
            "causal sweep noise",
            f"took {causal['block_sweep_threads_seconds']['causal']['512'] / cs['threads_causal']:.0%} of that time in the"
            f" block sweep's rounds, which would make it"
            f" {causal['block_sweep_threads_seconds']['causal']['512'] / cs['fused_causal']:.2f}×",
        ),
        (
            "memory share",
            f"| {ratios['8192']['efficient_over_numpy_memory']:.1%} ({mib[8192, 'efficient']:,.0f} MiB against {mib[8192, 'numpy']:,.0f} MiB)",
        ),
        (
            "math path",
            f"{ratios['4096']['math_over_fused_time']:.2f}× the time; {mib[4096, 'torch_math']:,.0f} MiB against {mib[4096, 'torch_flash']:.0f} MiB",
        ),
        ("causal / noncausal", f"{c['causal_over_noncausal_time']:.3f}×"),
        ("fused causal / noncausal", f"took {c['fused_causal_over_noncausal_time']:.2f}× of its own"),
        (
            "KV cache",
            f"{decoding['ratios']['recomputed_over_cached_time']:.0f}× ({decoding['cached_seconds'] * 1e3:.2f} ms against {decoding['recomputed_seconds'] * 1e3:.0f} ms)",
        ),
        (
            "backward memory",
            f"{b['8x4096']['efficient_step_over_plain_step_memory']:.1%}; and {b['8x4096']['efficient_step_over_plain_step']:.2f}× its time",
        ),
        (
            "backward / fused",
            f"{b['8x4096']['efficient_step_over_fused']:.2f}× as one call, {b['8x4096']['efficient_step_split_over_fused']:.2f}× split",
        ),
        (
            "MiniLM",
            f"{minilm['ratios']['numpy_over_torch_time']:.2f}× ({minilm['seconds']['numpy'] * 1e3:.1f} ms against {minilm['seconds']['torch'] * 1e3:.1f} ms; transformers {minilm['transformers']}",
        ),
        ("breakdown total", f"({parts['total']:.3f} s in all, against {seconds[1024, 'numpy']['seconds']:.3f} s"),
        (
            "breakdown shares",
            f"spends {share['products']:.0%} of\nits time in its two matrix products, {share['exp']:.0%} in `exp` and {share['rest']:.0%} in the rest",
        ),
        (
            "floor",
            f"{(share['products'] + share['exp']) * ratios['1024']['numpy_over_fused_time']:.2f}× the fused kernel's time",
        ),
        (
            "tile products",
            f"spends {cb['products']:.2f} s\nin its two matrix products ({causal['breakdown']['products_gflops']:.0f} GFLOP/s",
        ),
        ("fused call", f"whole call ({cs['fused_noncausal']:.2f} s), and {cb['exp']:.2f} s in `exp`"),
        ("exp per score", f"({causal['breakdown']['exp_ns_per_score']:.1f} ns per score"),
        (
            "split reference",
            f"({seconds[4096, 'numpy_threads']['seconds'] / seconds[4096, 'numpy']['seconds']:.2f}× one call's time) and holds {mib[4096, 'numpy_threads'] / mib[4096, 'numpy']:.2f}×",
        ),
        (
            "backward at T = 1024",
            f"it took {b['32x1024']['efficient_backward_over_plain_backward']:.2f}× the plain\nbackward's time at T = 1024",
        ),
        (
            "backward at T = 4096",
            f"and {b['8x4096']['efficient_backward_over_plain_backward']:.2f}× at T = 4096, where the order is not",
        ),
        (
            "plain backward's spread",
            f"varied by {backward['sizes']['8x4096']['round_spread']['plain_backward']:.1f}× between slowest and\nfastest",
        ),
        (
            "recomputed attention",
            f"spends {step['recomputed']['shares']['attention (scores, softmax, P V)']:.0%}\nof its recomputed time",
        ),
        (
            "cached parts",
            f"spends {step['cached']['shares']['attention (scores, softmax, P V)']:.0%} there and {step['cached']['shares']['attention' + chr(39) + 's argument checks']:.0%} in the attention's argument checks",
        ),
        ("tiny widths", f"takes {decoding['ratios']['tiny_over_cached_time']:.0%} of the real one's time"),
        *_llm_quotes(),
    ]


def _llm_quotes() -> list[tuple[str, str]]:
    """What the README quotes from the llm section."""
    llm = recorded_run("llm")
    one, two, load, mib = llm["threads"]["1"], llm["threads"]["2"], llm["load"], 2**20
    r1, r2 = llm["ratios"]["1"], llm["ratios"]["2"]
    return [
        ("llm commit", f"the llm section the same day at {llm['measured']['commit'][:7]}"),
        (
            "llm decode",
            f"at 1 thread {r1['numpy_over_torch_decode_time']:.2f}× the time per decoded token "
            f"({one['decode_tokens_per_second']['numpy']:.1f} against {one['decode_tokens_per_second']['torch']:.1f} "
            f"tokens/s), at 2 threads {r2['numpy_over_torch_decode_time']:.2f}× "
            f"({two['decode_tokens_per_second']['numpy']:.1f} against {two['decode_tokens_per_second']['torch']:.1f})",
        ),
        (
            "llm whole call",
            f"the whole call {r1['numpy_over_torch_time']:.2f}× and {r2['numpy_over_torch_time']:.2f}×; without its "
            f"cache NumPy takes {r1['uncached_over_cached_time']:.1f}× and {r2['uncached_over_cached_time']:.1f}×",
        ),
        ("llm prompt", f"same {llm['new_tokens']} tokens after a {llm['prompt_tokens']}-token chat prompt"),
        (
            "llm load",
            f"a first load (parsing the GGUF file into the cache) {load['cold_median_seconds']:.1f} s, a cached load "
            f"{load['warm_median_seconds']:.1f} s",
        ),
        (
            "llm memory",
            f"{load['cold_peak_extra_bytes'] / mib:.0f} MiB and {load['warm_peak_extra_bytes'] / mib:.0f} MiB (the "
            f"float32 weights are {llm['weights_bytes'] / mib:.0f} MiB); generating adds "
            f"{load['generate_peak_extra_bytes']['numpy']['first'] / mib:.1f} MiB (its KV cache: "
            f"{llm['kv_cache_bytes'] / mib:.1f} MiB), transformers {load['generate_peak_extra_bytes']['torch']['first'] / mib:.1f} MiB",
        ),
    ]


@pytest.mark.parametrize(("what", "text"), _quotes(), ids=[what for what, _ in _quotes()])
def test_the_readme_quotes_the_recorded_run(what, text):
    assert " ".join(text.split()) in " ".join(SECTION.split()), f"README's {what}: expected {text!r}"
