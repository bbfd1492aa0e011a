"""What attention costs on this machine: NumPy reference, torch SDPA, memory-efficient NumPy.

Usage: python benchmarks/bench_attention.py [--out DIR] [--repeats N]   (make bench)

Sizes: B*H = 32 sequences of head width Dh = 64, float32, T = S in
{256, 1024, 4096}; both NumPy versions also run at T = 8192. Two more runs
(chapter 9): causal attention at B*H = 8, T = S = 4096, where the
memory-efficient version skips the masked tiles, against its own non-causal
time and torch's causal SDPA; and one generated token of a small decoder at a
context of 1024, with and without a KV cache. And the backward pass
(chapter 10): the plain NumPy backward against torch autograd's backward of
SDPA at B*H = 32, T = 1024, and the memory-efficient backward against the
plain one at B*H = 8, T = 4096. And all-MiniLM-L6-v2 (chapter 13): its NumPy
forward against transformers' BertModel on 8 sentences of about 16 tokens.

--sections chooses what to run (default: all); a partial run keeps the other
sections of --base (default: the recorded run shipped with the package), so
that each section's ratios still come from one run. For each it
reports the best of N wall-clock times, the time ratios the course targets,
the peak extra memory (NumPy: tracemalloc; torch: the peak resident set of a
child process, which tracemalloc cannot see), and the achieved GFLOP/s
(4*B*H*T^2*Dh flops) next to this machine's float32 GEMM rate, measured in
the same run. Prints a table and writes bench.json and bench.png to --out.
Not part of make test: it takes a few minutes and needs about 10 GB of memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from selfattention import (  # noqa: E402
    TinyDecoder,
    memory_efficient_attention,
    memory_efficient_attention_backward,
    scaled_dot_product_attention,
    scaled_dot_product_attention_backward,
)
from selfattention.measure import best_time, decoding_step_times, peak_bytes  # noqa: E402

SEQUENCES, HEAD_DIM = 32, 64  # B*H and Dh
LENGTHS = (256, 1024, 4096)
LONG = 8192  # NumPy versions only
BLOCK_SIZE = 512
CAUSAL = {"sequences": 8, "T": 4096}  # B*H and T = S of the causal run
# The decoder of the decoding run: vocabulary, width, query and key/value heads, layers, feed-forward width
DECODER = {
    "vocab_size": 256,
    "d_model": 256,
    "num_heads": 8,
    "num_kv_heads": 2,
    "num_layers": 4,
    "dim_feedforward": 1024,
}
DECODE_CONTEXT = 1024
BACKWARD = {"torch_sequences": 32, "torch_T": 1024, "efficient_sequences": 8, "efficient_T": 4096}
# Chapter 13: all-MiniLM-L6-v2's forward in NumPy against transformers' BertModel, on these sentences
MINILM_SENTENCES = (
    "The quick brown fox jumps over the lazy dog near the quiet river bank.",
    "Self-attention lets every token in a sentence look at every other token.",
    "The central bank raised interest rates for the third time this year.",
    "Heavy rain flooded the narrow streets of the old town overnight.",
    "She practises the violin for an hour every single evening after work.",
    "Researchers trained a small transformer on a laptop in a few minutes.",
    "The train to Edinburgh leaves from platform four at half past nine.",
    "Regular exercise and enough sleep lower the risk of heart disease.",
)
SECTIONS = ("attention", "causal", "decoding", "backward", "minilm")


def inputs(T: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((SEQUENCES, T, HEAD_DIM), dtype=np.float32) for _ in range(3))


TORCH_PEAK = r"""
import re, numpy as np, torch, torch.nn.functional as F
T = {T}
rng = np.random.default_rng(0)
q, k, v = (torch.from_numpy(rng.standard_normal(({B}, T, {D}), dtype=np.float32)) for _ in range(3))
def status(key):
    return int(re.search(key + r":\s+(\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
F.scaled_dot_product_attention(q, k, v)  # warm-up: one-off allocations are not the attention's
open("/proc/self/clear_refs", "w").write("5")  # reset the peak resident set
before = status("VmRSS")
out = F.scaled_dot_product_attention(q, k, v)
print(status("VmHWM") - before)
"""


def torch_peak(T: int) -> int | None:
    """Peak extra resident memory of one torch SDPA call, in a fresh process (Linux only)."""
    if not Path("/proc/self/clear_refs").exists():
        return None
    code = TORCH_PEAK.format(T=T, B=SEQUENCES, D=HEAD_DIM)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(result.stdout.strip())


def gemm_gflops(repeats: int) -> float:
    a, b = (np.random.default_rng(1).standard_normal((2048, 2048), dtype=np.float32) for _ in range(2))
    return 2 * 2048**3 / best_time(lambda: a @ b, repeats) / 1e9


def attention_flops(T: int) -> float:
    return 4 * SEQUENCES * T * T * HEAD_DIM


def run(repeats: int, sections: tuple[str, ...] = SECTIONS, base: dict | None = None) -> dict:
    results = dict(base or {})
    if "attention" in sections:
        results.update(attention_run(repeats))
    if "causal" in sections:
        results["causal"] = causal_run(repeats)
    if "decoding" in sections:
        model = TinyDecoder.random(**DECODER, seed=0)
        step = decoding_step_times(model, DECODE_CONTEXT, repeats)
        results["decoding"] = {
            **DECODER,
            "context": DECODE_CONTEXT,
            "cached_seconds": step["cached"],
            "recomputed_seconds": step["recomputed"],
            "recomputed_over_cached_time": step["recomputed"] / step["cached"],
        }
    if "backward" in sections:
        results["backward"] = backward_run(repeats)
    if "minilm" in sections:
        results["minilm"] = minilm_run(repeats)
    return results


def minilm_run(repeats: int) -> dict:
    """all-MiniLM-L6-v2: loading, and the forward of 8 sentences of about 16 tokens, NumPy against BertModel."""
    import time

    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import BertModel
    from transformers.utils import logging

    from selfattention import load_minilm

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    start = time.perf_counter()
    model = load_minilm()
    load_numpy = time.perf_counter() - start
    start = time.perf_counter()
    reference = BertModel.from_pretrained(str(model.path), local_files_only=True).eval()
    load_torch = time.perf_counter() - start
    ids, keep = model.token_ids(list(MINILM_SENTENCES))
    t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(keep.astype(np.int64))

    def torch_forward() -> None:
        with torch.no_grad():
            reference(input_ids=t_ids, attention_mask=t_mask)

    for _ in range(3):  # warm-up: the first calls allocate and pick kernels
        model.forward(ids, keep)
        torch_forward()
    seconds = {
        "numpy": best_time(partial(model.forward, ids, keep), max(repeats, 20)),
        "torch": best_time(torch_forward, max(repeats, 20)),
    }
    return {
        "sentences": len(MINILM_SENTENCES),
        "tokens": int(keep.sum()),
        "T": int(ids.shape[1]),
        "torch_attention": reference.config._attn_implementation,
        "load_seconds": {"numpy": load_numpy, "torch": load_torch},
        "seconds": seconds,
        "numpy_over_torch_time": seconds["numpy"] / seconds["torch"],
    }


def attention_run(repeats: int) -> dict:
    results = {
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "numpy": np.__version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        "sizes": {"sequences": SEQUENCES, "head_dim": HEAD_DIM, "dtype": "float32", "block_size": BLOCK_SIZE},
        "gemm_gflops": gemm_gflops(repeats),
        "rows": [],
    }
    plan = [(T, name) for T in LENGTHS for name in ("numpy", "torch", "efficient")]
    plan += [(LONG, "numpy"), (LONG, "efficient")]
    timings: dict[tuple[int, str], dict] = {}
    for T, name in tqdm(plan, desc="benchmark", unit="run"):
        q, k, v = inputs(T)
        if name == "numpy":
            call = partial(scaled_dot_product_attention, q, k, v)
        elif name == "efficient":
            call = partial(memory_efficient_attention, q, k, v, block_size=BLOCK_SIZE)
        else:
            call = partial(F.scaled_dot_product_attention, *map(torch.from_numpy, (q, k, v)))
        seconds = best_time(call, repeats if T < LONG else 1)
        peak = torch_peak(T) if name == "torch" else peak_bytes(call)
        timings[(T, name)] = {
            "T": T,
            "implementation": name,
            "seconds": seconds,
            "peak_extra_bytes": peak,
            "gflops": attention_flops(T) / seconds / 1e9,
            "memory_method": "peak RSS of a child process" if name == "torch" else "tracemalloc",
        }
    results["rows"] = list(timings.values())
    results["ratios"] = {
        str(T): {
            **(
                {"numpy_over_torch_time": timings[(T, "numpy")]["seconds"] / timings[(T, "torch")]["seconds"]}
                if T != LONG
                else {}
            ),
            "efficient_over_numpy_time": timings[(T, "efficient")]["seconds"] / timings[(T, "numpy")]["seconds"],
            "efficient_over_numpy_memory": timings[(T, "efficient")]["peak_extra_bytes"]
            / timings[(T, "numpy")]["peak_extra_bytes"],
        }
        for T in (*LENGTHS, LONG)
    }
    return results


def backward_run(repeats: int) -> dict:
    """The plain backward against torch autograd's, and the memory-efficient backward against the plain one."""
    rng = np.random.default_rng(3)
    B, T = BACKWARD["torch_sequences"], BACKWARD["torch_T"]
    q, k, v, grad_out = (rng.standard_normal((B, T, HEAD_DIM), dtype=np.float32) for _ in range(4))
    tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
    t_grad = torch.from_numpy(grad_out)

    def torch_backward() -> None:
        out = F.scaled_dot_product_attention(tq, tk, tv)  # the forward is part of what autograd needs
        torch.autograd.grad(out, (tq, tk, tv), t_grad)

    seconds = {
        "numpy_plain": best_time(partial(scaled_dot_product_attention_backward, grad_out, q, k, v), repeats),
        "torch_autograd": best_time(torch_backward, repeats),
    }
    B2, T2 = BACKWARD["efficient_sequences"], BACKWARD["efficient_T"]
    q2, k2, v2, g2 = (rng.standard_normal((B2, T2, HEAD_DIM), dtype=np.float32) for _ in range(4))
    out2, lse2 = memory_efficient_attention(q2, k2, v2, block_size=BLOCK_SIZE, return_lse=True)
    plain = partial(scaled_dot_product_attention_backward, g2, q2, k2, v2)
    efficient = partial(memory_efficient_attention_backward, g2, q2, k2, v2, out2, lse2, block_size=BLOCK_SIZE)
    seconds["plain_4096"] = best_time(plain, repeats)
    seconds["efficient_4096"] = best_time(efficient, repeats)
    peaks = {"plain_4096": peak_bytes(plain), "efficient_4096": peak_bytes(efficient)}
    return {
        **BACKWARD,
        "seconds": seconds,
        "peak_extra_bytes": peaks,
        "numpy_over_torch_time": seconds["numpy_plain"] / seconds["torch_autograd"],
        "efficient_over_plain_time": seconds["efficient_4096"] / seconds["plain_4096"],
        "efficient_over_plain_memory": peaks["efficient_4096"] / peaks["plain_4096"],
    }


def causal_run(repeats: int) -> dict:
    """Causal attention: the memory-efficient version (tiles skipped) against itself non-causal and torch causal."""
    rng = np.random.default_rng(2)
    B, T = CAUSAL["sequences"], CAUSAL["T"]
    q, k, v = (rng.standard_normal((B, T, HEAD_DIM), dtype=np.float32) for _ in range(3))
    causal = partial(memory_efficient_attention, q, k, v, block_size=BLOCK_SIZE, is_causal=True)
    full = partial(memory_efficient_attention, q, k, v, block_size=BLOCK_SIZE)
    tq, tk, tv = map(torch.from_numpy, (q, k, v))
    seconds = {
        "efficient_causal": best_time(causal, repeats),
        "efficient_noncausal": best_time(full, repeats),
        "torch_causal": best_time(partial(F.scaled_dot_product_attention, tq, tk, tv, is_causal=True), repeats),
    }
    peaks = {"efficient_causal": peak_bytes(causal), "efficient_noncausal": peak_bytes(full)}
    return {
        "sequences": B,
        "T": T,
        "seconds": seconds,
        "peak_extra_bytes": peaks,
        "causal_over_noncausal_time": seconds["efficient_causal"] / seconds["efficient_noncausal"],
        "causal_over_torch_causal_time": seconds["efficient_causal"] / seconds["torch_causal"],
        "causal_over_noncausal_memory": peaks["efficient_causal"] / peaks["efficient_noncausal"],
    }


def print_table(results: dict) -> None:
    print(
        f"\nB*H = {SEQUENCES}, Dh = {HEAD_DIM}, float32; machine float32 GEMM: {results['gemm_gflops']:.1f} GFLOP/s\n"
    )
    print(f"{'T':>6} {'implementation':>15} {'time (s)':>10} {'GFLOP/s':>9} {'% of GEMM':>10} {'peak extra (MiB)':>17}")
    for row in results["rows"]:
        peak = "n/a" if row["peak_extra_bytes"] is None else f"{row['peak_extra_bytes'] / 2**20:,.0f}"
        share = 100 * row["gflops"] / results["gemm_gflops"]
        name, seconds = row["implementation"], row["seconds"]
        print(f"{row['T']:>6} {name:>15} {seconds:>10.4f} {row['gflops']:>9.1f} {share:>9.0f}% {peak:>17}")
    print("\nratios (targets: numpy/torch time <= 3 at T=1024; efficient/numpy time <= 1.5, memory <= 0.10 at T=8192)")
    for T, ratio in results["ratios"].items():
        parts = [f"{key} = {value:.2f}" for key, value in ratio.items()]
        print(f"  T={T:>5}: " + ", ".join(parts))
    causal = results["causal"]
    print(f"\ncausal, B*H = {causal['sequences']}, T = S = {causal['T']} (targets: <= 0.6 of both):")
    for name, seconds in causal["seconds"].items():
        print(f"  {name:>20}: {seconds:.3f} s")
    print(
        f"  efficient causal / non-causal time {causal['causal_over_noncausal_time']:.2f}, "
        f"/ torch causal {causal['causal_over_torch_causal_time']:.2f}, "
        f"memory causal / non-causal {causal['causal_over_noncausal_memory']:.2f}"
    )
    backward = results.get("backward")
    if backward:
        print("\nbackward (targets: numpy/torch <= 3 at T=1024; efficient/plain time <= 2, memory <= 0.10 at T=4096):")
        for name, seconds in backward["seconds"].items():
            print(f"  {name:>16}: {seconds:.3f} s")
        print(
            f"  numpy / torch autograd {backward['numpy_over_torch_time']:.2f}, efficient / plain time "
            f"{backward['efficient_over_plain_time']:.2f}, memory {backward['efficient_over_plain_memory']:.3f}"
        )
    minilm = results.get("minilm")
    if minilm:
        sizes = f"{minilm['sentences']} sentences padded to T = {minilm['T']}"
        print(f"\nall-MiniLM-L6-v2, {sizes} (target: numpy/torch <= 3):")
        print(
            f"  forward: numpy {minilm['seconds']['numpy'] * 1e3:.1f} ms, BertModel ({minilm['torch_attention']}) "
            f"{minilm['seconds']['torch'] * 1e3:.1f} ms, ratio {minilm['numpy_over_torch_time']:.2f}; "
            f"loading: numpy {minilm['load_seconds']['numpy']:.2f} s, BertModel {minilm['load_seconds']['torch']:.2f} s"
        )
    decoding = results["decoding"]
    print(f"\none generated token at a context of {decoding['context']} (target: cached >= 20x faster):")
    print(
        f"  cached {decoding['cached_seconds'] * 1e3:.2f} ms, "
        f"recomputed {decoding['recomputed_seconds'] * 1e3:.1f} ms, ratio {decoding['recomputed_over_cached_time']:.0f}"
    )


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, marker in (("numpy", "o"), ("torch", "s"), ("efficient", "^")):
        rows = [r for r in results["rows"] if r["implementation"] == name]
        Ts = [r["T"] for r in rows]
        left.loglog(Ts, [r["seconds"] for r in rows], marker=marker, label=name)
        if name != "torch":
            right.loglog(Ts, [r["peak_extra_bytes"] / 2**20 for r in rows], marker=marker, label=name)
    for ax, label in ((left, "best time (s)"), (right, "peak extra memory (MiB)")):
        ax.set_xlabel("sequence length T (= S)")
        ax.set_ylabel(label)
        ax.legend()
        ax.grid(True, which="both", alpha=0.3)
    left.set_title(f"Time, B*H={SEQUENCES}, Dh={HEAD_DIM}, float32")
    right.set_title("Peak extra memory (tracemalloc)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("_build/bench"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, from {', '.join(SECTIONS)}")
    parser.add_argument(
        "--base", type=Path, default=Path(__file__).resolve().parents[1] / "src/selfattention/data/bench-2core.json"
    )
    args = parser.parse_args()
    sections = tuple(name.strip() for name in args.sections.split(","))
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    base = json.loads(args.base.read_text()) if set(sections) != set(SECTIONS) else None
    results = run(args.repeats, sections, base)
    results.setdefault("sections_run", {})
    for name in sections:
        results["sections_run"][name] = {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    print_table(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench.json").write_text(json.dumps(results, indent=2))
    plot(results, args.out / "bench.png")
    print(f"\nwrote {args.out / 'bench.json'} and {args.out / 'bench.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
