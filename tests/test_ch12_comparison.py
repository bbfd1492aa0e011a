"""Chapter 12's honest comparison is reproducible: the baselines exactly, a ViT seed within a few images (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _scripts import load_script
from sklearn.model_selection import train_test_split
from threadpoolctl import threadpool_limits

import selfattention as sa

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
RECORD = json.loads((ROOT / "src" / "selfattention" / "data" / "ch12_comparison.json").read_text())


@pytest.fixture(scope="module")
def script():
    return load_script("record_ch12_comparison")


@pytest.fixture(scope="module")
def data():
    x_train, x_test, y_train, y_test = sa.load_digits_split(test_size=0.25, seed=0)
    return x_train, x_test, y_train, y_test


def test_the_baselines_give_the_recorded_predictions(script, data):
    x_train, x_test, y_train, y_test = data
    flat = lambda a: a.reshape(len(a), -1).astype(np.float64)  # noqa: E731
    with threadpool_limits(limits=1, user_api="blas"):
        for name, (_, _, make) in script.BASELINES.items():
            run = RECORD["baselines"][name]
            hits = (make(run["chosen"]).fit(flat(x_train), y_train).predict(flat(x_test)) == y_test).astype(int)
            assert "".join(map(str, hits)) == run["test_correct"], name


def test_the_validation_split_holds_no_test_image(data):
    x_train, x_test, y_train, _ = data
    x_fit, x_val, _, _ = train_test_split(x_train, y_train, test_size=0.2, stratify=y_train, random_state=0)
    assert len(x_val) == RECORD["validation_size"] == 270
    test_rows = {row.tobytes() for row in x_test}
    assert not any(row.tobytes() in test_rows for row in x_val)  # no test image is used for a choice


def test_a_vit_seed_retrains_to_its_record(script, data):
    x_train, x_test, y_train, y_test = data
    chosen = RECORD["vit"]["chosen"]
    accuracy = (script.vit_predictions(x_train, y_train, x_test, seed=1, **chosen) == y_test).mean()
    assert abs(accuracy - RECORD["vit"]["test_accuracy"][1]) <= 3 / len(y_test)  # float32 training: a few images
