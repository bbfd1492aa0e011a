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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ._validation import as_float_array, check_min_ndim, check_positive_int

__all__ = ["split_over_threads"]


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
        number of sequences. With 1, ``attention`` runs as it is.
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
    oversubscribe the cores. Results agree with a single call's to rounding,
    not to the last bit: a one-thread BLAS adds up its products in another
    order. See chapter 7.
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
    if threads == 1:
        return attention(q, k, v, **kwargs)
    from threadpoolctl import threadpool_limits

    flat = [a.reshape(count, *a.shape[-2:]) for a in (q, k, v)]
    groups = np.array_split(np.arange(count), threads)

    def run(group: np.ndarray) -> Any:
        part = slice(int(group[0]), int(group[-1]) + 1)
        return attention(*(a[part] for a in flat), **kwargs)

    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(threads) as pool:
        parts = list(pool.map(run, groups))
    if isinstance(parts[0], tuple):
        return tuple(_join([p[i] for p in parts], batch) for i in range(len(parts[0])))
    return _join(parts, batch)


def _join(parts: list[np.ndarray], batch: tuple[int, ...]) -> np.ndarray:
    whole = np.concatenate(parts, axis=0)
    return whole.reshape(*batch, *whole.shape[1:])
