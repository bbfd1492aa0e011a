"""`make bench`'s llm section (chapter 14) compares like with like: the same ids on both sides, every round.

No test here times anything: the rounds run stand-in calls, and the one test that runs both generators
does it on a tiny random model.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("bench_llm")
    finally:
        sys.path.remove(str(BENCHMARKS))


def stand_ins(log: list[str], ids: dict[str, list[int]]) -> dict:
    """Calls that note their name in ``log`` and return ``ids[name]``, in the order a round makes them."""

    def call(name):
        log.append(name)
        return list(ids[name])

    return {name: (lambda name=name: call(name)) for name in ids}


SAME = {"numpy": [5, 6, 7], "torch": [5, 6, 7], "numpy_first": [5], "torch_first": [5], "numpy_uncached": [5, 6, 7]}


def test_rounds_interleave_the_calls_after_one_warm_up_each_and_cap_the_slow_one(bench):
    log = []
    seconds, chosen = bench.timed_rounds(stand_ins(log, SAME), 4, at_most={"numpy_uncached": 2})
    assert chosen == [5, 6, 7]
    every = list(SAME)
    without_uncached = [name for name in every if name != "numpy_uncached"]
    assert log == every + every + every + without_uncached + without_uncached  # warm-up, then 4 rounds
    assert {name: len(times) for name, times in seconds.items()} == {**dict.fromkeys(SAME, 4), "numpy_uncached": 2}
    assert all(t >= 0 for times in seconds.values() for t in times)


@pytest.mark.parametrize(
    ("name", "ids"),
    [("torch", [5, 6, 8]), ("numpy_uncached", [5, 6]), ("torch_first", [6]), ("numpy_first", [5, 6])],
)
def test_a_call_that_chooses_other_ids_stops_the_run(bench, name, ids):
    with pytest.raises(RuntimeError, match=f"greedy decoding differs: {name} chose"):
        bench.timed_rounds(stand_ins([], {**SAME, name: ids}), 2)


def test_a_difference_in_a_later_round_stops_it_too(bench):
    answers = iter([[5, 6, 7], [5, 6, 7], [5, 9, 7]])  # right at the warm-up and in round 1, wrong in round 2
    calls = {**stand_ins([], SAME), "torch": lambda: next(answers)}
    with pytest.raises(RuntimeError, match=r"torch chose \[5, 9, 7\]"):
        bench.timed_rounds(calls, 3)


def test_the_summary_s_medians_decode_time_and_ratios(bench):
    seconds = {
        "numpy": [1.0, 1.2, 5.0],  # a slow round: the median leaves it out
        "torch": [2.0, 2.2, 2.1],
        "numpy_first": [0.07, 0.1, 0.5],
        "torch_first": [0.2, 0.2, 0.2],
        "numpy_uncached": [8.0, 9.0],
    }
    s = json.loads(json.dumps(bench.summary(seconds, 11)))
    assert s["median_seconds"] == {
        "numpy": 1.2,
        "torch": 2.1,
        "numpy_first": 0.1,
        "torch_first": 0.2,
        "numpy_uncached": 8.5,
    }
    assert s["decode_seconds_per_token"] == pytest.approx({"numpy": 0.11, "torch": 0.19})  # (whole - first) / 10
    assert s["tokens_per_second"] == pytest.approx({"numpy": 11 / 1.2, "torch": 11 / 2.1})
    assert s["decode_tokens_per_second"] == pytest.approx({"numpy": 1 / 0.11, "torch": 1 / 0.19})
    assert s["ratios"] == pytest.approx(
        {
            "numpy_over_torch_time": 1.2 / 2.1,
            "numpy_over_torch_decode_time": 0.11 / 0.19,
            "numpy_over_torch_first_token_time": 0.5,
            "uncached_over_cached_time": 8.5 / 1.2,
        }
    )


def test_the_report_names_both_thread_counts_and_what_memory_was_measured(bench):
    one = bench.summary({name: [1.0 + len(name) / 100] for name in SAME}, 32)
    ratios = {"1": one.pop("ratios"), "load": {"cold_over_warm_time": 4.0}}
    mib = 2**20
    result = {
        "model": "a model",
        "prompt_tokens": 36,
        "new_tokens": 32,
        "threads": {"1": one},
        "load": {
            "cold_median_seconds": 6.0,
            "warm_median_seconds": 1.5,
            "cold_peak_extra_bytes": 900 * mib,
            "warm_peak_extra_bytes": 700 * mib,
            "generate_peak_extra_bytes": {side: {"first": None, "again": None} for side in ("numpy", "torch")},
        },
        "numpy_traced_peak_bytes": {"load": 650 * mib, "generate": 3 * mib, "generate_uncached": 4 * mib},
        "weights_bytes": 538 * mib,
        "kv_cache_bytes": 2 * mib,
        "ratios": ratios,
    }
    lines = bench.report(result)
    assert lines[1].startswith("  1 thread(s): numpy ") and "first ever 6.0 s, cached 1.5 s (4.0x)" in lines[2]
    assert "not measured (no /proc/self/clear_refs)" in lines[3]
    result["load"]["generate_peak_extra_bytes"] = {
        "numpy": {"first": 5 * mib, "again": 0},
        "torch": {"first": 40 * mib, "again": mib // 2},
    }
    assert "numpy 5.0 MiB (again 0.0), transformers 40.0 MiB (again 0.5)" in bench.report(result)[3]


def tiny_llama(eos_id: int):
    """A random two-block Llama in float64 (no near-ties for the argmax), with a stand-in tokenizer."""
    from selfattention import AttentionParams, Linear
    from selfattention.llm import Llama, LlamaBlock, LlamaConfig, LlamaWeights

    c = LlamaConfig(
        num_layers=2,
        d_model=16,
        num_heads=4,
        num_kv_heads=2,
        head_dim=4,
        d_ff=32,
        vocab_size=40,
        context_length=64,
        rope_base=10000.0,
        rms_norm_eps=1e-5,
    )
    rng = np.random.default_rng(0)

    def linear(d_in, d_out):
        return Linear(rng.standard_normal((d_in, d_out)) / np.sqrt(d_in))

    def block():
        kv = c.num_kv_heads * c.head_dim
        attention = AttentionParams(q=linear(16, 16), k=linear(16, kv), v=linear(16, kv), out=linear(16, 16))
        return LlamaBlock(
            np.ones(16), attention, 1 + 0.1 * rng.standard_normal(16), linear(16, 32), linear(16, 32), linear(32, 16)
        )

    weights = LlamaWeights(c, rng.standard_normal((40, 16)), tuple(block() for _ in range(2)), np.ones(16))
    return Llama(weights, SimpleNamespace(get_vocab_size=lambda: 40), chat_template="", eos_id=eos_id)


@pytest.mark.slow  # imports transformers
def test_both_generators_choose_the_same_ids_and_stop_at_the_same_token(bench):
    from selfattention.interop.llama import transformers_llama

    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    model = tiny_llama(eos_id=39)
    reference = transformers_llama(model.weights)
    free = bench.numpy_generate(model, ids, 12)
    assert 39 not in free[:-1] and len(free) == 12  # 39 never chosen but, perhaps, last
    assert bench.torch_generate(reference, sorted(model.stop_ids), ids, 12) == free
    stop = free[4]  # a token chosen fifth, perhaps also earlier
    stopping = tiny_llama(eos_id=stop)
    until = bench.numpy_generate(stopping, ids, 12)
    assert until == free[: free.index(stop) + 1]
    assert bench.torch_generate(reference, sorted(stopping.stop_ids), ids, 12) == until
    calls = bench.generators(stopping, reference, ids)
    assert set(calls) == {"numpy", "torch", "numpy_first", "torch_first", "numpy_uncached"}
    bench.check_same_ids({name: call() for name, call in calls.items()})


@pytest.mark.slow  # reads the 98 MB GGUF file twice, in fresh processes
def test_a_first_load_fills_an_empty_cache_and_the_next_load_reads_it(bench, tmp_path):
    cache = tmp_path / "cache"
    first = bench.in_fresh_process("load", str(cache))
    assert list(cache.glob("gguf-*/tensors.npz"))
    again = bench.in_fresh_process("load", str(cache))
    for run in (first, again):
        assert set(run) == {"seconds", "peak_extra_bytes"} and run["seconds"] > 0
        assert run["peak_extra_bytes"] >= 0  # a measurement: a loaded machine can reclaim pages meanwhile


def test_a_fresh_process_measures_only_what_it_knows(bench):
    with pytest.raises(ValueError, match="mode must be 'load', 'numpy' or 'torch'; got 'nope'"):
        bench.child("nope")
