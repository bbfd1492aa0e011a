"""`make bench` section "backward" (chapter 10): the NumPy backward passes against torch autograd's."""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from bench_common import HEAD_DIM
from torch.nn.attention import SDPBackend, sdpa_kernel

from selfattention import (
    memory_efficient_attention,
    memory_efficient_attention_backward,
    scaled_dot_product_attention_backward,
)
from selfattention.interop.sdpa import as_4d_tensors
from selfattention.measure import best_time, peak_bytes

#: The package modules whose code this section times.
SOURCES = ("backward", "efficient", "interop.sdpa", "measure")

SIZES = {"torch_sequences": 32, "torch_T": 1024, "efficient_sequences": 8, "efficient_T": 4096}
BLOCK_SIZE = 512


def run(repeats: int) -> dict:
    rng = np.random.default_rng(3)
    B, T = SIZES["torch_sequences"], SIZES["torch_T"]
    q, k, v, grad_out = (rng.standard_normal((B, T, HEAD_DIM), dtype=np.float32) for _ in range(4))
    tq, tk, tv = (t.requires_grad_() for t in as_4d_tensors(q, k, v))
    t_grad = torch.from_numpy(grad_out).reshape(1, B, T, HEAD_DIM)

    def torch_backward() -> None:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # the fused kernel, forward and backward
            out = F.scaled_dot_product_attention(tq, tk, tv)  # the forward is part of what autograd needs
            torch.autograd.grad(out, (tq, tk, tv), t_grad)

    seconds = {
        "numpy_plain": best_time(partial(scaled_dot_product_attention_backward, grad_out, q, k, v), repeats),
        "torch_autograd": best_time(torch_backward, repeats),
    }
    B2, T2 = SIZES["efficient_sequences"], SIZES["efficient_T"]
    q2, k2, v2, g2 = (rng.standard_normal((B2, T2, HEAD_DIM), dtype=np.float32) for _ in range(4))
    out2, lse2 = memory_efficient_attention(q2, k2, v2, block_size=BLOCK_SIZE, return_lse=True)
    plain = partial(scaled_dot_product_attention_backward, g2, q2, k2, v2)
    efficient = partial(memory_efficient_attention_backward, g2, q2, k2, v2, out2, lse2, block_size=BLOCK_SIZE)
    seconds["plain_4096"] = best_time(plain, repeats)
    seconds["efficient_4096"] = best_time(efficient, repeats)
    peaks = {"plain_4096": peak_bytes(plain), "efficient_4096": peak_bytes(efficient)}
    return {
        **SIZES,
        "torch_kernel": "flash",
        "seconds": seconds,
        "peak_extra_bytes": peaks,
        "ratios": {
            "numpy_over_torch_time": seconds["numpy_plain"] / seconds["torch_autograd"],
            "efficient_over_plain_time": seconds["efficient_4096"] / seconds["plain_4096"],
            "efficient_over_plain_memory": peaks["efficient_4096"] / peaks["plain_4096"],
        },
    }


def report(result: dict) -> list[str]:
    lines = ["backward (targets: numpy/torch <= 3 at T=1024; efficient/plain time <= 2, memory <= 0.10 at T=4096):"]
    lines += [f"  {name:>16}: {seconds:.3f} s" for name, seconds in result["seconds"].items()]
    r = result["ratios"]
    lines.append(
        f"  numpy / torch autograd {r['numpy_over_torch_time']:.2f}, efficient / plain time "
        f"{r['efficient_over_plain_time']:.2f}, memory {r['efficient_over_plain_memory']:.3f}"
    )
    return lines
