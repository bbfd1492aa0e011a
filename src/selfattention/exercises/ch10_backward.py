"""Chapter 10 exercises: RMSNorm's backward, a test that catches a wrong attention backward, and one causal tile."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..backward import layer_norm_backward, scaled_dot_product_attention_backward
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array, compare_verdict

__all__ = ["check_rms_norm_backward", "check_gradient_test", "check_causal_tile_backward"]

_NAN_HINT = "the backward has no exponential of its own; check for a division by zero"


# --- Exercise 1: RMSNorm's backward ------------------------------------------------------------


def _rms_norm_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for shape, eps, size, offset, what in [  # x = offset + size * N(0, 1)
        ((3, 8), 1e-5, 1.0, 1.5, ": rows with a mean of about 1.5"),
        ((2, 4, 6), 1e-6, 2.0, 0.0, ": batch axes"),
        ((1, 5), 1e-5, 1.0, 0.0, ": one token"),
        ((6,), 1e-5, 1.0, 0.0, ": a single vector, no token axis"),
        ((4, 1), 1e-2, 0.3, 0.0, ": one feature"),
        ((3, 6), 0.5, 0.1, 0.0, ": small entries, where eps matters"),
        ((2, 3, 16), 1e-6, 1.0, 0.0, ", float32"),
    ]:
        x = offset + size * rng.normal(size=shape)
        arrays = (rng.normal(size=shape), x, 1.0 + 0.3 * rng.normal(size=shape[-1]))  # grad_y, x, weight
        if what == ", float32":
            arrays = tuple(a.astype(np.float32) for a in arrays)
        cases.append((f"x {shape}, eps={eps:g}{what}", (*arrays, eps)))
    return cases


def _rms_norm_backward(
    grad_y: np.ndarray, x: np.ndarray, weight: np.ndarray, eps: float, slip: str = ""
) -> tuple[np.ndarray, np.ndarray]:
    """RMSNorm's gradients (grad_x, grad_weight), in float64; ``slip`` computes a known wrong answer."""
    grad_y, x, weight = (np.asarray(a, dtype=np.float64) for a in (grad_y, x, weight))
    rms = np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + (0.0 if slip == "no eps" else eps))  # (..., 1)
    x_hat = x / rms
    g = grad_y if slip == "no weight" else grad_y * weight  # the gradient reaching x_hat
    if slip == "constant rms":
        grad_x = g / rms
    else:
        coupling = (g * x_hat).sum(axis=-1, keepdims=True)  # (..., 1): how the row's rms moves the loss
        coupling = coupling if slip == "sum" else coupling / x.shape[-1]
        mean_term = g.mean(axis=-1, keepdims=True) if slip == "mean term" else 0.0
        grad_x = (g - mean_term - x_hat * coupling) / rms
    per_token = grad_y * x_hat  # (..., D)
    if slip == "per token":
        return grad_x, per_token
    if slip == "tokens only":
        return grad_x, per_token.sum(axis=-2) if per_token.ndim > 1 else per_token
    return grad_x, per_token.reshape(-1, x.shape[-1]).sum(axis=0)  # the weight serves every token


def _compare_named_arrays(
    got: Any, expected: tuple[np.ndarray, ...], names: tuple[str, ...], what: str, nan_hint: str = _NAN_HINT
) -> str | None:
    """Compare a returned tuple of arrays named ``names``; the gradient nearest the output (the last) first."""
    if not isinstance(got, (tuple, list)) or len(got) != len(expected):
        count = f"a {type(got).__name__} of {len(got)}" if isinstance(got, (tuple, list)) else type(got).__name__
        return f"should return {what}; got {count}"
    for index in reversed(range(len(names))):  # dV before dK before dQ: a wrong dV explains a wrong dQ
        problem = compare_array(names[index], nan_hint)(got[index], expected[index])
        if problem is not None:
            return problem
    return None


_RMS_NORM_SLIPS = {  # the slip that computes a wrong answer: the hint it earns
    "mean term": "It matches keeping LayerNorm's -mean(g) term: that term comes from the mean's derivative, "
    "and RMSNorm has no mean",
    "constant rms": "It matches treating the rms as a constant: each x_j also moves its row's rms, by "
    "x_hat_j / (D rms), which subtracts x_hat * mean(g * x_hat) before dividing by the rms",
    "sum": "It matches x_hat * sum(g * x_hat): the mean square divides by D, so the rms's derivative carries "
    "a 1/D; use the mean",
    "no weight": "It matches leaving out the weight in grad_x: the gradient reaching x_hat is grad_y * weight",
    "no eps": "It matches leaving out eps: the forward divides by sqrt(mean(x**2) + eps), and so must the backward",
    "per token": "It matches returning grad_y * x_hat for every token: one weight serves all tokens, so its "
    "gradient is that summed over every axis but the last",
    "tokens only": "It matches summing the weight's gradient over the tokens only: sum over the batch axes "
    "too, every axis but the last",
}

RMS_NORM_BACKWARD = Exercise(
    name="RMSNorm's backward",
    kind="derive",
    concept="a normaliser's backward: the coupling through the row's rms",
    chapter=10,
    number=1,
    cases=_rms_norm_cases,
    reference=_rms_norm_backward,
    compare=partial(_compare_named_arrays, names=("grad_x", "grad_weight"), what="a pair (grad_x, grad_weight)"),
    mistakes=(
        Mistake(
            lambda g, x, w, eps: layer_norm_backward(g, x, w, None, eps)[:2],
            "It matches LayerNorm's backward: RMSNorm neither subtracts the mean nor divides by the standard "
            "deviation; redo the derivation with rms = sqrt(mean(x**2) + eps)",
        ),
        *(Mistake(partial(_rms_norm_backward, slip=slip), hint) for slip, hint in _RMS_NORM_SLIPS.items()),
    ),
)


def check_rms_norm_backward(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(grad_y, x, weight, eps) -> (grad_x, grad_weight)`` for RMSNorm over the last axis.

    The forward is ``y = x / sqrt(mean(x**2) + eps) * weight`` (chapter 5,
    exercise 1); ``x`` and ``grad_y`` are (..., D), ``weight`` is (D,), and
    ``grad_weight`` has the weight's shape. See chapter 10, exercise 1.
    """
    return RMS_NORM_BACKWARD.check(fn)


# --- Exercise 2: a test that tells a right attention backward from a wrong one ---------------------


def _attention_backward(
    grad_out: Any, q: Any, k: Any, v: Any, is_causal: bool = False, bug: str = ""
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One head's dQ, dK, dV, vectorised; ``bug`` names the wrong version to compute."""
    arrays = [np.asarray(a) for a in (grad_out, q, k, v)]
    dtype = np.result_type(*arrays, np.float32) if all(a.dtype.kind == "f" for a in arrays) else np.float64
    grad_out, q, k, v = (a.astype(dtype, copy=False) for a in arrays)
    T, S = q.shape[-2], k.shape[-2]
    scale = 1 / np.sqrt(v.shape[-1] if bug == "scale" else q.shape[-1])
    scores = scale * q @ np.swapaxes(k, -1, -2)  # (T, S)
    if is_causal and bug != "no mask":
        diagonal = 0 if bug == "upper left" else S - T  # query i may see keys 0 ... i + diagonal
        scores = np.where(np.arange(S) <= np.arange(T)[:, None] + diagonal, scores, -np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        top = scores.max(axis=-1, keepdims=True)
        if bug != "nan":
            top = np.where(np.isneginf(top), 0.0, top)  # a query that sees no key: weights 0, not NaN
        exps = np.exp(scores - top)
        total = exps.sum(axis=-1, keepdims=True)
        p = exps / total if bug == "nan" else exps / np.where(total > 0, total, 1.0)
    out = p @ v
    delta = 0.0 if bug == "no delta" else (grad_out * out).sum(axis=-1, keepdims=True)
    grad_s = p * (grad_out @ np.swapaxes(v, -1, -2) - delta)
    return scale * grad_s @ k, scale * np.swapaxes(grad_s, -1, -2) @ q, np.swapaxes(p, -1, -2) @ grad_out


def _package_backward(grad_out, q, k, v, is_causal=False):
    """The package's backward, one head."""
    return scaled_dot_product_attention_backward(grad_out, q, k, v, is_causal=is_causal)


def _backward_by_rows(grad_out, q, k, v, is_causal=False):
    """A correct backward written another way: one query at a time, through the softmax's Jacobian."""
    grad_out, q, k, v = (np.asarray(a, dtype=np.float64) for a in (grad_out, q, k, v))
    (T, Dk), S = q.shape, k.shape[0]
    grad_q, grad_k, grad_v = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for i in range(T):
        seen = np.arange(S) <= S - T + i if is_causal else np.ones(S, dtype=bool)
        if not seen.any():
            continue  # this query sees no key: it sends no gradient anywhere
        scores = q[i] @ k[seen].T / np.sqrt(Dk)
        p = np.exp(scores - scores.max())
        p /= p.sum()
        grad_s = (np.diag(p) - np.outer(p, p)) @ (v[seen] @ grad_out[i])  # J^T dP for this row
        grad_q[i] = grad_s @ k[seen] / np.sqrt(Dk)
        grad_k[seen] += np.outer(grad_s, q[i]) / np.sqrt(Dk)
        grad_v[seen] += np.outer(p, grad_out[i])
    return grad_q, grad_k, grad_v


def _backward_without_delta(grad_out, q, k, v, is_causal=False):
    """A wrong backward: dS = P * dP."""
    return _attention_backward(grad_out, q, k, v, is_causal, bug="no delta")


def _backward_scaled_by_dv(grad_out, q, k, v, is_causal=False):
    """A wrong backward: the scale is 1/sqrt(Dv), in its forward too."""
    return _attention_backward(grad_out, q, k, v, is_causal, bug="scale")


def _backward_ignoring_the_mask(grad_out, q, k, v, is_causal=False):
    """A wrong backward: is_causal changes nothing."""
    return _attention_backward(grad_out, q, k, v, is_causal, bug="no mask")


def _backward_aligned_upper_left(grad_out, q, k, v, is_causal=False):
    """A wrong backward: query i sees keys 0 ... i, whatever S - T is."""
    return _attention_backward(grad_out, q, k, v, is_causal, bug="upper left")


def _backward_nan_for_blocked_queries(grad_out, q, k, v, is_causal=False):
    """A wrong backward: a query that sees no key gets NaN, and its NaN spreads into dK and dV."""
    return _attention_backward(grad_out, q, k, v, is_causal, bug="nan")


_TEST_CASES = [  # (backward, what it is, the verdict a good test gives)
    (_package_backward, "the package's backward", True),
    (_backward_by_rows, "a correct backward written another way", True),
    (_backward_without_delta, "a backward that leaves out delta", False),
    (_backward_scaled_by_dv, "a backward whose scale uses Dv instead of Dk", False),
    (_backward_ignoring_the_mask, "a backward that ignores is_causal", False),
    (_backward_aligned_upper_left, "a backward whose causal diagonal sits at the upper left", False),
    (_backward_nan_for_blocked_queries, "a backward that gives NaN to a query with no visible key", False),
]
_VERDICTS = {backward: verdict for backward, _, verdict in _TEST_CASES}

# (T, S, Dk, Dv): fewer queries than keys, more queries than keys (some see no key), and square.
_TEST_SHAPES = ((3, 5, 4, 2), (5, 3, 2, 3), (4, 4, 3, 3))


def _gradient_test(
    backward: Callable[..., Any],
    shapes: tuple[tuple[int, int, int, int], ...] = _TEST_SHAPES,
    causal: tuple[bool, ...] = (False, True),
    slip: str = "",
) -> bool:
    """Whether ``backward`` matches the package's backward on every shape, with and without the causal mask."""
    rng = np.random.default_rng(0)
    for T, S, Dk, Dv in shapes:
        for is_causal in causal:
            q, k, v = rng.normal(size=(T, Dk)), rng.normal(size=(S, Dk)), rng.normal(size=(S, Dv))
            grad_out = rng.normal(size=(T, Dv))
            if slip == "upper left":  # the reference of a test that trusted torch's is_causal
                want = _attention_backward(grad_out, q, k, v, is_causal, bug="upper left")
            else:
                want = scaled_dot_product_attention_backward(grad_out, q, k, v, is_causal=is_causal)
            got = backward(grad_out, q, k, v, is_causal=is_causal)
            pairs = list(zip(got, want, strict=True))[2:] if slip == "only dV" else zip(got, want, strict=True)
            for mine, theirs in pairs:
                mine = np.asarray(mine)
                if slip == "exact":
                    if not np.array_equal(mine, theirs):
                        return False
                elif slip == "nan blind":
                    if (np.abs(mine - theirs) > 1e-8 + 1e-6 * np.abs(theirs)).any():
                        return False
                elif not np.allclose(mine, theirs, rtol=1e-6, atol=1e-8):
                    return False
    return True


def _gradient_test_cases(rng: np.random.Generator) -> CaseList:
    return [(f"{what}: expected {verdict}", (backward,)) for backward, what, verdict in _TEST_CASES]


def _on(backward: Callable[..., Any]) -> Callable[[Any, tuple[Any, ...]], bool]:
    """Recognise a wrong verdict on the case that hands the test ``backward``."""
    return lambda got, args: args[0] is backward and bool(got) != _VERDICTS[backward]


_SQUARE_SHAPES = ((3, 3, 4, 2), (5, 5, 2, 3))

GRADIENT_TEST = Exercise(
    name="a test that catches a wrong backward",
    kind="test",
    concept="a gradient check is only as good as its inputs",
    chapter=10,
    number=2,
    cases=_gradient_test_cases,
    reference=_gradient_test,
    compare=compare_verdict,
    mistakes=(
        Mistake(
            partial(_gradient_test, slip="upper left"),
            "It matches a test whose reference aligns the causal diagonal at the upper left, as torch's "
            "is_causal=True does; the package, like a KV cache, aligns it at the lower right: compare with "
            "sa.scaled_dot_product_attention_backward, or pass torch attn_mask=sa.causal_mask(T, S, dtype=bool)",
            detect=_on(_package_backward),
        ),
        Mistake(
            partial(_gradient_test, slip="exact"),
            "It matches comparing without a tolerance: two correct backwards that add in another order differ "
            "in the last bits; compare with np.allclose",
            detect=_on(_backward_by_rows),
        ),
        Mistake(
            partial(_gradient_test, slip="only dV"),
            "It matches a test that does not compare dQ and dK: this backward's dV is right, but its dS leaves out "
            "delta, which only dQ and dK show; compare all three gradients",
            detect=_on(_backward_without_delta),
        ),
        Mistake(
            partial(_gradient_test, shapes=((3, 5, 3, 3), (5, 3, 2, 2), (4, 4, 3, 3))),
            "It matches a test whose heads all have Dk = Dv: a scale by the wrong width shows only when the "
            "two widths differ",
            detect=_on(_backward_scaled_by_dv),
        ),
        Mistake(
            partial(_gradient_test, causal=(False,)),
            "It matches a test that never sets is_causal=True: try the causal mask too",
            detect=_on(_backward_ignoring_the_mask),
        ),
        Mistake(
            partial(_gradient_test, shapes=_SQUARE_SHAPES),
            "It matches a test that tries the causal mask only with T = S, where the upper-left and lower-right "
            "diagonals coincide: try T != S",
            detect=_on(_backward_aligned_upper_left),
        ),
        Mistake(
            partial(_gradient_test, shapes=((3, 5, 4, 2), *_SQUARE_SHAPES)),
            "It matches a test in which every query sees some key: with is_causal and T > S, the first T - S "
            "queries see none, and their gradients must be 0, not NaN. (A NaN also slips through "
            "(abs(a - b) > tol).any(), which is False for NaN; np.allclose is not fooled)",
            detect=_on(_backward_nan_for_blocked_queries),
        ),
    ),
    float32=False,  # the answer is a verdict; the test chooses its own inputs
    passes="the right verdict",
)


def check_gradient_test(test: Callable[..., Any]) -> CheckResult:
    """Check ``test(backward) -> bool``: whether ``backward`` computes one head's attention gradients.

    ``backward(grad_out, q, k, v, is_causal=False) -> (grad_q, grad_k, grad_v)``
    takes one head, ``q`` (T, Dk), ``k`` (S, Dk), ``v`` (S, Dv) and
    ``grad_out`` (T, Dv), with the scale 1/sqrt(Dk) and, under ``is_causal``,
    the package's causal mask (aligned at the lower right: query i sees keys
    0 ... S - T + i). The test must say True for any correct backward and False
    for a wrong one, for every T, S, Dk, Dv >= 1. See chapter 10, exercise 2.
    """
    return GRADIENT_TEST.check(test)


# --- Exercise 3: one causal tile of the recomputing backward -----------------------------------


def _tile_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for T, S, Dk, Dv, rows, cols, what in [
        (6, 6, 4, 4, (2, 4), (2, 4), "a tile on the diagonal, T = S = 6"),
        (5, 8, 3, 2, (1, 4), (3, 6), "T = 5 queries after 3 cached keys: the tile straddles the diagonal"),
        (7, 4, 2, 3, (0, 4), (0, 2), "T = 7 queries, S = 4 keys: queries 0-2 see no key"),
        (6, 6, 4, 4, (4, 6), (0, 3), "a tile below the diagonal: nothing masked"),
        (6, 6, 4, 4, (0, 2), (3, 6), "a tile above the diagonal: everything masked"),
        (1, 5, 4, 2, (0, 1), (2, 5), "one query (T = 1) after 4 cached keys"),
        (4, 4, 8, 3, (1, 4), (3, 4), "a tile of one key"),
        (6, 9, 4, 4, (3, 6), (4, 8), "float32, T = 6, S = 9"),
    ]:
        q, k, v = rng.normal(size=(T, Dk)), rng.normal(size=(S, Dk)), rng.normal(size=(S, Dv))
        grad_out = rng.normal(size=(T, Dv))
        if what.startswith("float32"):
            q, k, v, grad_out = (a.astype(np.float32) for a in (q, k, v, grad_out))
        out, lse = _causal_forward(q, k, v)
        if what.startswith("float32"):
            out, lse = out.astype(np.float32), lse.astype(np.float32)
        cases.append((what, (grad_out, q, k, v, out, lse, slice(*rows), slice(*cols))))
    return cases


def _causal_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The causal forward's output and log-sum-exp per query (-inf for a query that sees no key), in float64."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    T, S = q.shape[0], k.shape[0]
    scores = np.where(np.arange(S) <= np.arange(T)[:, None] + S - T, q @ k.T / np.sqrt(q.shape[1]), -np.inf)
    with np.errstate(divide="ignore"):
        top = np.max(scores, axis=-1, keepdims=True)
        shift = np.where(np.isneginf(top), 0.0, top)
        total = np.exp(scores - shift).sum(axis=-1, keepdims=True)
        lse = (shift + np.log(total))[:, 0]  # log 0 = -inf where no key is seen
    weights = np.exp(scores - np.where(np.isneginf(lse), 0.0, lse)[:, None])
    return weights @ v, lse


def _tile_backward(
    grad_out: np.ndarray,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    out: np.ndarray,
    lse: np.ndarray,
    rows: slice,
    cols: slice,
    slip: str = "",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tile's share of (dQ[rows], dK[cols], dV[cols]), in float64; ``slip`` computes a known wrong answer."""
    grad_out, q, k, v, out, lse = (np.asarray(a, dtype=np.float64) for a in (grad_out, q, k, v, out, lse))
    T, S = q.shape[0], k.shape[0]
    scale = 1.0 if slip == "no scale" else 1 / np.sqrt(q.shape[1])
    q_rows, k_cols, v_cols, grad_rows = q[rows], k[cols], v[cols], grad_out[rows]
    i, j = np.arange(T)[rows][:, None], np.arange(S)[cols]  # the tile's query rows and key columns
    if slip == "tile positions":
        i, j = i - rows.start, j - cols.start
    diagonal = 0 if slip in ("upper left", "tile positions") else S - T  # query i sees keys 0 ... i + diagonal
    if slip == "" and cols.start > rows.stop - 1 + diagonal:  # above the diagonal: nothing to compute
        return np.zeros_like(q_rows), np.zeros_like(k_cols), np.zeros_like(v_cols)
    scores = scale * q_rows @ k_cols.T
    if slip != "no mask":
        scores = np.where(j <= i + diagonal, scores, -np.inf)
    if slip == "tile softmax":
        with np.errstate(invalid="ignore"):
            top = scores.max(axis=-1, keepdims=True)
            p = np.exp(scores - np.where(np.isneginf(top), 0.0, top))
            p /= np.maximum(p.sum(axis=-1, keepdims=True), np.finfo(float).tiny)
    else:
        p = np.exp(scores - np.where(np.isneginf(lse[rows]), 0.0, lse[rows])[:, None])  # the exact weights
    grad_p = grad_rows @ v_cols.T
    if slip == "no delta":
        delta = 0.0
    elif slip == "tile delta":
        delta = (p * grad_p).sum(axis=-1, keepdims=True)
    else:
        delta = (grad_rows * out[rows]).sum(axis=-1, keepdims=True)  # the whole row's, from the output
    grad_s = p * (grad_p - delta)
    grad_k = scale * (p if slip == "P for dK" else grad_s).T @ q_rows
    return scale * grad_s @ k_cols, grad_k, p.T @ grad_rows


_TILE_NAN_HINT = (
    "a query that sees no key has lse = -inf and scores of -inf, and e^(-inf - (-inf)) is NaN: its weights "
    "are 0, so replace its lse by 0 (or any finite number) before the exponential"
)

_TILE_SLIPS = {  # the slip that computes a wrong answer: the hint it earns
    "no mask": "It matches leaving out the causal mask: in this tile key j is visible to query i only when "
    "j <= S - T + i; set the other scores to -inf before the exponential",
    "upper left": "It matches the diagonal at the upper left (key j visible when j <= i): the package aligns "
    "it at the lower right, where query i sits at position S - T + i",
    "tile positions": "It matches a mask built from positions inside the tile: the tile's rows start at "
    "rows.start and its columns at cols.start; compare the global positions",
    "tile softmax": "It matches a softmax over this tile alone; the tile's weights are exp(scores - lse), "
    "normalised over every key by the forward's log-sum-exp",
    "tile delta": "It matches delta summed over this tile's keys only: delta = rowsum(dP * P) runs over the "
    "whole row, which is rowsum(dO * O), from out",
    "no delta": "It matches dS = P * dP: subtract each row's delta = rowsum(dO * O) first",
    "P for dK": "It matches dK from P instead of dS: the keys enter through the scores, so dK = s dS^T Q, "
    "as dQ = s dS K",
    "no scale": "It matches leaving out the scale: the scores are s Q K^T with s = 1/sqrt(Dk), so dQ and dK "
    "carry s, inside the exponential too",
}

CAUSAL_TILE = Exercise(
    name="a causal tile of the recomputing backward",
    kind="extend",
    concept="the recomputing backward under a causal mask: skip, mask, align at the lower right",
    chapter=10,
    number=3,
    cases=_tile_cases,
    reference=_tile_backward,
    compare=lambda got, expected: _compare_named_arrays(
        got,
        expected,
        names=("grad_q part", "grad_k part", "grad_v part"),
        what="a tuple of three, (grad_q part, grad_k part, grad_v part)",
        nan_hint=_TILE_NAN_HINT,
    ),
    mistakes=tuple(Mistake(partial(_tile_backward, slip=slip), hint) for slip, hint in _TILE_SLIPS.items()),
)


def check_causal_tile_backward(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(grad_out, q, k, v, out, lse, rows, cols) -> (grad_q part, grad_k part, grad_v part)``.

    One (query block, key block) tile of the recomputing backward under the
    package's causal mask (lower right: query i sees keys 0 ... S - T + i).
    ``q`` (T, Dk), ``k`` (S, Dk), ``v`` (S, Dv), ``grad_out`` and ``out``
    (T, Dv) and ``lse`` (T,) are whole, from the causal forward; ``rows`` and
    ``cols`` are slices. The answer is what the tile adds to ``grad_q[rows]``,
    ``grad_k[cols]`` and ``grad_v[cols]``, shapes (rows, Dk), (cols, Dk),
    (cols, Dv); zeros for a tile the mask blanks. See chapter 10, exercise 3.
    """
    return CAUSAL_TILE.check(fn)
