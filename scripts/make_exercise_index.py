"""Write book/exercises.md: every declared exercise, by chapter, with its kind and the idea it checks.

Usage: python scripts/make_exercise_index.py

The page is generated from the package's registry of exercises, so it cannot
drift from the checkers; tests/test_exercises.py fails when the committed page
differs from what this script writes.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import selfattention.exercises  # noqa: F401  (importing declares every exercise)
from selfattention.exercises._framework import APPENDICES, KINDS, REGISTRY

ROOT = Path(__file__).resolve().parents[1]


def _label_and_title(chapter: int) -> tuple[str, str]:
    """The chapter's page label and title: the `(label)=` and `# Title` lines that open its first cell."""
    (path,) = (ROOT / "chapters").glob(f"{chapter:02d}_*.ipynb")
    first = "".join(json.loads(path.read_text())["cells"][0]["source"])
    label = re.match(r"\((ch-[a-z-]+)\)=", first).group(1)
    title = re.search(r"^# (.+)$", first, re.MULTILINE).group(1)
    return label, title


def index_page() -> str:
    """The Markdown of the exercise index."""
    lines = [
        "(exercises)=",
        "# Exercises",
        "",
        "Every chapter ends with exercises, and the bug zoo has one per bug. Each has",
        "a checker that runs in your own kernel, with no server and no account: it",
        "shows `PASS`, `FAIL` with the first",
        "failing case and, for a known mistake, what it is, or `TODO` while the",
        "function is still the stub. A `PASS` also names the exercise that comes next.",
        "Each has a collapsed solution. The kinds:",
        "",
    ]
    lines += [f"- **{kind}**: {meaning}." for kind, meaning in KINDS.items()]
    by_chapter: dict[int, list] = {}
    for exercise in REGISTRY.values():
        by_chapter.setdefault(exercise.chapter, []).append(exercise)
    for chapter in sorted(by_chapter):
        label, title = _label_and_title(chapter)
        heading, page = ("Appendix", "the appendix") if chapter in APPENDICES else (f"Chapter {chapter}", "the chapter")
        lines += ["", f"## {heading}: {title}", "", f"In {{ref}}`{page} <{label}>`:", ""]
        lines += ["| exercise | kind | checks |", "|---|---|---|"]
        for exercise in sorted(by_chapter[chapter], key=lambda e: e.number):
            lines.append(f"| {exercise.number}. {exercise.name} | {exercise.kind} | {exercise.concept} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    (ROOT / "book" / "exercises.md").write_text(index_page())
    sys.exit(0)
