"""`make bench` section "causal" (chapters 7 and 9): the memory-efficient version against the fused kernel at length.

B·H = 8, T = S = 4096, head width 64, float32: memory-efficient attention with and without a causal
mask (the causal one skips the tiles above the diagonal) against PyTorch's fused kernel with and without
its causal mask, all four timed in interleaved rounds.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from bench_common import qkv
from torch.nn.attention import SDPBackend, sdpa_kernel

from selfattention import memory_efficient_attention
from selfattention.interop.sdpa import as_4d_tensors
from selfattention.measure import best_times, peak_bytes

#: The package modules whose code this section times.
SOURCES = ("efficient", "interop.sdpa", "measure")

SEQUENCES, T = 8, 4096
BLOCK_SIZE = 512


def fused(tensors: tuple, is_causal: bool) -> None:
    with torch.no_grad(), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        F.scaled_dot_product_attention(*tensors, is_causal=is_causal)


def run(repeats: int) -> dict:
    q, k, v = qkv(SEQUENCES, T, seed=2)
    tensors = as_4d_tensors(q, k, v)
    calls = {
        "efficient_causal": partial(memory_efficient_attention, q, k, v, block_size=BLOCK_SIZE, is_causal=True),
        "efficient_noncausal": partial(memory_efficient_attention, q, k, v, block_size=BLOCK_SIZE),
        "fused_causal": partial(fused, tensors, True),
        "fused_noncausal": partial(fused, tensors, False),
    }
    seconds = best_times(calls, repeats)
    peaks = {name: peak_bytes(calls[name]) for name in ("efficient_causal", "efficient_noncausal")}
    return {
        "sequences": SEQUENCES,
        "T": T,
        "block_size": BLOCK_SIZE,
        "torch_kernel": "flash",
        "seconds": seconds,
        "peak_extra_bytes": peaks,
        "ratios": {
            "efficient_over_fused_time": seconds["efficient_noncausal"] / seconds["fused_noncausal"],
            "efficient_causal_over_fused_causal_time": seconds["efficient_causal"] / seconds["fused_causal"],
            "causal_over_noncausal_time": seconds["efficient_causal"] / seconds["efficient_noncausal"],
            "fused_causal_over_noncausal_time": seconds["fused_causal"] / seconds["fused_noncausal"],
            "causal_over_noncausal_memory": peaks["efficient_causal"] / peaks["efficient_noncausal"],
        },
    }


def report(result: dict) -> list[str]:
    lines = [
        f"B*H = {result['sequences']}, T = S = {result['T']} (targets: efficient within 1.5x of the fused kernel):"
    ]
    lines += [f"  {name:>20}: {seconds:.3f} s" for name, seconds in result["seconds"].items()]
    lines.append("  " + ", ".join(f"{key} = {value:.2f}" for key, value in result["ratios"].items()))
    return lines
