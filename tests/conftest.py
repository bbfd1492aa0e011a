"""Shared fixtures: a seeded generator, and figures drawn without a display.

The parity helpers (tolerances per dtype, assert_parity, randomise_parameters)
are in ``selfattention.testing``, shared with the chapters and benchmarks.
"""

from __future__ import annotations

import os

# Hugging Face's libraries (the references of chapters 8 and 13) read local files only: set before any test
# imports them, because huggingface_hub reads it once, at import.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import matplotlib  # noqa: E402

matplotlib.use("Agg")  # tests draw figures without a display

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
