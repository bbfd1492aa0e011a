"""Attention on all cores: the independent sequences of a batch split over threads.

Taught in chapter 7. NumPy's matrix products run on every core (its BLAS
splits them), but its element-wise functions, ``exp`` above all, and its
reductions run on one. In attention the ``exp`` of every score costs about as
much as the two matrix products, so on a machine with c cores a NumPy
attention leaves c - 1 of them idle for half its time, while PyTorch's fused
kernel splits everything. Each (batch, head) sequence is independent of the
others, so :func:`split_over_threads` hands groups of them to a pool of
threads, each running a one-thread BLAS (NumPy releases Python's global lock
inside its loops, so the threads really run at once).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ._validation import as_float_array, check_min_ndim, check_positive_int

__all__ = ["split_over_threads"]

#: Chunks of sequences per thread: each result is copied into the output when done, so about
#: 1 / CHUNKS_PER_THREAD of the output is held twice at once, not all of it.
CHUNKS_PER_THREAD = 4


def split_over_threads(
    attention: Callable[..., Any], q: Any, k: Any, v: Any, threads: int | None = None, **kwargs: Any
) -> Any:
    """Run ``attention(q, k, v, **kwargs)`` with the batch axes split over ``threads`` threads.

    Parameters
    ----------
    attention : callable
        An attention function of the package, such as
        :func:`selfattention.memory_efficient_attention` or
        :func:`selfattention.scaled_dot_product_attention`, that treats the
        batch axes independently. Its result (an array or a tuple of arrays,
        each with the batch axes first) is put back together in order.
    q, k, v : array_like, shapes (..., T, Dk), (..., S, Dk), (..., S, Dv)
        With the same batch axes (no broadcasting between them).
    threads : int, optional
        Defaults to the number of CPUs (``os.cpu_count()``), and at most the
        number of sequences. With 1, ``attention`` runs as it is (its
        result is checked as the split's would be).
    **kwargs
        Passed on, e.g. ``is_causal`` or ``block_size``. A ``mask`` is refused:
        its batch axes would have to be split alike.

    Returns
    -------
    Whatever ``attention`` returns, for the whole batch.

    Raises
    ------
    ValueError
        If ``attention`` is not callable, the inputs are not arrays of at least
        2 axes with the same batch axes, ``threads`` is not a positive integer,
        or a ``mask`` is given.

    Notes
    -----
    While the threads run, the BLAS of NumPy runs one thread each (through
    ``threadpoolctl``, for the whole process), so the threads do not
    oversubscribe the cores. The sequences go out in
    ``CHUNKS_PER_THREAD * threads`` chunks (4 per thread), and each chunk's
    result is copied into the output as soon as it is done: at most one
    chunk per thread is held twice, so the split costs a fraction of the
    output's memory (about a quarter for the reference's T × S weights),
    not a second copy of it. Results agree with a single call's to
    rounding, not to the last bit: a one-thread BLAS adds up its products
    in another order. See chapter 7.
    """
    if not callable(attention):
        raise ValueError(
            f"attention must be a function called as attention(q, k, v, ...); got {type(attention).__name__}"
        )
    if "mask" in kwargs:
        raise ValueError("split_over_threads does not split a mask; call the attention function directly")
    arrays = []
    for name, value in (("q", q), ("k", k), ("v", v)):
        arr = as_float_array(value, name)
        check_min_ndim(arr, name, 2, "(..., T, D)")
        arrays.append(arr)
    q, k, v = arrays
    batch = q.shape[:-2]
    if not batch == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(
            f"q, k and v must have the same batch axes; got {q.shape[:-2]}, {k.shape[:-2]} and {v.shape[:-2]}"
        )
    count = int(np.prod(batch, dtype=np.int64))
    threads = check_positive_int(os.cpu_count() or 1 if threads is None else threads, "threads", at_most=1024)
    threads = max(1, min(threads, count))
    if threads == 1:  # the same promise as the split: arrays with the batch axes first
        result = attention(q, k, v, **kwargs)
        pieces = result if isinstance(result, tuple) else (result,)
        if not all(isinstance(piece, np.ndarray) and piece.shape[: len(batch)] == batch for piece in pieces):
            raise ValueError(
                "attention must return an array, or a tuple of arrays, with the batch axes first; "
                f"got {_describe(result)} for batch axes {batch}"
            )
        return result
    from threadpoolctl import threadpool_limits

    flat = [a.reshape(count, *a.shape[-2:]) for a in (q, k, v)]
    # More chunks than threads, each written into one output as soon as it is done: joining whole halves at
    # the end would hold every result twice (for the reference's T x S weights, twice the memory).
    chunks = np.array_split(np.arange(count), min(count, CHUNKS_PER_THREAD * threads))
    joined: list[np.ndarray] = []
    returns_tuple: list[bool] = []  # set by the first chunk to finish
    lock = threading.Lock()

    def run(chunk: np.ndarray) -> None:
        part = slice(int(chunk[0]), int(chunk[-1]) + 1)
        result = attention(*(a[part] for a in flat), **kwargs)
        pieces = result if isinstance(result, tuple) else (result,)
        if not all(isinstance(piece, np.ndarray) and piece.ndim >= 1 and len(piece) == len(chunk) for piece in pieces):
            raise ValueError(
                "attention must return an array, or a tuple of arrays, with the sequences on the first axis; "
                f"got {_describe(result)} for {len(chunk)} sequences"
            )
        with lock:
            if not joined:
                returns_tuple.append(isinstance(result, tuple))
                joined.extend(np.empty((count, *piece.shape[1:]), dtype=piece.dtype) for piece in pieces)
        for whole, piece in zip(joined, pieces, strict=True):
            whole[part] = piece

    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(run, chunks):
            pass
    results = tuple(whole.reshape(*batch, *whole.shape[1:]) for whole in joined)
    return results if returns_tuple[0] else results[0]


def _describe(result: Any) -> str:
    if isinstance(result, tuple):
        return "a tuple of " + ", ".join(_describe(item) for item in result)
    if isinstance(result, np.ndarray):
        return f"an array of shape {result.shape}"
    return type(result).__name__
