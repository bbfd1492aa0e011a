"""The package as a whole: honest imports, one list of public names, and the shared helpers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import selfattention as sa
from selfattention import measure, testing

ROOT = Path(__file__).resolve().parents[1]


def test_importing_the_package_loads_neither_torch_nor_matplotlib():
    code = "import sys, selfattention; print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout


def test_lazy_names_are_the_torch_modules_own_list_and_load_on_first_use():
    from selfattention import vision_modules

    assert tuple(vision_modules.__all__) == sa._LAZY["vision_modules"]
    assert sa.T2TAttention is vision_modules.T2TAttention
    assert {"T2TAttention", "testing", "measure", "exercises"} <= set(dir(sa))
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        sa.no_such_name  # noqa: B018


def test_all_is_assembled_without_duplicates_and_every_name_resolves():
    assert len(sa.__all__) == len(set(sa.__all__))
    for name in sa.__all__:
        assert getattr(sa, name) is not None


def test_every_public_name_is_documented_on_the_api_page():
    # The API reference: book/api.md (the index) and one page per part of the package in book/api/.
    pages = [ROOT / "book" / "api.md", *sorted((ROOT / "book" / "api").glob("*.md"))]
    api = "\n".join(path.read_text() for path in pages)
    documented = set(re.findall(r"\.\. auto(?:function|class|data):: selfattention\.(\w+)\s", api))
    missing = sorted(set(sa.__all__) - documented)
    assert not missing, f"add these to a page in book/api/: {missing}"
    assert not documented - set(sa.__all__), "book/api/ documents names the package does not export"
    # The interactive figures live in their own namespace, selfattention.interactive.
    interactive = set(re.findall(r"\.\. auto(?:function|class):: selfattention\.interactive\.(\w+)\s", api))
    assert interactive == set(sa.interactive.__all__)


def test_best_time_and_peak_bytes():
    calls = []
    assert measure.best_time(lambda: calls.append(1), repeats=4) >= 0.0
    assert len(calls) == 5  # one warm-up, then four timed
    assert measure.median_time(lambda: calls.append(1), repeats=3) >= 0.0
    assert len(calls) == 9  # and one warm-up, then three timed
    assert measure.peak_bytes(lambda: np.ones(1_000_000)) >= 8_000_000


def test_assert_parity_reports_the_largest_difference():
    testing.assert_parity(np.ones(3), np.ones(3) + 1e-13, np.float64)
    with pytest.raises(
        AssertionError, match=r"result: the largest difference is 0.5 at index \(1, 0\) \(got 1.5, expected 1;"
    ):
        testing.assert_parity(np.array([[1.0], [1.5]]), np.ones((2, 1)))
    with pytest.raises(AssertionError, match=r"weights: shape \(2,\) differs from the expected \(3,\)"):
        testing.assert_parity(np.ones(2), np.ones(3), what="weights")
    with pytest.raises(AssertionError, match=r"the largest difference is nan"):
        testing.assert_parity(np.array([np.nan]), np.ones(1))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: measure.best_time(3), r"function must be callable \(called with no arguments\); got int"),
        (lambda: measure.best_time(print, repeats=0), r"repeats must be a positive integer; got 0"),
        (lambda: measure.median_time(print, repeats=1.5), r"repeats must be a positive integer; got 1.5"),
        (lambda: measure.peak_bytes(None), r"function must be callable \(called with no arguments\); got NoneType"),
        (lambda: testing.randomise_parameters(np.ones(3)), r"module must be a torch.nn.Module; got ndarray"),
        (lambda: testing.tolerance(np.int64), r"dtype must be float16, float32 or float64; got <class 'numpy.int64'>"),
    ],
)
def test_helper_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
