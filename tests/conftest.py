"""Shared helpers for the parity tests: tolerances per dtype and a seeded generator."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # tests draw figures without a display

import numpy as np
import pytest
import torch

# (rtol, atol) for comparing against PyTorch, by dtype.
TOLERANCES = {np.float64: (1e-10, 1e-12), np.float32: (1e-5, 1e-6)}


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def to_torch(*arrays: np.ndarray) -> tuple[torch.Tensor, ...]:
    """NumPy arrays as tensors sharing their dtype."""
    return tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays)


def assert_close(actual, expected, dtype) -> None:
    """assert_allclose with the tolerance for ``dtype``; reports the max difference on failure."""
    rtol, atol = TOLERANCES[np.dtype(dtype).type]
    if isinstance(expected, torch.Tensor):
        expected = expected.detach().numpy()
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
