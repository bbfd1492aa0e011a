"""Chapter 11's 8-seed record is what its own training loop gives: two seeds re-trained (slow: about 15 s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def script():
    return load_script("record_ch11_seeds")


@pytest.fixture(scope="module")
def namespace(script):
    return script.chapter_namespace()


@pytest.mark.parametrize("seed", [1, 3])
def test_a_seed_retrains_to_its_record(script, namespace, seed):
    record = json.loads((ROOT / "src" / "selfattention" / "data" / "ch11_seeds.json").read_text())
    assert (record["steps"], record["wide_steps"]) == (script.STEPS, script.WIDE_STEPS)
    recorded = record["runs"][seed]
    again = script.one_seed(namespace, seed)
    assert again["accuracy"] == recorded["accuracy"]
    for key in ("on_source", "head_alone"):  # float64 training: other BLAS kernels move the last digits only
        assert again[key] == pytest.approx(recorded[key], abs=0.01), key
    assert again["uniform"] == pytest.approx(recorded["uniform"], abs=0.01)
    assert again["steps_to_99"]["1/sqrt(Dh)"] == recorded["steps_to_99"]["1/sqrt(Dh)"]
