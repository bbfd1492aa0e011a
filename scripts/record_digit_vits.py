"""Train chapter 12's three TinyViTs and record their weights: src/selfattention/data/digit_vits.npz.

Usage: python scripts/record_digit_vits.py

Each run of ``selfattention.vit_training.DIGIT_VIT_RUNS`` starts from
``digit_vit(seed)`` and is trained by ``train_tiny_vit`` on one torch thread, in
float32, on ``load_digits_split(0.25, seed=0)``. The file holds each model's
float32 weights (keys ``seed<N>/<parameter>``) and, as JSON under ``record``,
the runs, the model's configuration, each model's test accuracy, the training
time, the commit and the machine's numerics. Chapter 12 computes from these
weights, and checks that the model it trains itself agrees with them.
Re-run it after changing the recipe; ``load_digit_vits`` refuses a stale file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from selfattention import load_digits_split
from selfattention.machine import numerics, torch_threads
from selfattention.vit_training import DIGIT_VIT_RUNS, TINY_VIT_CONFIG, digit_vit, train_tiny_vit

OUT = Path(__file__).resolve().parents[1] / "src" / "selfattention" / "data" / "digit_vits.npz"


def main() -> int:
    x_train, x_test, y_train, y_test = load_digits_split(test_size=0.25, seed=0)
    arrays, accuracy, seconds = {}, {}, {}
    for seed, settings in DIGIT_VIT_RUNS.items():
        model = digit_vit(seed)
        start = time.perf_counter()
        with torch_threads(1):
            history = train_tiny_vit(model, x_train, y_train, seed=seed, x_test=x_test, y_test=y_test, **settings)
        seconds[seed] = round(time.perf_counter() - start, 1)
        accuracy[seed] = history["accuracy"][-1]
        for name, value in model.state_dict().items():
            arrays[f"seed{seed}/{name}"] = value.detach().numpy().astype(np.float32)
        print(f"seed {seed}: {settings}, test accuracy {accuracy[seed]:.4f}, {seconds[seed]} s")

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=OUT.parent).stdout.strip()

    commit = git("rev-parse", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no", "--", "src", "scripts"):
        commit += " with uncommitted changes"
    record = {
        "runs": DIGIT_VIT_RUNS,
        "config": TINY_VIT_CONFIG,
        "test_accuracy": accuracy,
        "seconds": seconds,
        "commit": commit,
        "numerics": numerics(),
        "torch": torch.__version__,
    }
    np.savez_compressed(OUT, record=np.array(json.dumps(record)), **arrays)
    print(f"wrote {OUT.relative_to(Path.cwd()) if OUT.is_relative_to(Path.cwd()) else OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
