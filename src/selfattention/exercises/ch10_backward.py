"""Chapter 10 exercises: the softmax backward, dQ and dV of one head, one key block of the efficient backward."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..backward import scaled_dot_product_attention_backward, softmax_backward
from ..scores import softmax
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array

__all__ = ["check_softmax_backward", "check_head_gradients", "check_key_block_backward"]

_NAN_HINT = "the backward has no exponential of its own; check for a division by zero"


def _softmax_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for shape in [(4,), (3, 5), (2, 3, 6)]:
        y = softmax(rng.normal(size=shape))
        cases.append((f"y {shape}", (rng.normal(size=shape), y)))
    return cases


SOFTMAX_BACKWARD = Exercise(
    name="softmax backward",
    kind="derive",
    concept="the softmax's Jacobian-vector product",
    chapter=10,
    number=1,
    cases=_softmax_cases,
    reference=lambda grad_y, y: softmax_backward(grad_y, y),
    compare=compare_array("gradient", _NAN_HINT),
    mistakes=(
        Mistake(lambda g, y: y * g, "It matches y * grad_y: subtract each row's sum of grad_y * y first"),
        Mistake(
            lambda g, y: y * (g - (g * y).sum()),
            "It matches summing over the whole array; the sum runs along the last axis, one per row (keepdims)",
        ),
        Mistake(lambda g, y: g - (g * y).sum(-1, keepdims=True), "It matches forgetting the factor y in front"),
    ),
)


def check_softmax_backward(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(grad_y, y) -> grad_x`` for y = softmax(x) along the last axis.

    See chapter 10, exercise 1.
    """
    return SOFTMAX_BACKWARD.check(fn)


def _head_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for T, S, Dk, Dv in [(3, 3, 4, 4), (2, 5, 3, 2), (4, 6, 8, 5)]:
        q, k, v = rng.normal(size=(T, Dk)), rng.normal(size=(S, Dk)), rng.normal(size=(S, Dv))
        cases.append((f"T={T}, S={S}, Dk={Dk}, Dv={Dv}", (rng.normal(size=(T, Dv)), q, k, v)))
    return cases


def _head_reference(grad_out: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray):
    grad_q, _, grad_v = scaled_dot_product_attention_backward(grad_out, q, k, v)
    return grad_q, grad_v


def _compare_pair_of_grads(got: Any, expected: tuple[np.ndarray, np.ndarray]) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        what = f"a {type(got).__name__} of {len(got)} items" if isinstance(got, (tuple, list)) else type(got).__name__
        return f"should return a pair (grad_q, grad_v); got {what}"
    return compare_array("grad_v", _NAN_HINT)(got[1], expected[1]) or compare_array("grad_q", _NAN_HINT)(
        got[0], expected[0]
    )


def _head_no_delta(grad_out, q, k, v):
    s = q @ k.T / np.sqrt(q.shape[-1])
    p = softmax(s)
    grad_s = p * (grad_out @ v.T)
    return grad_s @ k / np.sqrt(q.shape[-1]), p.T @ grad_out


def _head_no_scale(grad_out, q, k, v):
    grad_q, grad_v = _head_reference(grad_out, q, k, v)
    return grad_q * np.sqrt(q.shape[-1]), grad_v


HEAD_GRADIENTS = Exercise(
    name="dQ and dV of one head",
    kind="derive",
    concept="one head's backward",
    chapter=10,
    number=2,
    cases=_head_cases,
    reference=_head_reference,
    compare=_compare_pair_of_grads,
    mistakes=(
        Mistake(_head_no_delta, "It matches dS = P * dP; subtract each row's delta = rowsum(dO * O) first"),
        Mistake(_head_no_scale, "It matches dQ without the scale: the scores were multiplied by 1/sqrt(Dk)"),
    ),
)


def check_head_gradients(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(grad_out, q, k, v) -> (grad_q, grad_v)`` for one head without a mask, scale 1/sqrt(Dk).

    See chapter 10, exercise 2.
    """
    return HEAD_GRADIENTS.check(fn)


def _key_block_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for T, S, block, D in [(3, 6, 2, 4), (4, 8, 4, 3), (2, 5, 1, 2)]:
        q, k, v = rng.normal(size=(T, D)), rng.normal(size=(S, D)), rng.normal(size=(S, D))
        scores = q @ k.T / np.sqrt(D)
        lse = np.log(np.exp(scores - scores.max(-1, keepdims=True)).sum(-1)) + scores.max(-1)
        out = softmax(scores) @ v
        grad_out = rng.normal(size=(T, D))
        start = int(rng.integers(0, S - block + 1))
        args = (grad_out, q, k[start : start + block], v[start : start + block], out, lse)
        cases.append((f"T={T}, a block of {block} keys, D={D}", args))
    return cases


def _key_block_reference(grad_out, q, k_block, v_block, out, lse):
    scale = 1 / np.sqrt(q.shape[-1])
    p = np.exp(q @ k_block.T * scale - lse[:, None])  # this block's exact weights
    grad_v = p.T @ grad_out
    delta = (grad_out * out).sum(-1, keepdims=True)
    grad_s = p * (grad_out @ v_block.T - delta)
    return grad_s @ k_block * scale, grad_s.T @ q * scale, grad_v


def _compare_triple(got: Any, expected: tuple[np.ndarray, ...]) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return f"should return (grad_q part, grad_k block, grad_v block); got {type(got).__name__}"
    names = ("block's part of grad_q", "grad_k of the block", "grad_v of the block")
    problems = (compare_array(n, _NAN_HINT)(g, e) for n, g, e in zip(names, got, expected, strict=True))
    return next((p for p in problems if p is not None), None)


def _key_block_softmax(grad_out, q, k_block, v_block, out, lse):
    scale = 1 / np.sqrt(q.shape[-1])
    p = softmax(q @ k_block.T * scale)  # normalised over this block only
    delta = (grad_out * out).sum(-1, keepdims=True)
    grad_s = p * (grad_out @ v_block.T - delta)
    return grad_s @ k_block * scale, grad_s.T @ q * scale, p.T @ grad_out


KEY_BLOCK_BACKWARD = Exercise(
    name="one key block of the memory-efficient backward",
    kind="extend",
    concept="the recomputing backward, one tile",
    chapter=10,
    number=3,
    cases=_key_block_cases,
    reference=_key_block_reference,
    compare=_compare_triple,
    mistakes=(
        Mistake(
            _key_block_softmax,
            "It matches a softmax over this block alone; the block's weights are exp(scores - lse), "
            "normalised over every key by the forward's log-sum-exp",
        ),
    ),
)


def check_key_block_backward(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(grad_out, q, k_block, v_block, out, lse) -> (grad_q_part, grad_k_block, grad_v_block)``.

    See chapter 10, exercise 3.
    """
    return KEY_BLOCK_BACKWARD.check(fn)
