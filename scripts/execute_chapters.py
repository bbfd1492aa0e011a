"""Re-run chapters top to bottom in a fresh kernel and save their outputs.

Usage: python scripts/execute_chapters.py chapters/01_word_vectors.ipynb [...]

Used by ``make execute``. The kernel is this interpreter's (the venv's), the
working directory is the chapter's folder, no timing metadata is written, and
consecutive prints are merged into one output (the kernel splits them by
timing), so that a re-run changes a notebook only where its outputs changed.

Each chapter's wall time (kernel start included) is printed and recorded, with
the commit and the machine's numerics, in ``_build/execute/times.json``: the
README's table of chapter times comes from such a record. Times are measured,
never asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

CELL_TIMEOUT_SECONDS = 600
RECORD = Path("_build/execute/times.json")


def execute(path: Path) -> tuple[nbformat.NotebookNode, float]:
    """Execute the notebook at ``path``; return it and the wall time in seconds."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_SECONDS,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False,
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = merge_streams(cell.outputs)
    return notebook, seconds


def merge_streams(outputs: list) -> list:
    """Join consecutive stream outputs of the same name (stdout or stderr) into one."""
    merged: list = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if (
            output.output_type == "stream"
            and previous is not None
            and previous.output_type == "stream"
            and previous.name == output.name
        ):
            previous.text += output.text
        else:
            merged.append(output)
    return merged


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__)
        return 2
    from selfattention.machine import numerics

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no", "--", "src", "chapters"):
        commit += " with uncommitted changes to src/ or chapters/"

    times = {}
    for name in paths:
        path = Path(name)
        notebook, seconds = execute(path)
        nbformat.write(notebook, path)
        times[path.name] = round(seconds, 1)
        print(f"{path}: executed in {seconds:.1f} s")
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    record = {"commit": commit, "numerics": numerics(), "seconds": times}
    RECORD.write_text(json.dumps(record, indent=1) + "\n")
    print(f"recorded in {RECORD}: commit {commit}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
