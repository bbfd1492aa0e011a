"""Chapter 11's exercises: the references against torch and a real model, and answers the declarations do not list.

The generic tests (tests/test_exercises.py) check that each reference passes and
each declared mistake earns its hint. Here: the references are right (torch's
autograd and optimiser, and what a TinyEncoder with a rolled position table
computes), correct answers written in other ways and in float32 pass, and
plausible wrong answers that are not declared mistakes fail.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import selfattention as sa
from selfattention.exercises import ch11_training as ch11
from selfattention.exercises import check_adamw_step, check_label_smoothing_grad, check_rolled_positions

# --- Exercise 1: the gradient of label smoothing -----------------------------------------------


@pytest.mark.parametrize(
    ("shape", "V", "smoothing", "scale"),
    [((2, 5), 10, 0.1, 2.0), ((1, 1), 4, 0.2, 1.0), ((3, 4), 2, 0.3, 1.0), ((6,), 7, 0.0, 1.0), ((2, 3), 6, 1.0, 1.0),
     ((4,), 5, 0.1, 400.0)],
)  # fmt: skip
def test_the_label_smoothing_reference_is_torch_s_autograd(shape, V, smoothing, scale):
    rng = np.random.default_rng(0)
    logits, targets = scale * rng.normal(size=(*shape, V)), rng.integers(0, V, size=shape)
    z = torch.tensor(logits, requires_grad=True)
    F.cross_entropy(z.reshape(-1, V), torch.from_numpy(targets).reshape(-1), label_smoothing=smoothing).backward()
    np.testing.assert_allclose(ch11._smoothing_grad(logits, targets, smoothing), z.grad.numpy(), atol=1e-15)


def _smoothed_grad_float32(logits, targets, smoothing):
    z = np.asarray(logits, dtype=np.float32)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    q = np.full(z.shape, np.float32(smoothing) / z.shape[-1], dtype=np.float32)
    np.put_along_axis(q, targets[..., None], 1 - np.float32(smoothing) + np.float32(smoothing) / z.shape[-1], axis=-1)
    return (p - q) / np.float32(targets.size)


def _smoothed_grad_by_loops(logits, targets, smoothing):
    """Position by position: (1 - s) * (p - e_y) + s * (p - 1/V), the two parts of the loss."""
    V = logits.shape[-1]
    rows, labels = logits.reshape(-1, V), targets.reshape(-1)
    grad = np.zeros_like(rows)
    for n, (row, label) in enumerate(zip(rows, labels, strict=True)):
        p = np.exp(row - row.max())
        p /= p.sum()
        for k in range(V):
            grad[n, k] = (1 - smoothing) * (p[k] - (k == label)) + smoothing * (p[k] - 1 / V)
    return grad.reshape(logits.shape) / len(labels)


def _smoothed_grad_by_torch(logits, targets, smoothing):
    z = torch.tensor(logits, requires_grad=True)
    V = logits.shape[-1]
    F.cross_entropy(z.reshape(-1, V), torch.from_numpy(targets).reshape(-1), label_smoothing=smoothing).backward()
    return z.grad


@pytest.mark.parametrize("answer", [_smoothed_grad_float32, _smoothed_grad_by_loops, _smoothed_grad_by_torch])
def test_label_smoothing_correct_answers_pass(answer):
    result = check_label_smoothing_grad(answer)
    assert result.passed, repr(result)


def _smoothing_wrong(slip):
    def answer(logits, targets, smoothing):
        V = logits.shape[-1]
        p = sa.softmax(logits)
        q = (1 - smoothing) * np.eye(V)[targets] + smoothing / V
        if slip == "smoothing not divided by V":
            q = (1 - smoothing) * np.eye(V)[targets] + smoothing
        elif slip == "softmax over the first axis":
            p = sa.softmax(logits, axis=0)
        elif slip == "the smoothing mass on the target only":
            q = np.eye(V)[targets] * (1 - smoothing + smoothing / V)
        elif slip == "divided by the sequence length":
            return (p - q) / targets.shape[-1]
        elif slip == "no maximum subtracted":
            p = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
        return (p - q) / targets.size

    return answer


@pytest.mark.parametrize(
    ("slip", "message"),
    [
        ("smoothing not divided by V", "does not match the reference"),
        ("softmax over the first axis", "does not match the reference"),
        ("the smoothing mass on the target only", "does not match the reference"),
        ("divided by the sequence length", "does not match the reference"),
        ("no maximum subtracted", "contains NaN or inf: did an exponential overflow"),
    ],
)
def test_label_smoothing_undeclared_wrong_answers_fail(slip, message):
    with np.errstate(all="ignore"):
        result = check_label_smoothing_grad(_smoothing_wrong(slip))
    assert result.status == "FAIL" and message in repr(result), repr(result)


# --- Exercise 2: one AdamW step ------------------------------------------------------------------


@pytest.mark.parametrize(("lr", "weight_decay"), [(0.1, 0.1), (0.01, 0.05), (0.003, 0.0), (0.5, 0.3)])
def test_the_adamw_reference_is_torch_s_optimiser_over_several_steps(lr, weight_decay):
    rng = np.random.default_rng(1)
    param = rng.normal(size=(3, 4))
    m, v = np.zeros_like(param), np.zeros_like(param)
    weight = torch.tensor(param.copy(), requires_grad=True)
    optimiser = torch.optim.AdamW([weight], lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay)
    for t in range(1, 8):
        grad = rng.normal(size=param.shape) * 10.0 ** rng.integers(-3, 2)
        param, m, v = ch11._adamw(param, grad, m, v, t, lr, 0.9, 0.999, 1e-8, weight_decay)
        weight.grad = torch.from_numpy(grad)
        optimiser.step()
        state = optimiser.state[weight]
        np.testing.assert_allclose(param, weight.detach().numpy(), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(m, state["exp_avg"].numpy(), rtol=1e-12)
        np.testing.assert_allclose(v, state["exp_avg_sq"].numpy(), rtol=1e-12)


def _adamw_float32(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    param, grad, m, v = (np.asarray(a, dtype=np.float32) for a in (param, grad, m, v))
    param = param * np.float32(1 - lr * weight_decay)
    m = np.float32(beta1) * m + np.float32(1 - beta1) * grad
    v = np.float32(beta2) * v + np.float32(1 - beta2) * grad * grad
    step_size = np.float32(lr / (1 - beta1**t))  # torch's form: the corrections outside the arrays
    denom = np.sqrt(v) / np.float32(np.sqrt(1 - beta2**t)) + np.float32(eps)
    return param - step_size * m / denom, m, v


def _adamw_by_torch(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    weight = torch.tensor(param.copy(), requires_grad=True)
    optimiser = torch.optim.AdamW([weight], lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay)
    optimiser.state[weight] = {
        "step": torch.tensor(float(t - 1)),
        "exp_avg": torch.tensor(m.copy()),
        "exp_avg_sq": torch.tensor(v.copy()),
    }
    weight.grad = torch.tensor(grad)
    optimiser.step()
    state = optimiser.state[weight]
    return weight.detach(), state["exp_avg"], state["exp_avg_sq"]


def _adamw_by_loops(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    new_param, new_m, new_v = param.copy(), m.copy(), v.copy()
    for i in np.ndindex(param.shape):
        new_param[i] -= lr * weight_decay * param[i]
        new_m[i] = beta1 * m[i] + (1 - beta1) * grad[i]
        new_v[i] = beta2 * v[i] + (1 - beta2) * grad[i] ** 2
        m_hat, v_hat = new_m[i] / (1 - beta1**t), new_v[i] / (1 - beta2**t)
        new_param[i] -= lr * m_hat / (v_hat**0.5 + eps)
    return new_param, new_m, new_v


@pytest.mark.parametrize("answer", [_adamw_float32, _adamw_by_torch, _adamw_by_loops])
def test_adamw_correct_answers_pass(answer):
    result = check_adamw_step(answer)
    assert result.passed, repr(result)


def _adamw_wrong(slip):
    def answer(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
        decayed = param * (1 - lr * weight_decay)
        g_m = g_v = grad
        if slip == "the decay in m only":
            decayed, g_m = param, grad + weight_decay * param
        elif slip == "betas swapped":
            beta1, beta2 = beta2, beta1
        elif slip == "a fixed amount subtracted":
            decayed = param - lr * weight_decay * np.sign(param)
        elif slip == "the step from the old m":
            new_m = beta1 * m + (1 - beta1) * g_m
            new_v = beta2 * v + (1 - beta2) * g_v**2
            step = (m / (1 - beta1**t)) / (np.sqrt(new_v / (1 - beta2**t)) + eps)
            return decayed - lr * step, new_m, new_v
        elif slip == "the decay scaled by the bias correction":
            decayed = param * (1 - lr * weight_decay / (1 - beta1**t))
        new_m = beta1 * m + (1 - beta1) * g_m
        new_v = beta2 * v + (1 - beta2) * g_v**2
        step = (new_m / (1 - beta1**t)) / (np.sqrt(new_v / (1 - beta2**t)) + eps)
        return decayed - lr * step, new_m, new_v

    return answer


@pytest.mark.parametrize(
    "slip",
    [
        "the decay in m only",
        "betas swapped",
        "a fixed amount subtracted",
        "the step from the old m",
        "the decay scaled by the bias correction",
    ],
)
def test_adamw_undeclared_wrong_answers_fail(slip):
    result = check_adamw_step(_adamw_wrong(slip))
    assert result.status == "FAIL" and "does not match the reference" in repr(result), repr(result)


def test_a_weight_with_no_gradient_only_decays_under_adamw_but_moves_by_lr_under_adam_with_l2():
    one, zero = np.ones(1), np.zeros(1)
    adamw, _, _ = ch11._adamw(one, zero, zero, zero, 1, 0.1, 0.9, 0.999, 1e-8, 0.2)
    l2, _, _ = ch11._adam_l2(one, zero, zero, zero, 1, 0.1, 0.9, 0.999, 1e-8, 0.2)
    np.testing.assert_allclose([1 - adamw[0], 1 - l2[0]], [0.02, 0.1], rtol=1e-6)


# --- Exercise 3: a rolled position table -------------------------------------------------------


@pytest.mark.parametrize(("T", "roll"), [(6, 2), (5, -3), (4, 9), (7, 0), (1, 3)])
def test_the_rolled_reference_is_what_a_model_with_a_rolled_table_attends_to(T, roll):
    """Exact for any weights: the rolled model on x is the model on x relabelled, so each row's top key moves so."""
    model = sa.TinyEncoder.random(10, T, 16, 2, scale=3.0, seed=T)  # sharp weights: no near-ties in a row
    x = np.random.default_rng(roll % 7).integers(0, 10, size=(50, T))
    rows = (np.arange(T) + roll) % T
    rolled = dataclasses.replace(model, positions=model.positions[rows])
    relabelled = x[:, np.argsort(rows)]  # token j of x stands at old position rows[j]
    logits, weights = rolled.forward(x)
    logits_before, weights_before = model.forward(relabelled)
    np.testing.assert_allclose(logits, logits_before[:, rows], atol=1e-10)
    top, top_before = weights[0].argmax(axis=-1), weights_before[0].argmax(axis=-1)  # (50, H, T)
    for b, h in np.ndindex(top.shape[:2]):
        np.testing.assert_array_equal(top[b, h], ch11._rolled_source(top_before[b, h], roll))


def _rolled_with_np_roll(source, roll):
    return (np.roll(source, -roll) - roll) % len(source)


def _rolled_by_permutation_matrices(source, roll):
    """As (T, T) patterns: P_new = R P R^T with R[j, (j + roll) mod T] = 1, then the 1 of each row."""
    T = len(source)
    pattern = np.eye(T)[source]
    shift = np.eye(T)[(np.arange(T) + roll) % T]
    return (shift @ pattern @ shift.T).argmax(axis=-1).astype(float)


def _rolled_by_loops(source, roll):
    T = len(source)
    answer = []
    for i in range(T):
        old_query = (i + roll) % T
        old_key = source[old_query]
        answer.append(next(j for j in range(T) if (j + roll) % T == old_key))  # the token carrying it now
    return answer


@pytest.mark.parametrize("answer", [_rolled_with_np_roll, _rolled_by_permutation_matrices, _rolled_by_loops])
def test_rolled_correct_answers_pass(answer):
    result = check_rolled_positions(answer)
    assert result.passed, repr(result)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (lambda source, roll: np.roll(source, roll), None),  # np.roll the wrong way, keys not relabelled
        (lambda source, roll: (source[(np.arange(len(source)) + roll) % len(source)] + roll) % len(source), None),
        (lambda source, roll: (source - 2 * roll) % len(source), None),  # the reversal's answer, taken as general
        (lambda source, roll: (source[(np.arange(len(source)) - roll) % len(source)] - roll) % len(source), None),
        # Slices move the queries only while 0 <= roll < T; at roll 13, T = 5, they stay put.
        (
            lambda source, roll: (np.concatenate([source[roll:], source[:roll]]) - roll) % len(source),
            r"case 5 \(.*roll 13\): .* It matches moving the keys but not the queries",
        ),
    ],
    ids=["np.roll forward", "keys relabelled +roll", "minus 2 roll", "queries back, keys back", "slices"],
)
def test_rolled_undeclared_wrong_answers_fail(answer, hint):
    result = check_rolled_positions(answer)
    assert result.status == "FAIL" and "do not match the reference" in repr(result), repr(result)
    assert re.search(hint, repr(result)) if hint else "It matches" not in repr(result), repr(result)
