"""Chapter 11 exercises: label smoothing's gradient, one AdamW step, and what a rolled position table does."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..scores import softmax
from ._framework import CaseList, CheckResult, Exercise, Mistake, answer_array, compare_array

__all__ = ["check_label_smoothing_grad", "check_adamw_step", "check_rolled_positions"]

_NAN_HINT = "did an exponential overflow? Subtract each row's maximum before exp, as in a softmax"


def _smoothing_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for shape, V, smoothing in [
        ((2, 5), 10, 0.1),
        ((1, 1), 4, 0.2),
        ((3, 4), 2, 0.3),
        ((6,), 7, 0.0),
        ((2, 3), 6, 1.0),
    ]:
        logits = rng.normal(scale=2.0, size=(*shape, V))
        description = f"logits {logits.shape}, smoothing {smoothing}"
        cases.append((description, (logits, rng.integers(0, V, size=shape), smoothing)))
    big = np.array([[1000.0, 0.0, -1000.0], [0.0, 800.0, 1.0]])  # an unshifted exp overflows here
    cases.append(("logits near 1000, smoothing 0.1", (big, np.array([1, 2]), 0.1)))
    logits = (30.0 * rng.normal(size=(3, 5))).astype(np.float32)  # a float32 model's logits
    cases.append(("float32 logits (3, 5), smoothing 0.1", (logits, rng.integers(0, 5, size=3), 0.1)))
    return cases


def _one_hot(targets: np.ndarray, V: int) -> np.ndarray:
    return np.eye(V)[targets]


def _smoothed_target(targets: np.ndarray, V: int, smoothing: float) -> np.ndarray:
    """PyTorch's label smoothing: 1 - smoothing on the target, then smoothing / V added to every class."""
    return (1 - smoothing) * _one_hot(targets, V) + smoothing / V


def _smoothing_grad(logits: np.ndarray, targets: np.ndarray, smoothing: float) -> np.ndarray:
    """d/dlogits of ``F.cross_entropy(logits, targets, label_smoothing=smoothing)``: (p - q) / N."""
    return (softmax(logits) - _smoothed_target(targets, logits.shape[-1], smoothing)) / targets.size


def _spread_over_others(logits: np.ndarray, targets: np.ndarray, smoothing: float) -> np.ndarray:
    V, target = logits.shape[-1], _one_hot(targets, logits.shape[-1])
    q = (1 - smoothing) * target + smoothing / (V - 1) * (1 - target)  # fairseq's convention
    return (softmax(logits) - q) / targets.size


LABEL_SMOOTHING_GRAD = Exercise(
    name="the gradient of label smoothing",
    kind="derive",
    concept="the gradient of cross-entropy against a smoothed target",
    chapter=11,
    number=1,
    cases=_smoothing_cases,
    reference=_smoothing_grad,
    compare=compare_array("gradient", _NAN_HINT),
    mistakes=(
        Mistake(
            _spread_over_others,
            "It matches spreading the smoothing over the V - 1 other classes (fairseq's convention); PyTorch's "
            "label_smoothing spreads smoothing / V over all V classes, the target included, so the target gets "
            "1 - smoothing + smoothing / V",
        ),
        Mistake(
            lambda z, y, s: ((1 - s) * softmax(z) + s / z.shape[-1] - _one_hot(y, z.shape[-1])) / y.size,
            "It matches smoothing the prediction p; smoothing changes the target, q = (1 - smoothing) e_y + "
            "smoothing / V, and the gradient is (p - q) / N",
        ),
        Mistake(
            lambda z, y, s: (softmax(z) - _one_hot(y, z.shape[-1])) / y.size,
            "It matches plain cross-entropy, with the smoothing left out: the target is q = (1 - smoothing) e_y + "
            "smoothing / V, and the gradient is (p - q) / N",
        ),
        Mistake(
            lambda z, y, s: (1 - s) * (softmax(z) - _one_hot(y, z.shape[-1])) / y.size,
            "It matches differentiating only the (1 - smoothing) part; the other part, smoothing times the mean "
            "over classes of -log p_k, has the gradient smoothing * (p - 1/V) / N",
        ),
        Mistake(
            lambda z, y, s: _smoothing_grad(z, y, s) * y.size,
            "It matches the gradient of the summed loss; the loss is the mean over every position, so divide by N",
        ),
        Mistake(
            lambda z, y, s: _smoothing_grad(z, y, s) * y.size / (y.shape[0] if y.ndim else 1),
            "It matches dividing by the batch size only; the mean runs over every position of every sequence",
        ),
        Mistake(
            lambda z, y, s: _smoothing_grad(z, y, s) * y.size / z.size,
            "It matches dividing by logits.size; N counts positions (targets.size), not positions times classes",
        ),
        Mistake(
            lambda z, y, s: -_smoothing_grad(z, y, s),
            "It matches the negative: the gradient of the loss is p - q, not q - p",
        ),
    ),
)


def check_label_smoothing_grad(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(logits, targets, smoothing) -> dL/dlogits``, the shape of ``logits``.

    ``logits`` is (..., V) and ``targets`` (...) integers; L is
    ``F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1),
    label_smoothing=smoothing)``, the mean over every position.
    See chapter 11, exercise 1.
    """
    return LABEL_SMOOTHING_GRAD.check(fn)


def _adamw_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for shape, t, lr, decay in [((3,), 1, 0.05, 0.2), ((2, 4), 5, 0.01, 0.05), ((5,), 100, 0.003, 0.01)]:
        param, grad = rng.normal(size=shape), rng.normal(size=shape)
        m, v = rng.normal(scale=0.1, size=shape), rng.uniform(0.0, 0.1, size=shape)
        if t == 1:
            m, v = np.zeros(shape), np.zeros(shape)  # the first step starts from zero moments
        cases.append(
            (f"{shape}, step t={t}, lr {lr}, decay {decay}", (param, grad, m, v, t, lr, 0.9, 0.999, 1e-8, decay))
        )
    param, grad = rng.normal(size=4), np.array([0.0, 0.5, 0.0, -2.0])  # a weight with no gradient only decays
    zeros = np.zeros(4), np.zeros(4)
    cases.append(("two gradients exactly 0, t=1", (param, grad, *zeros, 1, 0.1, 0.9, 0.999, 1e-8, 0.2)))
    param, grad = rng.normal(size=1), rng.normal(size=1)
    cases.append(
        ("one weight, t=3, no decay", (param, grad, 0.1 * grad, 0.01 * grad**2, 3, 0.01, 0.9, 0.999, 1e-8, 0.0))
    )
    param, grad = (rng.normal(size=(2, 3)).astype(np.float32) for _ in range(2))
    moments = (0.1 * grad, 0.01 * grad**2)  # float32 too, as a float32 model's optimiser keeps them
    cases.append(("float32 arrays (2, 3), t=2", (param, grad, *moments, 2, 0.01, 0.9, 0.999, 1e-8, 0.05)))
    tiny = np.array([1e-8, -3e-8, 2e-9])  # gradients near eps: where eps sits matters
    cases.append(("gradients near eps, t=1", (np.ones(3), tiny, *np.zeros((2, 3)), 1, 0.01, 0.9, 0.999, 1e-8, 0.01)))
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
    absolute: bool = False,
):
    """Adam's step without decay, or one of the usual slips in it."""
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * (np.abs(grad) if absolute else grad**2)
    m_hat = m / (1 - beta1 ** (t + shift)) if correct else m
    v_hat = v / (1 - beta2 ** (t + shift)) if correct else v
    if eps_inside:
        step = m_hat / np.sqrt(v_hat + eps)
    else:
        step = m_hat / ((np.sqrt(v_hat) if root else v_hat) + eps)
    return (param - lr * step, *((m_hat, v_hat) if return_hats else (m, v)))


def _adamw(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay, **slip: bool):
    """torch.optim.AdamW's step: shrink the weight by lr * weight_decay, then Adam's step with the gradient alone."""
    return _adam(param * (1 - lr * weight_decay), grad, m, v, t, lr, beta1, beta2, eps, **slip)


def _adam_l2(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    return _adam(param, grad + weight_decay * param, m, v, t, lr, beta1, beta2, eps)


def _decay_after(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    stepped, m, v = _adam(param, grad, m, v, t, lr, beta1, beta2, eps)
    return stepped * (1 - lr * weight_decay), m, v


def _decay_without_lr(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    return _adam(param * (1 - weight_decay), grad, m, v, t, lr, beta1, beta2, eps)


def _compare_adam(got: Any, expected: tuple[np.ndarray, ...]) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return f"should return (param, m, v), the three updated arrays; got {type(got).__name__}"
    names = ("updated m", "updated v", "updated parameter")
    order = (1, 2, 0)  # the moments first: a wrong moment explains a wrong parameter
    compare = [compare_array(name, "check for a division by zero") for name in names]
    problems = (compare[i](got[j], expected[j]) for i, j in enumerate(order))
    return next((p for p in problems if p is not None), None)


ADAMW_STEP = Exercise(
    name="one AdamW step",
    kind="extend",
    concept="decoupled weight decay (AdamW) against L2 inside Adam",
    chapter=11,
    number=2,
    cases=_adamw_cases,
    reference=_adamw,
    compare=_compare_adam,
    mistakes=(
        Mistake(
            _adam_l2,
            "It matches Adam with L2: weight_decay * param added to the gradient (what torch.optim.Adam's "
            "weight_decay does), so the decay passes through m and v and is divided by sqrt(v_hat). AdamW leaves "
            "the gradient alone and shrinks the weight itself: param * (1 - lr * weight_decay)",
        ),
        Mistake(
            _decay_without_lr,
            "It matches shrinking the weight by weight_decay alone; torch.optim.AdamW multiplies it by the "
            "learning rate: param * (1 - lr * weight_decay)",
        ),
        Mistake(
            _decay_after,
            "It matches decaying after Adam's step; shrink the weight as it was before the step, "
            "param * (1 - lr * weight_decay) - lr * step (the two differ by lr**2 * weight_decay * step)",
        ),
        Mistake(
            partial(_adamw, correct=False),
            "It matches leaving out the bias correction: divide m by 1 - beta1**t and v by 1 - beta2**t",
        ),
        Mistake(
            partial(_adamw, shift=1),
            "It matches correcting with t + 1; t is the number of this step, counting from 1",
        ),
        Mistake(partial(_adamw, root=False), "It matches dividing by v_hat; divide by its square root"),
        Mistake(
            partial(_adamw, return_hats=True),
            "It matches returning the bias-corrected m_hat and v_hat; return the running means m and v themselves "
            "(the correction is applied afresh at every step)",
        ),
        Mistake(
            partial(_adamw, eps_inside=True),
            "It matches sqrt(v_hat + eps); eps is added after the square root, sqrt(v_hat) + eps",
        ),
        Mistake(
            partial(_adamw, absolute=True),
            "It matches updating v with |g|; v is the running mean of the squared gradient, g**2",
        ),
    ),
)


def check_adamw_step(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay) -> (param, m, v)``: torch.optim.AdamW.

    Step ``t`` counts from 1; ``m`` and ``v`` are the running means (not
    bias-corrected); the three arrays are returned new and the inputs left
    unchanged. See chapter 11, exercise 2.
    """
    return ADAMW_STEP.check(fn)


def _rolled_source(source: np.ndarray, roll: int, *, move_queries: bool = True, move_keys: bool = True) -> np.ndarray:
    """The key query i reads once row j of the position table is old row (j + roll) mod T.

    Token j carries old position (j + roll) mod T, so query i acts as old query
    i + roll and looks for the key that carries old position source[i + roll]:
    the token at (source[i + roll] - roll) mod T.
    """
    T = len(source)
    i = np.arange(T)
    looked_for = source[(i + roll) % T] if move_queries else source
    return (looked_for - roll) % T if move_keys else looked_for


def _rolled_cases(rng: np.random.Generator) -> CaseList:
    cases = [("a learned permutation, T=7, roll 3", (rng.permutation(7), 3))]
    cases.append(("shift by 3, T=12, roll 2", ((np.arange(12) - 3) % 12, 2)))  # the chapter's two models
    cases.append(("reversal, T=12, roll 2", (np.arange(12)[::-1].copy(), 2)))
    for T, roll in [(6, -4), (5, 13), (8, 0)]:
        cases.append((f"a learned permutation, T={T}, roll {roll}", (rng.permutation(T), roll)))
    cases.append(("T=1, roll 4", (np.array([0]), 4)))
    return cases


def _unwrapped(got: Any, args: tuple[np.ndarray, int]) -> bool:
    """Whether ``got`` is the right keys before the final mod T: right modulo T, but some outside 0 … T-1."""
    answer, (source, roll) = answer_array(got), args
    right = _rolled_source(source, roll)
    if answer is None or answer.shape != right.shape:
        return False
    return bool(np.array_equal(np.mod(answer, len(source)), right) and not np.array_equal(answer, right))


ROLLED_POSITIONS = Exercise(
    name="a rolled position table",
    kind="predict",
    concept="a trained head finds its key through the position table alone",
    chapter=11,
    number=3,
    cases=_rolled_cases,
    reference=_rolled_source,
    compare=compare_array("keys", "the keys are whole numbers from 0 to T - 1"),
    mistakes=(
        Mistake(
            partial(_rolled_source, move_keys=False),
            "It matches moving the queries but not the keys: every key's position row moved too, so the token "
            "that carries old position s now sits at (s - roll) mod T",
        ),
        Mistake(
            partial(_rolled_source, move_queries=False),
            "It matches moving the keys but not the queries: query i now carries old position (i + roll) mod T, "
            "so it looks for old position source[(i + roll) mod T] (reduce i + roll mod T, also when roll is "
            "negative or T or more)",
        ),
        Mistake(
            lambda source, roll: _rolled_source(source, -roll),
            "It matches rolling the other way: row j of the new table is old row (j + roll) mod T, so token j "
            "acts as old position j + roll, not j - roll",
        ),
        Mistake(
            lambda source, roll: source,
            "It matches the keys before the roll; the heads find their key through the position rows alone, so "
            "the pattern moves with them (only a pattern that depends on i - j alone, like a shift, stays put)",
        ),
        Mistake(
            lambda source, roll: np.argsort(_rolled_source(source, roll)),
            "It matches the inverse: entry i must be the key that query i reads, not the query that reads key i",
        ),
        Mistake(
            lambda source, roll: source[(np.arange(len(source)) + roll) % len(source)] - roll,
            "It matches the right keys before the wrap-around: take them mod T, so that every key is in 0 … T-1",
            detect=_unwrapped,
        ),
    ),
)


def check_rolled_positions(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(source, roll) -> (T,)``: the key each query reads once the position table is rolled.

    ``source`` (T,) holds, for each query ``i``, the key a trained model's heads
    read at ``i``. The new table's row ``j`` is the old row ``(j + roll) mod T``
    (``np.roll(positions, -roll, axis=0)``); entry ``i`` of the answer is the
    key query ``i`` reads with it. See chapter 11, exercise 3.
    """
    return ROLLED_POSITIONS.check(fn)
