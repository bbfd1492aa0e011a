"""The recorded `make bench` run describes the code as it is now, and says what it measured."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from selfattention import recorded

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("attention", "causal", "decoding", "backward", "minilm", "llm")


def record() -> dict:
    return json.loads((ROOT / "src" / "selfattention" / recorded.RECORD_FILE).read_text())


@pytest.mark.parametrize("section", SECTIONS)
def test_each_section_timed_the_sources_as_they_are_now(section):
    changed = recorded.stale_sources(section, clone=ROOT)
    assert not changed, (
        f"the recorded '{section}' section timed older versions of {changed}; chapters quote it. Re-run "
        f"`make bench BENCH_ARGS='--sections {section} --record'` on a quiet 2-core machine and re-execute the chapters"
    )


@pytest.mark.parametrize("section", SECTIONS)
def test_each_section_says_what_it_measured(section):
    measured = record()["sections"][section]["measured"]
    assert len(measured["commit"]) == 40 and measured["sources_uncommitted"] in (True, False)
    assert any(name.startswith("benchmarks/") for name in measured["sources"])
    assert any(name.startswith("selfattention/") for name in measured["sources"])
    for key in ("cpu", "cores", "numpy", "numpy_simd", "blas", "blas_threads", "torch", "torch_capability"):
        assert measured[key] not in (None, "", "unknown"), key
    assert "OPENBLAS_CORETYPE" not in measured["environment"]  # make bench unsets it: a laptop has none
    assert "OPENBLAS_L2_SIZE" not in measured["environment"]


def test_a_changed_source_makes_recorded_run_warn(monkeypatch):
    fake = record()
    first = next(iter(fake["sections"]["causal"]["measured"]["sources"]))
    fake["sections"]["causal"]["measured"]["sources"][first] = "0" * 64
    monkeypatch.setattr(recorded, "_load", lambda: fake)
    with pytest.warns(recorded.StaleRecordWarning, match="older versions of"):
        recorded.recorded_run("causal")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recorded.recorded_run("causal", check_sources=False)


def test_package_sources_follow_module_level_relative_imports():
    files = recorded.package_sources(["efficient"])
    assert "selfattention/efficient.py" in files and "selfattention/attention.py" in files
    assert "selfattention/scores.py" in files  # efficient -> attention -> scores
    assert "selfattention/pretrained.py" not in files
    assert recorded.package_sources(["selfattention.interop.sdpa"])[-1] == "selfattention/interop/sdpa.py"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: recorded.recorded_run("nope"), r"section must be one of \["),
        (lambda: recorded.recorded_run(3), r"section must be one of"),
        (lambda: recorded.recorded_run("causal", check_sources="yes"), r"check_sources must be True or False"),
        (lambda: recorded.stale_sources("nope"), r"section must be one of"),
        (lambda: recorded.stale_sources("causal", clone=3), r"clone must be the path of a clone .*; got int"),
        (lambda: recorded.stale_sources("causal", clone="/nonexistent"), r"clone must be the root of a clone"),
        (lambda: recorded.package_sources("efficient"), r"modules must be a list or tuple of module names; got str"),
        (lambda: recorded.package_sources(["nope"]), r"no module selfattention.nope"),
        (lambda: recorded.package_sources([3]), r"modules must hold module names \(str\); got int"),
        (lambda: recorded.source_hashes(["missing.py"]), r"cannot hash missing.py: no such file"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()
