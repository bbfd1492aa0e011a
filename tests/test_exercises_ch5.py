"""Chapter 5's exercises: the references against torch, and answers the declarations do not list.

The generic tests (tests/test_exercises.py) check that each reference passes and
each declared mistake earns its hint. Here: the references are right (torch's
LayerNorm and RMSNorm, the Annotated Transformer's LayerNorm written in torch, and
the ignored parameters each case was built to have), correct answers written in
other ways and in float32 pass, and plausible wrong answers that are not declared
mistakes fail.
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from selfattention.exercises import ch05_encoder as ch5
from selfattention.exercises import check_annotated_layer_norm, check_fold_layer_norm, check_ignored_parameters

# --- Exercise 1: a LayerNorm folded into an RMSNorm and the next linear layer ------------------------


@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_the_fold_reference_turns_torch_s_layer_norm_into_torch_s_rms_norm(eps):
    rng = np.random.default_rng(0)
    for _, (gamma, beta, w, b) in ch5._fold_cases(rng):
        gamma, beta, w, b = (a.astype(np.float64) for a in (gamma, beta, w, b))
        D = len(gamma)
        x = torch.from_numpy(3.0 + (0.05 if eps > 1e-3 else 2.0) * rng.normal(size=(5, D)))  # eps matters at 0.05
        before = F.layer_norm(x, (D,), torch.from_numpy(gamma), torch.from_numpy(beta), eps).numpy() @ w + b
        w2, b2 = ch5._fold(gamma, beta, w, b)
        normed = F.rms_norm(x - x.mean(-1, keepdim=True), (D,), eps=eps).numpy()
        for w_folded in (w2, w2 + rng.normal(size=w2.shape[-1])):  # a row added to every row changes nothing
            np.testing.assert_allclose(normed @ w_folded + b2, before, rtol=1e-10, atol=1e-12)


def _fold_by_loops(gamma, beta, w, b):
    w2, b2 = np.empty(w.shape), np.array(b, dtype=np.float64)
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            w2[i, j] = gamma[i] * w[i, j]
            b2[j] += beta[i] * w[i, j]
    return w2, b2


def _fold_in_float32(gamma, beta, w, b):
    gamma, beta, w, b = (np.asarray(a, dtype=np.float32) for a in (gamma, beta, w, b))
    return np.diag(gamma) @ w, w.T @ beta + b


def _fold_centred_plus_a_row(gamma, beta, w, b):
    w2 = gamma[:, None] * w
    return w2 - w2.mean(axis=0) + 7.0, beta @ w + b  # w2 is unique only up to a row added to every row


def _fold_in_torch(gamma, beta, w, b):
    gamma, beta, w, b = (torch.tensor(a) for a in (gamma, beta, w, b))
    return gamma[:, None] * w, beta @ w + b


@pytest.mark.parametrize("answer", [_fold_by_loops, _fold_in_float32, _fold_centred_plus_a_row, _fold_in_torch])
def test_fold_correct_answers_pass(answer):
    result = check_fold_layer_norm(answer)
    assert result.passed, repr(result)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda g, beta, w, b: (w / g[:, None], beta @ w + b), "folded weight w2"),
        (lambda g, beta, w, b: (np.sqrt(len(g)) * g[:, None] * w, beta @ w + b), "folded weight w2"),
        (lambda g, beta, w, b: (g[:, None] * w, beta @ w.T + b), "folded bias b2"),
        (lambda g, beta, w, b: (g[:, None] * w, (beta / g) @ w + b), "folded bias b2"),
        (lambda g, beta, w, b: (g[:, None] * w, (beta - beta.mean()) @ w + b), "folded bias b2"),
        (lambda g, beta, w, b: (beta @ w + b, g[:, None] * w), r"should have shape \(6, 6\); got \(6,\)"),
        (lambda g, beta, w, b: g[:, None] * w, r"should return a pair \(w2, b2\)"),
    ],
)
def test_fold_undeclared_wrong_answers_fail(answer, message):
    result = check_fold_layer_norm(answer)
    assert result.status == "FAIL" and "case 1 " in repr(result), repr(result)
    assert "It matches" not in repr(result) and re.search(message, repr(result)), repr(result)


# --- Exercise 2: the Annotated Transformer's LayerNorm in nn.LayerNorm ---------------------------------


def _annotated_layer_norm(x, a_2, b_2, eps=1e-6):
    mean = x.mean(-1, keepdim=True)
    return a_2 * (x - mean) / (x.std(-1, keepdim=True) + eps) + b_2


def test_the_annotated_reference_makes_nn_layer_norm_match_and_the_copied_weights_do_not():
    for _, (a_2, b_2) in ch5._annotated_cases(np.random.default_rng(0)):
        a_2, b_2 = a_2.astype(np.float64), b_2.astype(np.float64)
        D = len(a_2)
        x = torch.from_numpy(3.0 + 2.0 * np.random.default_rng(D).normal(size=(32, D)))
        x = x + (x - x.mean(-1, keepdim=True)) * (1.0 / x.std(-1, correction=0, keepdim=True) - 1)  # std 1
        want = _annotated_layer_norm(x, torch.from_numpy(a_2), torch.from_numpy(b_2)).numpy()
        norm = torch.nn.LayerNorm(D).double()
        for (weight, bias), close in [(ch5._to_layer_norm(a_2, b_2), True), ((a_2, b_2), False)]:
            with torch.no_grad():
                norm.weight.copy_(torch.from_numpy(weight))
                norm.bias.copy_(torch.from_numpy(bias))
                got = norm(x).numpy()
            gap = np.abs(got - want).max() / np.abs(want - b_2).max()
            assert (gap < 1e-5) == close, (D, gap)
            if not close:  # off by sqrt(D / (D - 1)), about 1 + 1/(2D)
                np.testing.assert_allclose(gap, np.sqrt(D / (D - 1)) - 1, rtol=1e-2)


def _annotated_in_torch(a_2, b_2):
    D = a_2.shape[0]
    return torch.tensor(a_2) * torch.tensor((D - 1.0) / D).sqrt(), torch.tensor(b_2)


def _annotated_in_float32(a_2, b_2):
    a_2 = np.asarray(a_2, dtype=np.float32)
    return a_2 * np.float32(np.sqrt((a_2.size - 1) / a_2.size)), np.asarray(b_2, dtype=np.float32)


def _annotated_by_the_ratio_of_two_stds(a_2, b_2):
    row = np.arange(len(a_2), dtype=np.float64)  # any row that is not constant
    return a_2 * row.std() / row.std(ddof=1), b_2.copy()


@pytest.mark.parametrize("answer", [_annotated_in_torch, _annotated_in_float32, _annotated_by_the_ratio_of_two_stds])
def test_annotated_correct_answers_pass(answer):
    result = check_annotated_layer_norm(answer)
    assert result.passed, repr(result)


@pytest.mark.parametrize(
    "answer",
    [
        lambda a, b: (a * np.sqrt(len(a) / (len(a) + 1)), b),  # D + 1 for D - 1
        lambda a, b: (a / np.sqrt(len(a) - 1), b),
        lambda a, b: (a * np.sqrt((len(a) - 2) / (len(a) - 1)), b),  # D off by one
        lambda a, b: (a * (1 - 1 / (2 * len(a))), b),  # the first-order approximation
        lambda a, b: (a * np.sqrt((len(a) - 1) / len(a)), b * 0),
    ],
)
def test_annotated_undeclared_wrong_answers_fail(answer):
    result = check_annotated_layer_norm(answer)
    assert result.status == "FAIL" and "does not match the reference" in repr(result), repr(result)
    assert "It matches" not in repr(result)


# --- Exercise 3: the parameters a block ignores ----------------------------------------------------------

EXPECTED_IGNORED = [
    sorted(f"{part}.bias" for part in ("attention.q", "attention.k", "attention.v", "attention.out"))
    + ["feed_forward.down.bias", "feed_forward.up.bias", "norm1.bias", "norm1.weight", "norm2.bias", "norm2.weight"],
    ["attention.k.bias"],
    ["attention.k.bias", "feed_forward.down.bias"],
    ["attention.k.bias"],
    ["attention.k.bias"],
    ["attention.k.bias", "attention.k.weight", "attention.q.bias", "attention.q.weight"],
    ["attention.k.bias"],
]


def test_each_case_ignores_what_it_was_built_to_and_the_tolerance_sits_far_from_both_sides():
    cases = ch5._ignored_cases(np.random.default_rng(0))
    assert [sorted(ch5._ignored(*args)) for _, args in cases] == [sorted(names) for names in EXPECTED_IGNORED]
    for (description, (block, params, x)), ignored in zip(cases, EXPECTED_IGNORED, strict=True):
        y = block(x, params)
        scale = max(1.0, np.abs(y).max())
        rng = np.random.default_rng(1)
        for name, _ in params.named_arrays():
            changed = copy.deepcopy(params)
            array = dict(changed.named_arrays())[name]
            array += rng.normal(size=array.shape).astype(array.dtype)
            gap = np.abs(block(x, changed) - y).max() / scale
            if name in ignored:
                assert gap < 1e-6, (description, name, gap)  # rounding, float32 included: 10x below 1e-5
            else:
                assert gap > 1e-4, (description, name, gap)  # the weakest used array: 10x above 1e-5


def _relative_norm(out, y):
    return np.linalg.norm(out - y) <= 1e-6 * np.linalg.norm(y)


def _ignored_with(change, same=_relative_norm):
    """A learner's test: ``change(array, rng)`` gives the changed array, ``same(out, y)`` compares the outputs."""

    def answer(block, params, x):
        y = block(x, params)
        rng = np.random.default_rng(3)
        found = []
        for name, _ in params.named_arrays():
            changed = copy.deepcopy(params)
            array = dict(changed.named_arrays())[name]
            array[...] = change(array, rng)
            if same(block(x, changed), y):
                found.append(name)
        return found

    return answer


def _within(tolerance):
    return lambda out, y: np.abs(out - y).max() <= tolerance


def _ignored_by_replace(block, params, x):
    """Rebuilds the frozen containers with dataclasses.replace instead of changing a copy in place."""
    y = block(x, params)
    rng = np.random.default_rng(5)

    def rebuilt(container, path, value):
        head, *rest = path
        inner = value if not rest else rebuilt(getattr(container, head), rest, value)
        return replace(container, **{head: inner})

    found = set()
    for name, array in params.named_arrays():
        new = (array + rng.uniform(-1, 1, size=array.shape)).astype(array.dtype)
        out = block(x, rebuilt(params, name.split("."), new))
        if np.allclose(out, y, rtol=1e-4, atol=1e-4 * np.abs(y).max()):
            found.add(name)
    return found


@pytest.mark.parametrize(
    "answer",
    [
        _ignored_with(lambda a, rng: a + rng.uniform(-1, 1, size=a.shape)),  # relative norm, uniform changes
        _ignored_with(lambda a, rng: a + 0.01 * rng.normal(size=a.shape)),  # a small change
        _ignored_with(lambda a, rng: -a - 1.0 - rng.random(a.shape)),  # a different value everywhere
        _ignored_by_replace,
        lambda block, params, x: tuple(ch5._ignored(block, params, np.asarray(x, dtype=np.float32))),
    ],
)
def test_ignored_correct_answers_pass(answer):
    result = check_ignored_parameters(answer)
    assert result.passed, repr(result)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (_ignored_with(lambda a, rng: a + rng.normal(size=a.shape), _within(0.1)), r"case 5 .*attention\.q\."),
        (_ignored_with(lambda a, rng: a + 1e-9 * rng.normal(size=a.shape), _within(1e-8)), "case 1 .*lists"),
        (lambda block, params, x: [n for n in ch5._ignored(block, params, x) if n.endswith("bias")], "case 1 .*misses"),
        (lambda block, params, x: ch5._ignored(block, params, x)[:-1] or ["norm1.bias"], r"case \d .*"),
    ],
)
def test_ignored_undeclared_wrong_answers_fail(answer, message):
    result = check_ignored_parameters(answer)
    assert result.status == "FAIL" and re.search(message, repr(result)), repr(result)


@pytest.mark.parametrize(
    ("same", "case"),
    [(lambda out, y: np.array_equal(out, y), 2), (np.allclose, 7)],  # allclose's atol=1e-8: below float32 rounding
)
def test_a_comparison_stricter_than_rounding_misses_the_key_bias_and_is_told_so(same, case):
    result = check_ignored_parameters(_ignored_with(lambda a, rng: a + rng.normal(size=a.shape), same))
    assert f"case {case} " in repr(result) and "comparison stricter than rounding" in repr(result), repr(result)
