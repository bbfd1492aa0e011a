"""Checkers for the chapters' exercises.

Each ``check_*`` function calls the learner's function on a fixed set of cases
(the chapter's own example plus seeded random inputs), compares the answer with
the package's reference implementation, and returns a :class:`CheckResult`.
A notebook cell that ends with the check shows ``PASS ...``, ``FAIL ...`` with
the first case that went wrong and why, or ``TODO ...`` while the function
still raises ``NotImplementedError``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .attention import scaled_dot_product_attention, self_attention
from .encoder import EncoderParams, encoder_block, layer_norm, relu
from .multihead import merge_heads, multihead_attention, split_heads
from .masks import causal_mask
from .scores import softmax
from .vision import conv_self_attention_forward, patchify

__all__ = [
    "CheckResult",
    "check_single_query",
    "check_attention_matrix",
    "check_softmax_temperature",
    "check_stable_softmax",
    "check_single_head",
    "check_head_parameter_count",
    "check_batched_scores",
    "check_additive_mask",
    "check_self_attention",
    "check_split_heads",
    "check_merge_heads",
    "check_multihead",
    "check_rms_norm",
    "check_pre_norm_block",
    "check_encoder_parameter_count",
    "check_patchify",
    "check_conv_self_attention",
    "check_t2t_parameter_count",
    "check_online_softmax_step",
    "check_score_memory",
]


@dataclass(frozen=True, repr=False)
class CheckResult:
    """Outcome of an exercise check; truthy when the check passed.

    Attributes
    ----------
    exercise : str
        Which exercise was checked.
    status : str
        ``"PASS"`` (every case matched the reference), ``"FAIL"`` (a case did
        not), or ``"TODO"`` (the function is still the stub).
    detail : str
        What was checked, or the first case that failed and why.
    """

    exercise: str
    status: str
    detail: str

    @property
    def passed(self) -> bool:
        return self.status == "PASS"

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return f"{self.status} {self.exercise}: {self.detail}"


@dataclass(frozen=True)
class _Case:
    description: str
    args: tuple[Any, ...]
    expected: Any


# A known mistake: a function computing the wrong answer it makes, and what to say.
Mistake = tuple[Callable[..., Any], str]


def _run(
    exercise: str,
    candidate: Any,
    cases: Sequence[_Case],
    compare: Callable[[Any, Any], str | None],
    mistakes: Sequence[Mistake] = (),
) -> CheckResult:
    """Run ``candidate`` on every case; stop at the first mismatch.

    When an answer is wrong and equals what one of ``mistakes`` computes, the
    message names that mistake.
    """
    if not callable(candidate):
        raise ValueError(f"expected the function to check for {exercise}; got {type(candidate).__name__}")
    for number, case in enumerate(cases, start=1):
        try:
            got = candidate(*case.args)
        except NotImplementedError as exc:
            raised_in = _innermost_function(exc)
            if raised_in is None or raised_in is getattr(candidate, "__code__", None):
                return CheckResult(exercise, "TODO", "not implemented yet")
            return CheckResult(exercise, "FAIL", (
                f"case {number} ({case.description}): {raised_in.co_name}(), which your function calls, "
                "raised NotImplementedError; finish that exercise first"
            ))
        except Exception as exc:  # the learner's code may raise anything; report it
            hint = _hint_for_error(exc)
            detail = f"case {number} ({case.description}) raised {type(exc).__name__}: {exc}"
            return CheckResult(exercise, "FAIL", detail if hint is None else f"{detail}. Hint: {hint}")
        problem = compare(got, case.expected)
        if problem is not None:
            for mistake, hint in mistakes:
                if compare(got, mistake(*case.args)) is None:
                    problem = f"{problem}. {hint}"
                    break
            return CheckResult(exercise, "FAIL", f"case {number} ({case.description}): {problem}")
    return CheckResult(exercise, "PASS", f"matches the reference on all {len(cases)} cases")


def _innermost_function(exc: BaseException) -> Any:
    """The code object of the frame that raised ``exc``."""
    tb = exc.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code


def _hint_for_error(exc: Exception) -> str | None:
    """A pointer to the usual cause of an error a learner's attention code raises."""
    text = str(exc)
    if isinstance(exc, ValueError) and "matmul" in text:
        return "on a (B, T, Dk) array, .T reverses all three axes; swap only the last two with np.swapaxes(k, -1, -2)"
    if isinstance(exc, ValueError) and "axes don't match array" in text:
        return "transpose(0, 2, 1) assumes exactly three axes; np.swapaxes(k, -1, -2) works for any number"
    if isinstance(exc, ValueError) and "not enough values to unpack" in text:
        return "the function must also work without batch axes: unpack with *batch, T, D = x.shape"
    if isinstance(exc, ValueError) and "inhomogeneous" in text:
        return "a function you called returned a tuple; multihead_attention returns (y, weights), so take y"
    return None


# Loose enough for an answer computed in float32, tight enough to catch a wrong
# scale, axis or transpose (those are off by 1e-2 or more).
RTOL, ATOL = 1e-5, 1e-6


def _compare_array(got: Any, expected: np.ndarray, name: str) -> str | None:
    if isinstance(got, tuple):
        return f"the {name} should be one array; got a tuple of {len(got)} (return only the {name})"
    try:
        got = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        return f"the {name} should be an array of numbers; got {type(got).__name__}"
    plural = name.endswith("s")  # "the weights do", "the output does"
    if got.shape != expected.shape:
        return f"the {name} should have shape {expected.shape}; got {got.shape}"
    if not np.isfinite(got).all():
        return (
            f"the {name} {'contain' if plural else 'contains'} NaN or inf: did an exponential overflow to inf, or did a whole "
            "row underflow to 0 so that 0/0 = NaN? Subtract each row's own maximum"
        )
    if not np.allclose(got, expected, rtol=RTOL, atol=ATOL):
        worst = float(np.max(np.abs(got - expected)))
        return f"the {name} {'do' if plural else 'does'} not match the reference; the largest difference is {worst:.3g}"
    return None


def _compare_output_and_weights(got: Any, expected: tuple[np.ndarray, np.ndarray]) -> str | None:
    """Compare a returned ``(output, weights)`` pair, weights first: they are nearer the cause."""
    if not isinstance(got, tuple) or len(got) != 2:
        return f"should return a pair (output, weights); got {type(got).__name__}"
    out, weights = (np.shape(value) for value in got)
    if out == expected[1].shape and weights == expected[0].shape and out != weights:
        return "the pair looks swapped: return (output, weights), output first"
    return _compare_array(got[1], expected[1], "weights") or _compare_array(got[0], expected[0], "output")


def _compare_single(name: str) -> Callable[[Any, Any], str | None]:
    return lambda got, expected: _compare_array(got, expected, name)


def _word_example() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The four one-hot-ish words and integer W_Q, W_K, W_V of chapter 1."""
    words = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]])
    legacy = np.random.RandomState(42)  # the same stream as np.random.seed(42)
    w_q, w_k, w_v = (legacy.randint(3, size=(3, 3)) for _ in range(3))
    return words, w_q, w_k, w_v


# --- Chapter 1 -----------------------------------------------------------------


def check_single_query(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(query, keys, values) -> (output, weights)`` for one query.

    ``query`` has shape (Dk,), ``keys`` (S, Dk) and ``values`` (S, Dv); the
    answer is the output vector (Dv,) and the weights (S,), scaled by
    ``1/sqrt(Dk)``. See chapter 1, exercise 1.
    """
    words, w_q, w_k, w_v = _word_example()
    rng = np.random.default_rng(101)
    cases = []
    for index in range(4):
        query, keys, values = words[index] @ w_q, words @ w_k, words @ w_v
        cases.append((f"word example, query {index + 1}", query, keys, values))
    for S, Dk, Dv in [(1, 3, 2), (5, 8, 4), (7, 2, 3)]:
        cases.append((f"random, S={S}, Dk={Dk}, Dv={Dv}", rng.normal(size=Dk), rng.normal(size=(S, Dk)), rng.normal(size=(S, Dv))))
    built = []
    for description, query, keys, values in cases:
        out, weights = scaled_dot_product_attention(query[None, :], keys, values)
        built.append(_Case(description, (query, keys, values), (out[0], weights[0])))
    unscaled = (
        lambda query, keys, values: tuple(a[0] for a in scaled_dot_product_attention(query[None, :], keys, values, scale=1.0)),
        "It matches unscaled scores: divide each score by sqrt(Dk)",
    )
    return _run("single-query attention", fn, built, _compare_output_and_weights, [unscaled])


def check_attention_matrix(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(words, w_q, w_k, w_v) -> (output, weights)`` in matrix form.

    ``words`` has shape (T, D) and each weight (D, Dk) or (D, Dv); the answer is
    the output (T, Dv) and the weights (T, T). See chapter 1, exercise 2.
    """
    words, w_q, w_k, w_v = _word_example()
    rng = np.random.default_rng(102)
    cases = [("word example", words, w_q, w_k, w_v)]
    for T, D, Dk, Dv in [(1, 3, 3, 3), (6, 4, 2, 5), (9, 8, 8, 8)]:
        cases.append((
            f"random, T={T}, D={D}, Dk={Dk}, Dv={Dv}",
            rng.normal(size=(T, D)), rng.normal(size=(D, Dk)), rng.normal(size=(D, Dk)), rng.normal(size=(D, Dv)),
        ))
    built = [
        _Case(description, (x, wq, wk, wv), scaled_dot_product_attention(x @ wq, x @ wk, x @ wv))
        for description, x, wq, wk, wv in cases
    ]
    def over_queries(x, wq, wk, wv):
        q, k, v = x @ wq, x @ wk, x @ wv
        weights = softmax(q @ k.T / np.sqrt(q.shape[-1]), axis=0)
        return weights @ v, weights

    mistakes = [
        (lambda x, wq, wk, wv: scaled_dot_product_attention(x @ wq, x @ wk, x @ wv, scale=1.0),
         "It matches unscaled scores: divide Q K^T by sqrt(Dk)"),
        (over_queries, "It matches a softmax over the queries (axis 0); each row, one query, must sum to 1 over the keys"),
    ]
    return _run("attention in matrix form", fn, built, _compare_output_and_weights, mistakes)


def check_softmax_temperature(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(scores, tau)``: a softmax over the last axis of ``scores / tau``.

    See chapter 1, exercise 3.
    """
    words, w_q, w_k, _ = _word_example()
    word_scores = (words @ w_q) @ (words @ w_k).T
    rng = np.random.default_rng(103)
    cases = [("word scores, tau=sqrt(3)", word_scores, float(np.sqrt(3.0))), ("word scores, tau=1", word_scores, 1.0)]
    for shape, tau in [((5,), 0.5), ((3, 4), 2.0), ((2, 3, 6), 10.0)]:
        cases.append((f"random {shape}, tau={tau}", rng.normal(scale=3.0, size=shape), tau))
    built = [_Case(d, (s, tau), softmax(s / tau, axis=-1)) for d, s, tau in cases]
    times_tau = (lambda scores, tau: softmax(np.asarray(scores) * tau, axis=-1), "It matches multiplying by tau; divide the scores by tau")
    return _run("softmax with temperature", fn, built, _compare_single("weights"), [times_tau])


# --- Chapter 2 -----------------------------------------------------------------


def check_stable_softmax(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x)``: a softmax over the last axis that survives huge scores.

    The cases include scores around +-1e4 in float64 and in the hundreds in
    float32, where a softmax that does not subtract the maximum overflows.
    See chapter 2, exercise 1.
    """
    rng = np.random.default_rng(201)
    cases = [
        ("small scores", rng.normal(size=(3, 5))),
        ("scores around +1e4", 1e4 + rng.normal(size=(4, 6))),
        ("scores around -1e4", -1e4 + rng.normal(size=(4, 6))),
        ("float32 scores in the hundreds", (300.0 * rng.normal(size=(2, 3, 7))).astype(np.float32)),
        ("a single score per row", rng.normal(size=(5, 1))),
    ]
    built = [_Case(d, (x,), softmax(x, axis=-1)) for d, x in cases]

    def compare(got: Any, expected: np.ndarray) -> str | None:
        if expected.dtype == np.float32 and getattr(got, "dtype", None) != np.float32:
            return f"float32 scores should give float32 weights; got {getattr(got, 'dtype', type(got).__name__)}"
        return _compare_array(got, expected, "weights")

    return _run("stable softmax", fn, built, compare)


def check_single_head(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, w_q, w_k, w_v, w_o) -> output`` for one attention head.

    ``x`` is (B, T, D); ``w_q``, ``w_k``, ``w_v`` are (D, Dk) and ``w_o`` is
    (Dk, D); the output is (B, T, D), with scores scaled by ``1/sqrt(Dk)``.
    See chapter 2, exercise 2.
    """
    rng = np.random.default_rng(202)
    built = []
    for B, T, D, Dk in [(1, 1, 4, 2), (2, 5, 6, 3), (3, 9, 12, 4)]:
        x = rng.normal(size=(B, T, D))
        w_q, w_k, w_v = (rng.normal(scale=D ** -0.5, size=(D, Dk)) for _ in range(3))
        w_o = rng.normal(scale=Dk ** -0.5, size=(Dk, D))
        out, _ = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)
        built.append(_Case(f"B={B}, T={T}, D={D}, Dk={Dk}", (x, w_q, w_k, w_v, w_o), out @ w_o))
    by_model_width = (
        lambda x, w_q, w_k, w_v, w_o: scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, scale=x.shape[-1] ** -0.5)[0] @ w_o,
        "It matches scaling by 1/sqrt(D), the model width; scale by 1/sqrt(Dk), the width of the vectors being dotted",
    )
    return _run("single head", fn, built, _compare_single("output"), [by_model_width])


def check_head_parameter_count(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(d_model, d_k) -> int``: the weights in W_q, W_k, W_v and W_o.

    No biases, as in chapter 2. See chapter 2, exercise 3.
    """
    cases = [(768, 64), (512, 64), (3, 3), (10, 7)]

    def compare(got: Any, expected: int) -> str | None:
        if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, np.integer)):
            return f"should return an integer; got {type(got).__name__}"
        if got != expected:
            return f"got {int(got)}, which is not the number of entries in W_q, W_k, W_v and W_o"
        return None

    built = [_Case(f"d_model={d}, d_k={k}", (d, k), 4 * d * k) for d, k in cases]
    return _run("parameter count", fn, built, compare)


# --- Chapter 3 -----------------------------------------------------------------


def check_batched_scores(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(q, k) -> scores``: ``q K^T / sqrt(Dk)`` over any leading batch axes.

    ``q`` is (..., T, Dk) and ``k`` is (..., S, Dk), with batch axes that
    broadcast; the scores are (..., T, S). See chapter 3, exercise 1.
    """
    rng = np.random.default_rng(301)
    built = []
    for q_shape, k_shape in [((4, 3), (6, 3)), ((2, 5, 4), (2, 5, 4)), ((2, 3, 4, 8), (2, 3, 7, 8)), ((2, 3, 4, 8), (3, 4, 8))]:
        q, k = rng.normal(size=q_shape), rng.normal(size=k_shape)
        expected = np.matmul(q, np.swapaxes(k, -1, -2)) / np.sqrt(q.shape[-1])
        built.append(_Case(f"q {q_shape}, k {k_shape}", (q, k), expected))
    unscaled = (lambda q, k: np.matmul(q, np.swapaxes(k, -1, -2)), "It matches the unscaled scores: divide by sqrt(Dk)")
    return _run("batched scores", fn, built, _compare_single("scores"), [unscaled])


def check_additive_mask(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(blocked) -> mask``: turn an ``nn.MultiheadAttention`` boolean mask
    (True = blocked) into an additive float mask (0 = keep, -inf = blocked).

    See chapter 3, exercise 2.
    """
    rng = np.random.default_rng(302)
    causal_blocked = np.triu(np.ones((5, 5), dtype=bool), k=1)
    cases = [("causal, T=5", causal_blocked), ("nothing blocked", np.zeros((3, 4), dtype=bool)),
             ("random, batched (2, 4, 6)", rng.random((2, 4, 6)) < 0.5)]
    built = [_Case(d, (m,), np.where(m, -np.inf, 0.0)) for d, m in cases]

    def compare(got: Any, expected: np.ndarray) -> str | None:
        got = np.asarray(got)
        if got.shape != expected.shape:
            return f"the mask should have shape {expected.shape}; got {got.shape}"
        if not np.issubdtype(got.dtype, np.floating):
            return f"an additive mask must be floating (it holds -inf); got dtype {got.dtype}"
        if not np.array_equal(got, expected):
            if np.array_equal(got, np.where(expected == 0, -np.inf, 0.0)):
                return "the polarity is flipped: in the input, True means blocked, which becomes -inf"
            return "the mask should be 0 where the input is False and -inf where it is True"
        return None

    return _run("additive mask", fn, built, compare)


def check_self_attention(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, w_qkv, w_out, mask) -> (y, weights)``, batched or not.

    ``x`` is (..., T, D), ``w_qkv`` (D, 3D) in [q | k | v] order, ``w_out``
    (D, D), and ``mask`` is None or an additive float mask (T, T).
    See chapter 3, exercise 3.
    """
    rng = np.random.default_rng(303)
    built = []
    for shape, masked in [((5, 4), False), ((5, 4), True), ((3, 6, 8), True), ((2, 2, 4, 4), True), ((1, 1, 6), False)]:
        D, T = shape[-1], shape[-2]
        x, w_qkv, w_out = rng.normal(size=shape), rng.normal(size=(D, 3 * D)) / np.sqrt(D), rng.normal(size=(D, D))
        mask = causal_mask(T) if masked else None
        y, weights = self_attention(x, w_qkv, w_out, mask=mask)
        built.append(_Case(f"x {shape}, {'causal mask' if masked else 'no mask'}", (x, w_qkv, w_out, mask), (y, weights)))
    def with_scale(scale_of: Callable[[int], float]) -> Callable[..., Any]:
        def layer(x, w_qkv, w_out, mask):
            q, k, v = np.split(x @ w_qkv, 3, axis=-1)
            out, weights = scaled_dot_product_attention(q, k, v, mask=mask, scale=scale_of(x.shape[-1]))
            return out @ w_out, weights
        return layer

    mistakes = [
        (with_scale(lambda D: 1.0), "It matches unscaled scores: divide Q K^T by sqrt(D)"),
        (with_scale(lambda D: 1.0 / D), "It matches dividing by D; divide by sqrt(D)"),
        (lambda x, w_qkv, w_out, mask: self_attention(x, w_qkv, w_out),
         "It matches the output with the mask left out: add the mask to the scores before the softmax"),
    ]
    return _run("self-attention", fn, built, _compare_output_and_weights, mistakes)


# --- Chapter 4 -----------------------------------------------------------------


def check_split_heads(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, num_heads)``: (..., T, D) -> (..., H, T, Dh), consecutive columns per head.

    See chapter 4, exercise 1.
    """
    rng = np.random.default_rng(401)
    cases = [((4, 8), 2), ((2, 5, 12), 3), ((2, 3, 4, 16), 4), ((3, 6), 1), ((2, 3, 6), 6)]
    built = []
    for shape, H in cases:
        x = rng.normal(size=shape)
        built.append(_Case(f"x {shape}, H={H}", (x, H), split_heads(x, H)))

    reshape_only = (
        lambda x, H: x.reshape(*x.shape[:-2], H, x.shape[-2], x.shape[-1] // H),
        "It matches a reshape alone, which mixes tokens and columns: reshape to (..., T, H, Dh), then swap T and H",
    )
    return _run("split heads", fn, built, _compare_single("heads"), [reshape_only])


def check_merge_heads(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x)``: (..., H, T, Dh) -> (..., T, H*Dh), the inverse of splitting.

    See chapter 4, exercise 2.
    """
    rng = np.random.default_rng(402)
    built = []
    for shape in [(2, 4, 3), (2, 3, 5, 4), (2, 2, 4, 3, 2), (1, 6, 1)]:
        x = rng.normal(size=shape)
        built.append(_Case(f"x {shape}", (x,), merge_heads(x)))
    reshape_only = (
        lambda x: x.reshape(*x.shape[:-3], x.shape[-2], -1),
        "It matches a reshape alone; first swap the head and token axes back to (..., T, H, Dh)",
    )
    return _run("merge heads", fn, built, _compare_single("merged output"), [reshape_only])


def check_multihead(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, w_qkv, w_out, num_heads) -> (y, weights)`` without biases or mask.

    ``weights`` has shape (..., H, T, T); the scale is ``1/sqrt(Dh)``.
    See chapter 4, exercise 3.
    """
    rng = np.random.default_rng(403)
    built = []
    for shape, H in [((5, 8), 2), ((2, 6, 12), 3), ((2, 4, 16), 4), ((3, 6), 1)]:
        D = shape[-1]
        x, w_qkv, w_out = rng.normal(size=shape), rng.normal(size=(D, 3 * D)) / np.sqrt(D), rng.normal(size=(D, D))
        built.append(_Case(f"x {shape}, H={H}", (x, w_qkv, w_out, H), multihead_attention(x, w_qkv, w_out, H)))
    def by_model_width(x, w_qkv, w_out, H):
        q, k, v = (split_heads(a, H) for a in np.split(x @ w_qkv, 3, axis=-1))
        out, weights = scaled_dot_product_attention(q, k, v, scale=x.shape[-1] ** -0.5)
        return merge_heads(out) @ w_out, weights

    mistakes = [(by_model_width, "It matches a scale of 1/sqrt(D); each head scales by 1/sqrt(Dh), its own width")]
    return _run("multi-head attention", fn, built, _compare_output_and_weights, mistakes)


# --- Chapter 5 -----------------------------------------------------------------


def check_rms_norm(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, weight, eps)``: RMSNorm, ``x / sqrt(mean(x**2) + eps) * weight`` over the last axis.

    See chapter 5, exercise 1.
    """
    rng = np.random.default_rng(501)
    built = []
    for shape, offset, eps in [((4, 6), 0.0, 1e-5), ((2, 3, 8), 3.0, 1e-6), ((2, 16), 0.0, 1e-2), ((3, 4), 0.0, 0.5)]:
        x = offset + rng.normal(size=shape) * (0.05 if eps >= 1e-2 else 2.0)  # small values make eps matter
        weight = 1.0 + 0.3 * rng.normal(size=shape[-1])
        expected = x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * weight
        built.append(_Case(f"x {shape}, eps={eps:g}", (x, weight, eps), expected))
    mistakes = [
        (lambda x, w, eps: layer_norm(x, w, None, eps), "It matches LayerNorm: RMSNorm does not subtract the mean"),
        (lambda x, w, eps: x / (np.sqrt(np.mean(x**2, axis=-1, keepdims=True)) + eps) * w,
         "It matches adding eps outside the square root; add it to the mean square, inside"),
        (lambda x, w, eps: x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + 1e-5) * w,
         "It matches a fixed eps of 1e-5; use the eps argument"),
        (lambda x, w, eps: x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps),
         "It matches leaving out the weight: multiply by it at the end"),
    ]
    return _run("RMSNorm", fn, built, _compare_single("output"), mistakes)


def _random_encoder_params(rng: np.random.Generator, D: int, F: int) -> EncoderParams:
    return EncoderParams.from_arrays(
        w_qkv=rng.normal(size=(D, 3 * D)) / np.sqrt(D), b_qkv=0.3 * rng.normal(size=3 * D),
        w_out=rng.normal(size=(D, D)) / np.sqrt(D), b_out=0.3 * rng.normal(size=D),
        w_ff1=rng.normal(size=(D, F)) / np.sqrt(D), b_ff1=0.3 * rng.normal(size=F),
        w_ff2=rng.normal(size=(F, D)) / np.sqrt(F), b_ff2=0.3 * rng.normal(size=D),
        norm1_weight=1 + 0.3 * rng.normal(size=D), norm1_bias=0.3 * rng.normal(size=D),
        norm2_weight=1 + 0.3 * rng.normal(size=D), norm2_bias=0.3 * rng.normal(size=D),
    )


def check_pre_norm_block(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, params, num_heads, mask)``: the pre-norm encoder block with ReLU.

    ``params`` is an :class:`~selfattention.EncoderParams`. You may use
    ``multihead_attention`` and ``layer_norm``. See chapter 5, exercise 2.
    """
    rng = np.random.default_rng(502)
    built = []
    for shape, H, F, masked in [((5, 8), 2, 16, True), ((2, 4, 8), 4, 8, False), ((2, 6, 12), 3, 24, True)]:
        args = (rng.normal(size=shape), _random_encoder_params(rng, shape[-1], F), H, causal_mask(shape[-2]) if masked else None)
        built.append(_Case(f"x {shape}, H={H}, {'causal mask' if masked else 'no mask'}", args, encoder_block(*args, norm_first=True)))

    def no_second_residual(x, p, num_heads, mask):
        attn, _ = multihead_attention(layer_norm(x, p.norm1_weight, p.norm1_bias), p.w_qkv, p.w_out, num_heads, mask=mask, b_qkv=p.b_qkv, b_out=p.b_out)
        h = x + attn
        return relu(layer_norm(h, p.norm2_weight, p.norm2_bias) @ p.w_ff1 + p.b_ff1) @ p.w_ff2 + p.b_ff2

    mistakes = [
        (lambda x, p, num_heads, mask: encoder_block(x, p, num_heads, mask=mask),
         "It matches the post-norm block; pre-norm applies each LayerNorm to the input of its sub-layer, inside the residual branch"),
        (lambda x, p, num_heads, mask: encoder_block(x, p, num_heads, norm_first=True),
         "It matches the output with the mask left out: pass mask to the attention"),
        (no_second_residual, "It matches leaving out the second residual: add h to the feed-forward output"),
    ]
    return _run("pre-norm block", fn, built, _compare_single("output"), mistakes)


def check_encoder_parameter_count(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(d_model, dim_feedforward) -> int``: every parameter of one encoder block.

    See chapter 5, exercise 3.
    """
    cases = [(64, 128), (512, 2048), (768, 3072), (4, 6)]

    def count(D: int, F: int) -> int:
        return (4 * D * D + 4 * D) + (D * F + F + F * D + D) + 4 * D

    def compare(got: Any, expected: tuple[int, int, int]) -> str | None:
        total, D, F = expected
        if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, np.integer)):
            return f"should return an integer; got {type(got).__name__}"
        if got == total - 4 * D:
            return f"got {int(got)}: the two LayerNorms are missing (a weight and a bias of D values each)"
        if got == total - (4 * D + F + D + 4 * D):
            return f"got {int(got)}: the biases are missing (attention, feed-forward and LayerNorm)"
        if got != total:
            return f"got {int(got)}, which is not the number of parameters of nn.TransformerEncoderLayer"
        return None

    built = [_Case(f"d_model={D}, dim_feedforward={F}", (D, F), (count(D, F), D, F)) for D, F in cases]
    return _run("encoder parameter count", fn, built, compare)


# --- Chapter 6 -----------------------------------------------------------------


def check_patchify(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(images, patch_size)``: (B, C, H, W) -> (B, N, C*p*p), patches row by row,
    each flattened in (channel, row, column) order.

    See chapter 6, exercise 1.
    """
    rng = np.random.default_rng(601)
    built = []
    for shape, p in [((1, 3, 8, 8), 4), ((2, 3, 6, 9), 3), ((2, 1, 4, 4), 2), ((1, 2, 4, 6), 1)]:
        images = rng.normal(size=shape)
        built.append(_Case(f"images {shape}, patch_size={p}", (images, p), patchify(images, p)))

    def channels_last(images, p):
        B, C, H, W = images.shape
        return images.reshape(B, C, H // p, p, W // p, p).transpose(0, 2, 4, 3, 5, 1).reshape(B, -1, p * p * C)

    mistakes = [
        (lambda images, p: images.reshape(images.shape[0], -1, images.shape[1] * p * p),
         "It matches a reshape alone, which does not cut square patches: split H and W into (rows, p) and (cols, p) first"),
        (channels_last, "It matches flattening each patch as (row, column, channel); flatten it as (channel, row, column), the order of a Conv2d weight"),
    ]
    return _run("patchify", fn, built, _compare_single("patches"), mistakes)


def check_conv_self_attention(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, state) -> out``: the SAGAN-style block in NumPy, output only.

    ``state`` holds ``q.weight`` (C/8, C, 1, 1), ``q.bias``, ``k.weight``,
    ``k.bias``, ``v.weight`` (C, C, 1, 1), ``v.bias`` and ``gamma`` (1,).
    See chapter 6, exercise 2.
    """
    rng = np.random.default_rng(602)
    built = []
    for B, C, H, W, gamma in [(1, 16, 3, 3, 0.5), (2, 32, 4, 5, 1.0), (1, 8, 2, 2, 0.7)]:
        state = {
            "q.weight": rng.normal(size=(C // 8, C, 1, 1)), "q.bias": rng.normal(size=C // 8),
            "k.weight": rng.normal(size=(C // 8, C, 1, 1)), "k.bias": rng.normal(size=C // 8),
            "v.weight": rng.normal(size=(C, C, 1, 1)) / np.sqrt(C), "v.bias": rng.normal(size=C),
            "gamma": np.array([gamma]),
        }
        x = rng.normal(size=(B, C, H, W))
        built.append(_Case(f"x {(B, C, H, W)}, gamma={gamma}", (x, state), conv_self_attention_forward(x, state)[0]))

    def without(change: str) -> Callable[..., Any]:
        def wrong(x, state):
            B, C, H, W = x.shape
            pixels = x.reshape(B, C, H * W).swapaxes(1, 2)
            q, k, v = (pixels @ state[f"{n}.weight"].reshape(state[f"{n}.weight"].shape[0], -1).T + state[f"{n}.bias"] for n in "qkv")
            scale = {"scale": 1.0, "sqrt_c": C ** -0.5}.get(change)
            out, _ = scaled_dot_product_attention(q, k, v, scale=scale)
            out = out.reshape(B, C, H, W) if change == "reshape" else out.swapaxes(1, 2).reshape(B, C, H, W)
            if change == "gamma":
                return out + x
            if change == "residual":
                return state["gamma"] * out
            return state["gamma"] * out + x
        return wrong

    mistakes = [
        (without("scale"), "It matches unscaled scores: divide by sqrt(C // 8), the width of the queries and keys"),
        (without("sqrt_c"), "It matches dividing by sqrt(C); the queries and keys have C // 8 channels, so divide by sqrt(C // 8)"),
        (without("gamma"), "It matches adding the attention without gamma: the output is gamma * attention + x"),
        (without("residual"), "It matches gamma * attention without the input: add x back"),
        (without("reshape"), "It matches reshaping (B, N, C) straight to (B, C, H, W); swap the pixel and channel axes first"),
    ]
    return _run("convolutional self-attention", fn, built, _compare_single("output"), mistakes)


def check_t2t_parameter_count(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(dim, chan, qkv_bias) -> int``: the parameters of a T2T attention module.

    See chapter 6, exercise 3.
    """
    cases = [(49, 64, False), (49, 64, True), (147, 64, False), (3, 4, True)]

    def count(dim: int, chan: int, qkv_bias: bool) -> int:
        return dim * chan * 3 + (3 * chan if qkv_bias else 0) + chan * chan + chan

    def compare(got: Any, expected: int) -> str | None:
        if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, np.integer)):
            return f"should return an integer; got {type(got).__name__}"
        chan = chan_of[expected]
        if got == expected - chan:
            return f"got {int(got)}: did you leave out proj's bias (chan values)?"
        if got in (expected - 3 * chan, expected + 3 * chan):
            return f"got {int(got)}: qkv has a bias of 3*chan values only when qkv_bias is True"
        if got != expected:
            return f"got {int(got)}, which is not the number of entries in qkv and proj"
        return None

    built = [_Case(f"dim={d}, chan={c}, qkv_bias={b}", (d, c, b), count(d, c, b)) for d, c, b in cases]
    chan_of = {count(d, c, b): c for d, c, b in cases}
    return _run("T2T parameter count", fn, built, compare)


# --- Chapter 7 -----------------------------------------------------------------


def _online_step(m, l, o, scores, values):
    new_m = np.maximum(m, scores.max(axis=-1, keepdims=True))
    correction = np.exp(m - new_m)
    e = np.exp(scores - new_m)
    return new_m, correction * l + e.sum(axis=-1, keepdims=True), correction * o + e @ values


def check_online_softmax_step(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(m, l, o, scores, values) -> (m, l, o)``: fold one block of keys in.

    ``m`` and ``l`` are (T, 1), ``o`` is (T, Dv), ``scores`` (T, block) and
    ``values`` (block, Dv). Scores are finite here. See chapter 7, exercise 1.
    """
    rng = np.random.default_rng(701)
    built = []
    for T, block, Dv, offset in [(1, 4, 2, 0.0), (5, 3, 4, 3.0), (6, 8, 3, -2.0)]:
        m = rng.normal(size=(T, 1))
        l = rng.uniform(1.0, 3.0, size=(T, 1))
        o = rng.normal(size=(T, Dv))
        scores, values = offset + 2 * rng.normal(size=(T, block)), rng.normal(size=(block, Dv))
        args = (m, l, o, scores, values)
        built.append(_Case(f"T={T}, block={block}, Dv={Dv}", args, _online_step(*args)))

    def compare(got: Any, expected: tuple[np.ndarray, np.ndarray, np.ndarray]) -> str | None:
        if not isinstance(got, tuple) or len(got) != 3:
            return f"should return a tuple (m, l, o); got {type(got).__name__}"
        for value, reference, name in zip(got, expected, ("new maximum m", "new sum l", "new output o")):
            problem = _compare_array(value, reference, name)
            if problem is not None:
                return problem
        return None

    def no_rescale(m, l, o, scores, values):
        new_m = np.maximum(m, scores.max(axis=-1, keepdims=True))
        e = np.exp(scores - new_m)
        return new_m, l + e.sum(axis=-1, keepdims=True), o + e @ values

    mistakes = [(no_rescale, "It matches adding the block without rescaling: multiply the old l and o by exp(m - m_new) first")]
    return _run("online softmax step", fn, built, compare, mistakes)


def check_score_memory(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(batch, heads, T, S, bytes_per_number) -> int``: the bytes of the score matrix.

    See chapter 7, exercise 2.
    """
    cases = [(32, 1, 1024, 1024, 4), (1, 12, 197, 197, 4), (8, 16, 4096, 4096, 2), (2, 3, 5, 7, 8)]

    def compare(got: Any, expected: int) -> str | None:
        if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, np.integer)):
            return f"should return an integer number of bytes; got {type(got).__name__}"
        if got != expected:
            return f"got {int(got):,} bytes; the scores are batch * heads * T * S numbers"
        return None

    built = [_Case(f"B={b}, H={h}, T={t}, S={s}, {n} bytes each", (b, h, t, s, n), b * h * t * s * n) for b, h, t, s, n in cases]
    return _run("score memory", fn, built, compare)
