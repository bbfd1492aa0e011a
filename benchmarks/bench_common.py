"""What every section of `make bench` shares: inputs, torch's peak memory, the GEMM ceiling, the record.

A section is a module `bench_<name>.py` that defines `SOURCES` (the package modules whose code it
times), `run(repeats) -> dict` (JSON-able results, its ratios under "ratios") and
`report(result) -> list[str]` (lines for the printed table). `bench_attention.py` runs them and adds
to each result, under "measured", what was measured: commit, the hashes of the timed sources (and
of the section's own module), CPU, threads, versions and BLAS kernel.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from selfattention.measure import best_time  # noqa: E402

HEAD_DIM = 64


def qkv(sequences: int, T: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Standard-normal float32 queries, keys and values of shape (sequences, T, HEAD_DIM)."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((sequences, T, HEAD_DIM), dtype=np.float32) for _ in range(3))


def attention_flops(sequences: int, T: int, S: int | None = None, causal: bool = False) -> float:
    """4·N·T·S·Dh: the two products Q Kᵀ and P V (a multiply and an add per term); half of it when causal."""
    flops = 4 * sequences * T * (T if S is None else S) * HEAD_DIM
    return flops / 2 if causal else flops


TORCH_PEAK = r"""
import re, numpy as np, torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
rng = np.random.default_rng(0)
q, k, v = (torch.from_numpy(rng.standard_normal((1, {N}, {T}, {D}), dtype=np.float32)) for _ in range(3))
def status(key):
    return int(re.search(key + r":\s+(\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
with torch.no_grad(), sdpa_kernel(SDPBackend.{BACKEND}):
    F.scaled_dot_product_attention(q, k, v, is_causal={CAUSAL})  # warm-up: one-off allocations
    open("/proc/self/clear_refs", "w").write("5")  # reset the peak resident set
    before = status("VmRSS")
    out = F.scaled_dot_product_attention(q, k, v, is_causal={CAUSAL})
print(status("VmHWM") - before)
"""


def torch_peak(sequences: int, T: int, kernel: str = "flash", causal: bool = False) -> int | None:
    """Peak extra resident memory of one 4-D torch SDPA call on `kernel`, in a fresh process (Linux only)."""
    if not Path("/proc/self/clear_refs").exists():
        return None
    backend = {"flash": "FLASH_ATTENTION", "math": "MATH"}[kernel]
    code = TORCH_PEAK.format(N=sequences, T=T, D=HEAD_DIM, BACKEND=backend, CAUSAL=causal)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(result.stdout.strip())


def gemm_gflops(repeats: int, size: int = 2048) -> float:
    """This machine's float32 matrix-product rate through NumPy's BLAS: the ceiling of the roofline."""
    a, b = (np.random.default_rng(1).standard_normal((size, size), dtype=np.float32) for _ in range(2))
    return 2 * size**3 / best_time(lambda: a @ b, max(repeats, 5)) / 1e9


def copy_gbytes(repeats: int, megabytes: int = 256) -> float:
    """This machine's memory bandwidth for one NumPy thread, reading and writing a large float32 array (GB/s)."""
    a = np.ones(megabytes * 2**20 // 4, dtype=np.float32)
    b = np.empty_like(a)
    return 2 * a.nbytes / best_time(lambda: np.copyto(b, a), max(repeats, 5)) / 1e9
