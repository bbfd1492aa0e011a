"""`make bench` section "backward" (chapter 10): forward and backward, like with like, against PyTorch's fused kernel.

A training step runs the forward, keeps what the backward needs, and runs the backward. Three ways, timed
in interleaved rounds at B·H = 32, T = 1024 and at B·H = 8, T = 4096, float32, head width 64:

- plain NumPy: the reference forward keeps the (T, S) weights P; the backward reads them (8·N·T·S·Dh
  flops: dV, dP, dQ and dK, each a product as large as the forward's two);
- memory-efficient NumPy: the blocked forward keeps only O and the log-sum-exp; the backward recomputes
  each tile's scores from Q and K (10·N·T·S·Dh flops, 2.5 times the forward's 4·N·T·S·Dh), FlashAttention's
  trade of arithmetic for memory;
- PyTorch autograd through its fused kernel (4-D input, under sdpa_kernel(FLASH_ATTENTION)), whose
  backward also recomputes.

Then the two NumPy backwards alone, each handed what its forward kept, and the peak extra memory of
each NumPy step (tracemalloc).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from bench_common import HEAD_DIM, qkv
from torch.nn.attention import SDPBackend, sdpa_kernel

from selfattention import memory_efficient_attention, memory_efficient_attention_backward, scaled_dot_product_attention
from selfattention.backward import _attention_backward_core
from selfattention.interop.sdpa import as_4d_tensors
from selfattention.measure import best_times, peak_bytes

#: The package modules whose code this section times.
SOURCES = ("backward", "efficient", "attention", "interop.sdpa", "measure")

SIZES = ((32, 1024), (8, 4096))  # (B·H, T)
BLOCK_SIZE = 512
FLOPS_PER_NTSD = {"forward": 4, "plain_backward": 8, "efficient_backward": 10}


def plain_backward(grad_out, q, k, v, out, weights) -> tuple:
    """The backward of the reference forward, from the weights P it kept."""
    return _attention_backward_core(grad_out, q, k, v, weights, out, 1 / np.sqrt(HEAD_DIM))


def plain_step(q, k, v, grad_out) -> tuple:
    out, weights = scaled_dot_product_attention(q, k, v)
    return plain_backward(grad_out, q, k, v, out, weights)


def efficient_step(q, k, v, grad_out) -> tuple:
    out, lse = memory_efficient_attention(q, k, v, block_size=BLOCK_SIZE, return_lse=True)
    return memory_efficient_attention_backward(grad_out, q, k, v, out, lse, block_size=BLOCK_SIZE)


def fused_step(tensors, grad) -> None:
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(*tensors)
        torch.autograd.grad(out, tensors, grad)


def one_size(sequences: int, T: int, repeats: int) -> dict:
    q, k, v = qkv(sequences, T, seed=3)
    grad_out = np.random.default_rng(4).standard_normal(q.shape, dtype=np.float32)
    tensors = tuple(t.requires_grad_() for t in as_4d_tensors(q, k, v))
    t_grad = torch.from_numpy(grad_out).reshape(tensors[0].shape)
    out, weights = scaled_dot_product_attention(q, k, v)
    out2, lse = memory_efficient_attention(q, k, v, block_size=BLOCK_SIZE, return_lse=True)
    calls = {
        "plain_step": partial(plain_step, q, k, v, grad_out),
        "efficient_step": partial(efficient_step, q, k, v, grad_out),
        "fused_step": partial(fused_step, tensors, t_grad),
        "plain_backward": partial(plain_backward, grad_out, q, k, v, out, weights),
        "efficient_backward": partial(
            memory_efficient_attention_backward, grad_out, q, k, v, out2, lse, block_size=BLOCK_SIZE
        ),
    }
    seconds = best_times(calls, repeats)
    ntsd = sequences * T * T * HEAD_DIM
    flops = {
        "plain_step": (FLOPS_PER_NTSD["forward"] + FLOPS_PER_NTSD["plain_backward"]) * ntsd,
        "efficient_step": (FLOPS_PER_NTSD["forward"] + FLOPS_PER_NTSD["efficient_backward"]) * ntsd,
        "fused_step": (FLOPS_PER_NTSD["forward"] + FLOPS_PER_NTSD["efficient_backward"]) * ntsd,
        "plain_backward": FLOPS_PER_NTSD["plain_backward"] * ntsd,
        "efficient_backward": FLOPS_PER_NTSD["efficient_backward"] * ntsd,
    }
    del weights
    peaks = {name: peak_bytes(calls[name]) for name in ("plain_step", "efficient_step")}
    return {
        "sequences": sequences,
        "T": T,
        "seconds": seconds,
        "gflops": {name: flops[name] / seconds[name] / 1e9 for name in seconds},
        "peak_extra_bytes": peaks,
    }


def run(repeats: int) -> dict:
    results = {f"{n}x{T}": one_size(n, T, repeats) for n, T in SIZES}
    ratios = {}
    for key, r in results.items():
        s = r["seconds"]
        ratios[key] = {
            "plain_step_over_fused": s["plain_step"] / s["fused_step"],
            "efficient_step_over_fused": s["efficient_step"] / s["fused_step"],
            "efficient_step_over_plain_step": s["efficient_step"] / s["plain_step"],
            "efficient_backward_over_plain_backward": s["efficient_backward"] / s["plain_backward"],
            "efficient_step_over_plain_step_memory": r["peak_extra_bytes"]["efficient_step"]
            / r["peak_extra_bytes"]["plain_step"],
        }
    return {
        "block_size": BLOCK_SIZE,
        "head_dim": HEAD_DIM,
        "torch_kernel": "flash",
        "flops_per_ntsd": FLOPS_PER_NTSD,
        "sizes": results,
        "ratios": ratios,
    }


def report(result: dict) -> list[str]:
    lines = [
        "forward + backward (step) and backward alone; GFLOP/s counts 4 + 8 (plain) or 4 + 10 (recomputing) N·T·S·Dh"
    ]
    for key, r in result["sizes"].items():
        lines.append(f"  B*H x T = {key}:")
        for name, seconds in r["seconds"].items():
            lines.append(f"    {name:>20}: {seconds:.3f} s, {r['gflops'][name]:.1f} GFLOP/s")
        lines.append("    " + ", ".join(f"{k} = {v:.2f}" for k, v in result["ratios"][key].items()))
    return lines
