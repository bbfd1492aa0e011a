"""`make bench`'s backward section (chapter 10) times what it says: the same gradients, the flops it counts."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("bench_backward")
    finally:
        sys.path.remove(str(BENCHMARKS))


def inputs(sequences=3, T=64, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((sequences, T, 64), dtype=np.float32) for _ in range(4))


def test_the_three_numpy_steps_give_the_same_gradients(bench):
    q, k, v, grad_out = inputs()
    plain = bench.plain_step(q, k, v, grad_out)
    recomputing = bench.efficient_step(q, k, v, grad_out, block_size=16)
    split = bench.efficient_step_split(q, k, v, grad_out)
    for a, b, c in zip(plain, recomputing, split, strict=True):
        assert a.shape == b.shape == c.shape == q.shape
        scale = np.abs(a).max()
        assert np.abs(b - a).max() < 1e-5 * scale, np.abs(b - a).max() / scale
        assert np.abs(c - a).max() < 1e-5 * scale, np.abs(c - a).max() / scale


def test_the_products_alone_are_the_backwards_products(bench):
    """The products-only stand-ins compute the same dV (their first product) as the backwards."""
    q, k, v, grad_out = inputs(sequences=2, T=32)
    out, weights = bench.scaled_dot_product_attention(q, k, v)
    grad_v = np.empty_like(q)
    bench.plain_products(grad_out, q, k, v, weights, (grad_v, np.empty_like(weights)))  # last write: dS^T Q
    np.testing.assert_allclose(grad_v, np.swapaxes(weights, -1, -2) @ q, rtol=1e-5, atol=1e-6)
    rows, tile, tile2 = np.empty((2, 16, 64), np.float32), *(np.empty((2, 16, 16), np.float32) for _ in range(2))
    bench.efficient_products(grad_out, q, k, v, 16, (rows, tile, tile2))
    np.testing.assert_allclose(tile, q[:, 16:] @ np.swapaxes(k[:, 16:], -1, -2), rtol=1e-5)  # the last tile's S
    np.testing.assert_allclose(tile2, grad_out[:, 16:] @ np.swapaxes(v[:, 16:], -1, -2), rtol=1e-5)  # its dP


def test_a_small_run_is_json_and_counts_its_flops(bench, monkeypatch):
    monkeypatch.setattr(bench, "SIZES", ((2, 64),))
    monkeypatch.setattr(bench, "BLOCK_SIZE", 32)
    monkeypatch.setattr(bench, "SWEEP_BLOCKS", (16, 32))
    monkeypatch.setattr(bench, "block_sweep", lambda repeats, _sweep=bench.block_sweep: _sweep(repeats, 2, 64))
    result = json.loads(json.dumps(bench.run(1)))
    size = result["sizes"]["2x64"]
    ntsd = 2 * 64 * 64 * 64
    assert set(size["seconds"]) == set(bench.FLOPS)
    for name, seconds in size["seconds"].items():
        assert size["gflops"][name] * seconds * 1e9 == pytest.approx(bench.FLOPS[name] * ntsd)
    assert bench.FLOPS["efficient_backward"] / bench.FLOPS_PER_NTSD["forward"] == 2.5  # FlashAttention's backward
    assert bench.FLOPS["plain_backward"] == 2 * bench.FLOPS_PER_NTSD["forward"]
    assert set(result["ratios"]) == {"2x64", "block_sweep"} and min(result["ratios"]["block_sweep"].values()) == 1
    assert set(size["round_spread"]) == {"plain_backward", "efficient_backward"}
    assert all(value >= 1 for value in size["round_spread"].values())
    lines = bench.report(result)
    assert any("efficient_step_split" in line for line in lines)
