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


@pytest.fixture
def close_figures():
    """Close every matplotlib figure a test opened (``pytestmark = pytest.mark.usefixtures("close_figures")``)."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


# Fixtures that load a reference library (transformers' code or BertModel, sentence-transformers, a saved
# checkpoint): a test that uses one is slow, so make unit (-m "not slow") leaves it to make test.
SLOW_FIXTURES = {"bert", "sentence_transformer", "tiny_checkpoint", "hf"}


@pytest.fixture(scope="session")
def hf():
    """Hugging Face's reference code (transformers' Llama, Bloom, Marian and XLM modules), imported on first use."""
    from types import SimpleNamespace

    transformers = pytest.importorskip("transformers")  # pinned in requirements.txt, so never skipped in CI
    from transformers.models.bloom import modeling_bloom
    from transformers.models.llama import modeling_llama
    from transformers.models.marian import modeling_marian
    from transformers.models.xlm import modeling_xlm

    return SimpleNamespace(
        transformers=transformers, llama=modeling_llama, bloom=modeling_bloom, marian=modeling_marian, xlm=modeling_xlm
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
