"""`make bench` section "llm" (chapter 14): SmolLM2-135M's greedy decoding in NumPy against transformers' generate.

The same weights on both sides: the NumPy model of `selfattention.llm.load_smollm2()` and transformers'
LlamaForCausalLM built from its arrays (`selfattention.interop.llama.transformers_llama`, fused sdpa
attention, float32). The same prompt (a one-line question through the chat template, PROMPT_TOKENS ids)
and NEW_TOKENS greedy tokens: NumPy's `generate_ids(ids, n)` with its KV cache, against
`generate(ids, max_new_tokens=n, do_sample=False)` with transformers' cache, both from token ids (the
tokenizer is not timed). Every call's ids are compared: the run stops if the two sides, or NumPy with and
without its cache, ever choose different tokens.

At 1 and at 2 threads (NumPy's BLAS through threadpoolctl, torch through torch.set_num_threads), in
interleaved rounds after a warm-up call of each, the median wall time of: a whole generation of NEW_TOKENS
tokens; a generation of 1 token (the prompt's forward pass and the first token); and NumPy without its
cache (every step recomputes the whole text; fewer rounds, it is slow). A token's decode time is
(whole - first) / (NEW_TOKENS - 1), the cost of one cached step once the prompt is in.

Loading, in fresh processes: the first load ever (the GGUF file parsed and its tensors written to an empty
cache directory, SELFATTENTION_CACHE pointed at a new temporary directory; the file itself is likely in the
operating system's page cache already) and a cached load (the same directory again), each from
`load_smollm2()` called to the model returned, imports not counted. Memory: the peak extra resident
memory of the loading process (ru_maxrss after the load minus before it: the weights it keeps and what
it needed on the way), and of a process's first and second generation after the model was loaded (and,
for transformers, built), for NumPy and for transformers (Linux's /proc/self/clear_refs resets the
high-water mark VmHWM before each; None elsewhere; the second reuses what the first freed, so it is
near 0); and, in this process, tracemalloc's peak of what NumPy allocates while loading (cached) and
while generating.
"""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from bench_common import ROOT  # noqa: F401  (puts src/ on the path)

from selfattention.measure import peak_bytes

#: The package modules whose code this section times.
SOURCES = ("llm", "interop.llama", "measure")

MESSAGE = "Why is the sky blue?"  # through the chat template: 36 token ids
NEW_TOKENS = 32
THREADS = (1, 2)
UNCACHED_ROUNDS = 3  # at most: a generation without the cache takes seconds
COLD_LOADS = 3  # at most: each parses the whole file again
CLEAR_REFS = Path("/proc/self/clear_refs")


# -- the two generators ----------------------------------------------------------------------------------


def numpy_generate(model: Any, ids: list[int], new_tokens: int, use_cache: bool = True) -> list[int]:
    """NumPy's greedy continuation of ``ids``: ``new_tokens`` ids, fewer if a stop token comes first."""
    return model.generate_ids(ids, new_tokens, use_cache=use_cache)


def torch_generate(reference: Any, stop_ids: list[int], ids: list[int], new_tokens: int) -> list[int]:
    """transformers' greedy continuation of ``ids`` (``generate``, its cache on), stopping where NumPy stops."""
    import torch

    input_ids = torch.tensor([ids])
    out = reference.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=new_tokens,
        do_sample=False,
        use_cache=True,
        eos_token_id=stop_ids,
        pad_token_id=stop_ids[0],
    )
    return out[0, len(ids) :].tolist()


def generators(model: Any, reference: Any, ids: list[int]) -> dict[str, Callable[[], list[int]]]:
    """The calls a round times, by name; each returns the ids it chose."""
    stop_ids = sorted(model.stop_ids)
    return {
        "numpy": partial(numpy_generate, model, ids, NEW_TOKENS),
        "torch": partial(torch_generate, reference, stop_ids, ids, NEW_TOKENS),
        "numpy_first": partial(numpy_generate, model, ids, 1),
        "torch_first": partial(torch_generate, reference, stop_ids, ids, 1),
        "numpy_uncached": partial(numpy_generate, model, ids, NEW_TOKENS, use_cache=False),
    }


def check_same_ids(outputs: dict[str, list[int]]) -> None:
    """Raise unless every whole generation chose the same ids, and every first token is their first."""
    expected = outputs["numpy"]
    for name, ids in outputs.items():
        want = expected[:1] if name.endswith("_first") else expected
        if ids != want:
            raise RuntimeError(f"greedy decoding differs: {name} chose {ids}, numpy (cached) chose {want}")


def timed_rounds(
    calls: dict[str, Callable[[], list[int]]], rounds: int, at_most: dict[str, int] | None = None
) -> tuple[dict[str, list[float]], list[int]]:
    """Wall times of every call in interleaved rounds, after one warm-up call each, and the ids they chose.

    ``calls`` must hold "numpy", the whole cached generation the others are compared with; every call's
    ids are checked after every round (see :func:`check_same_ids`). ``at_most`` caps the rounds of slow
    calls: they run in the first rounds only.
    """
    at_most = at_most or {}
    chosen = {name: call() for name, call in calls.items()}  # the warm-up
    check_same_ids(chosen)
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    for r in range(rounds):
        outputs = {}
        for name, call in calls.items():
            if r < at_most.get(name, rounds):
                start = time.perf_counter()
                outputs[name] = call()
                seconds[name].append(time.perf_counter() - start)
        check_same_ids(outputs)
    return seconds, chosen["numpy"]


def summary(seconds: dict[str, list[float]], new_tokens: int) -> dict[str, Any]:
    """Medians, tokens per second and the ratios of one thread count's rounds."""
    median = {name: statistics.median(times) for name, times in seconds.items()}
    decode = {side: (median[side] - median[side + "_first"]) / (new_tokens - 1) for side in ("numpy", "torch")}
    return {
        "seconds": seconds,
        "median_seconds": median,
        "decode_seconds_per_token": decode,
        "tokens_per_second": {side: new_tokens / median[side] for side in ("numpy", "torch")},
        "decode_tokens_per_second": {side: 1 / decode[side] for side in decode},
        "ratios": {
            "numpy_over_torch_time": median["numpy"] / median["torch"],
            "numpy_over_torch_decode_time": decode["numpy"] / decode["torch"],
            "numpy_over_torch_first_token_time": median["numpy_first"] / median["torch_first"],
            "uncached_over_cached_time": median["numpy_uncached"] / median["numpy"],
        },
    }


def generation(model: Any, reference: Any, ids: list[int], threads: int, rounds: int) -> dict[str, Any]:
    """One thread count's timings: NumPy's BLAS and torch both limited to ``threads``."""
    from threadpoolctl import threadpool_limits

    from selfattention.machine import torch_threads

    calls = generators(model, reference, ids)
    with threadpool_limits(limits=threads, user_api="blas"), torch_threads(threads):
        seconds, chosen = timed_rounds(calls, rounds, at_most={"numpy_uncached": min(rounds, UNCACHED_ROUNDS)})
    if len(chosen) != NEW_TOKENS:
        raise RuntimeError(
            f"the greedy answer stopped after {len(chosen)} of {NEW_TOKENS} tokens: a token's decode time needs "
            "a prompt whose answer is longer"
        )
    return summary(seconds, NEW_TOKENS)


# -- memory and loading, in fresh processes --------------------------------------------------------------


def _max_resident() -> int:
    """This process's peak resident memory so far, in bytes (ru_maxrss: kB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _status_bytes(key: str) -> int:
    """A memory line of /proc/self/status (``VmRSS``, ``VmHWM``), in bytes."""
    match = re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    return int(match.group(1)) * 1024


def child(mode: str) -> None:
    """What a fresh process measures, printed as one JSON line: ``load``, ``numpy`` or ``torch`` (generating)."""
    from selfattention.llm import load_smollm2

    if mode not in ("load", "numpy", "torch"):
        raise ValueError(f"mode must be 'load', 'numpy' or 'torch'; got {mode!r}")
    if mode == "load":
        before = _max_resident()
        start = time.perf_counter()
        load_smollm2()
        seconds = time.perf_counter() - start
        print(json.dumps({"seconds": seconds, "peak_extra_bytes": _max_resident() - before}))
        return
    model = load_smollm2()
    ids = model.encode(model.chat_prompt(MESSAGE))
    if mode == "torch":
        from selfattention.interop.llama import transformers_llama

        quiet_transformers()
        call = partial(torch_generate, transformers_llama(model.weights), sorted(model.stop_ids), ids, NEW_TOKENS)
    else:
        call = partial(numpy_generate, model, ids, NEW_TOKENS)
    peaks = {"first": None, "again": None}
    for name in peaks:
        if not CLEAR_REFS.exists():
            break
        CLEAR_REFS.write_text("5")  # the high-water mark VmHWM restarts from the resident memory now
        before = _status_bytes("VmRSS")
        call()
        peaks[name] = _status_bytes("VmHWM") - before
    print(json.dumps(peaks))


def in_fresh_process(mode: str, cache: str) -> dict[str, Any]:
    """:func:`child` in a new Python process, with SELFATTENTION_CACHE set to ``cache``."""
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_llm; bench_llm.child({mode!r})"
    )
    env = {**os.environ, "SELFATTENTION_CACHE": cache}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if result.returncode:
        raise RuntimeError(f"the {mode} process failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def fresh_processes(repeats: int) -> dict[str, Any]:
    """First loads (each into a new, empty cache directory), cached loads, and generating's peak memory."""
    with tempfile.TemporaryDirectory(prefix="selfattention-bench-") as root:
        caches = [str(Path(root) / f"cache-{i}") for i in range(min(repeats, COLD_LOADS))]
        cold = [in_fresh_process("load", cache) for cache in caches]
        if not any(Path(caches[-1]).glob("gguf-*")):
            raise RuntimeError(f"the first load wrote no cache in {caches[-1]}: the cached loads would parse again")
        warm = [in_fresh_process("load", caches[-1]) for _ in range(repeats)]  # the cache the last one wrote
        generating = {side: in_fresh_process(side, caches[-1]) for side in ("numpy", "torch")}
    return {
        "cold_seconds": [run["seconds"] for run in cold],
        "warm_seconds": [run["seconds"] for run in warm],
        "cold_median_seconds": statistics.median(run["seconds"] for run in cold),
        "warm_median_seconds": statistics.median(run["seconds"] for run in warm),
        "cold_peak_extra_bytes": max(run["peak_extra_bytes"] for run in cold),
        "warm_peak_extra_bytes": max(run["peak_extra_bytes"] for run in warm),
        "generate_peak_extra_bytes": generating,
    }


def quiet_transformers() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


# -- the section ------------------------------------------------------------------------------------------


def run(repeats: int) -> dict:
    import transformers

    from selfattention.interop.llama import transformers_llama
    from selfattention.llm import load_smollm2

    os.environ["HF_HUB_OFFLINE"] = "1"
    quiet_transformers()
    load = fresh_processes(repeats)
    model = load_smollm2()
    reference = transformers_llama(model.weights)
    ids = model.encode(model.chat_prompt(MESSAGE))
    by_threads = {str(n): generation(model, reference, ids, n, repeats) for n in THREADS}
    continuation = numpy_generate(model, ids, NEW_TOKENS)
    c = model.config
    kv_bytes = c.num_layers * 2 * c.num_kv_heads * (len(ids) + NEW_TOKENS) * c.head_dim * model.weights.dtype.itemsize
    traced = {
        "load": peak_bytes(load_smollm2),
        "generate": peak_bytes(partial(numpy_generate, model, ids, NEW_TOKENS)),
        "generate_uncached": peak_bytes(partial(numpy_generate, model, ids, NEW_TOKENS, use_cache=False)),
    }
    ratios = {n: result.pop("ratios") for n, result in by_threads.items()}
    ratios["load"] = {"cold_over_warm_time": load["cold_median_seconds"] / load["warm_median_seconds"]}
    return {
        "model": model.name,
        "parameters": model.weights.parameter_count(),
        "weights_bytes": model.weights.parameter_count() * model.weights.dtype.itemsize,
        "message": MESSAGE,
        "prompt_tokens": len(ids),
        "new_tokens": len(continuation),
        "continuation": model.decode(continuation),
        "rounds": repeats,
        "transformers": transformers.__version__,
        "torch_attention": reference.config._attn_implementation,
        "threads": by_threads,
        "load": load,
        "numpy_traced_peak_bytes": traced,
        "kv_cache_bytes": kv_bytes,
        "ratios": ratios,
    }


def report(result: dict) -> list[str]:
    mib = 2**20
    lines = [
        f"{result['model']}, {result['prompt_tokens']}-token chat prompt + {result['new_tokens']} greedy tokens, "
        f"same ids on both sides (target: numpy/torch per token <= 1 at 1 and 2 threads):"
    ]
    for n, t in result["threads"].items():
        r, tps, dps = result["ratios"][n], t["tokens_per_second"], t["decode_tokens_per_second"]
        lines.append(
            f"  {n} thread(s): numpy {tps['numpy']:.1f} tokens/s, transformers {tps['torch']:.1f} (ratio "
            f"{r['numpy_over_torch_time']:.2f}); decode {dps['numpy']:.1f} against {dps['torch']:.1f} tokens/s "
            f"({r['numpy_over_torch_decode_time']:.2f}); prompt + first token "
            f"{t['median_seconds']['numpy_first'] * 1e3:.0f} ms against {t['median_seconds']['torch_first'] * 1e3:.0f} "
            f"ms; numpy without its cache {r['uncached_over_cached_time']:.1f}x the time"
        )
    load, traced = result["load"], result["numpy_traced_peak_bytes"]
    peaks = load["generate_peak_extra_bytes"]
    lines += [
        f"  loading: first ever {load['cold_median_seconds']:.1f} s, cached {load['warm_median_seconds']:.1f} s "
        f"({result['ratios']['load']['cold_over_warm_time']:.1f}x); peak extra resident "
        f"{load['cold_peak_extra_bytes'] / mib:.0f} MiB and {load['warm_peak_extra_bytes'] / mib:.0f} MiB "
        f"(weights {result['weights_bytes'] / mib:.0f} MiB float32)",
        "  generating: peak extra resident "
        + (
            f"numpy {peaks['numpy']['first'] / mib:.1f} MiB (again {peaks['numpy']['again'] / mib:.1f}), "
            f"transformers {peaks['torch']['first'] / mib:.1f} MiB (again {peaks['torch']['again'] / mib:.1f}); "
            if peaks["numpy"]["first"] is not None
            else "not measured (no /proc/self/clear_refs); "
        )
        + f"NumPy's allocations (tracemalloc): loading {traced['load'] / mib:.0f} MiB, generating "
        f"{traced['generate'] / mib:.1f} MiB cached (KV cache {result['kv_cache_bytes'] / mib:.1f} MiB), "
        f"{traced['generate_uncached'] / mib:.1f} MiB uncached",
    ]
    return lines
