"""Measuring time and memory: best-of wall-clock time and tracemalloc's peak.

Used by chapters 7 and 9, the tests and ``benchmarks/`` (``make bench``), so that all
of them measure the same way. Timings vary between runs and machines: compare
them only as ratios within one run, never in a test's assertion.
"""

from __future__ import annotations

import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

from ._validation import check_nonnegative_int, check_positive_int

__all__ = ["best_time", "best_times", "median_time", "peak_bytes", "decoding_step_times"]


def _check_callable(function: Any) -> None:
    if not callable(function):
        raise ValueError(f"function must be callable (called with no arguments); got {type(function).__name__}")


def _wall_times(function: Callable[[], Any], repeats: Any) -> list[float]:
    """``repeats`` wall-clock times of ``function()``, in seconds, after one warm-up call."""
    _check_callable(function)
    repeats = check_positive_int(repeats, "repeats", at_most=10**6)
    function()  # warm-up: first-call allocations and caches are not the function's cost
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def best_time(function: Callable[[], Any], repeats: int = 3) -> float:
    """The shortest of ``repeats`` wall-clock times of ``function()``, in seconds, after one warm-up call.

    The minimum is the least disturbed by whatever else the machine is doing.

    Raises
    ------
    ValueError
        If ``function`` is not callable or ``repeats`` is not a positive integer.

    Notes
    -----
    See chapter 7.
    """
    return min(_wall_times(function, repeats))


def best_times(functions: dict[str, Callable[[], Any]], rounds: int = 5) -> dict[str, float]:
    """The shortest wall-clock time of each function, timed in interleaved rounds, in seconds.

    Each round calls every function once, in order, so that a slow spell of
    the machine (another program, a warm or cold cache, a clock change) falls
    on all of them alike instead of on whichever was being timed. Every
    function is called once to warm up before the first round. Compare the
    results as ratios: that is what one run of a noisy machine measures well.

    Parameters
    ----------
    functions : dict of str to callable
        Names and functions called with no arguments.
    rounds : int, default 5

    Raises
    ------
    ValueError
        If ``functions`` is not a non-empty dict of callables or ``rounds`` is not a positive integer.

    Notes
    -----
    Used by ``make bench``; see chapter 7.
    """
    if not isinstance(functions, dict) or not functions:
        raise ValueError(f"functions must be a non-empty dict of name -> callable; got {functions!r:.80}")
    for function in functions.values():
        _check_callable(function)
    rounds = check_positive_int(rounds, "rounds", at_most=10**6)
    for function in functions.values():
        function()
    best = dict.fromkeys(functions, float("inf"))
    for _ in range(rounds):
        for name, function in functions.items():
            start = time.perf_counter()
            function()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def median_time(function: Callable[[], Any], repeats: int = 5) -> float:
    """The median of ``repeats`` wall-clock times of ``function()``, in seconds, after one warm-up call.

    Steadier than the minimum when a timing is compared across lengths: one
    lucky run cannot bend a curve.

    Raises
    ------
    ValueError
        If ``function`` is not callable or ``repeats`` is not a positive integer.

    Notes
    -----
    See chapter 7 (the time curves).
    """
    return statistics.median(_wall_times(function, repeats))


def peak_bytes(function: Callable[[], Any]) -> int:
    """The peak of the memory that ``function()`` allocates through Python and NumPy, in bytes (tracemalloc).

    It counts the bytes of the buffers NumPy asks for (repeatable to within a
    few kB from run to run); it does not see the operating system's overhead
    or memory that C libraries allocate themselves (torch's, for example).

    Raises
    ------
    ValueError
        If ``function`` is not callable.

    Notes
    -----
    See chapter 7.
    """
    _check_callable(function)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def decoding_step_times(model: Any, context: int, repeats: int = 3, seed: int = 0) -> dict[str, float]:
    """Best wall time of generating one token after ``context`` tokens, with a KV cache and without.

    Without the cache, a step runs the whole text (``context + 1`` tokens)
    through the model; with it, the ``context`` tokens are cached first and a
    step runs only the new one. Used by chapter 9 and ``make bench``.

    Parameters
    ----------
    model : TinyDecoder
    context : int
        Tokens already in the text.
    repeats : int, default 3
        Timed runs of each step; the best is kept.
    seed : int, default 0
        Seeds the random text.

    Returns
    -------
    dict
        ``{"cached": seconds, "recomputed": seconds}``.

    Raises
    ------
    ValueError
        If ``model`` is not a TinyDecoder or a count is not a positive integer.
    """
    from .decoding import TinyDecoder

    if not isinstance(model, TinyDecoder):
        raise ValueError(f"model must be a TinyDecoder; got {type(model).__name__}")
    context = check_positive_int(context, "context", at_most=2**16)
    repeats = check_positive_int(repeats, "repeats", at_most=1000)
    text = np.random.default_rng(check_nonnegative_int(seed, "seed")).integers(0, model.vocab_size, size=context + 1)
    caches = model.new_caches(max_len=context + repeats + 2)
    model.forward(text[:context], caches)  # the prompt, cached once
    token = text[context:]
    cached = best_time(lambda: model.forward(token, caches), repeats)  # each run appends one token
    recomputed = best_time(lambda: model.forward(text), repeats)
    return {"cached": cached, "recomputed": recomputed}
