"""Chapter 11 exercises: the cross-entropy gradient, one Adam step, and the head pattern a copying task needs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..scores import softmax
from ..training import cross_entropy_backward, source_positions
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array

__all__ = ["check_cross_entropy_grad", "check_adam_step", "check_copy_pattern"]

_NAN_HINT = "did an exponential overflow? Subtract each row's maximum before exp, as in a softmax"


def _ce_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for shape, V in [((4,), 3), ((2, 5), 10), ((3, 4), 6)]:
        logits = rng.normal(scale=2.0, size=(*shape, V))
        cases.append((f"logits {logits.shape}", (logits, rng.integers(0, V, size=shape))))
    big = np.array([[1000.0, 0.0, -1000.0], [0.0, 800.0, 1.0]])  # an unshifted exp overflows here
    cases.append(("logits near 1000", (big, np.array([1, 2]))))
    return cases


def _one_hot(targets: np.ndarray, V: int) -> np.ndarray:
    return np.eye(V)[targets]


CROSS_ENTROPY_GRAD = Exercise(
    name="the cross-entropy gradient",
    kind="derive",
    concept="the gradient of the loss",
    chapter=11,
    number=1,
    cases=_ce_cases,
    reference=lambda logits, targets: cross_entropy_backward(1.0, logits, targets),
    compare=compare_array("gradient", _NAN_HINT),
    mistakes=(
        Mistake(
            lambda z, y: softmax(z) - _one_hot(y, z.shape[-1]),
            "It matches the gradient of the summed loss; the loss is the mean over every position, so divide by N",
        ),
        Mistake(
            lambda z, y: softmax(z) / y.size,
            "It matches p / N: subtract 1 at each position's target class (p minus the one-hot target)",
        ),
        Mistake(
            lambda z, y: (_one_hot(y, z.shape[-1]) - softmax(z)) / y.size,
            "It matches the negative: the gradient of the loss is p - onehot, not onehot - p",
        ),
        Mistake(
            lambda z, y: (softmax(z) - _one_hot(y, z.shape[-1])) / (y.shape[0] if y.ndim else 1),
            "It matches dividing by the batch size only; the mean runs over every position of every sequence",
        ),
        Mistake(
            lambda z, y: (softmax(z) - _one_hot(y, z.shape[-1])) / z.size,
            "It matches dividing by logits.size; N counts positions (targets.size), not positions times classes",
        ),
    ),
)


def check_cross_entropy_grad(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(logits, targets) -> dL/dlogits`` for the mean cross-entropy over every position.

    See chapter 11, exercise 1.
    """
    return CROSS_ENTROPY_GRAD.check(fn)


def _adam_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for shape, t in [((3,), 1), ((2, 4), 5), ((5,), 100)]:
        param, grad = rng.normal(size=shape), rng.normal(size=shape)
        m, v = rng.normal(scale=0.1, size=shape), rng.uniform(0.0, 0.1, size=shape)
        if t == 1:
            m, v = np.zeros(shape), np.zeros(shape)  # the first step starts from zero moments
        cases.append((f"{shape}, step t={t}", (param, grad, m, v, t, 0.01, 0.9, 0.999, 1e-8)))
    tiny = np.array([1e-8, -3e-8, 2e-9])  # gradients near eps: where eps sits matters
    cases.append(("gradients near eps, t=1", (np.ones(3), tiny, np.zeros(3), np.zeros(3), 1, 0.01, 0.9, 0.999, 1e-8)))
    return cases


def _adam(
    param,
    grad,
    m,
    v,
    t,
    lr,
    beta1,
    beta2,
    eps,
    *,
    correct: bool = True,
    root: bool = True,
    shift: int = 0,
    eps_inside: bool = False,
    return_hats: bool = False,
):
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad**2
    m_hat = m / (1 - beta1 ** (t + shift)) if correct else m
    v_hat = v / (1 - beta2 ** (t + shift)) if correct else v
    if eps_inside:
        step = m_hat / np.sqrt(v_hat + eps)
    else:
        step = m_hat / ((np.sqrt(v_hat) if root else v_hat) + eps)
    return (param - lr * step, *((m_hat, v_hat) if return_hats else (m, v)))


def _adam_abs(param, grad, m, v, t, lr, beta1, beta2, eps):
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * np.abs(grad)
    m_hat, v_hat = m / (1 - beta1**t), v / (1 - beta2**t)
    return param - lr * m_hat / (np.sqrt(v_hat) + eps), m, v


def _compare_adam(got: Any, expected: tuple[np.ndarray, ...]) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return f"should return (param, m, v), the three updated arrays; got {type(got).__name__}"
    names = ("updated m", "updated v", "updated parameter")
    order = (1, 2, 0)  # the moments first: a wrong moment explains a wrong parameter
    compare = [compare_array(name, "check for a division by zero") for name in names]
    problems = (compare[i](got[j], expected[j]) for i, j in enumerate(order))
    return next((p for p in problems if p is not None), None)


ADAM_STEP = Exercise(
    name="one Adam step",
    kind="implement",
    concept="Adam's update",
    chapter=11,
    number=2,
    cases=_adam_cases,
    reference=_adam,
    compare=_compare_adam,
    mistakes=(
        Mistake(
            lambda *a: _adam(*a, correct=False),
            "It matches leaving out the bias correction: divide m by 1 - beta1**t and v by 1 - beta2**t",
        ),
        Mistake(
            lambda *a: _adam(*a, shift=1),
            "It matches correcting with t + 1; t is the number of this step, counting from 1",
        ),
        Mistake(lambda *a: _adam(*a, root=False), "It matches dividing by v_hat; divide by its square root"),
        Mistake(
            lambda *a: _adam(*a, return_hats=True),
            "It matches returning the bias-corrected m_hat and v_hat; return the running means m and v themselves "
            "(the correction is applied afresh at every step)",
        ),
        Mistake(
            lambda *a: _adam(*a, eps_inside=True),
            "It matches sqrt(v_hat + eps); eps is added after the square root, sqrt(v_hat) + eps",
        ),
        Mistake(
            lambda param, grad, *rest: _adam_abs(param, grad, *rest),
            "It matches updating v with |g|; v is the running mean of the squared gradient, g**2",
        ),
    ),
)


def check_adam_step(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(param, grad, m, v, t, lr, beta1, beta2, eps) -> (param, m, v)``, step t counting from 1.

    ``m`` and ``v`` are the running means (not bias-corrected); the three
    arrays are returned new and the inputs left unchanged. See chapter 11, exercise 2.
    """
    return ADAM_STEP.check(fn)


def _pattern(length: int, offset: int) -> np.ndarray:
    pattern = np.zeros((length, length))
    pattern[np.arange(length), source_positions("shift", length, offset)] = 1.0
    return pattern


COPY_PATTERN = Exercise(
    name="the head pattern of a shifted copy",
    kind="predict",
    concept="what a trained head must learn",
    chapter=11,
    number=3,
    cases=lambda rng: [(f"T={T}, offset={k}", (T, k)) for T, k in [(6, 1), (8, 3), (5, 0), (7, 6)]],
    reference=_pattern,
    compare=compare_array("pattern", "the pattern holds only 0s and 1s"),
    mistakes=(
        Mistake(
            lambda T, k: _pattern(T, -k % T),
            "It matches copying from offset places ahead, which is also the transpose of the answer: row i is "
            "the query at output position i, and its 1 sits in the column of the key it copies, (i - offset) mod T",
        ),
        Mistake(
            lambda T, k: np.eye(T, k=-k),
            "It matches forgetting the wrap-around: the first offset outputs copy the last inputs, (i - offset) mod T",
        ),
    ),
)


def check_copy_pattern(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(length, offset) -> (T, T)`` with a 1 where query i must attend for the shift task, 0 elsewhere.

    See chapter 11, exercise 3.
    """
    return COPY_PATTERN.check(fn)
