"""Repository-wide pytest hooks: what a run's numbers came from, and how long each chapter took.

- The header names the floating-point paths and thread counts of the run
  (``selfattention.machine.numerics``): NumPy's SIMD target, its BLAS kernel,
  PyTorch's CPU capability and threads, and the variables that change them.
  A chapter's committed outputs must be the same under every one of them (the
  output policy on the API page); ``make test-stable`` re-runs the chapters
  under two others.
- nbval executes each chapter once, cell by cell (kernel start included in the
  first cell's set-up). Summing the durations of a notebook's items gives the
  chapter's run time without executing it a second time. The times are printed
  at the end, with the 20 s target each chapter is written for; they are
  measured, never asserted: a busy or slow machine must not turn a correct
  chapter red. ``make execute`` records them (``_build/execute/times.json``).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

CHAPTER_TARGET_SECONDS = 20  # what a chapter is written to run in, on the idle 2-core CI machine
_chapter_seconds: dict[str, float] = defaultdict(float)


def pytest_report_header(config: pytest.Config) -> list[str]:
    from selfattention.machine import numerics

    n = numerics()
    environment = " ".join(f"{k}={v}" for k, v in n["environment"].items()) or "none set"
    return [
        f"numerics: {n['cpu']}, {n['cores']} cores; NumPy {n['numpy']} SIMD {n['numpy_simd']}, "
        f"BLAS {n['blas']} on {n['blas_threads']} threads; torch {n['torch']} {n['torch_capability']} "
        f"on {n['torch_threads']} threads",
        f"numerics environment: {environment}",
    ]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _chapter_seconds[path] += report.duration  # set-up, call and teardown


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _chapter_seconds:
        return
    terminalreporter.section("chapter run times (nbval; measured, not asserted)")
    for path, seconds in sorted(_chapter_seconds.items()):
        note = f"  (over the {CHAPTER_TARGET_SECONDS} s target)" if seconds >= CHAPTER_TARGET_SECONDS else ""
        terminalreporter.write_line(f"{path}: {seconds:.1f} s{note}")
