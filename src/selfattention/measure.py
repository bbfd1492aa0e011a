"""Measuring time and memory: best-of wall-clock time and tracemalloc's peak.

Used by chapter 7, the tests and ``benchmarks/`` (``make bench``), so that all
of them measure the same way. Timings vary between runs and machines: compare
them only as ratios within one run, never in a test's assertion.
"""

from __future__ import annotations

import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from ._validation import check_positive_int

__all__ = ["best_time", "median_time", "peak_bytes"]


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
