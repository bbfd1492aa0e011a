"""The chapters as published: listed in the book and committed from a clean run.

nbval (``--nbval`` in ``make test``) re-executes every chapter once and compares
each output with the committed one; the repository's ``conftest.py`` times those
runs against the budget. These tests cover what nbval does not: the hygiene of
the committed outputs and the exercises' layout.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

if TYPE_CHECKING:
    import nbformat

ROOT = Path(__file__).resolve().parents[1]
# Reading notebooks imports nbformat and its JSON-schema validator (seconds): make test runs these, make unit
# does not.
pytestmark = pytest.mark.slow
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))


def _code_cells(path: Path) -> list[nbformat.NotebookNode]:
    import nbformat  # here, not at the top: importing it takes seconds, and make unit collects this file

    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def _text(output: nbformat.NotebookNode) -> str:
    if output.output_type == "stream":
        return output.text
    return output.get("data", {}).get("text/plain", "")


def test_the_toc_lists_exactly_the_chapters():
    toc = (ROOT / "_toc.yml").read_text()
    listed = re.findall(r"file:\s*(chapters/\S+)", toc)
    assert listed == [f"chapters/{p.stem}" for p in CHAPTERS]
    assert len(CHAPTERS) >= 2


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_committed_outputs_come_from_one_clean_run(path):
    cells = _code_cells(path)
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1)), (
        "re-run the chapter with `make execute`"
    )
    for cell in cells:
        names = [o.get("name") if o.output_type == "stream" else None for o in cell.outputs]
        assert not any(a is not None and a == b for a, b in zip(names, names[1:], strict=False)), (
            f"cell {cell.execution_count} has split print outputs: re-run the chapter with `make execute`"
        )
        for output in cell.outputs:
            assert output.output_type != "error", f"stored error in cell {cell.execution_count}"
            assert output.get("name") != "stderr", (
                f"stderr (a warning?) in cell {cell.execution_count}: {output.text[:200]}"
            )
            assert not re.search(r"/(root|tmp|home|work|Users)/", _text(output)), (
                f"a machine path in cell {cell.execution_count}"
            )


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_exercises_have_a_stub_and_a_collapsed_passing_solution(path):
    cells = _code_cells(path)
    checks = [c for c in cells if re.search(r"^check_\w+\(", c.source, re.MULTILINE)]
    stubs = [c for c in checks if "raise NotImplementedError" in c.source]
    solutions = [c for c in checks if c.source.startswith("# Solution")]
    assert 3 <= len(stubs) == len(solutions), "each chapter ends with at least 3 exercises, each with a solution"
    assert len(checks) == len(stubs) + len(solutions)
    for stub in stubs:
        assert _text(stub.outputs[-1]).startswith("TODO ") and "not implemented yet" in _text(stub.outputs[-1])
    for solution in solutions:
        assert {"hide-input", "hide-output"} <= set(solution.metadata.get("tags", [])), (
            "solutions are collapsed on the website, code and output (an output answers a 'predict first')"
        )
        jupyter = solution.metadata.get("jupyter", {})
        assert jupyter.get("source_hidden") and jupyter.get("outputs_hidden"), "and collapsed in JupyterLab"
        assert _text(solution.outputs[-1]).startswith("PASS "), _text(solution.outputs[-1])
        # A solution defines its own name, so running it leaves the learner's function alone.
        stub_names = set(re.findall(r"^def (\w+)\(", "".join(s.source for s in stubs), re.MULTILINE))
        assert not stub_names & set(re.findall(r"^def (\w+)\(", solution.source, re.MULTILINE))


def test_the_repository_url_is_set_once_and_every_chapter_installs_from_it():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    url = config["repository"]["url"]
    assert url.startswith("https://github.com/") and "executablebooks" not in url
    for path in CHAPTERS:
        first_code = _code_cells(path)[0]
        assert first_code.source.startswith("# On Colab or Binder, install the course package"), path.name
        assert f'"selfattention @ git+{url}"' in first_code.source, f"{path.name}: the install cell must use {url}"
        assert "import selfattention" in first_code.source and "except ImportError" in first_code.source
        assert "remove-cell" in first_code.metadata.get("tags", []), "hidden on the website, kept in downloads"
        assert first_code.outputs == [], "nothing to install, and nothing printed, when the package is importable"


# The output policy (book/api.md, "What a chapter prints"): a number nbval compares may carry at most this many
# significant digits, in printed text and in the data an interactive figure embeds. More would show the last bits
# of a float, which another BLAS kernel, SIMD path or thread count changes.
MAX_SIGNIFICANT_DIGITS = 6
_DECIMAL = re.compile(r"(?<![\w.,])-?\d+\.\d+(?:[eE][-+]?\d+)?(?![\w.])")


def _significant_digits(number: str) -> int:
    mantissa = number.lstrip("-").lower().split("e")[0]
    return len(mantissa.replace(".", "").lstrip("0"))


def _compared_texts(cell: nbformat.NotebookNode) -> list[str]:
    """What nbval compares in ``cell``: stream text and every text-like output, without inlined images and scripts."""
    texts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            texts.append(output.text)
            continue
        for kind, value in output.get("data", {}).items():
            if kind.startswith(("text/", "application/")) and isinstance(value, str):
                value = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", value)
                texts.append(re.sub(r"<script>.*?</script>", "", value, flags=re.DOTALL))  # code, not data
    return texts


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_outputs_print_no_more_digits_than_the_output_policy_allows(path):
    for cell in _code_cells(path):
        if "NBVAL_IGNORE_OUTPUT" in cell.source:
            continue
        for text in _compared_texts(cell):
            long = [n for n in _DECIMAL.findall(text) if _significant_digits(n) > MAX_SIGNIFICANT_DIGITS]
            assert not long, (
                f"cell {cell.execution_count} prints {long[:3]}: more than {MAX_SIGNIFICANT_DIGITS} significant digits "
                "show last bits that differ between machines; round it (book/api.md, 'What a chapter prints')"
            )


def test_the_digit_check_catches_full_precision_floats():
    assert _DECIMAL.findall('"out":[-0.8757469900165484, 2.5e-17] 0.2361 and 22,565,376') == [
        "-0.8757469900165484",
        "2.5e-17",
        "0.2361",
    ]
    assert [_significant_digits(n) for n in ("-0.8757469900165484", "0.000123", "44.6375", "1e-12")] == [16, 3, 6, 1]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_only_timing_cells_skip_the_output_comparison(path):
    for cell in _code_cells(path):
        if "NBVAL_IGNORE_OUTPUT" in cell.source:
            assert re.search(r"timings? differ", cell.source), (
                f"cell {cell.execution_count} skips nbval's comparison: only a timing may (say so in a comment)"
            )


# ---------------------------------------------------------------- reading on a phone (issue 32)

# The code box shows about 87 characters at 1400 px (measured in tests/test_site.py); on a phone the code wraps
# (book/_static/course.css). 79 leaves room for the box's padding at every desktop width the theme uses.
MAX_CODE_COLUMNS = 79


def _cells(path: Path) -> list[nbformat.NotebookNode]:
    import nbformat

    return nbformat.read(path, as_version=4).cells


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_code_lines_fit_the_desktop_code_box(path):
    for cell in _code_cells(path):
        if "remove-cell" in cell.metadata.get("tags", []):
            continue  # not on the site (the Colab install cell)
        long = [line for line in cell.source.splitlines() if len(line) > MAX_CODE_COLUMNS]
        assert not long, (
            f"cell {cell.execution_count}: {len(long)} line(s) over {MAX_CODE_COLUMNS} columns: {long[0]!r}"
        )


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_collapsed_cells_say_what_they_hide(path):
    """A collapsed cell's toggle names its content: "Show solution", not the theme's "Show code cell source"."""
    for cell in _code_cells(path):
        if "hide-input" not in cell.metadata.get("tags", []):
            continue
        prompts = cell.metadata.get("mystnb", {})
        show, hide = prompts.get("code_prompt_show", ""), prompts.get("code_prompt_hide", "")
        assert show.startswith("Show ") and hide.startswith("Hide ") and "code cell" not in show, (
            f"cell {cell.execution_count}: set metadata mystnb.code_prompt_show/hide (got {show!r}, {hide!r})"
        )
        if cell.source.startswith("# Solution"):
            assert (show, hide) == ("Show solution", "Hide solution"), f"cell {cell.execution_count}"


# About 150 words a minute of technical reading, rounded up to 5 minutes.
WORDS_PER_MINUTE = 150


def reading_minutes(words: int) -> int:
    return 5 * math.ceil(words / (5 * WORDS_PER_MINUTE))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_each_chapter_says_how_long_it_takes_and_what_it_needs(path):
    cells = _cells(path)
    markdown = [c.source for c in cells if c.cell_type == "markdown"]
    words = len(re.findall(r"\S+", "\n".join(markdown)))
    found = re.search(r"^\*\*Time\*\*: about (\d+) minutes\. \*\*You need\*\*: (.+)$", markdown[0], re.MULTILINE)
    assert found, "the first markdown cell must end with '**Time**: about N minutes. **You need**: ...'"
    assert int(found.group(1)) == reading_minutes(words), (
        f"{words} words of text: about {reading_minutes(words)} minutes at {WORDS_PER_MINUTE} words a minute"
    )


def test_reading_minutes_rounds_up_to_five():
    assert [reading_minutes(w) for w in (1, 750, 751, 3000, 3001)] == [5, 5, 10, 20, 25]
