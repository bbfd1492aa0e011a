"""`make lab`: JupyterLab renders the chapters' MyST (roles such as {ref} and {cite:p}) through jupyterlab-myst.

Without the extension, JupyterLab shows those roles as raw text. JupyterLab
lists the extension as "OK" only when its version is compatible; 4.6 reported
jupyterlab-myst 2.7.0 as incompatible, so the pins keep JupyterLab at 4.5.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

# JupyterLab's own command and a browser: make test runs these, make unit does not.
pytestmark = pytest.mark.slow


def test_jupyterlab_myst_is_installed_enabled_and_compatible():
    jupyter = Path(sys.executable).with_name("jupyter")
    listing = subprocess.run(
        [str(jupyter), "labextension", "list"], capture_output=True, text=True, check=True, timeout=120
    )
    text = re.sub(r"\x1b\[[0-9;]*m", "", listing.stdout + listing.stderr)  # drop the colour codes
    line = next((line for line in text.splitlines() if "jupyterlab-myst" in line and " v" in line), None)
    assert line is not None, f"jupyterlab-myst is not installed:\n{text}"
    assert "enabled" in line and line.split()[3] == "OK", f"jupyterlab-myst is not usable: {line.strip()}"
    assert "is not compatible" not in text, text


def _open_in_jupyterlab(tmp_path: Path, notebook: dict, script: str, *, drive: str = "") -> dict:
    """Open ``notebook`` in JupyterLab twice, trusted (as after running it) and untrusted, and run ``script`` on each.

    ``script`` returns what the test compares, null until the figure is ready. ``drive``, run once on the trusted
    copy after that, may act on the figure (click, type); the script's result after it is returned as "driven".
    """
    import json
    import os
    import shutil
    import socket
    import time
    import urllib.request

    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and chromedriver):
        message = "Chromium or chromedriver not found; bash .ci/install-browser installs them"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)  # CI must run the browser tests, never skip them
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "trusted.ipynb").write_text(json.dumps(notebook))
    untrusted = json.loads(json.dumps(notebook))
    untrusted["metadata"]["copy"] = "untrusted"  # other content, so the trusted copy's signature does not cover it
    (notebooks / "untrusted.ipynb").write_text(json.dumps(untrusted))
    env = {**os.environ, "JUPYTER_DATA_DIR": str(tmp_path / "data"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    jupyter = Path(sys.executable).with_name("jupyter")
    subprocess.run([str(jupyter), "trust", str(notebooks / "trusted.ipynb")], env=env, check=True, capture_output=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [str(jupyter), "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1", "--ServerApp.token=",
         "--ServerApp.password=", "--allow-root", f"--notebook-dir={notebooks}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    options = Options()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                 f"--user-data-dir={tmp_path / 'profile'}"):  # fmt: skip
        options.add_argument(flag)
    driver = None
    found = {}
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/lab", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        driver = webdriver.Chrome(service=Service(chromedriver), options=options)
        for name in ("untrusted", "trusted"):  # the untrusted one first: a trusted page's script would build it too
            driver.get(f"http://127.0.0.1:{port}/lab/tree/{name}.ipynb?reset")
            for _ in range(120):
                time.sleep(0.5)
                found[name] = driver.execute_script(script)
                if found[name] and (found[name]["ready"] or name == "untrusted"):
                    break
        if drive:
            driver.execute_script(drive)
            found["driven"] = driver.execute_script(script)
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:  # still waiting for a kernel that a busy machine is slow to start
            server.kill()
            server.wait(timeout=30)
    return found


# What a figure shows in JupyterLab: whether its script built it, whether the static image shows, and its rows.
_FIGURE = (
    "const w = document.querySelector('.sa-widget'); if (!w) return null;"
    "const img = w.querySelector('.sa-fallback img');"
    "return {ready: w.hasAttribute('data-ready'), image: !!img && img.getClientRects().length > 0,"
    "        rows: w.querySelectorAll('.sa-row').length,"
    "        kept: (w.querySelector('dd[data-name=kept]') || {}).textContent || null};"
)


def test_jupyterlab_draws_the_interactive_figure_or_its_fallback(tmp_path):
    """A trusted notebook (one the learner ran) runs the figure's script; an untrusted one shows the static image."""
    import json

    chapter = json.loads((Path(__file__).resolve().parents[1] / "chapters" / "01_word_vectors.ipynb").read_text())
    found = _open_in_jupyterlab(tmp_path, chapter, _FIGURE)
    assert found["trusted"] == {"ready": True, "image": False, "rows": 4, "kept": None}, found
    assert found["untrusted"] == {"ready": False, "image": True, "rows": 0, "kept": None}, found


def test_jupyterlab_runs_the_next_token_explorer(tmp_path):
    """Chapter 14's figure in a notebook: its sliders work in JupyterLab's output area too."""
    import nbformat
    import numpy as np

    from selfattention import interactive

    z = np.random.default_rng(0).normal(size=500) * 2
    figure = interactive.next_token_explorer({"p": ("Once upon a", z)}, [f"t{i}" for i in range(500)], title="t",
                                             alt="The ten most likely next tokens, as bars.")  # fmt: skip
    cell = nbformat.v4.new_code_cell("explorer", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("execute_result", figure._repr_mimebundle_(), execution_count=1)]
    chapter = Path(__file__).resolve().parents[1] / "chapters" / "01_word_vectors.ipynb"
    notebook = nbformat.v4.new_notebook(cells=[cell], metadata=nbformat.read(chapter, as_version=4).metadata)
    # The top-k slider's first step is top-k 1: one token kept, nine dropped.
    drive = (
        "const s = document.querySelector('.sa-widget input[data-setting=k]');"
        "s.value = '1'; s.dispatchEvent(new Event('input', {bubbles: true}));"
    )
    found = _open_in_jupyterlab(tmp_path, notebook, _FIGURE, drive=drive)
    assert found["trusted"] == {"ready": True, "image": False, "rows": 10, "kept": "500 of 500"}, found
    assert found["untrusted"] == {"ready": False, "image": True, "rows": 0, "kept": None}, found
    assert found["driven"]["kept"] == "1 of 500", found
