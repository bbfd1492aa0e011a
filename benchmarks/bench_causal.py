"""`make bench` section "causal" (chapters 7 and 9): the memory-efficient version against the fused kernel at length.

B·H = 8, T = S = 4096, head width 64, float32: memory-efficient attention with and without a causal
mask (the causal one skips the tiles above the diagonal), as one call and split over the cores'
threads, against PyTorch's fused kernel with and without its causal mask, all timed in interleaved
rounds. Then where the single call's time goes (its matrix products alone, its exp alone, the rest),
and the split version's time for several block sizes.
"""

from __future__ import annotations

import time
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from bench_common import HEAD_DIM, attention_flops, qkv
from torch.nn.attention import SDPBackend, sdpa_kernel

from selfattention import memory_efficient_attention, split_over_threads
from selfattention.interop.sdpa import as_4d_tensors
from selfattention.measure import best_times, peak_bytes

#: The package modules whose code this section times.
SOURCES = ("efficient", "parallel", "interop.sdpa", "measure")

SEQUENCES, T = 8, 4096
BLOCK_SIZE = 512
BLOCK_SWEEP = (128, 256, 512, 1024)


def fused(tensors: tuple, is_causal: bool) -> None:
    with torch.no_grad(), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        F.scaled_dot_product_attention(*tensors, is_causal=is_causal)


def products_only(q: np.ndarray, k: np.ndarray, v: np.ndarray, block: int) -> None:
    """The memory-efficient loop's two matrix products per tile, nothing else."""
    for i in range(0, T, block):
        for j in range(0, T, block):
            np.matmul(np.matmul(q[:, i : i + block], np.swapaxes(k[:, j : j + block], -1, -2)), v[:, j : j + block])


def exp_only(tile: np.ndarray, out: np.ndarray, tiles: int) -> None:
    """As many float32 exps, tile by tile, as the loop takes: one per score."""
    for _ in range(tiles):
        np.exp(tile, out=out)


def breakdown(q: np.ndarray, k: np.ndarray, v: np.ndarray, repeats: int) -> dict:
    tile = np.random.default_rng(0).uniform(-20, 0, (SEQUENCES, BLOCK_SIZE, BLOCK_SIZE)).astype(np.float32)
    out = np.empty_like(tile)
    tiles = (T // BLOCK_SIZE) ** 2
    seconds = best_times(
        {
            "total": partial(memory_efficient_attention, q, k, v, block_size=BLOCK_SIZE),
            "products": partial(products_only, q, k, v, BLOCK_SIZE),
            "exp": partial(exp_only, tile, out, tiles),
        },
        repeats,
    )
    seconds["rest"] = max(seconds["total"] - seconds["products"] - seconds["exp"], 0.0)
    return {
        "block_size": BLOCK_SIZE,
        "seconds": seconds,
        "products_gflops": attention_flops(SEQUENCES, T) / seconds["products"] / 1e9,
        "exp_ns_per_score": seconds["exp"] / (SEQUENCES * T * T) * 1e9,
    }


def run(repeats: int) -> dict:
    q, k, v = qkv(SEQUENCES, T, seed=2)
    tensors = as_4d_tensors(q, k, v)
    split = partial(split_over_threads, memory_efficient_attention, q, k, v)
    calls = {
        "efficient_causal": partial(memory_efficient_attention, q, k, v, block_size=BLOCK_SIZE, is_causal=True),
        "efficient_noncausal": partial(memory_efficient_attention, q, k, v, block_size=BLOCK_SIZE),
        "threads_causal": partial(split, block_size=BLOCK_SIZE, is_causal=True),
        "threads_noncausal": partial(split, block_size=BLOCK_SIZE),
        "fused_causal": partial(fused, tensors, True),
        "fused_noncausal": partial(fused, tensors, False),
    }
    start = time.perf_counter()
    seconds = best_times(calls, repeats)
    peaks = {name: peak_bytes(calls[name]) for name in ("efficient_causal", "efficient_noncausal")}
    sweep = {
        kind: best_times(
            {str(b): partial(split, block_size=b, is_causal=kind == "causal") for b in BLOCK_SWEEP},
            repeats,
        )
        for kind in ("noncausal", "causal")
    }
    return {
        "sequences": SEQUENCES,
        "T": T,
        "head_dim": HEAD_DIM,
        "block_size": BLOCK_SIZE,
        "torch_kernel": "flash",
        "seconds": seconds,
        "peak_extra_bytes": peaks,
        "breakdown": breakdown(q, k, v, repeats),
        "block_sweep_threads_seconds": sweep,
        "wall_seconds": time.perf_counter() - start,
        "ratios": {
            "efficient_over_fused_time": seconds["efficient_noncausal"] / seconds["fused_noncausal"],
            "efficient_causal_over_fused_causal_time": seconds["efficient_causal"] / seconds["fused_causal"],
            "threads_over_fused_time": seconds["threads_noncausal"] / seconds["fused_noncausal"],
            "threads_causal_over_fused_causal_time": seconds["threads_causal"] / seconds["fused_causal"],
            "causal_over_noncausal_time": seconds["efficient_causal"] / seconds["efficient_noncausal"],
            "fused_causal_over_noncausal_time": seconds["fused_causal"] / seconds["fused_noncausal"],
            "causal_over_noncausal_memory": peaks["efficient_causal"] / peaks["efficient_noncausal"],
        },
    }


def report(result: dict) -> list[str]:
    lines = [f"B*H = {result['sequences']}, T = S = {result['T']} (target: efficient within 1.5x of the fused kernel):"]
    lines += [f"  {name:>20}: {seconds:.3f} s" for name, seconds in result["seconds"].items()]
    lines.append("  " + ", ".join(f"{key} = {value:.2f}" for key, value in result["ratios"].items()))
    parts = result["breakdown"]["seconds"]
    lines.append(
        "  one call, block 512: "
        + ", ".join(f"{name} {seconds:.3f} s" for name, seconds in parts.items())
        + f"; products at {result['breakdown']['products_gflops']:.0f} GFLOP/s, "
        f"exp {result['breakdown']['exp_ns_per_score']:.2f} ns per score"
    )
    for kind, sweep in result["block_sweep_threads_seconds"].items():
        lines.append(
            f"  split over threads, {kind}, by block size: " + ", ".join(f"{b}: {s:.3f} s" for b, s in sweep.items())
        )
    return lines
