"""`make bench` section "backward" (chapter 10): forward and backward, like with like, against PyTorch's fused kernel.

A training step runs the forward, keeps what the backward needs, and runs the backward. At B·H = 32,
T = 1024 and at B·H = 8, T = 4096 (float32, head width 64), timed in interleaved rounds:

- plain NumPy: the reference forward keeps the (T, S) weights P; the backward reads them (8·N·T·S·Dh
  flops: dV, dP, dQ and dK, each a product as large as one of the forward's two);
- memory-efficient NumPy: the blocked forward keeps only O and the log-sum-exp; the backward recomputes
  each tile's scores from Q and K (10·N·T·S·Dh flops, 2.5 times the forward's 4·N·T·S·Dh), FlashAttention's
  trade of arithmetic for memory; also with the sequences split over the cores (one-thread BLAS each),
  as chapter 7 does for the forward;
- PyTorch autograd through its fused kernel (4-D input, under sdpa_kernel(FLASH_ATTENTION)), whose
  backward also recomputes.

Then the two NumPy backwards alone, each handed what its forward kept, and, to show where their time
goes, their matrix products alone (the same products on the same shapes, into preallocated outputs; the
rest of a backward's time is its element-wise passes: exp, D, dS), and how much the two backwards' times
vary from round to round (slowest over fastest, in as many more rounds). The peak extra memory of each NumPy
step and backward (tracemalloc), and the recomputing backward's time against its block size at
B·H = 8, T = 4096.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from bench_common import HEAD_DIM, qkv
from threadpoolctl import threadpool_limits
from torch.nn.attention import SDPBackend, sdpa_kernel

from selfattention import memory_efficient_attention, memory_efficient_attention_backward, scaled_dot_product_attention
from selfattention.backward import _attention_backward_core
from selfattention.interop.sdpa import as_4d_tensors
from selfattention.measure import best_times, peak_bytes

#: The package modules whose code this section times.
SOURCES = ("backward", "efficient", "attention", "interop.sdpa", "measure")

SIZES = ((32, 1024), (8, 4096))  # (B·H, T)
BLOCK_SIZE = 512
SWEEP_BLOCKS = (128, 256, 512, 1024, 2048)  # at the larger size
FLOPS_PER_NTSD = {"forward": 4, "plain_backward": 8, "efficient_backward": 10}
FLOPS = {  # per N·T·S·Dh, of each timed call
    "plain_step": FLOPS_PER_NTSD["forward"] + FLOPS_PER_NTSD["plain_backward"],
    "efficient_step": FLOPS_PER_NTSD["forward"] + FLOPS_PER_NTSD["efficient_backward"],
    "efficient_step_split": FLOPS_PER_NTSD["forward"] + FLOPS_PER_NTSD["efficient_backward"],
    "fused_step": FLOPS_PER_NTSD["forward"] + FLOPS_PER_NTSD["efficient_backward"],
    "plain_backward": FLOPS_PER_NTSD["plain_backward"],
    "efficient_backward": FLOPS_PER_NTSD["efficient_backward"],
    "plain_backward_products": FLOPS_PER_NTSD["plain_backward"],
    "efficient_backward_products": FLOPS_PER_NTSD["efficient_backward"],
}


def plain_backward(grad_out, q, k, v, out, weights) -> tuple:
    """The backward of the reference forward, from the weights P it kept."""
    return _attention_backward_core(grad_out, q, k, v, weights, out, 1 / np.sqrt(HEAD_DIM))


def plain_step(q, k, v, grad_out) -> tuple:
    out, weights = scaled_dot_product_attention(q, k, v)
    return plain_backward(grad_out, q, k, v, out, weights)


def efficient_step(q, k, v, grad_out, block_size: int = BLOCK_SIZE) -> tuple:
    out, lse = memory_efficient_attention(q, k, v, block_size=block_size, return_lse=True)
    return memory_efficient_attention_backward(grad_out, q, k, v, out, lse, block_size=block_size)


def efficient_step_split(q, k, v, grad_out) -> tuple:
    """`efficient_step` with the sequences split over the cores, each thread on a one-thread BLAS."""
    groups = np.array_split(np.arange(len(q)), min(os.cpu_count() or 1, len(q)))
    parts = [slice(int(g[0]), int(g[-1]) + 1) for g in groups]
    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(len(parts)) as pool:
        grads = list(pool.map(lambda p: efficient_step(q[p], k[p], v[p], grad_out[p]), parts))
    return tuple(np.concatenate([g[i] for g in grads]) for i in range(3))


def fused_step(tensors, grad) -> None:
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(*tensors)
        torch.autograd.grad(out, tensors, grad)


def plain_products(grad_out, q, k, v, weights, outputs) -> None:
    """The plain backward's four products alone: P^T dO, dO V^T, dS K and dS^T Q (P stands in for dS)."""
    grad_qkv, grad_s = outputs
    np.matmul(np.swapaxes(weights, -1, -2), grad_out, out=grad_qkv)
    np.matmul(grad_out, np.swapaxes(v, -1, -2), out=grad_s)
    np.matmul(weights, k, out=grad_qkv)
    np.matmul(np.swapaxes(weights, -1, -2), q, out=grad_qkv)


def efficient_products(grad_out, q, k, v, block: int, outputs) -> None:
    """The recomputing backward's five products per tile alone: S = Q Kᵀ, Pᵀ dO, dO Vᵀ, dS K, dSᵀ Q.

    T must be a multiple of ``block`` (every tile full), as at the sizes timed here.
    """
    grad_rows, tile, tile2 = outputs
    T = q.shape[-2]
    for r in range(0, T, block):
        q_rows, grad_out_rows = q[:, r : r + block], grad_out[:, r : r + block]
        for c in range(0, T, block):
            k_cols, v_cols = k[:, c : c + block], v[:, c : c + block]
            np.matmul(q_rows, np.swapaxes(k_cols, -1, -2), out=tile)
            np.matmul(np.swapaxes(tile, -1, -2), grad_out_rows, out=grad_rows)
            np.matmul(grad_out_rows, np.swapaxes(v_cols, -1, -2), out=tile2)
            np.matmul(tile2, k_cols, out=grad_rows)
            np.matmul(np.swapaxes(tile2, -1, -2), q_rows, out=grad_rows)


def round_spread(calls: dict, rounds: int) -> dict:
    """Slowest over fastest of each call's times in `rounds` more interleaved rounds: how much one best-of-N says."""
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: max(t) / min(t) for name, t in times.items()}


def one_size(sequences: int, T: int, repeats: int) -> dict:
    q, k, v = qkv(sequences, T, seed=3)
    grad_out = np.random.default_rng(4).standard_normal(q.shape, dtype=np.float32)
    tensors = tuple(t.requires_grad_() for t in as_4d_tensors(q, k, v))
    t_grad = torch.from_numpy(grad_out).reshape(tensors[0].shape)
    out, weights = scaled_dot_product_attention(q, k, v)
    out2, lse = memory_efficient_attention(q, k, v, block_size=BLOCK_SIZE, return_lse=True)
    block = min(BLOCK_SIZE, T)
    plain_outputs = (np.empty_like(q), np.empty_like(weights))
    efficient_outputs = (np.empty((sequences, block, HEAD_DIM), np.float32),) + tuple(
        np.empty((sequences, block, block), np.float32) for _ in range(2)
    )
    calls = {
        "plain_step": partial(plain_step, q, k, v, grad_out),
        "efficient_step": partial(efficient_step, q, k, v, grad_out),
        "efficient_step_split": partial(efficient_step_split, q, k, v, grad_out),
        "fused_step": partial(fused_step, tensors, t_grad),
        "plain_backward": partial(plain_backward, grad_out, q, k, v, out, weights),
        "efficient_backward": partial(
            memory_efficient_attention_backward, grad_out, q, k, v, out2, lse, block_size=BLOCK_SIZE
        ),
        "plain_backward_products": partial(plain_products, grad_out, q, k, v, weights, plain_outputs),
        "efficient_backward_products": partial(efficient_products, grad_out, q, k, v, block, efficient_outputs),
    }
    seconds = best_times(calls, repeats)
    spread = round_spread({name: calls[name] for name in ("plain_backward", "efficient_backward")}, repeats)
    ntsd = sequences * T * T * HEAD_DIM
    peaks = {name: peak_bytes(calls[name]) for name in ("plain_backward", "efficient_backward")}
    steps = {name: calls[name] for name in ("plain_step", "efficient_step")}
    del calls, weights, plain_outputs, efficient_outputs  # free P before the steps build their own
    peaks.update({name: peak_bytes(call) for name, call in steps.items()})
    return {
        "sequences": sequences,
        "T": T,
        "seconds": seconds,
        "gflops": {name: FLOPS[name] * ntsd / seconds[name] / 1e9 for name in seconds},
        "peak_extra_bytes": peaks,
        "round_spread": spread,
    }


def block_sweep(repeats: int, sequences: int = 8, T: int = 4096) -> dict:
    """The recomputing backward alone at several block sizes, in interleaved rounds."""
    q, k, v = qkv(sequences, T, seed=3)
    grad_out = np.random.default_rng(4).standard_normal(q.shape, dtype=np.float32)
    out, lse = memory_efficient_attention(q, k, v, block_size=BLOCK_SIZE, return_lse=True)
    calls = {
        str(b): partial(memory_efficient_attention_backward, grad_out, q, k, v, out, lse, block_size=b)
        for b in SWEEP_BLOCKS
    }
    seconds = best_times(calls, repeats)
    ntsd = sequences * T * T * HEAD_DIM
    return {
        "sequences": sequences,
        "T": T,
        "seconds": seconds,
        "gflops": {b: FLOPS["efficient_backward"] * ntsd / s / 1e9 for b, s in seconds.items()},
    }


def run(repeats: int) -> dict:
    results = {f"{n}x{T}": one_size(n, T, repeats) for n, T in SIZES}
    sweep = block_sweep(repeats)
    ratios = {}
    for key, r in results.items():
        s, m = r["seconds"], r["peak_extra_bytes"]
        ratios[key] = {
            "plain_step_over_fused": s["plain_step"] / s["fused_step"],
            "efficient_step_over_fused": s["efficient_step"] / s["fused_step"],
            "efficient_step_split_over_fused": s["efficient_step_split"] / s["fused_step"],
            "efficient_step_over_plain_step": s["efficient_step"] / s["plain_step"],
            "efficient_backward_over_plain_backward": s["efficient_backward"] / s["plain_backward"],
            "efficient_products_over_plain_products": s["efficient_backward_products"] / s["plain_backward_products"],
            "plain_backward_products_share": s["plain_backward_products"] / s["plain_backward"],
            "efficient_backward_products_share": s["efficient_backward_products"] / s["efficient_backward"],
            "efficient_step_over_plain_step_memory": m["efficient_step"] / m["plain_step"],
            "efficient_backward_over_plain_backward_memory": m["efficient_backward"] / m["plain_backward"],
        }
    best = min(sweep["seconds"].values())
    ratios["block_sweep"] = {b: seconds / best for b, seconds in sweep["seconds"].items()}
    return {
        "block_size": BLOCK_SIZE,
        "head_dim": HEAD_DIM,
        "torch_kernel": "flash",
        "flops_per_ntsd": FLOPS_PER_NTSD,
        "sizes": results,
        "block_sweep": sweep,
        "ratios": ratios,
    }


def report(result: dict) -> list[str]:
    lines = [
        "forward + backward (step), backward alone and its products alone; GFLOP/s counts 4 (forward), "
        "8 (plain backward) or 10 (recomputing backward) N·T·S·Dh"
    ]
    for key, r in result["sizes"].items():
        lines.append(f"  B*H x T = {key}:")
        for name, seconds in r["seconds"].items():
            lines.append(f"    {name:>27}: {seconds:.3f} s, {r['gflops'][name]:5.1f} GFLOP/s")
        spread = r["round_spread"]
        lines.append("    slowest/fastest round: " + ", ".join(f"{k} {v:.2f}" for k, v in spread.items()))
        lines.append(
            "    peak extra MiB: " + ", ".join(f"{k} {v / 2**20:.0f}" for k, v in r["peak_extra_bytes"].items())
        )
        lines.append("    " + ", ".join(f"{k} = {v:.2f}" for k, v in result["ratios"][key].items()))
    sweep = result["block_sweep"]
    lines.append(f"  recomputing backward against block size, B*H x T = {sweep['sequences']}x{sweep['T']}:")
    lines.append(
        "    " + ", ".join(f"{b}: {s:.3f} s ({sweep['gflops'][b]:.1f} GFLOP/s)" for b, s in sweep["seconds"].items())
    )
    return lines
