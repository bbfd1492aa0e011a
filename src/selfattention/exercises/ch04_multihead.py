"""Chapter 4 exercises: each head's score matrix, reordering the heads of a layer, and cross-attention's weights."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np

from ._framework import CaseList, CheckResult, Exercise, Mistake, answer_array, compare_array, compare_count

__all__ = ["check_head_score_matrices", "check_reorder_heads", "check_cross_attention_count"]

# No exponential here: a NaN or inf comes from a division by zero (a head width of 0?) or an overflow.
_NAN_HINT = "check for a division by zero: is the head width Dh = D // num_heads, and not 0?"


def _score_matrices(w_q: np.ndarray, w_k: np.ndarray, num_heads: int, **wrong: Any) -> np.ndarray:
    """Each head's (D, kdim) matrix W_Q^h (W_K^h)^T / sqrt(Dh); ``wrong`` names a known slip instead."""
    w_q, w_k = np.asarray(w_q, dtype=float), np.asarray(w_k, dtype=float)  # float64, whatever the weights' dtype
    D = w_q.shape[-1]
    Dh = D // num_heads
    if wrong.get("strided"):  # head h takes columns h, h + H, h + 2H, ...
        q_heads = np.stack([w_q[:, h::num_heads] for h in range(num_heads)])
        k_heads = np.stack([w_k[:, h::num_heads] for h in range(num_heads)])
    elif wrong.get("full_width"):  # every head takes all D columns
        q_heads, k_heads = np.stack([w_q] * num_heads), np.stack([w_k] * num_heads)
    else:
        q_heads = np.stack([w_q[:, h * Dh : (h + 1) * Dh] for h in range(num_heads)])  # (H, D, Dh)
        k_heads = np.stack([w_k[:, h * Dh : (h + 1) * Dh] for h in range(num_heads)])  # (H, kdim, Dh)
    if wrong.get("transposed"):
        q_heads, k_heads = k_heads, q_heads
    scale = {"model_width": D**-0.5, "unscaled": 1.0}.get(wrong.get("scale", ""), Dh**-0.5)
    return q_heads @ np.swapaxes(k_heads, -1, -2) * scale  # (H, D, kdim)


def _is_full_product(got: Any, args: tuple[Any, ...]) -> bool:
    """Whether every head's matrix is a multiple of the whole W_Q W_K^T, whatever the scale."""
    w_q, w_k, num_heads = args
    answer, full = answer_array(got), np.asarray(w_q, dtype=float) @ np.asarray(w_k, dtype=float).T
    if num_heads == 1 or answer is None or answer.shape != (num_heads, *full.shape):
        return False  # with one head, the whole product is the right answer, up to its scale
    scales = np.einsum("hab,ab->h", answer, full) / np.sum(full * full)  # the best multiple, head by head
    return bool(np.allclose(answer, scales[:, None, None] * full, rtol=1e-4, atol=1e-5 * np.abs(full).max()))


def _score_matrix_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for D, H, kdim, dtype in [
        (4, 2, 4, np.float64),
        (8, 4, 8, np.float64),
        (8, 1, 8, np.float64),
        (6, 6, 6, np.float64),
        (8, 2, 6, np.float64),
        (12, 3, 12, np.float32),
    ]:
        w_q, w_k = rng.normal(size=(D, D)).astype(dtype), rng.normal(size=(kdim, D)).astype(dtype)
        keys = "" if kdim == D else f", keys of width {kdim}"
        precision = ", float32 weights" if dtype == np.float32 else ""
        cases.append((f"D={D}, {H} head{'s' * (H > 1)} of {D // H}{keys}{precision}", (w_q, w_k, H)))
    return cases


HEAD_SCORE_MATRICES = Exercise(
    name="each head's score matrix",
    kind="derive",
    concept="a head's scores as one bilinear form of rank Dh",
    chapter=4,
    number=1,
    cases=_score_matrix_cases,
    reference=_score_matrices,
    compare=compare_array("score matrices", _NAN_HINT),
    mistakes=(
        *(
            Mistake(partial(_score_matrices, **{slip: value}), hint)
            for slip, value, hint in [
                (
                    "scale",
                    "model_width",
                    "It matches dividing by sqrt(D); each head's dot products have Dh terms, so divide by sqrt(Dh)",
                ),
                (
                    "scale",
                    "unscaled",
                    "It matches leaving out the scale; the head divides its scores by sqrt(Dh), and so must W^h",
                ),
                (
                    "transposed",
                    True,
                    "It matches each matrix transposed, W_K^h (W_Q^h)^T; in x W z^T the query x stands on the left, "
                    "so W_Q's block comes first: W_Q^h (W_K^h)^T",
                ),
                (
                    "strided",
                    True,
                    "It matches taking every H-th column (h, h + H, ...); head h owns the consecutive columns "
                    "h*Dh to (h+1)*Dh - 1",
                ),
            ]
        ),
        Mistake(
            partial(_score_matrices, full_width=True),
            "It matches the whole W_Q W_K^T (at some scale) for every head; a head reads only its own Dh columns of "
            "W_Q and W_K",
            detect=_is_full_product,
        ),
    ),
)


def check_head_score_matrices(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(w_q, w_k, num_heads) -> (H, D, kdim)``: each head's scores as one matrix.

    ``w_q`` is (D, D) and ``w_k`` (kdim, D), in the ``x @ w`` layout, without
    biases. Matrix ``h`` must be ``W_Q^h (W_K^h)^T / sqrt(Dh)``, so that head
    ``h``'s scores are ``x @ W^h @ z.T`` for queries from ``x`` and keys from
    ``z``. See chapter 4, exercise 1.
    """
    return HEAD_SCORE_MATRICES.check(fn)


_KEYS = ("w_qkv", "b_qkv", "w_out", "b_out")


def _reorder(params: Mapping[str, np.ndarray], num_heads: int, order: list[int], **wrong: Any) -> dict:
    """The layer whose head h is ``params``' head ``order[h]``; ``wrong`` names a known slip instead."""
    w_qkv, b_qkv, w_out, b_out = (np.asarray(params[key]) for key in _KEYS)
    D = w_out.shape[0]
    Dh = D // num_heads
    order = np.argsort(order) if wrong.get("inverse") else np.asarray(order)
    head = np.concatenate([np.arange(h * Dh, (h + 1) * Dh) for h in order])  # (D,): old feature of each new one
    if wrong.get("fused_blocks"):  # w_qkv read as H blocks of 3*Dh columns, one per head
        columns = np.concatenate([np.arange(h * 3 * Dh, (h + 1) * 3 * Dh) for h in order])
    else:
        columns = np.concatenate([head, D + head, 2 * D + head])  # the same heads in W_Q, W_K and W_V
    return {
        "w_qkv": w_qkv[:, columns],
        "b_qkv": b_qkv if wrong.get("fixed_b_qkv") else b_qkv[columns],
        "w_out": w_out if wrong.get("fixed_w_out") else w_out[:, head] if wrong.get("w_out_columns") else w_out[head],
        "b_out": b_out[head] if wrong.get("moved_b_out") else b_out.copy(),
    }


def _reorder_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for D, H, order, dtype in [
        (8, 2, [1, 0], np.float64),
        (12, 3, [2, 0, 1], np.float64),
        (16, 4, [3, 1, 0, 2], np.float64),
        (4, 4, [1, 3, 0, 2], np.float64),
        (6, 1, [0], np.float64),
        (12, 3, [1, 2, 0], np.float32),
    ]:
        params = {
            "w_qkv": rng.normal(size=(D, 3 * D)).astype(dtype),
            "b_qkv": rng.normal(size=3 * D).astype(dtype),
            "w_out": rng.normal(size=(D, D)).astype(dtype),
            "b_out": rng.normal(size=D).astype(dtype),
        }
        precision = ", float32 weights" if dtype == np.float32 else ""
        cases.append((f"D={D}, {H} head{'s' * (H > 1)}, order {order}{precision}", (params, H, order)))
    return cases


def _compare_params(got: Any, expected: dict) -> str | None:
    if not isinstance(got, Mapping):
        return f"should return a dict with the keys {', '.join(_KEYS)}; got {type(got).__name__}"
    missing = [key for key in _KEYS if key not in got]
    if missing:
        return f"the dict has no {', '.join(missing)}; return all four arrays, the ones that do not change included"
    problems = (compare_array(f"new {key}", _NAN_HINT)(got[key], expected[key]) for key in _KEYS)
    return next((problem for problem in problems if problem is not None), None)


REORDER_HEADS = Exercise(
    name="reordering the heads",
    kind="extend",
    concept="which columns and rows of the weights belong to a head",
    chapter=4,
    number=2,
    cases=_reorder_cases,
    reference=_reorder,
    compare=_compare_params,
    mistakes=tuple(
        Mistake(partial(_reorder, **{slip: True}), hint)
        for slip, hint in [
            (
                "fixed_w_out",
                "It matches moving the heads' Q, K and V columns but not W_O's rows: head h's output is multiplied "
                "by rows h*Dh to (h+1)*Dh - 1 of W_O, so those rows move with the head",
            ),
            (
                "w_out_columns",
                "It matches moving W_O's columns; the heads' outputs meet W_O's rows, while its columns are the "
                "model's output features, which stay where they are",
            ),
            (
                "moved_b_out",
                "It matches reordering b_out too; b_out is added to the model's output features, which do not "
                "belong to any head, so it stays as it was",
            ),
            (
                "fixed_b_qkv",
                "It matches moving the weights' columns but not b_qkv; each column of Q, K and V has its own bias, "
                "which must move with it",
            ),
            (
                "fused_blocks",
                "It matches cutting w_qkv into H blocks of 3*Dh; it is [W_Q | W_K | W_V], so head h has Dh columns "
                "in each of the three D-wide blocks",
            ),
            (
                "inverse",
                "It matches the inverse reordering: new head h must be old head order[h], not old head h "
                "moved to place order[h]",
            ),
        ]
    ),
)


def check_reorder_heads(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(params, num_heads, order) -> dict``: the same layer with its heads in another order.

    ``params`` holds ``w_qkv`` (D, 3D), ``b_qkv`` (3D,), ``w_out`` (D, D) and
    ``b_out`` (D,), as ``sa.multihead_attention`` takes them. The answer has the
    same four keys; its head ``h`` is ``params``' head ``order[h]``, with its
    columns in the same order, so that the layer's output is unchanged.
    See chapter 4, exercise 2.
    """
    return REORDER_HEADS.check(fn)


def _cross_attention_count(D: int, kdim: int, vdim: int, bias: bool) -> int:
    weights = D * D + kdim * D + vdim * D + D * D  # W_Q (D, D), W_K (kdim, D), W_V (vdim, D), W_O (D, D)
    return weights + (4 * D if bias else 0)  # every projection's output, and so its bias, is D wide


CROSS_ATTENTION_COUNT = Exercise(
    name="cross-attention parameter count",
    kind="count",
    concept="the weights of cross-attention",
    chapter=4,
    number=3,
    cases=lambda rng: [
        (f"D={D}, kdim={k}, vdim={v}, bias={b}", (D, k, v, b))
        for D, k, v, b in [
            (16, 16, 16, True),
            (16, 8, 12, True),
            (16, 8, 12, False),
            (64, 32, 48, True),
            (768, 1024, 512, True),
        ]
    ],
    reference=_cross_attention_count,
    compare=compare_count(
        "the parameter count", "got {got}, which is not the number of entries in the four weights and biases"
    ),
    mistakes=(
        Mistake(
            lambda D, kdim, vdim, bias: 4 * D * D + (4 * D if bias else 0),
            "It matches the self-attention count; W_K has kdim rows and W_V has vdim rows",
        ),
        Mistake(
            lambda D, kdim, vdim, bias: _cross_attention_count(D, kdim, vdim, bias) - (3 * D if bias else 0),
            "It matches leaving out the input projections' biases, D each",
        ),
        Mistake(
            lambda D, kdim, vdim, bias: (
                _cross_attention_count(D, kdim, vdim, bias) - (2 * D - kdim - vdim if bias else 0)
            ),
            "It matches biases as long as the inputs; a bias is as long as its projection's output, D",
        ),
    ),
)


def check_cross_attention_count(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(D, kdim, vdim, bias) -> int``: the parameters of ``nn.MultiheadAttention(D, H, kdim=, vdim=, bias=)``.

    See chapter 4, exercise 3.
    """
    return CROSS_ATTENTION_COUNT.check(fn)
