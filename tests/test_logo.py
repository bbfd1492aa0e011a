"""The committed logo and favicon are exactly what scripts/make_logo.py draws."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def test_logo_and_favicon_are_reproduced_by_the_script(tmp_path):
    spec = importlib.util.spec_from_file_location("make_logo", ROOT / "scripts" / "make_logo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path)
    for name in ("logo.png", "favicon.png"):
        committed = mpimg.imread(ROOT / "book" / "_static" / name)
        drawn = mpimg.imread(tmp_path / name)
        assert committed.shape == drawn.shape, name
        np.testing.assert_allclose(
            drawn, committed, atol=2 / 255, err_msg=f"re-run scripts/make_logo.py: {name} is stale"
        )
    assert mpimg.imread(tmp_path / "favicon.png").shape[:2] == (64, 64)
