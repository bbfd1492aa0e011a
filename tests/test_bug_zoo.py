"""The bug zoo: every bug is cited, caught by its property test, and absent from the reference and the fixes.

The page (chapters/90_bug_zoo.ipynb) shows each property failing on its bug with the smallest case
Hypothesis finds; nbval checks those outputs. These tests check what the page relies on.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from selfattention import bugs
from selfattention.bugs import properties
from selfattention.bugs.properties import PROPERTY, falsify
from selfattention.bugs.references import REFERENCE
from selfattention.exercises import ch90_bug_zoo

ROOT = Path(__file__).resolve().parents[1]
BUGS = list(bugs.__all__)
SOURCE = re.compile(r"Source: ([\w.-]+/[\w.-]+)#(\d+)")
PAGE = ROOT / "chapters" / "90_bug_zoo.ipynb"


def test_the_zoo_has_at_least_15_bugs_each_from_a_cited_public_thread():
    assert len(BUGS) == len(set(BUGS)) >= 15
    cited = set()
    for name in BUGS:
        doc = " ".join(getattr(bugs, name).__doc__.split())
        match = SOURCE.search(doc)
        assert match, f"bugs.{name} must name its source as 'Source: owner/repository#number'"
        assert "The bug:" in doc and "fix" in doc.lower(), f"bugs.{name} must say what was wrong and the fix"
        cited.add(match.group(0))
    assert len(cited) == len(BUGS), "one bug per thread"


def test_the_page_cites_every_bug_by_repository_and_number_with_a_link():
    text = PAGE.read_text()
    for name in BUGS:
        repo, number = SOURCE.search(" ".join(getattr(bugs, name).__doc__.split())).groups()
        kind = "issues|pull"
        assert re.search(rf"https://github\.com/{re.escape(repo)}/({kind})/{number}\b", text), f"{repo}#{number}"
        assert f"bugs.{name}" in text, f"the page must show bugs.{name}"


@pytest.mark.parametrize("name", BUGS)
def test_each_property_catches_its_bug_and_holds_for_the_reference(name):
    with np.errstate(all="ignore"):
        caught = falsify(name, getattr(bugs, name))
    assert not caught and caught.case is not None and caught.problem, repr(caught)
    assert falsify(name, REFERENCE[name]), "the property must hold for the package's own answer"


@pytest.mark.parametrize("name", BUGS)
def test_each_bug_has_an_exercise_whose_first_mistake_is_the_bug(name):
    exercise = ch90_bug_zoo.EXERCISE[name]
    assert exercise.kind == "debug" and exercise.mistakes[0].answer is getattr(bugs, name)
    assert exercise.mistakes[0].hint.startswith("It matches the original bug: ")
    with np.errstate(all="ignore"):
        result = exercise.check(getattr(bugs, name))
    assert not result and "It matches the original bug" in repr(result)


def test_the_smallest_failing_cases_are_the_same_on_every_run():
    first = [falsify(name, getattr(bugs, name)).case for name in BUGS[:5]]
    assert first == [falsify(name, getattr(bugs, name)).case for name in BUGS[:5]]


def test_properties_cover_every_bug_and_nothing_else():
    assert set(PROPERTY) == set(BUGS) == set(REFERENCE) == set(ch90_bug_zoo.EXERCISE)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: falsify("no_such_bug", bugs.weak_mask_value), r"bug must be one of \[.*\]; got 'no_such_bug'"),
        (lambda: falsify("weak_mask_value", 3), r"impl must be a function with the signature of bugs\.weak_mask_value"),
        (lambda: falsify("weak_mask_value", bugs.weak_mask_value, max_examples=0), r"max_examples must be"),
        (
            lambda: bugs.weak_mask_value(np.ones((2, 3)), np.ones((4, 2)), np.ones((4, 2)), np.ones((2, 4), bool)),
            "q and k",
        ),
        (lambda: bugs.weak_mask_value(np.ones((2, 3)), np.ones((4, 3)), np.ones((4, 2)), np.ones((2, 4))), "boolean"),
        (lambda: bugs.causal_mask_top_left(np.ones((3, 2)), np.ones((2, 2)), np.ones((2, 2))), "T <= S"),
        (lambda: bugs.sliding_window_one_too_wide(3, 0), "window"),
        (
            lambda: bugs.padding_mask_on_query_axis(np.ones((1, 2, 2)), np.ones((1, 2, 2)), np.ones((1, 2, 2)), [3]),
            "length",
        ),
        (
            lambda: bugs.batch_mask_on_head_axis(
                np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2), bool)
            ),
            r"\(B, heads",
        ),
        (lambda: bugs.scale_by_model_width(np.ones((2, 3)), np.ones((4, 2)), np.ones((3, 2)), np.ones((3, 2))), "w_q"),
        (lambda: bugs.merge_heads_by_reshape(np.ones((2, 3))), "x"),
        (lambda: bugs.rope_half_split_on_interleaved_pairs(np.ones((2, 3)), np.ones((2, 3))), "Dh even"),
        (lambda: bugs.rope_permutation_wrong_head_count(np.ones((2, 6)), 4), "even width"),
        (lambda: bugs.cached_positions_restart(np.ones((2, 8)), None, 2, 3), "prefill"),
    ],
)
def test_bad_input_is_a_value_error_that_says_what_was_expected(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_falsify_refuses_a_function_of_another_signature_and_names_an_answer_that_changes():
    for wrong in (lambda q, k: q, int, np.zeros(3)):
        with pytest.raises(ValueError, match=r"the signature of bugs\.scale_after_softmax, \(q, k, v\)"):
            falsify("scale_after_softmax", wrong)
    calls = []

    def wrong_once(q, k, v):  # wrong on its first call only, as an answer that keeps state might be
        calls.append(1)
        return REFERENCE["scale_after_softmax"](q, k, v) * (2 if len(calls) == 1 else 1)

    changing = falsify("scale_after_softmax", wrong_once)
    assert not changing and "different answers on the same input" in changing.problem


def test_a_correct_float32_answer_holds():
    # cached_positions_restart is left out: its weights (EncoderParams) stay float64, so its answer from a
    # float32 input is a float64 array, which the property rightly holds to float64's tolerance.
    for name in [name for name in BUGS if name != "cached_positions_restart"]:
        reference = REFERENCE[name]

        def in_float32(*args, reference=reference):
            cast = [a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == np.float64 else a for a in args]
            return reference(*cast)

        assert falsify(name, in_float32, max_examples=30), name


def test_the_bugs_import_only_the_package_core():
    code = "import sys, selfattention.bugs; print(sorted(m for m in ('hypothesis', 'torch', 'matplotlib') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
    for path in (ROOT / "src" / "selfattention" / "bugs").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                assert node.module in {"_validation", "attention", "decoding", "encoder", "masks", "multihead",
                                       "positions", "scores"}, f"{path.name} imports ..{node.module}"  # fmt: skip
    assert properties.__name__ == "selfattention.bugs.properties"
