"""Shared fixtures: a seeded generator, and figures drawn without a display.

The parity helpers (tolerances per dtype, assert_parity, randomise_parameters)
are in ``selfattention.testing``, shared with the chapters and benchmarks.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # tests draw figures without a display

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
