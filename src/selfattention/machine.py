"""The machine behind the numbers: its floating-point paths and thread counts.

Two machines that run the same code can disagree in the last bits of a float:
NumPy picks a SIMD kernel for each ufunc (SSE, AVX2 or AVX-512), its BLAS
picks a GEMM kernel for the CPU and splits the work over threads, and PyTorch
does the same with its own kernels (``ATEN_CPU_CAPABILITY``) and MKL. The
course's output policy (the API page, "What a chapter prints") keeps every
printed number independent of all of these. :func:`numerics` says which paths
this process runs, so that ``make test`` can print them and ``make
test-stable`` can check that its settings took effect. :func:`torch_threads`
sets PyTorch's thread count for a block of code and then restores it, so a
chapter that needs a count does not leak it into the cells after.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ._validation import check_positive_int

__all__ = ["numerics", "torch_threads", "NUMERIC_ENVIRONMENT"]

# The environment variables that change a floating-point path or a thread count, read by numerics().
NUMERIC_ENVIRONMENT = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NPY_DISABLE_CPU_FEATURES",
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _numpy_simd() -> str:
    """The SIMD target NumPy runs its float32 ``exp`` with (e.g. 'X86_V3', 'baseline(X86_V2)')."""
    try:
        from numpy.lib.introspect import opt_func_info
    except ImportError:  # NumPy < 2.0
        return "unknown"
    info = opt_func_info(func_name="^exp$", signature="float32")
    return next(iter(info.get("exp", {}).values()), {}).get("current", "unknown")


def _blas() -> tuple[str, int | None]:
    """NumPy's BLAS: its name, version and kernel, and its thread count (threadpoolctl, if installed)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl is not installed)", None
    for pool in threadpool_info():
        if pool.get("user_api") == "blas" and "numpy" in pool.get("filepath", ""):
            name = f"{pool.get('internal_api')} {pool.get('version')} ({pool.get('architecture', '?')} kernels)"
            return name, pool.get("num_threads")
    return "unknown", None


def numerics() -> dict[str, Any]:
    """The floating-point paths and thread counts this process runs.

    Returns
    -------
    dict
        ``cpu`` (the model name), ``cores`` (``os.cpu_count()``), ``numpy`` and
        ``numpy_simd`` (the SIMD target of NumPy's float32 ``exp``, e.g.
        ``"X86_V3"`` for AVX2 or ``"baseline(X86_V2)"`` when dispatch is off),
        ``blas`` and ``blas_threads`` (NumPy's BLAS and its kernel), ``torch``,
        ``torch_capability`` (``"AVX2"``, ``"AVX512"``, ``"DEFAULT"``...) and
        ``torch_threads``, and ``environment``: each variable of
        ``NUMERIC_ENVIRONMENT`` that is set.

    Notes
    -----
    Imports torch. See the API page's output policy, and ``make test-stable``.
    """
    import torch

    blas, blas_threads = _blas()
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "numpy": np.__version__,
        "numpy_simd": _numpy_simd(),
        "blas": blas,
        "blas_threads": blas_threads,
        "torch": torch.__version__,
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "environment": {name: os.environ[name] for name in NUMERIC_ENVIRONMENT if name in os.environ},
    }


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run a block with PyTorch's intra-op thread count set to ``n``, then restore the old count.

    Parameters
    ----------
    n : int
        Threads for the block (at least 1). One thread is what a small model
        trains fastest on when other programs share the cores: a thread pool
        whose threads wait for busy cores can run many times slower.

    Raises
    ------
    ValueError
        If ``n`` is not a positive integer of at most 1,024 (a typo's ``10**9``
        would ask PyTorch for a billion threads).

    Examples
    --------
    >>> with torch_threads(1):
    ...     pass  # train here; the count is restored after, even on an error
    """
    n = check_positive_int(n, "n", at_most=1024)
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
