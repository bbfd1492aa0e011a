"""Chapter 12 exercises: patches and tokens of a ViT, attention rollout for two layers, the most attended patches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..scores import softmax
from ..vit import attention_rollout
from ._framework import CaseList, CheckResult, Exercise, Mistake, answer_array, compare_array, shaped_answer

__all__ = ["check_token_count", "check_rollout", "check_most_attended"]


def _counts(image_size: int, patch_size: int, channels: int) -> tuple[int, int, int]:
    patches = (image_size // patch_size) ** 2
    return patches, patches + 1, channels * patch_size**2


def _compare_counts(got: Any, expected: tuple[int, int, int]) -> str | None:
    names = ("num_patches", "num_tokens", "values_per_patch")
    answer = None if isinstance(got, (tuple, list)) else answer_array(got)  # an array or a tensor of three
    if answer is not None and answer.shape == (3,):
        got = list(answer)
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return f"should return three numbers {names}; got {type(got).__name__}"
    for name, value, want in zip(names, got, expected, strict=True):
        answer = answer_array(value)
        if answer is None or answer.ndim != 0 or float(answer) != want:
            return f"{name} should be {want}; got {value!r}"
    return None


TOKEN_COUNT = Exercise(
    name="patches and tokens",
    kind="count",
    concept="the tokens of an image",
    chapter=12,
    number=1,
    cases=lambda rng: [
        (f"{s}x{s} image, p={p}, C={c}", (s, p, c)) for s, p, c in [(8, 2, 1), (224, 16, 3), (32, 4, 3), (28, 7, 1)]
    ],
    reference=_counts,
    compare=_compare_counts,
    mistakes=(
        Mistake(
            lambda s, p, c: ((s // p) ** 2, (s // p) ** 2, c * p * p),
            "It matches forgetting the class token: one more token than patches",
        ),
        Mistake(
            lambda s, p, c: (s // p, s // p + 1, c * p * p),
            "It matches counting one row of patches; the grid is (size/p) by (size/p)",
        ),
        Mistake(
            lambda s, p, c: ((s // p) ** 2, (s // p) ** 2 + 1, p * p),
            "It matches leaving out the channels: each patch holds C*p*p numbers",
        ),
    ),
    float32=False,
)


def check_token_count(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(image_size, patch_size, channels) -> (num_patches, num_tokens, values_per_patch)``.

    See chapter 12, exercise 1.
    """
    return TOKEN_COUNT.check(fn)


def _rollout_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for H, T in [(1, 3), (2, 4), (4, 5)]:
        weights = softmax(rng.normal(scale=2.0, size=(2, H, T, T)))
        cases.append((f"2 layers, H={H}, T={T}", (weights,)))
    return cases


def _rollout(weights: np.ndarray) -> np.ndarray:
    return attention_rollout(weights)


def _first_layer_left(weights: np.ndarray) -> np.ndarray:
    T = weights.shape[-1]
    first, second = (0.5 * layer.mean(axis=0) + 0.5 * np.eye(T) for layer in weights)
    return first @ second


def _summed_heads(weights: np.ndarray) -> np.ndarray:
    T = weights.shape[-1]
    first, second = (0.5 * layer.sum(axis=0) + 0.5 * np.eye(T) for layer in weights)
    return second @ first


ROLLOUT = Exercise(
    name="attention rollout for two layers",
    kind="implement",
    concept="attention rollout",
    chapter=12,
    number=2,
    cases=_rollout_cases,
    reference=_rollout,
    compare=compare_array("rollout", "check for a division by zero"),
    mistakes=(
        Mistake(
            _first_layer_left,
            "It matches the first layer on the left; the later layer acts on what the earlier one produced, "
            "so it multiplies from the left: A2_hat @ A1_hat",
        ),
        Mistake(
            lambda w: w[1].mean(axis=0) @ w[0].mean(axis=0),
            "It matches leaving out the residual; mix each layer as 0.5 * A + 0.5 * I before multiplying",
        ),
        Mistake(
            lambda w: 0.5 * w[1].mean(axis=0) + 0.5 * np.eye(w.shape[-1]),
            "It matches the last layer alone; rollout multiplies both layers' mixed weights, A2_hat @ A1_hat",
        ),
        Mistake(_summed_heads, "It matches summing the heads; average them, so that each row still sums to 1"),
        Mistake(
            lambda w: (w[1].mean(axis=0) + np.eye(w.shape[-1])) @ (w[0].mean(axis=0) + np.eye(w.shape[-1])),
            "It matches A + I without the halves; mix as 0.5 * A + 0.5 * I so that each row still sums to 1",
        ),
        Mistake(
            lambda w: (
                (0.5 * w[1].max(axis=0) + 0.5 * np.eye(w.shape[-1]))
                @ (0.5 * w[0].max(axis=0) + 0.5 * np.eye(w.shape[-1]))
            ),
            "It matches taking the largest weight over the heads; average the heads (mean over axis 0)",
        ),
    ),
)


def check_rollout(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(weights) -> (T, T)`` for two layers' weights (2, H, T, T), heads averaged, residual mixed in.

    See chapter 12, exercise 2.
    """
    return ROLLOUT.check(fn)


def _attended_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for B, N, k in [(2, 16, 3), (3, 9, 1), (1, 16, 16)]:
        cases.append((f"B={B}, N={N}, k={k}", (softmax(rng.normal(size=(B, N))), k)))
    tied = np.array([[0.25, 0.25, 0.1, 0.25, 0.15]])
    cases.append(("ties, k=3", (tied, 3)))
    cases.append(("B=4, N=16, k=8", (softmax(rng.normal(scale=3.0, size=(4, 16))), 8)))  # the order matters here
    return cases


def _compare_indices(got: Any, expected: np.ndarray) -> str | None:
    answer, problem = shaped_answer(got, expected, "patch indices", form="an integer array", shape_note=" (B, k)")
    if problem:
        return problem
    if answer.dtype.kind == "f" and not np.array_equal(answer, np.round(answer)):
        return "the patch indices should be whole numbers (indices into the N patches)"
    if not np.array_equal(answer.astype(np.int64), expected):
        row = int(np.flatnonzero((answer.astype(np.int64) != expected).any(axis=1))[0])
        got_row = answer[row].astype(np.int64).tolist()
        problem = f"row {row} should be {expected[row].tolist()}; got {got_row}"
        if sorted(got_row) == sorted(expected[row].tolist()):
            problem += (
                ": the right patches in another order. List the most attended first and break ties by the lower "
                "index (torch.topk promises no order among ties; a stable sort of -weights keeps it)"
            )
        return problem
    return None


MOST_ATTENDED = Exercise(
    name="the most attended patches",
    kind="implement",
    concept="ranking patches for a deletion test",
    chapter=12,
    number=3,
    cases=_attended_cases,
    reference=lambda w, k: np.argsort(-w, axis=1, kind="stable")[:, :k],
    compare=_compare_indices,
    mistakes=(
        Mistake(
            lambda w, k: np.argsort(w, axis=1, kind="stable")[:, :k],
            "It matches the least attended patches; sort by the negated weights (or reverse the order)",
        ),
        Mistake(
            lambda w, k: np.argsort(w, axis=1, kind="stable")[:, ::-1][:, :k],
            "It matches reversing an ascending sort, which puts the higher index first among ties; "
            "sort -weights with kind='stable'",
        ),
        Mistake(
            lambda w, k: np.sort(np.argsort(-w, axis=1, kind="stable")[:, :k], axis=1),
            "It matches the right patches in index order; list the most attended first",
        ),
        Mistake(
            lambda w, k: np.argsort(w, axis=1, kind="stable")[:, w.shape[1] - k :],
            "It matches the last k of an ascending sort: the right patches, least attended first; "
            "reverse them, or sort -weights",
        ),
    ),
    float32=False,
)


def check_most_attended(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(cls_weights, k) -> (B, k)`` patch indices, most attended first, ties to the lower index.

    See chapter 12, exercise 3.
    """
    return MOST_ATTENDED.check(fn)
