"""Chapter 2 exercises: a stable softmax, one attention head, and its parameter count."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..attention import scaled_dot_product_attention
from ..scores import softmax
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array, compare_count

__all__ = [
    "check_stable_softmax",
    "check_permutation_test",
    "check_head_parameter_count",
]


def _stable_softmax_cases(rng: np.random.Generator) -> CaseList:
    return [
        ("small scores", (rng.normal(size=(3, 5)),)),
        ("scores around +1e4", (1e4 + rng.normal(size=(4, 6)),)),
        ("scores around -1e4", (-1e4 + rng.normal(size=(4, 6)),)),
        ("float32 scores in the hundreds", ((300.0 * rng.normal(size=(2, 3, 7))).astype(np.float32),)),
        ("a single score per row", (rng.normal(size=(5, 1)),)),
    ]


STABLE_SOFTMAX = Exercise(
    name="stable softmax",
    kind="implement",
    concept="the softmax without overflow",
    chapter=2,
    number=1,
    cases=_stable_softmax_cases,
    reference=softmax,
    # The exercise states no dtype rule, so an answer in float64 (or float32) passes.
    compare=compare_array("weights"),
    float32=False,  # its float64 cases near 1e4 lose their differences in float32; it has its own float32 case
)


def check_stable_softmax(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x)``: a softmax over the last axis that survives huge scores.

    The cases include scores around +-1e4 in float64 and in the hundreds in
    float32, where a softmax that does not subtract the maximum overflows.
    See chapter 2, exercise 1.
    """
    return STABLE_SOFTMAX.check(fn)


HEAD_PARAMETER_COUNT = Exercise(
    name="parameter count",
    kind="count",
    concept="the weights of an attention layer",
    chapter=2,
    number=3,
    cases=lambda rng: [(f"d_model={d}, d_k={k}", (d, k)) for d, k in [(768, 64), (512, 64), (3, 3), (10, 7)]],
    reference=lambda d_model, d_k: 4 * d_model * d_k,
    compare=compare_count(
        "the parameter count", "got {got}, which is not the number of entries in W_q, W_k, W_v and W_o"
    ),
    mistakes=(Mistake(lambda d_model, d_k: 3 * d_model * d_k, "It matches W_q, W_k and W_v alone: count W_o too"),),
)


def check_head_parameter_count(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(d_model, d_k) -> int``: the weights in W_q, W_k, W_v and W_o.

    No biases, as in chapter 2. See chapter 2, exercise 3.
    """
    return HEAD_PARAMETER_COUNT.check(fn)


def _heads(
    seed: int = 202,
) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray], np.ndarray]:
    """A small attention head, the same head with position embeddings added to its input, and an input (2, 6, 8)."""
    rng = np.random.default_rng(seed)
    D = 8
    w_q, w_k, w_v, w_o = (rng.normal(size=(D, D)) / np.sqrt(D) for _ in range(4))
    x = rng.normal(size=(2, 6, D))
    positions = rng.normal(size=(6, D))

    def head(tokens: np.ndarray) -> np.ndarray:
        out, _ = scaled_dot_product_attention(tokens @ w_q, tokens @ w_k, tokens @ w_v)
        return out @ w_o

    def head_with_positions(tokens: np.ndarray) -> np.ndarray:
        return head(tokens + positions)

    return head, head_with_positions, x


def _permutation_cases(rng: np.random.Generator) -> CaseList:
    head, head_with_positions, x = _heads()

    def reversed_head(tokens: np.ndarray) -> np.ndarray:  # reads the tokens backwards: order matters again
        return head(tokens[:, ::-1])

    def last_token_zeroed(tokens: np.ndarray) -> np.ndarray:  # position T - 1 is special
        out = head(tokens).copy()
        out[:, -1] = 0.0
        return out

    return [
        ("one attention head: expected True", (head, x, np.random.default_rng(2))),
        ("the same head with position embeddings: expected False", (head_with_positions, x, np.random.default_rng(2))),
        ("the head on the tokens reversed: expected False", (reversed_head, x, np.random.default_rng(2))),
        ("the head with its last output zeroed: expected False", (last_token_zeroed, x, np.random.default_rng(2))),
    ]


def _permutation_test(
    f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, rng: np.random.Generator, **kw: Any
) -> bool:
    perm = rng.permutation(x.shape[1])
    unpermuted = kw.get("unpermuted", False)  # the mistake: compare with f(x) itself
    return bool(np.allclose(f(x[:, perm]), f(x) if unpermuted else f(x)[:, perm], rtol=1e-4, atol=1e-5))


def _compare_verdict(got: Any, expected: bool) -> str | None:
    if not isinstance(got, (bool, np.bool_)):
        return f"the test must return True or False; got {got!r}"
    return None if bool(got) == expected else f"got {bool(got)}"


PERMUTATION_TEST = Exercise(
    name="a permutation-equivariance test",
    kind="test",
    concept="attention ignores order until positions are added",
    chapter=2,
    number=2,
    cases=_permutation_cases,
    reference=_permutation_test,
    compare=_compare_verdict,
    mistakes=(
        Mistake(
            lambda f, x, rng: True,
            "It matches a test that says True for a function that is not equivariant: compare every output "
            "token with its permuted counterpart, f(x[:, perm]) against f(x)[:, perm], with a permutation from rng",
        ),
        Mistake(
            lambda f, x, rng: _permutation_test(f, x, rng, unpermuted=True),
            "It matches a test that says False for a single head, which is equivariant: did you compare with "
            "f(x) unpermuted, permute another axis, or compare without a tolerance?",
        ),
    ),
    float32=False,  # the answer is a verdict, and the head's inputs are fixed by the checker
    passes="the right verdict",
)


def check_permutation_test(test: Callable[..., Any]) -> CheckResult:
    """Check ``test(f, x, rng) -> bool``: whether ``f`` is permutation equivariant on ``x`` (B, T, D).

    ``f`` maps (B, T, D) to (B, T, D); the test should shuffle the T tokens
    with ``rng`` and compare ``f`` of the shuffled tokens with the shuffled
    ``f(x)``. It must say True for a single attention head and False for the
    same head with position embeddings added to its input. See chapter 2,
    exercise 2.
    """
    return PERMUTATION_TEST.check(test)
