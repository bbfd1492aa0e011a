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
