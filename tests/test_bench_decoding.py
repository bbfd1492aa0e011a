"""`make bench`'s decoding section (chapter 9) times what it says: every part of a step, and nothing changed by it."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from selfattention import TinyDecoder, decoding, params

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SMALL = {"vocab_size": 32, "d_model": 32, "num_heads": 4, "num_kv_heads": 2, "num_layers": 2, "dim_feedforward": 64}


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("bench_decoding")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_timing_the_parts_changes_no_output_and_restores_the_functions(bench):
    model = TinyDecoder.random(**SMALL, seed=0)
    text = np.random.default_rng(0).integers(0, 32, size=12)

    def functions():
        return (
            {name: getattr(decoding, name) for name in bench.PARTS}
            | {key: getattr(*key) for key in bench.CARVED}
            | {"Linear": params.Linear.__call__}
        )

    originals = functions()
    with bench.timed_parts({}) as parts:
        timed = model.forward(text)
    np.testing.assert_array_equal(timed, model.forward(text))
    every_part = set(bench.PARTS.values()) | set(bench.CARVED.values())
    assert set(parts) == every_part and all(seconds > 0 for seconds in parts.values())
    assert functions() == originals


def test_each_call_is_timed_once_at_the_outermost_part(bench, monkeypatch):
    """A clock that ticks once per reading: each timed call then adds exactly 1 to its part, nested calls nothing.

    So the parts count the calls a decoder block makes, and feed_forward's own Linear layers (or a Linear
    inside project_qkv) are not counted again as projections.
    """
    model = TinyDecoder.random(**SMALL, seed=0)
    ticks = iter(range(10**6))
    monkeypatch.setattr(bench.time, "perf_counter", lambda: float(next(ticks)))
    with bench.timed_parts({}) as parts:
        model.forward([1, 2, 3])  # 3 new tokens: each block builds a causal mask
    blocks = SMALL["num_layers"]
    assert parts == {
        "LayerNorms": 2 * blocks + 1,  # two per block and the final one
        "projections": 2 * blocks,  # Q, K, V in one call and the output projection
        "RoPE and masks": 3 * blocks,  # RoPE on q and on k, and the mask
        # the attention call reads the clock twice around its argument checks, which give their 1 up to
        # their own part: 3 ticks in all, 2 left for the attention
        "attention (scores, softmax, P V)": 2 * blocks,
        "attention's argument checks": blocks,
        "feed-forward": blocks,
    }


def test_a_small_run_is_json_and_its_shares_add_up(bench, monkeypatch):
    monkeypatch.setattr(bench, "DECODER", SMALL)
    monkeypatch.setattr(bench, "TINY", {**SMALL, "d_model": 8, "dim_feedforward": 8})
    monkeypatch.setattr(bench, "CONTEXT", 16)
    result = json.loads(json.dumps(bench.run(2)))
    assert result["context"] == 16 and result["cached_rounds"] == 2 * bench.CACHED_ROUNDS_PER_REPEAT
    for kind in ("cached", "recomputed"):
        step = result["breakdown"][kind]
        assert set(step["parts"]) == set(bench.PARTS.values()) | set(bench.CARVED.values()) | {"rest"}
        assert sum(step["parts"].values()) == pytest.approx(step["total"])
        assert sum(step["shares"].values()) == pytest.approx(1)
    ratios = result["ratios"]
    assert ratios["recomputed_over_cached_time"] == result["recomputed_seconds"] / result["cached_seconds"]
    assert ratios["tiny_over_cached_time"] == result["tiny_cached_seconds"] / result["cached_seconds"]
    lines = bench.report(result)
    assert any(line.strip().startswith("cached (") for line in lines) and "tiny widths" in lines[1]
