"""`make bench` section "attention" (chapters 2 and 7): the forward pass against PyTorch's fused kernel.

B·H = 32 sequences of head width 64, float32, T = S in {256, 1024, 4096}: the NumPy reference, the
memory-efficient NumPy version, PyTorch's fused CPU kernel (4-D input, run under sdpa_kernel so it
cannot fall back) and, to show what a 3-D call costs, PyTorch's unfused math path. Both NumPy versions
also run at T = 8192, for memory. Each length's implementations are timed in interleaved rounds.
Besides time and peak memory, each row counts the bytes the implementation moves to and from memory
(arrays too large for the caches) for the roofline of chapter 7.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from bench_common import HEAD_DIM, attention_flops, copy_gbytes, gemm_gflops, qkv, torch_peak
from torch.nn.attention import SDPBackend, sdpa_kernel

from selfattention import memory_efficient_attention, scaled_dot_product_attention, split_over_threads
from selfattention.interop.sdpa import as_4d_tensors
from selfattention.measure import best_times, peak_bytes

#: The package modules whose code this section times.
SOURCES = ("attention", "efficient", "parallel", "interop.sdpa", "measure")

SEQUENCES = 32
LENGTHS = (256, 1024, 4096)
LONG = 8192  # NumPy versions only: the reference's scores alone take 8 GiB
BLOCK_SIZE = 512
KERNELS = {"torch_flash": SDPBackend.FLASH_ATTENTION, "torch_math": SDPBackend.MATH}


def torch_call(tensors: tuple, backend: SDPBackend) -> None:
    with torch.no_grad(), sdpa_kernel(backend):
        F.scaled_dot_product_attention(*tensors)


def bytes_moved(name: str, T: int, sequences: int = SEQUENCES, block: int = BLOCK_SIZE) -> int:
    """Bytes to and from main memory, counted from the arrays too large to stay in the caches.

    Q, K, V and the output move at least once. The reference writes the (T, S) float32 weights, which it
    returns, and passes over them 9 more times (max; subtract, exp and divide each read and write; sum;
    P V), 10 passes in all, as does the math path. The memory-efficient version keeps one (block, block)
    tile per sequence and reads K and V again for each block of queries. The fused kernel's tiling is
    its own: counted at its lower bound, Q, K, V and O once.
    """
    qkvo = 4 * sequences * T * HEAD_DIM * 4
    if name.startswith(("numpy", "torch_math")):
        return qkvo + 10 * sequences * T * T * 4
    if name.startswith("efficient"):
        return qkvo + (-(-T // block) - 1) * 2 * sequences * T * HEAD_DIM * 4
    return qkvo


def reference_breakdown(repeats: int, T: int = 1024) -> dict:
    """Where the reference's time goes at T = 1024: its two products alone, its exps alone, and the rest."""
    q, k, v = qkv(SEQUENCES, T)
    scores = np.matmul(q, np.swapaxes(k, -1, -2))
    shifted = scores - scores.max(axis=-1, keepdims=True)
    buffer = np.empty_like(shifted)
    seconds = best_times(
        {
            "total": partial(scaled_dot_product_attention, q, k, v),
            "products": lambda: np.matmul(np.matmul(q, np.swapaxes(k, -1, -2), out=buffer), v),
            "exp": partial(np.exp, shifted, out=buffer),
        },
        repeats,
    )
    seconds["rest"] = max(seconds["total"] - seconds["products"] - seconds["exp"], 0.0)
    return {"T": T, "seconds": seconds}


def run(repeats: int) -> dict:
    result = {
        "sizes": {"sequences": SEQUENCES, "head_dim": HEAD_DIM, "dtype": "float32", "block_size": BLOCK_SIZE},
        "gemm_gflops": gemm_gflops(repeats),
        "copy_gbytes_one_thread": copy_gbytes(repeats),
        "rows": [],
    }
    rows = {}
    for T in (*LENGTHS, LONG):
        q, k, v = qkv(SEQUENCES, T)
        calls = {
            "numpy": partial(scaled_dot_product_attention, q, k, v),
            "efficient": partial(memory_efficient_attention, q, k, v, block_size=BLOCK_SIZE),
        }
        if T != LONG:
            calls["numpy_threads"] = partial(split_over_threads, scaled_dot_product_attention, q, k, v)
            calls["efficient_threads"] = partial(
                split_over_threads, memory_efficient_attention, q, k, v, block_size=BLOCK_SIZE
            )
            tensors = as_4d_tensors(q, k, v)
            calls.update({name: partial(torch_call, tensors, backend) for name, backend in KERNELS.items()})
        seconds = best_times(calls, repeats if T != LONG else 1)
        for name, call in calls.items():
            if name.startswith("torch"):
                peak = torch_peak(SEQUENCES, T, kernel=name.removeprefix("torch_"))
            else:
                peak = peak_bytes(call)  # tracemalloc follows the split's threads too
            rows[(T, name)] = {
                "T": T,
                "implementation": name,
                "seconds": seconds[name],
                "peak_extra_bytes": peak,
                "gflops": attention_flops(SEQUENCES, T) / seconds[name] / 1e9,
                "bytes_moved": bytes_moved(name, T),
                "memory_method": "peak RSS of a child process" if name.startswith("torch") else "tracemalloc",
            }
    result["rows"] = list(rows.values())
    result["reference_breakdown"] = reference_breakdown(repeats)
    result["ratios"] = {
        str(T): {
            **(
                {
                    "numpy_over_fused_time": rows[(T, "numpy")]["seconds"] / rows[(T, "torch_flash")]["seconds"],
                    "efficient_over_fused_time": rows[(T, "efficient")]["seconds"]
                    / rows[(T, "torch_flash")]["seconds"],
                    "math_over_fused_time": rows[(T, "torch_math")]["seconds"] / rows[(T, "torch_flash")]["seconds"],
                    "numpy_threads_over_fused_time": rows[(T, "numpy_threads")]["seconds"]
                    / rows[(T, "torch_flash")]["seconds"],
                    "efficient_threads_over_fused_time": rows[(T, "efficient_threads")]["seconds"]
                    / rows[(T, "torch_flash")]["seconds"],
                }
                if T != LONG
                else {}
            ),
            "efficient_over_numpy_time": rows[(T, "efficient")]["seconds"] / rows[(T, "numpy")]["seconds"],
            "efficient_over_numpy_memory": rows[(T, "efficient")]["peak_extra_bytes"]
            / rows[(T, "numpy")]["peak_extra_bytes"],
        }
        for T in (*LENGTHS, LONG)
    }
    return result


def report(result: dict) -> list[str]:
    lines = [
        f"B*H = {SEQUENCES}, Dh = {HEAD_DIM}, float32; float32 GEMM {result['gemm_gflops']:.1f} GFLOP/s, "
        f"one-thread copy {result['copy_gbytes_one_thread']:.1f} GB/s",
        f"{'T':>6} {'implementation':>15} {'time (s)':>10} {'GFLOP/s':>9} {'% of GEMM':>10} {'peak extra (MiB)':>17}",
    ]
    for row in result["rows"]:
        peak = "n/a" if row["peak_extra_bytes"] is None else f"{row['peak_extra_bytes'] / 2**20:,.0f}"
        share = 100 * row["gflops"] / result["gemm_gflops"]
        lines.append(
            f"{row['T']:>6} {row['implementation']:>15} {row['seconds']:>10.4f} {row['gflops']:>9.1f} "
            f"{share:>9.0f}% {peak:>17}"
        )
    parts = result["reference_breakdown"]
    lines.append(
        f"reference at T = {parts['T']}: " + ", ".join(f"{name} {sec:.3f} s" for name, sec in parts["seconds"].items())
    )
    lines.append("ratios (targets: numpy/fused time <= 2 at T=1024; efficient/numpy memory <= 0.10 at T=8192)")
    for T, ratio in result["ratios"].items():
        lines.append(f"  T={T:>5}: " + ", ".join(f"{key} = {value:.2f}" for key, value in ratio.items()))
    return lines
