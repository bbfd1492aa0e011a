"""Chapter 12's recorded TinyViTs, the training function that made them, and the machine helpers around them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import selfattention as sa
from selfattention import machine
from selfattention import vit_training as vt


@pytest.fixture(scope="module")
def digits():
    return sa.load_digits_split(test_size=0.25, seed=0)


@pytest.fixture(scope="module")
def recorded():
    return vt.load_digit_vits()


def _logits(model: torch.nn.Module, images: np.ndarray) -> np.ndarray:
    dtype = next(model.parameters()).dtype
    with torch.no_grad():
        return model(torch.from_numpy(images).to(dtype)).numpy()


def test_the_record_holds_the_three_runs_in_float64_with_their_accuracies(recorded, digits):
    models, record = recorded
    _, x_test, _, y_test = digits
    assert sorted(models) == [0, 1, 2] and record["runs"] == vt.DIGIT_VIT_RUNS
    for seed, model in models.items():
        assert not model.training and next(model.parameters()).dtype == torch.float64
        assert sum(p.numel() for p in model.parameters()) == 18_218
        accuracy = (_logits(model, x_test).argmax(-1) == y_test).mean()
        assert accuracy == pytest.approx(record["test_accuracy"][seed], abs=1e-12)
    assert record["commit"] and record["numerics"]["cpu"] and record["torch"].startswith("2.")
    float32, _ = vt.load_digit_vits(torch.float32)
    np.testing.assert_allclose(_logits(float32[0], x_test), _logits(models[0], x_test), atol=1e-4)


def test_digit_vit_draws_the_chapters_starting_weights_and_leaves_the_global_generator_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    model = vt.digit_vit(0)
    assert torch.equal(torch.rand(1), before), "digit_vit moved the global generator"
    torch.manual_seed(0)
    same = sa.TinyViT(**vt.TINY_VIT_CONFIG)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), same.state_dict().values(), strict=True))


@pytest.mark.slow
def test_retraining_a_recorded_run_here_agrees_with_the_record(recorded, digits):
    x_train, x_test, y_train, y_test = digits
    model = vt.digit_vit(1)
    with machine.torch_threads(1):
        history = vt.train_tiny_vit(
            model, x_train, y_train, seed=1, x_test=x_test, y_test=y_test, **vt.DIGIT_VIT_RUNS[1]
        )
    assert history["step"] == list(range(1, 13)) and len(history["loss"]) == len(history["accuracy"]) == 12
    assert history["loss"][-1] < history["loss"][0] and not model.training
    difference = np.abs(_logits(model, x_test) - _logits(recorded[0][1], x_test)).max()
    assert difference < vt.AGREEMENT


RETRAIN = """
import json, numpy as np, torch, selfattention as sa
from selfattention import vit_training as vt
x_train, x_test, y_train, y_test = sa.load_digits_split(test_size=0.25, seed=0)
model = vt.digit_vit(0)
vt.train_tiny_vit(model, x_train, y_train, seed=0, **vt.DIGIT_VIT_RUNS[0])
with torch.no_grad():
    print(json.dumps(model(torch.from_numpy(x_test)).numpy().tolist()))
"""


@pytest.mark.slow
def test_other_kernels_and_one_thread_move_the_trained_logits_but_by_less_than_the_agreement(recorded, digits):
    # Chapter 12's claim: the same seed trained under other numerics no longer agrees in its last digits, and
    # stays within AGREEMENT of the record. One thread, torch's DEFAULT kernels and MKL's compatible path.
    environment = dict(os.environ, OMP_NUM_THREADS="1", ATEN_CPU_CAPABILITY="default", MKL_CBWR="COMPATIBLE")
    run = subprocess.run([sys.executable, "-c", RETRAIN], env=environment, capture_output=True, text=True, check=True)
    logits = np.array(json.loads(run.stdout))
    difference = np.abs(logits - _logits(recorded[0][0], digits[1])).max()
    assert 1e-6 < difference < vt.AGREEMENT, difference


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda d: vt.train_tiny_vit(torch.nn.Linear(2, 2), d[0], d[2], epochs=1, lr=1e-3, seed=0),
            "must be a TinyViT",
        ),
        (lambda d: vt.train_tiny_vit(vt.digit_vit(0), d[0][:, 0], d[2], epochs=1, lr=1e-3, seed=0), r"\(N, C, H, W\)"),
        (lambda d: vt.train_tiny_vit(vt.digit_vit(0), d[0].tolist(), d[2], epochs=1, lr=1e-3, seed=0), "got list"),
        (lambda d: vt.train_tiny_vit(vt.digit_vit(0), d[0], d[2][:5], epochs=1, lr=1e-3, seed=0), "one per image"),
        (lambda d: vt.train_tiny_vit(vt.digit_vit(0), d[0], d[2] + 10, epochs=1, lr=1e-3, seed=0), r"\[0, 10\)"),
        (lambda d: vt.train_tiny_vit(vt.digit_vit(0), d[0][:0], d[2][:0], epochs=1, lr=1e-3, seed=0), "no images"),
        (lambda d: vt.train_tiny_vit(vt.digit_vit(0), d[0], d[2], epochs=0, lr=1e-3, seed=0), "epochs must be"),
        (lambda d: vt.train_tiny_vit(vt.digit_vit(0), d[0], d[2], epochs=10**6, lr=1e-3, seed=0), "at most 10,000"),
        (lambda d: vt.train_tiny_vit(vt.digit_vit(0), d[0], d[2], epochs=1, lr=-1.0, seed=0), "lr"),
        (lambda d: vt.train_tiny_vit(vt.digit_vit(0), d[0], d[2], epochs=1, lr=1e-3, seed=-1), "seed"),
        (lambda d: vt.train_tiny_vit(vt.digit_vit(0), d[0], d[2], epochs=1, lr=1e-3, seed=0, x_test=d[1]), "both"),
        (lambda d: vt.digit_vit(2**63), "below 2\\*\\*63"),
        (lambda d: vt.digit_vit(1.5), "seed"),
        (lambda d: vt.load_digit_vits(torch.float16), "torch.float32 or torch.float64"),
        (lambda d: vt.load_digit_vits("float64"), "torch.float32 or torch.float64"),
    ],
)
def test_bad_input_is_refused_with_a_value_error(digits, call, message):
    with pytest.raises(ValueError, match=message):
        call(digits)


def test_torch_threads_restores_the_count_even_after_an_error():
    before = torch.get_num_threads()
    with machine.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError, match="inside"), machine.torch_threads(1):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError, match="n must be a positive integer"), machine.torch_threads(bad):
            pass


def test_numerics_names_the_paths_this_process_runs(monkeypatch):
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    n = machine.numerics()
    assert n["torch_threads"] == torch.get_num_threads() and n["numpy"] == np.__version__
    assert n["torch_capability"] == torch.backends.cpu.get_cpu_capability()
    assert n["environment"]["MKL_CBWR"] == "COMPATIBLE" and n["numpy_simd"] and n["cpu"]
    assert set(n["environment"]) <= set(machine.NUMERIC_ENVIRONMENT)
