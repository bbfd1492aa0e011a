"""Each exercise checker passes the reference, shows TODO for a stub, and names every declared mistake.

The generic tests walk the registry of declared exercises; the hand-written ones
below cover what a declaration cannot express: error hints, type and shape
diagnostics, and answers that match no declared mistake.
"""

from __future__ import annotations

import copy
import itertools
import re
import subprocess
import sys
from dataclasses import replace as dataclasses_replace
from pathlib import Path

import numpy as np
import pytest

from selfattention import exercises as ex
from selfattention import (
    multihead_attention,
    softmax,
)
from selfattention.exercises._framework import REGISTRY, _all_cases, place
from selfattention.exercises.ch06_vision import BIGGAN_ATTENTION

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = list(REGISTRY.values())
MISTAKES = [
    pytest.param(exercise, mistake, id=f"{exercise.name}: {mistake.hint[len('It matches ') :][:40]}")
    for exercise in EXERCISES
    for mistake in exercise.mistakes
]
CHECKERS = [getattr(ex, name) for name in ex.__all__ if name.startswith("check_")]


def _stub(*args):
    raise NotImplementedError


def _descriptions(exercise):
    return [description for description, _ in exercise.cases(np.random.default_rng(0))]


def _in_float32(answer):
    """``answer`` computed from float32 copies of the floating arrays among its arguments."""

    def cast(a):
        if isinstance(a, dict):
            return {key: cast(value) for key, value in a.items()}
        return a.astype(np.float32) if isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating) else a

    return lambda *args: answer(*map(cast, args))


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.name)
def test_the_reference_passes_and_a_stub_is_todo(exercise):
    result = exercise.check(exercise.reference)
    assert (
        result
        and repr(result)
        == f"PASS {exercise.name}: {exercise.passes} on {_all_cases(len(_descriptions(exercise)))}. "
        + exercise.next_exercise()
    )
    todo = exercise.check(_stub)
    assert not todo and todo.status == "TODO" and repr(todo) == f"TODO {exercise.name}: not implemented yet"


@pytest.mark.parametrize("exercise", [e for e in EXERCISES if e.float32], ids=lambda e: e.name)
def test_the_reference_computed_in_float32_passes(exercise):
    result = exercise.check(_in_float32(exercise.reference))
    assert result.passed, repr(result)


@pytest.mark.parametrize(("exercise", "mistake"), MISTAKES)
def test_each_declared_mistake_fails_with_its_own_hint(exercise, mistake):
    with np.errstate(all="ignore"):
        result = exercise.check(mistake.answer)
    pattern = rf"FAIL {re.escape(exercise.name)}: case (\d+) \((.+?)\): (.+)\. {re.escape(mistake.hint)}"
    match = re.fullmatch(pattern, repr(result))
    assert match and _descriptions(exercise)[int(match[1]) - 1] == match[2], repr(result)


# Exercises with many right answers have a checker but no declared reference: (chapter, number).
NO_REFERENCE: dict = {}  # every checker is a declared exercise now


def test_every_checker_runs_its_own_exercise_named_in_its_docstring():
    declared = [checker for checker in CHECKERS if checker not in NO_REFERENCE]
    names = [checker(_stub).exercise for checker in declared]
    assert sorted(names) == sorted(REGISTRY) and len(set(names)) == len(declared) == 62
    places = {
        checker: (REGISTRY[name].chapter, REGISTRY[name].number) for checker, name in zip(declared, names, strict=True)
    }
    places.update(NO_REFERENCE)
    assert len(set(places.values())) == len(CHECKERS) == 62  # one checker per exercise
    for checker, (chapter, number) in places.items():
        assert f"See {place(chapter)}, exercise {number}." in " ".join(checker.__doc__.split())
        assert checker.__module__.startswith(f"selfattention.exercises.ch{chapter:02d}_")


def _naive_softmax(x):
    e = np.exp(x)  # no max subtraction: overflows on large scores
    return e / e.sum(axis=-1, keepdims=True)


def _values_batched_only(y, slope):
    B, T, Dv = y.shape  # copied from a batched example: fails on one sequence of outputs
    return y


# Answers that match no declared mistake, and errors: what a declaration cannot express.
# One case per line: the checker, the wrong answer, and what the message must contain (a regex).
# fmt: off
WRONG = [
    (ex.check_log_softmax, lambda x: np.log(_naive_softmax(x)), r"case 2 \(weights that round to 0: .*\): the log-weights contain NaN or inf: .* It matches np\.log\(softmax\(x\)\)"),
    (ex.check_log_softmax, lambda x: x - np.log(np.exp(x).sum(axis=-1))[..., None], r"case 3 \(scores around \+1e4\): the log-weights contain NaN or inf: .* It matches x - log\(sum\(exp\(x\)\)\)"),
    (ex.check_cross_attention_count, lambda D, kdim, vdim, bias: 4.0 * D * D + 0.5, r"case 1 \(D=16, kdim=16, vdim=16, bias=True\): the parameter count must be a positive integer; got 1024.5 of type float$"),
    (ex.check_cross_attention_count, lambda D, kdim, vdim, bias: 2 * D * D, r"case 1 \(D=16, kdim=16, vdim=16, bias=True\): got 512, which is not the number of entries in the four weights and biases$"),
    (ex.check_padding_mask_on_query_axis, lambda q, k, v, lengths: q @ k.T / np.sqrt(q.shape[-1]), r"case 1 \(one sequence, 1 real token of 2\) raised ValueError: .*Hint: on a \(B, T, Dk\) array, \.T reverses"),
    (ex.check_batch_mask_on_head_axis, lambda q, k, v, keep: q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]), r"case 1 .* raised ValueError: axes don't match array\. Hint: transpose\(0, 2, 1\) assumes exactly three axes"),
    (ex.check_to_package_mask, lambda attn_mask, padding: np.where(attn_mask, -1e9, 0.0) + np.where(padding, -1e9, 0.0)[:, None], r"case 1 \(.*\): sequence 0, query 0, key 1 should be blocked \(-inf\); got -1e\+09\. It matches blocking with a large finite number"),
    (ex.check_to_package_mask, lambda attn_mask, padding: ~attn_mask & ~padding[:, None], r"case 2 \(float attn_mask.*\) raised TypeError: ufunc 'invert' not supported"),
    (ex.check_values_for_outputs, _values_batched_only, r"case 1 \(the chapter's example: .*\) raised ValueError: not enough values to unpack .*Hint: the function must also work without batch axes"),
    (ex.check_ignored_parameters, lambda block, params, x: "attention.k.bias", r"case 1 \(.*\): should return a list of names such as \['attention\.k\.bias'\]; got str$"),
    (ex.check_ignored_parameters, lambda block, params, x: ["b_qkv"], r"case 1 \(.*\): \['b_qkv'\] is not a name that params\.named_arrays\(\) yields$"),
    (ex.check_biggan_attention, lambda x, state: BIGGAN_ATTENTION.reference(x, state).reshape(len(x), -1), r"case 1 \(x \(1, 16, 4, 4\), gamma=0.5\): the output should have shape \(1, 16, 4, 4\); got \(1, 256\)$"),
    (ex.check_rescale_rows, lambda S, block_size: np.zeros(S), r"case 1 \(S=12, blocks of 4\): should return a pair \(hidden, shown\) of score rows; got ndarray$"),
    (ex.check_lean_softmax, lambda scores: softmax(scores).tolist(), r"case 1 \(256 x 1024 float32 scores\): the weights should be a NumPy array, whose memory tracemalloc can count; got list$"),
]
# fmt: on


@pytest.mark.parametrize(("check", "wrong", "message"), WRONG)
def test_wrong_answers_fail_with_the_first_bad_case(check, wrong, message):
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        result = check(wrong)
    assert not result.passed and result.status == "FAIL" and repr(result).startswith("FAIL ")
    assert re.search(message, repr(result)), repr(result)


def test_checkers_reject_something_that_is_not_a_function():
    with pytest.raises(
        ValueError,
        match=r"expected the function to check for stable log-softmax \(pass the function itself, without calling it\); got int",
    ):
        ex.check_log_softmax(3)


def test_a_stub_called_by_the_answer_is_named_not_reported_as_todo():
    def my_head_columns(order, head_dim):
        raise NotImplementedError

    def reorder_heads(params, num_heads, order):
        columns = my_head_columns(order, params["w_out"].shape[0] // num_heads)
        return {**params, "w_out": params["w_out"][columns]}

    result = ex.check_reorder_heads(reorder_heads)
    assert result.status == "FAIL"
    assert repr(result).endswith(
        "my_head_columns(), which your function calls, raised NotImplementedError; finish that exercise first"
    )


def test_importing_the_checkers_loads_neither_torch_nor_matplotlib():
    code = "import sys, selfattention.exercises; print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout


# --- Issue 11: the checkers judge the answer, not its type -------------------------------


def _convert(answer, to):
    """``answer``'s arrays in another form: "torch" (tensors that require grad), "torch, no grad", "float32",
    "list" or "tuple"."""
    import torch

    def one(value):
        if isinstance(value, tuple):
            return tuple(one(v) for v in value)
        if not isinstance(value, np.ndarray):
            return value
        if to == "torch":
            return torch.tensor(value, requires_grad=np.issubdtype(value.dtype, np.floating))
        if to == "torch, no grad":
            return torch.from_numpy(value.copy())
        if to == "float32":
            return value.astype(np.float32) if np.issubdtype(value.dtype, np.floating) else value
        return value.tolist() if to == "list" else tuple(value.tolist()) if value.ndim == 1 else value.tolist()

    return lambda *args: one(answer(*args))


# Chapter 7's lean softmax is judged by the memory its call allocates too: converting a right answer to torch, a
# list or a float32 copy costs a copy of its own or hides the buffer from tracemalloc. Its other right answers, all
# NumPy arrays (float32 and float64, loops and chunks), pass in tests/test_exercises_ch7.py.
ANY_FORM = [exercise for exercise in EXERCISES if exercise.name != "a softmax in one copy"]


@pytest.mark.parametrize("form", ["torch", "torch, no grad", "float32", "list", "tuple"])
@pytest.mark.parametrize("exercise", ANY_FORM, ids=lambda e: e.name)
def test_a_correct_answer_passes_in_any_form(exercise, form):
    result = exercise.check(_convert(exercise.reference, form))
    assert result.passed, repr(result)


def test_a_correct_count_passes_as_a_float_or_a_numpy_integer():
    from selfattention.exercises.ch04_multihead import _cross_attention_count

    assert ex.check_cross_attention_count(lambda *args: float(_cross_attention_count(*args)))
    assert ex.check_cross_attention_count(lambda *args: np.int64(_cross_attention_count(*args)))


def test_a_correct_log_softmax_passes_whatever_its_dtype():
    import torch

    assert ex.check_log_softmax(lambda x: torch.log_softmax(torch.as_tensor(x), dim=-1))
    assert ex.check_log_softmax(lambda x: torch.log_softmax(torch.as_tensor(x, dtype=torch.float32), dim=-1))
    assert ex.check_log_softmax(lambda x: x - np.logaddexp.reduce(x, axis=-1, keepdims=True))


def _in_place_log_softmax(x):
    x -= x.max(axis=-1, keepdims=True)  # changes the caller's scores
    x -= np.log(np.exp(x).sum(axis=-1, keepdims=True))
    return x


def test_an_answer_that_changes_its_input_fails_and_says_so():
    result = ex.check_log_softmax(_in_place_log_softmax)
    assert not result
    assert re.search(
        r"case 1 \(small scores, 4 rows of 4\): your function changed its argument `x` in place", repr(result)
    )


def test_an_answer_that_changes_a_state_dict_fails_without_crashing_the_checker():
    def pops_a_weight(x, state):
        gamma = state.pop("gamma")
        return BIGGAN_ATTENTION.reference(x, {**state, "gamma": gamma})

    result = ex.check_biggan_attention(pops_a_weight)
    assert not result and "changed its argument `state` in place" in repr(result)

    def wrong_and_pops(x, state):
        state.clear()
        return x

    assert "changed its argument `state`" in repr(ex.check_biggan_attention(wrong_and_pops))


def test_the_biggan_checker_passes_a_float32_answer():
    result = ex.check_biggan_attention(_in_float32(BIGGAN_ATTENTION.reference))
    assert result, repr(result)


def _raises(*args):
    raise RuntimeError("boom")


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.name)
def test_an_answer_that_raises_fails_and_names_the_exception(exercise):
    result = exercise.check(_raises)
    assert not result and re.search(r": case 1 \(.+\) raised RuntimeError: boom$", repr(result)), repr(result)


def _first_array_overwritten(exercise):
    """The reference, but it first overwrites the first array argument in place."""

    def answer(*args):
        want = exercise.reference(*copy.deepcopy(args))
        first = next(a for a in args if isinstance(a, np.ndarray))
        first[...] = 0
        return want

    return answer


@pytest.mark.parametrize(
    "exercise",
    [
        e
        for e in EXERCISES
        if any(isinstance(a, np.ndarray) for _, args in e.cases(np.random.default_rng(0)) for a in args)
    ],
    ids=lambda e: e.name,
)
def test_a_correct_answer_that_overwrites_its_input_fails_and_says_so(exercise):
    result = exercise.check(_first_array_overwritten(exercise))
    assert not result and re.search(r"changed its argument `[\w ]+` in place; .* work on a copy", repr(result))


def test_an_answer_that_changes_its_params_container_fails_without_crashing():
    def zeroes_a_bias(block, params, x):
        params.b_out[...] = 0.0
        return []

    result = ex.check_ignored_parameters(zeroes_a_bias)
    assert not result and "changed its argument `params` in place" in repr(result), repr(result)


def test_adding_attention_s_output_pair_to_an_array_earns_a_hint():
    from selfattention.exercises._framework import _hint_for_error

    rng = np.random.default_rng(0)
    x, w_qkv, w_out = rng.normal(size=(3, 4)), rng.normal(size=(4, 12)), rng.normal(size=(4, 4))
    with pytest.raises(ValueError, match="inhomogeneous") as error:
        x + multihead_attention(x, w_qkv, w_out, 2)  # (y, weights), not y
    assert _hint_for_error(error.value).startswith("a function you called returned a tuple; multihead_attention")


@pytest.mark.parametrize("not_a_function", [None, np.ones(3), 3, "softmax", np.ndarray])
@pytest.mark.parametrize("check", CHECKERS, ids=lambda c: c.__name__)
def test_every_checker_rejects_something_that_is_not_a_function(check, not_a_function):
    with pytest.raises(ValueError, match=r"expected the function to check for .+; got \w+"):
        check(not_a_function)


def test_a_float16_answer_fails_with_a_pointer_to_float32():
    result = ex.check_log_softmax(lambda x: np.log(softmax(np.asarray(x))).astype(np.float16))
    assert not result and "your answer is float16" in repr(result) and "compute in float32" in repr(result)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda D, kdim, vdim, bias: True, r"the parameter count must be a positive integer; got True"),
        (lambda D, kdim, vdim, bias: "1088", r"must be a positive integer; got '1088' of type str"),
        (lambda D, kdim, vdim, bias: 1088.5, r"must be a positive integer; got 1088.5"),
        (lambda D, kdim, vdim, bias: float("nan"), r"must be a positive integer; got nan"),
        (lambda D, kdim, vdim, bias: None, r"must be a positive integer; got None"),
    ],
)
def test_a_count_that_is_not_a_whole_number_fails_with_a_message(answer, message):
    result = ex.check_cross_attention_count(answer)
    assert not result and re.search(message, repr(result)), repr(result)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda x: None, r"the log-weights should be an array of numbers; got NoneType"),
        (lambda x: "weights", r"the log-weights should be an array of numbers; got str"),
        (lambda x: np.ones(3), r"the log-weights should have shape \(4, 4\); got \(3,\)"),
        (lambda x: np.full(np.shape(x), np.nan), r"the log-weights contain NaN or inf"),
        (lambda x: 1 / 0, r"raised ZeroDivisionError: division by zero"),
    ],
)
def test_odd_log_softmax_answers_fail_with_a_message(answer, message):
    result = ex.check_log_softmax(answer)
    assert not result and re.search(message, repr(result)), repr(result)


# --- checkers with many right answers (no single reference) ---------------------------------


def _permutation_test(f, x, rng):
    y = f(x)
    return all(
        np.allclose(f(x[:, list(perm)]), y[:, list(perm)], rtol=1e-4, atol=1e-5)
        for perm in itertools.permutations(range(x.shape[1]))
    )


@pytest.mark.parametrize(
    ("check", "answer", "expected"),
    [
        (ex.check_query_favouring_word_2, lambda: np.array([-2, 1, 0]), r"PASS .*word 2 gets the only largest weight"),
        (ex.check_query_favouring_word_2, lambda: [-2.0, 1.0, 0.0], r"PASS"),
        (ex.check_query_favouring_word_2, _stub, r"TODO .*not implemented yet"),
        (ex.check_query_favouring_word_2, lambda: np.array([1, 0, 0]), r"FAIL .*must be the only largest"),
        (ex.check_query_favouring_word_2, lambda: np.ones(4), r"FAIL .*3 numbers; got shape \(4,\)"),
        (ex.check_query_favouring_word_2, lambda: 1 / 0, r"FAIL .*raised ZeroDivisionError"),
        (ex.check_permutation_test, _permutation_test, r"PASS .*the right verdict on all 10 cases"),
        (ex.check_permutation_test, lambda f, x, rng: True, r"FAIL .*case 2 \(.*expected False\): got True"),
        (ex.check_permutation_test, lambda f, x, rng: 1, r"FAIL .*must return True or False; got 1"),
        (ex.check_permutation_test, _stub, r"TODO"),
    ],
)
def test_checkers_without_a_single_answer(check, answer, expected):
    assert re.match(expected, repr(check(answer))), repr(check(answer))


def test_a_permutation_test_that_shuffles_x_in_place_is_told_to_work_on_a_copy():
    def shuffles_in_place(f, x, rng):
        rng.shuffle(x, axis=1)
        return _permutation_test(f, x, rng)

    result = ex.check_permutation_test(shuffles_in_place)
    assert not result and "changed its argument `x` in place" in repr(result)


def test_the_cross_attention_count_is_torch_s():
    import torch

    def torch_count(D, kdim, vdim, bias):
        module = torch.nn.MultiheadAttention(D, 1, kdim=kdim, vdim=vdim, bias=bias)
        return sum(p.numel() for p in module.parameters())

    assert ex.check_cross_attention_count(torch_count)


def test_every_exercise_says_what_it_asks_for_and_points_to_the_next():
    from selfattention.exercises._framework import KINDS

    ordered = sorted(EXERCISES, key=lambda e: (e.chapter, e.number))
    for chapter in {e.chapter for e in ordered}:  # each chapter's exercises numbered 1, 2, ... without gaps
        assert [e.number for e in ordered if e.chapter == chapter] == list(
            range(1, 1 + sum(e.chapter == chapter for e in ordered))
        )
    for exercise, following in itertools.pairwise(ordered):
        assert exercise.kind in KINDS and exercise.concept
        assert exercise.next_exercise() == (
            f"Next: {place(following.chapter)}, exercise {following.number} ({following.name})."
        )
    assert ordered[-1].next_exercise() == "That was the course's last exercise."
    with pytest.raises(ValueError, match="kind must be one of"):
        dataclasses_replace(ordered[0], kind="guess")
    with pytest.raises(ValueError, match="names the concept it checks"):
        dataclasses_replace(ordered[0], concept="")


def test_the_exercise_index_page_lists_every_exercise_as_declared():
    sys.path.insert(0, str(ROOT / "scripts"))
    from make_exercise_index import index_page

    assert (ROOT / "book" / "exercises.md").read_text() == index_page(), "run scripts/make_exercise_index.py"


def test_the_rolling_buffer_reference_is_the_package_s_sliding_window_cache():
    from selfattention import SlidingWindowCache
    from selfattention.exercises.ch09_decoding import _rolling_update

    rng = np.random.default_rng(0)
    for window in (1, 2, 3, 5):
        cache, buffer, position = SlidingWindowCache(window), np.zeros((window, 2)), 0
        for t in (2, 1, 7, 1, 3):
            keys = rng.normal(size=(1, t, 2))
            theirs, _ = cache.update(keys, keys)
            mine, buffer = _rolling_update(buffer, position, keys[0], window)
            np.testing.assert_array_equal(mine, theirs[0])
            position += t
