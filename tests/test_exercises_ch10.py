"""Chapter 10's exercises: the references against torch and the package, and answers the declarations do not list.

The generic tests (tests/test_exercises.py) check that each reference passes and
each declared mistake earns its hint. Here: the references are right (torch's
autograd, the package's backwards), correct answers written in other ways and
in float32 pass, and plausible wrong answers that are not declared mistakes fail.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import selfattention as sa
from selfattention.exercises import ch10_backward as ch10
from selfattention.exercises import check_causal_tile_backward, check_gradient_test, check_rms_norm_backward

# --- Exercise 1: RMSNorm's backward ------------------------------------------------------------


@pytest.mark.parametrize(("shape", "eps"), [((3, 8), 1e-5), ((2, 4, 6), 1e-6), ((6,), 1e-5), ((4, 1), 1e-2)])
def test_the_rms_norm_reference_is_torch_s_autograd(shape, eps):
    rng = np.random.default_rng(0)
    grad_y, x, weight = rng.normal(size=shape), rng.normal(size=shape), 1 + 0.3 * rng.normal(size=shape[-1])
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(weight, requires_grad=True)
    F.rms_norm(xt, (shape[-1],), wt, eps=eps).backward(torch.tensor(grad_y))
    grad_x, grad_weight = ch10._rms_norm_backward(grad_y, x, weight, eps)
    np.testing.assert_allclose(grad_x, xt.grad.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(grad_weight, wt.grad.numpy(), rtol=1e-12, atol=1e-14)


def _rms_norm_backward_float32(grad_y, x, weight, eps):
    grad_y, x, weight = (np.asarray(a, dtype=np.float32) for a in (grad_y, x, weight))
    rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps))
    x_hat = x / rms
    g = grad_y * weight
    grad_x = (g - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) / rms
    return grad_x, (grad_y * x_hat).reshape(-1, x.shape[-1]).sum(axis=0)


def _rms_norm_backward_with_x(grad_y, x, weight, eps):
    """The same gradient written with x and the mean square instead of x_hat."""
    mean_square = (x**2).mean(axis=-1, keepdims=True) + eps
    g = grad_y * weight
    grad_x = g / np.sqrt(mean_square) - x * (g * x).mean(axis=-1, keepdims=True) / mean_square**1.5
    grad_weight = (grad_y * x / np.sqrt(mean_square)).sum(axis=tuple(range(x.ndim - 1)))
    return grad_x, grad_weight


def _rms_norm_backward_by_jacobian(grad_y, x, weight, eps):
    """Row by row, through the full D x D Jacobian of x_hat."""
    x2 = x.reshape(-1, x.shape[-1])
    g2 = (grad_y * weight).reshape(x2.shape)
    grad_x = np.empty_like(x2)
    D = x.shape[-1]
    for r, (row, g) in enumerate(zip(x2, g2, strict=True)):
        rms = np.sqrt(row @ row / D + eps)
        jacobian = np.eye(D) / rms - np.outer(row, row) / (D * rms**3)  # d x_hat_i / d x_j
        grad_x[r] = jacobian.T @ g
    grad_weight = (grad_y * x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps)).reshape(-1, D).sum(axis=0)
    return grad_x.reshape(x.shape), grad_weight


@pytest.mark.parametrize(
    "answer", [_rms_norm_backward_float32, _rms_norm_backward_with_x, _rms_norm_backward_by_jacobian]
)
def test_rms_norm_backward_correct_answers_pass(answer):
    result = check_rms_norm_backward(answer)
    assert result.passed, repr(result)


def _rms_wrong(slip):
    def answer(grad_y, x, weight, eps):
        rms = np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps)
        x_hat = x / rms
        g = grad_y * weight
        grad_x = (g - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) / rms
        grad_weight = (grad_y * x_hat).reshape(-1, x.shape[-1]).sum(axis=0)
        if slip == "sign":
            grad_x = (g + x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) / rms
        elif slip == "rms squared":
            grad_x = grad_x / rms
        elif slip == "weight in its own gradient":
            grad_weight = (g * x_hat).reshape(-1, x.shape[-1]).sum(axis=0)
        elif slip == "x, not x_hat":
            grad_weight = (grad_y * x).reshape(-1, x.shape[-1]).sum(axis=0)
        elif slip == "mean over tokens":
            grad_x = (g - x_hat * (g * x_hat).mean(axis=0, keepdims=True)) / rms
        return grad_x, grad_weight

    return answer


@pytest.mark.parametrize(
    "slip", ["sign", "rms squared", "weight in its own gradient", "x, not x_hat", "mean over tokens"]
)
def test_rms_norm_backward_undeclared_wrong_answers_fail(slip):
    result = check_rms_norm_backward(_rms_wrong(slip))
    assert result.status == "FAIL" and "does not match the reference" in repr(result), repr(result)


# --- Exercise 2: a test that catches a wrong backward ---------------------------------------------


def _torch_backward(grad_out, q, k, v, is_causal=False):
    """A third correct backward: autograd through torch's fused attention, with the package's mask."""
    qt, kt, vt = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    mask = torch.from_numpy(sa.causal_mask(len(q), len(k), dtype=bool)) if is_causal else None
    F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask).backward(torch.tensor(grad_out))
    return qt.grad.numpy(), kt.grad.numpy(), vt.grad.numpy()


def test_the_correct_backwards_agree_and_each_wrong_one_shows_only_where_the_hint_says():
    rng = np.random.default_rng(1)
    shapes = [(3, 5, 4, 2), (5, 3, 2, 3), (4, 4, 3, 3), (1, 1, 1, 1), (1, 6, 5, 5)]
    for T, S, Dk, Dv in shapes:
        for is_causal in (False, True):
            q, k, v, g = (rng.normal(size=s) for s in ((T, Dk), (S, Dk), (S, Dv), (T, Dv)))
            want = sa.scaled_dot_product_attention_backward(g, q, k, v, is_causal=is_causal)
            for backward in (ch10._backward_by_rows, _torch_backward, ch10._package_backward):
                for a, b in zip(backward(g, q, k, v, is_causal=is_causal), want, strict=True):
                    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
            shows = {
                ch10._backward_scaled_by_dv: Dk != Dv,
                ch10._backward_ignoring_the_mask: is_causal and min(T, S) > 1,
                ch10._backward_aligned_upper_left: is_causal and T != S and min(T, S) > 0,
                ch10._backward_nan_for_blocked_queries: is_causal and T > S,
            }
            for backward, expected in shows.items():
                with np.errstate(all="ignore"):
                    got = backward(g, q, k, v, is_causal=is_causal)
                same = all(np.allclose(a, b, rtol=1e-10, atol=1e-12) for a, b in zip(got, want, strict=True))
                assert same != expected, (backward.__name__, T, S, Dk, Dv, is_causal)


def _finite_difference_test(backward, eps=1e-6):
    """A test that needs no reference backward: central differences of sum(O * grad_out)."""
    rng = np.random.default_rng(5)
    for T, S, Dk, Dv in [(2, 4, 3, 2), (4, 2, 2, 3)]:
        for is_causal in (False, True):
            q, k, v, g = (rng.normal(size=s) for s in ((T, Dk), (S, Dk), (S, Dv), (T, Dv)))
            grads = backward(g, q, k, v, is_causal=is_causal)
            for index, array in enumerate((q, k, v)):
                numeric = np.zeros_like(array)
                for i in np.ndindex(array.shape):
                    up, down = [q.copy(), k.copy(), v.copy()], [q.copy(), k.copy(), v.copy()]
                    up[index][i] += eps
                    down[index][i] -= eps
                    f_up = sa.scaled_dot_product_attention(*up, is_causal=is_causal)[0]
                    f_down = sa.scaled_dot_product_attention(*down, is_causal=is_causal)[0]
                    numeric[i] = ((f_up - f_down) * g).sum() / (2 * eps)
                if not np.allclose(grads[index], numeric, rtol=1e-5, atol=1e-7):
                    return False
    return True


def _torch_lower_right_test(backward):
    rng = np.random.default_rng(3)
    for T, S in [(2, 5), (5, 2), (3, 3)]:
        for is_causal in (False, True):
            q, k, v, g = (rng.normal(size=s) for s in ((T, 4), (S, 4), (S, 3), (T, 3)))
            got = backward(g, q, k, v, is_causal)
            if not all(np.allclose(a, b) for a, b in zip(got, _torch_backward(g, q, k, v, is_causal), strict=True)):
                return False
    return True


@pytest.mark.parametrize("test", [ch10._gradient_test, _finite_difference_test, _torch_lower_right_test])
def test_gradient_test_correct_answers_pass(test):
    result = check_gradient_test(test)
    assert result.passed, repr(result)


def _shape_only_test(backward):
    q, k, v, g = np.ones((3, 2)), np.ones((4, 2)), np.ones((4, 5)), np.ones((3, 5))
    return [a.shape for a in backward(g, q, k, v)] == [(3, 2), (4, 2), (4, 5)]


def _any_gradient_test(backward):  # one matching gradient is taken as enough
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.normal(size=s) for s in ((3, 4), (5, 4), (5, 2), (3, 2)))
    got, want = backward(g, q, k, v, True), sa.scaled_dot_product_attention_backward(g, q, k, v, is_causal=True)
    return any(np.allclose(a, b) for a, b in zip(got, want, strict=True))


def _torch_upper_left_test(backward):  # trusts torch's is_causal, which aligns at the upper left
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.normal(size=s) for s in ((3, 4), (5, 4), (5, 2), (3, 2)))
    qt, kt, vt = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    F.scaled_dot_product_attention(qt, kt, vt, is_causal=True).backward(torch.tensor(g))
    got = backward(g, q, k, v, is_causal=True)
    return all(np.allclose(a, b.grad.numpy()) for a, b in zip(got, (qt, kt, vt), strict=True))


def _chapter_cell_test(backward):
    """The chapter's finite-difference cell (T = 3, S = 5, Dk = 4, Dv = 2, causal), adapted: misses T > S."""
    rng = np.random.default_rng(0)
    q, k, v, w = (rng.normal(size=s) for s in ((3, 4), (5, 4), (5, 2), (3, 2)))
    want = sa.scaled_dot_product_attention_backward(w, q, k, v, is_causal=True)
    return all(np.allclose(a, b) for a, b in zip(backward(w, q, k, v, is_causal=True), want, strict=True))


@pytest.mark.parametrize(
    ("test", "message"),
    [
        (lambda backward: True, r"case 3 \(a backward that leaves out delta: expected False\): got True\. It matches"),
        (_shape_only_test, r"case 3 \(.*\): got True\. It matches a test that does not compare dQ and dK"),
        (_any_gradient_test, r"case 3 \(.*\): got True\. It matches a test that does not compare dQ and dK"),
        (_torch_upper_left_test, r"case 1 \(the package's backward: expected True\): got False\. .*upper left"),
        (_chapter_cell_test, r"case 7 \(.*no visible key: expected False\): got True\. .*T > S"),
        (
            lambda b: ch10._gradient_test(b, shapes=((3, 5, 4, 2), (5, 3, 2, 3)), slip="nan blind"),
            r"case 7 \(.*\): got True\. .*slips through",
        ),
        (lambda backward: 1, r"case 1 \(.*\): the test must return True or False; got 1$"),
    ],
)
def test_gradient_test_undeclared_wrong_tests_fail_with_the_case_s_hint(test, message):
    result = check_gradient_test(test)
    assert result.status == "FAIL" and re.search(message, repr(result)), repr(result)


# --- Exercise 3: a causal tile of the recomputing backward -------------------------------------


@pytest.mark.parametrize(("T", "S", "block"), [(6, 6, 2), (5, 8, 3), (7, 4, 2), (1, 5, 2), (9, 9, 4)])
def test_the_tiles_add_up_to_the_package_s_causal_backward(T, S, block):
    rng = np.random.default_rng(T * S)
    q, k, v, g = (rng.normal(size=s) for s in ((T, 3), (S, 3), (S, 2), (T, 2)))
    out, lse = sa.memory_efficient_attention(q, k, v, is_causal=True, return_lse=True, block_size=block)
    mine_out, mine_lse = ch10._causal_forward(q, k, v)
    np.testing.assert_allclose(mine_out, out, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(np.isneginf(mine_lse), np.isneginf(lse))
    np.testing.assert_allclose(mine_lse[np.isfinite(lse)], lse[np.isfinite(lse)], rtol=1e-12)
    grad_q, grad_k, grad_v = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for r in range(0, T, block):
        for c in range(0, S, block):
            rows, cols = slice(r, min(r + block, T)), slice(c, min(c + block, S))
            dq, dk, dv = ch10._tile_backward(g, q, k, v, out, lse, rows, cols)
            grad_q[rows] += dq
            grad_k[cols] += dk
            grad_v[cols] += dv
    for want in (
        sa.scaled_dot_product_attention_backward(g, q, k, v, is_causal=True),
        sa.memory_efficient_attention_backward(g, q, k, v, out, lse, is_causal=True, block_size=block),
        _torch_backward(g, q, k, v, is_causal=True),
    ):
        for mine, theirs in zip((grad_q, grad_k, grad_v), want, strict=True):
            np.testing.assert_allclose(mine, theirs, rtol=1e-10, atol=1e-12)


def _tile_float32(grad_out, q, k, v, out, lse, rows, cols):
    grad_out, q, k, v, out, lse = (np.asarray(a, dtype=np.float32) for a in (grad_out, q, k, v, out, lse))
    T, S = len(q), len(k)
    if cols.start > rows.stop - 1 + S - T:
        return np.zeros((len(q[rows]), q.shape[1]), np.float32), *(np.zeros_like(a[cols]) for a in (k, v))
    scale = np.float32(1 / np.sqrt(q.shape[1]))
    seen = np.arange(S)[cols] <= np.arange(T)[rows, None] + S - T
    scores = np.where(seen, scale * q[rows] @ k[cols].T, np.float32(-np.inf))
    p = np.exp(scores - np.where(np.isneginf(lse[rows]), np.float32(0), lse[rows])[:, None])
    grad_s = p * (grad_out[rows] @ v[cols].T - (grad_out[rows] * out[rows]).sum(-1, keepdims=True))
    return scale * grad_s @ k[cols], scale * grad_s.T @ q[rows], p.T @ grad_out[rows]


def _tile_by_loops(grad_out, q, k, v, out, lse, rows, cols):
    """No skipping, finite -1e30 masking, loops over entries: written as differently as possible."""
    T, S, Dk = len(q), len(k), q.shape[1]
    r_ids, c_ids = range(T)[rows], range(S)[cols]
    grad_q = np.zeros((len(r_ids), Dk))
    grad_k, grad_v = np.zeros((len(c_ids), Dk)), np.zeros((len(c_ids), v.shape[1]))
    for a, i in enumerate(r_ids):
        delta = float(grad_out[i] @ out[i])
        for b, j in enumerate(c_ids):
            score = q[i] @ k[j] / np.sqrt(Dk) if j <= i + S - T else -1e30
            p = 0.0 if np.isneginf(lse[i]) else np.exp(score - lse[i])
            grad_s = p * (grad_out[i] @ v[j] - delta)
            grad_q[a] += grad_s * k[j] / np.sqrt(Dk)
            grad_k[b] += grad_s * q[i] / np.sqrt(Dk)
            grad_v[b] += p * grad_out[i]
    return grad_q, grad_k, grad_v


def _tile_torch(grad_out, q, k, v, out, lse, rows, cols):
    """torch tensors, with NaN weights of blocked queries zeroed after the fact."""
    gt, qt, kt, vt, ot, lt = (torch.as_tensor(np.asarray(a, dtype=np.float64)) for a in (grad_out, q, k, v, out, lse))
    T, S = len(q), len(k)
    i, j = torch.arange(T)[rows, None], torch.arange(S)[cols]
    scores = (qt[rows] @ kt[cols].T / q.shape[1] ** 0.5).masked_fill(j > i + S - T, float("-inf"))
    p = torch.nan_to_num(torch.exp(scores - lt[rows, None]), nan=0.0)
    grad_s = p * (gt[rows] @ vt[cols].T - (gt[rows] * ot[rows]).sum(-1, keepdim=True))
    return grad_s @ kt[cols] / q.shape[1] ** 0.5, grad_s.T @ qt[rows] / q.shape[1] ** 0.5, p.T @ gt[rows]


@pytest.mark.parametrize("answer", [_tile_float32, _tile_by_loops, _tile_torch])
def test_causal_tile_correct_answers_pass(answer):
    result = check_causal_tile_backward(answer)
    assert result.passed, repr(result)


def _tile_wrong(slip):
    def answer(grad_out, q, k, v, out, lse, rows, cols):
        T, S = len(q), len(k)
        diagonal = S - T
        if slip == "skip off by one" and cols.start >= rows.stop - 1 + diagonal:
            return np.zeros((len(q[rows]), q.shape[1])), np.zeros_like(k[cols]), np.zeros_like(v[cols])
        scale = 1 / np.sqrt(q.shape[1])
        i, j = np.arange(T)[rows, None], np.arange(S)[cols]
        seen = (j < i + diagonal) if slip == "strict" else (j <= i + diagonal)
        if slip == "transposed mask":
            seen = i <= j + diagonal
        scores = np.where(seen, scale * q[rows] @ k[cols].T, -np.inf)
        with np.errstate(invalid="ignore"):
            p = np.exp(scores - lse[rows, None])  # NaN where lse = -inf, unless handled
        if slip != "nan":
            p = np.nan_to_num(p, nan=0.0)
        grad_s = p * (grad_out[rows] @ v[cols].T - (grad_out[rows] * out[rows]).sum(-1, keepdims=True))
        grad_v = p.T @ grad_out[rows]
        if slip == "dV from dS":
            grad_v = grad_s.T @ grad_out[rows]
        return scale * grad_s @ k[cols], scale * grad_s.T @ q[rows], grad_v

    return answer


@pytest.mark.parametrize(
    ("slip", "message"),
    [
        ("strict", r"case 1 \(a tile on the diagonal, T = S = 6\): .*does not match"),
        ("transposed mask", r"case 1 .*does not match"),
        ("skip off by one", r"case 3 \(T = 7 queries, S = 4 keys: queries 0-2 see no key\): .*does not match"),
        ("dV from dS", r"case 1 .*grad_v part does not match"),
        (
            "nan",
            r"case 3 \(T = 7 queries, S = 4 keys: queries 0-2 see no key\): .*NaN or inf: a query that sees no key",
        ),
    ],
)
def test_causal_tile_undeclared_wrong_answers_fail(slip, message):
    result = check_causal_tile_backward(_tile_wrong(slip))
    assert result.status == "FAIL" and re.search(message, repr(result)), repr(result)


def test_the_numbers_exercise_2_s_text_states():
    """Seven backwards, two correct and five wrong; the chapter's finite-difference setting lets one through."""
    verdicts = [verdict for _, _, verdict in ch10._TEST_CASES]
    assert len(verdicts) == 7 and verdicts.count(True) == 2 and verdicts.count(False) == 5
    result = check_gradient_test(_chapter_cell_test)
    assert re.search(r"case 7 \(a backward that gives NaN", repr(result)), repr(result)
