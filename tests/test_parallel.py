"""split_over_threads: the same attention, its batch split over threads; best_times: interleaved rounds."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_info

import selfattention as sa
from selfattention.measure import best_times


def qkv(shape, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype) for _ in range(3))


@pytest.mark.parametrize("threads", [1, 2, 3, 7])
@pytest.mark.parametrize("is_causal", [False, True])
def test_split_equals_one_call(threads, is_causal):
    q, k, v = qkv((2, 3, 40, 8))
    whole = sa.memory_efficient_attention(q, k, v, block_size=16, is_causal=is_causal)
    split = sa.split_over_threads(sa.memory_efficient_attention, q, k, v, threads, block_size=16, is_causal=is_causal)
    assert split.shape == whole.shape
    np.testing.assert_allclose(split, whole, rtol=1e-13, atol=1e-13)


def test_split_puts_tuples_back_together_in_order():
    q, k, v = qkv((5, 6, 4), seed=1)
    out, weights = sa.split_over_threads(sa.scaled_dot_product_attention, q, k, v, threads=2)
    ref_out, ref_weights = sa.scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(out, ref_out, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(weights, ref_weights, rtol=1e-13, atol=1e-13)


def test_split_holds_the_output_once_not_twice():
    """The reference returns its T x S weights: the split must not hold a second copy of them while joining."""
    import tracemalloc

    q, k, v = qkv((16, 128, 8), seed=2)
    weights_bytes = 16 * 128 * 128 * 8

    def peak(call):
        tracemalloc.start()
        try:
            call()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    one = peak(lambda: sa.scaled_dot_product_attention(q, k, v))
    split = peak(lambda: sa.split_over_threads(sa.scaled_dot_product_attention, q, k, v, threads=2))
    assert one > weights_bytes  # the reference holds its weights ...
    assert split < one + 0.5 * weights_bytes  # ... and the split adds well under another copy of them


def test_split_refuses_a_function_that_does_not_return_arrays_per_sequence():
    with pytest.raises(ValueError, match=r"attention must return an array, or a tuple of arrays.*got float for 1"):
        sa.split_over_threads(lambda q, k, v: 1.0, *qkv((2, 3, 4)), threads=2)
    with pytest.raises(ValueError, match=r"got an array of shape \(3, 4\) for 1 sequences"):
        sa.split_over_threads(lambda q, k, v: q[0], *qkv((2, 3, 4)), threads=2)


def test_split_restores_the_blas_threads():
    before = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    sa.split_over_threads(sa.memory_efficient_attention, *qkv((4, 8, 4)), threads=2)
    assert [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"] == before


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: sa.split_over_threads("f", *qkv((2, 3, 4))), r"attention must be a function"),
        (
            lambda: sa.split_over_threads(sa.memory_efficient_attention, *qkv((2, 3, 4)), threads=0),
            r"threads must be a positive integer; got 0",
        ),
        (
            lambda: sa.split_over_threads(sa.memory_efficient_attention, *qkv((2, 3, 4)), threads=2.0),
            r"threads must be a positive integer",
        ),
        (
            lambda: sa.split_over_threads(sa.memory_efficient_attention, *qkv((2, 3, 4)), threads=10**9),
            r"threads must be at most 1,024",
        ),
        (
            lambda: sa.split_over_threads(sa.memory_efficient_attention, *qkv((2, 3, 4)), mask=np.ones((3, 3), bool)),
            r"does not split a mask",
        ),
        (
            lambda: sa.split_over_threads(sa.memory_efficient_attention, np.ones(3), np.ones(3), np.ones(3)),
            r"q must have at least 2 axes \(\.\.\., T, D\); got shape \(3,\)",
        ),
        (
            lambda: sa.split_over_threads(
                sa.memory_efficient_attention, np.ones((2, 3, 4)), np.ones((1, 3, 4)), np.ones((1, 3, 4))
            ),
            r"q, k and v must have the same batch axes",
        ),
    ],
)
def test_split_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_best_times_interleaves_and_keeps_the_best():
    calls = []
    times = best_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=3)
    assert calls == ["a", "b"] * 4  # one warm-up round, then three interleaved rounds
    assert set(times) == {"a", "b"} and all(t >= 0 for t in times.values())


@pytest.mark.parametrize(
    ("functions", "rounds", "message"),
    [
        ({}, 1, r"functions must be a non-empty dict"),
        ([print], 1, r"functions must be a non-empty dict"),
        ({"a": 3}, 1, r"function must be callable"),
        ({"a": print}, 0, r"rounds must be a positive integer; got 0"),
    ],
)
def test_best_times_bad_input(functions, rounds, message):
    with pytest.raises(ValueError, match=message):
        best_times(functions, rounds)
