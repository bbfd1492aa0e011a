"""The repository's own tooling: every make target is documented, and CI runs lint and the tests."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_make_target_is_documented_in_make_help():
    makefile = (ROOT / "Makefile").read_text()
    phony = set(re.search(r"^\.PHONY:(.*)$", makefile, re.MULTILINE).group(1).split())
    documented = set(re.findall(r"^([a-z-]+):[^#\n]*## ", makefile, re.MULTILINE))
    assert phony == documented, f"undocumented: {sorted(phony - documented)}; not phony: {sorted(documented - phony)}"
    listed = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for target in phony:
        assert re.search(rf"^  make {target} ", listed, re.MULTILINE), f"make help does not list {target}"


def test_ci_runs_lint_and_the_tests_and_builds_the_site_once():
    steps = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("make ")]
    assert steps == ["make lint", "make test", "make test-stable"]  # make test builds the site, with -W
