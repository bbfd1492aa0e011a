"""Chapter 3 exercises: what a sequence-first module mixes, one mask from PyTorch's two, and keyless queries."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ._framework import (
    ATOL,
    ATOL_FLOAT32,
    RTOL,
    RTOL_FLOAT32,
    CaseList,
    CheckResult,
    Exercise,
    Mistake,
    answer_array,
    shaped_answer,
)

__all__ = ["check_seq_first_reads", "check_to_package_mask", "check_queries_without_keys"]


# --- Exercise 1: what a sequence-first module mixes ---------------------------------------------------


def _seq_first_cases(rng: np.random.Generator) -> CaseList:
    B, T = (int(n) for n in rng.integers(2, 6, size=2))
    return [
        (f"B={b}, T={t}, {'causal' if causal else 'no mask'}", (b, t, causal))
        for b, t, causal in [
            (3, 2, False),
            (4, 3, True),
            (3, 3, True),  # B = T: a (T, T) causal mask has the shape the module wants, so nothing complains
            (1, 4, True),  # one sequence
            (1, 4, False),
            (3, 1, False),  # one token per sequence
            (1, 1, True),
            (B, T, True),
        ]
    ]


def _reads(B: int, T: int, causal: bool, *, layout: str = "sequence first", mask: str = "") -> np.ndarray:
    """(B, T, B, T): True where output ``y[b, t]`` depends on input ``x[b2, t2]``.

    ``layout`` is how the module reads the (B, T, D) array: "sequence first"
    (axis 0 is time, axis 1 the batch) or "batch first". ``mask`` names a slip:
    "ignored" (no causal mask) or "reversed" (the later steps instead of the earlier).
    """
    b, t, b2, t2 = np.ix_(*(np.arange(n) for n in (B, T, B, T)))
    if layout == "batch first":
        same, step, now = b2 == b, t2, t
    else:  # the module's sequences are the columns t, its time steps the rows b
        same, step, now = t2 == t, b2, b
    if not causal or mask == "ignored":
        return np.broadcast_to(same, (B, T, B, T)).copy()
    return same & ((step >= now) if mask == "reversed" else (step <= now))


def _compare_reads(got: Any, expected: np.ndarray) -> str | None:
    answer, problem = shaped_answer(got, expected, "answer", shape_note=" (B, T, B, T)")
    if problem:
        return problem
    if answer.dtype != np.bool_ and not np.isin(answer, (0, 1)).all():
        return f"the answer should hold True and False (or 1 and 0); got values such as {answer.flat[0]!r}"
    answer = answer.astype(bool)
    if not np.array_equal(answer, expected):
        b, t, b2, t2 = np.argwhere(answer != expected)[0]
        says = "depends" if expected[b, t, b2, t2] else "does not depend"
        return (
            f"y[{b}, {t}] {says} on x[{b2}, {t2}], so entry [{b}, {t}, {b2}, {t2}] should be "
            f"{bool(expected[b, t, b2, t2])}; got {bool(answer[b, t, b2, t2])}"
        )
    return None


SEQ_FIRST_READS = Exercise(
    name="what a sequence-first module mixes",
    kind="predict",
    concept="which axis nn.MultiheadAttention takes for time",
    chapter=3,
    number=1,
    cases=_seq_first_cases,
    reference=_reads,
    compare=_compare_reads,
    mistakes=(
        Mistake(
            partial(_reads, layout="batch first"),
            "It matches what batch_first=True computes, each sequence on its own. The default module reads "
            "axis 0 as time: here the rows b are its time steps, and the columns t its separate sequences",
        ),
        Mistake(
            lambda B, T, causal: np.ones((B, T, B, T), dtype=bool),
            "It matches every output reading every input. The module still keeps its sequences apart, but its "
            "sequences are the columns t: y[b, t] reads only inputs with the same t",
        ),
        Mistake(
            partial(_reads, mask="ignored"),
            "It matches the module without its causal mask. With causal=True the mask runs along the axis the "
            "module takes for time, b, so y[b, t] reads x[b2, t] only for b2 <= b",
        ),
        Mistake(
            partial(_reads, mask="reversed"),
            "It matches the question turned round, which outputs x[b2, t2] feeds. Entry [b, t, b2, t2] asks "
            "whether output y[b, t] reads input x[b2, t2]; under the causal mask it reads b2 <= b",
        ),
    ),
    float32=False,  # sizes in, a boolean array out: nothing to compute in float32
)


def check_seq_first_reads(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(B, T, causal) -> reads``: what a (B, T, D) batch mixes in a sequence-first module.

    A batch ``x`` of shape (B, T, D) goes, as it is, through an
    ``nn.MultiheadAttention`` built without ``batch_first=True``, as
    self-attention; with ``causal=True`` the module also gets a causal
    ``attn_mask`` of the size it expects. ``reads`` is a boolean (B, T, B, T)
    array, True at ``[b, t, b2, t2]`` where output ``y[b, t]`` depends on
    input ``x[b2, t2]``. See chapter 3, exercise 1.
    """
    return SEQ_FIRST_READS.check(fn)


# --- Exercise 2: one mask from nn.MultiheadAttention's two --------------------------------------------


def _padding(lengths: list[int], S: int, *, left: bool = False) -> np.ndarray:
    """(B, S) key_padding_mask, True at padding: the last (or, left-padded, the first) S - length keys."""
    real = np.arange(S)[None, :] < np.asarray(lengths)[:, None]  # (B, S): right padding
    return ~(real[:, ::-1] if left else real)


def _package_mask_cases(rng: np.random.Generator) -> CaseList:
    T = 5
    future = np.triu(np.ones((T, T), dtype=bool), k=1)  # True = blocked
    distance = np.subtract.outer(np.arange(T), np.arange(T))  # i - j
    bias = np.where(future, -np.inf, -rng.uniform(0.2, 1.0) * distance)  # causal, with an ALiBi-like bias
    return [
        (
            "bool causal attn_mask, padding [3, 2, 1], B=T=S=3",
            (np.triu(np.ones((3, 3), dtype=bool), k=1), _padding([3, 2, 1], 3)),
        ),
        ("float attn_mask with a distance bias, left padding [5, 3], T=S=5", (bias, _padding([5, 3], 5, left=True))),
        ("key_padding_mask only, padding [4, 1, 2], S=4", (None, _padding([4, 1, 2], 4))),
        ("bool attn_mask only, cross-attention T=3, S=5", (rng.random((3, 5)) < 0.4, None)),
        (
            "float32 attn_mask, one query (T=1), padding [6, 2], S=6",
            (rng.normal(size=(1, 6)).astype(np.float32), _padding([6, 2], 6)),
        ),
        ("bool attn_mask, cross-attention T=4, S=6, padding [6, 3]", (rng.random((4, 6)) < 0.3, _padding([6, 3], 6))),
    ]


def _to_package_mask(attn_mask: np.ndarray | None, key_padding_mask: np.ndarray | None, *, slip: str = "") -> Any:
    """The additive mask (0 keeps, -inf blocks, other values added) that gives the module's attention.

    ``slip`` names a known mistake, computed instead of the right answer.
    """
    if slip == "torch polarity":  # a boolean answer, True = blocked
        return np.asarray(attn_mask) | np.asarray(key_padding_mask)[:, None, :]
    parts = []
    if attn_mask is not None and slip != "no attn_mask":
        mask = np.asarray(attn_mask)
        if mask.dtype == np.bool_:
            blocked, kept = (0.0, -np.inf) if slip == "attn polarity" else (-np.inf, 0.0)
            mask = mask.astype(float) if slip == "added" else np.where(mask, blocked, kept)
        elif slip == "made boolean":
            mask = np.where(mask, -np.inf, 0.0)  # any nonzero value, a finite bias too, becomes -inf
        parts.append(mask)  # (T, S)
    if key_padding_mask is not None and slip != "no padding":
        blocked, kept = (0.0, -np.inf) if slip == "padding polarity" else (-np.inf, 0.0)
        padding = np.where(key_padding_mask, blocked, kept)  # (B, S)
        dtype = parts[0].dtype if parts else padding.dtype
        where = {"query axis": (slice(None), slice(None), None), "no query axis": (Ellipsis,)}
        parts.append(padding.astype(dtype)[where.get(slip, (slice(None), None, slice(None)))])  # (B, 1, S)
    if slip == "finite":
        return sum(parts[1:], parts[0]).clip(-1e9)
    return sum(parts[1:], parts[0])


def _entry(index: tuple[int, ...], shape: tuple[int, ...]) -> str:
    """Where an entry of a (T, S), (B, T, S) or (B, 1, S) mask is, in words."""
    if len(shape) == 2:
        return f"query {index[0]}, key {index[1]}"
    b, i, j = index
    return f"sequence {b}, {'every query' if shape[1] == 1 else f'query {i}'}, key {j}"


def _additive(mask: np.ndarray) -> np.ndarray:
    """A package mask as the additive one it stands for: a boolean mask is True = may attend."""
    return np.where(mask, 0.0, -np.inf) if mask.dtype == np.bool_ else mask.astype(np.float64)


def _compare_package_mask(got: Any, expected: Any) -> str | None:
    """What is wrong with a merged mask: its form, whether it lines up with the scores, then its entries."""
    answer, want = answer_array(got), np.asarray(expected)
    if answer is None:
        kinds = "float (0 keeps, -inf blocks) or boolean (True = may attend)"
        return f"the mask should be an array, {kinds}; got {type(got).__name__}"
    if answer.dtype.kind not in "bf":
        return (
            f"the mask should be float (0 keeps, -inf blocks) or boolean (True = may attend); got dtype {answer.dtype}"
        )
    try:
        full = np.broadcast_shapes(answer.shape, want.shape)
    except ValueError:
        full = None
    if (
        answer.ndim > 3
        or full is None
        or full[len(full) - want.ndim :] != want.shape
        or 1 < np.prod(full[: len(full) - want.ndim])
    ):
        axes = "(batch, queries, keys)" if want.ndim == 3 else "(queries, keys)"
        return f"the mask should broadcast to shape {want.shape}, {axes}; got shape {answer.shape}"
    low_precision = answer.dtype in (np.float32, np.float16)
    answer, want = np.broadcast_to(_additive(answer), full).reshape(want.shape), _additive(want)
    if np.isnan(answer).any():
        return f"the mask contains NaN, at {_entry(tuple(np.argwhere(np.isnan(answer))[0]), want.shape)}"
    if np.isposinf(answer).any():
        return "the mask contains +inf; a blocked key gets -inf"
    wrongly = np.isneginf(answer) != np.isneginf(want)
    if wrongly.any():
        index = tuple(int(i) for i in np.argwhere(wrongly)[0])
        if np.isneginf(want[index]):
            return f"{_entry(index, want.shape)} should be blocked (-inf); got {answer[index]:.4g}"
        return f"{_entry(index, want.shape)} should be kept (add {want[index]:.4g}); got -inf"
    finite = np.isfinite(want)
    scale = max(1.0, float(np.abs(want[finite]).max(initial=0.0)))
    rtol, atol = (RTOL_FLOAT32, ATOL_FLOAT32 * scale) if low_precision else (RTOL, ATOL)
    off = finite & ~np.isclose(answer, want, rtol=rtol, atol=atol)
    if off.any():
        index = tuple(int(i) for i in np.argwhere(off)[0])
        return f"{_entry(index, want.shape)} should add {want[index]:.4g} to the score; got {answer[index]:.4g}"
    return None


def _has_nan(got: Any, args: tuple[Any, ...]) -> bool:
    answer = answer_array(got)
    return answer is not None and answer.dtype.kind == "f" and bool(np.isnan(answer).any())


def _finite_where_blocked(got: Any, args: tuple[Any, ...]) -> bool:
    answer, want = answer_array(got), _to_package_mask(*args)
    try:
        answer = np.broadcast_to(answer, np.broadcast_shapes(answer.shape, want.shape))
        blocked = np.broadcast_to(np.isneginf(want), answer.shape)
    except ValueError:
        return False
    return answer.dtype.kind == "f" and bool((blocked & np.isfinite(answer) & (answer <= -1e4)).any())


TO_PACKAGE_MASK = Exercise(
    name="one mask from attn_mask and key_padding_mask",
    kind="extend",
    concept="merging nn.MultiheadAttention's two masks into one",
    chapter=3,
    number=2,
    cases=_package_mask_cases,
    reference=_to_package_mask,
    compare=_compare_package_mask,
    mistakes=(
        *(
            Mistake(partial(_to_package_mask, slip=slip), hint)
            for slip, hint in [
                (
                    "padding polarity",
                    "It matches blocking the real tokens: in key_padding_mask True marks the padding, which must "
                    "become -inf",
                ),
                (
                    "attn polarity",
                    "It matches reading the boolean attn_mask as True = may attend; nn.MultiheadAttention's "
                    "boolean masks mean True = blocked",
                ),
                (
                    "added",
                    "It matches adding the boolean attn_mask as numbers: True becomes 1, which blocks nothing; "
                    "turn True into -inf with np.where",
                ),
                (
                    "made boolean",
                    "It matches np.where(attn_mask, -inf, 0) on a float mask too; a float attn_mask is additive "
                    "already, so add it as it is, its finite values (a bias such as ALiBi's) included",
                ),
                (
                    "query axis",
                    "It matches the padding on the query axis, (B, S, 1): that blocks the padded queries' rows "
                    "instead of the padded keys' columns; give it shape (B, 1, S)",
                ),
                (
                    "no query axis",
                    "It matches the padding without a query axis, (B, S): broadcasting lines its batch axis up "
                    "with the queries, so query i gets sequence i's padding; give the padding shape (B, 1, S)",
                ),
                ("no padding", "It matches attn_mask alone; key_padding_mask blocks each sequence's padded keys too"),
                ("no attn_mask", "It matches key_padding_mask alone; attn_mask blocks (or biases) keys too"),
                (
                    "torch polarity",
                    "It matches a boolean answer in nn.MultiheadAttention's polarity (True = blocked); the "
                    "package reads a boolean mask as True = may attend, so return the opposite, or a float mask",
                ),
            ]
        ),
        Mistake(
            partial(_to_package_mask, slip="finite"),
            "It matches blocking with a large finite number; use -inf: with -1e9, a query whose keys are all "
            "blocked still reads them (see the pitfalls above)",
            detect=_finite_where_blocked,
        ),
        Mistake(
            lambda attn_mask, key_padding_mask: np.where(attn_mask, -np.inf, 0.0) + key_padding_mask[:, None] * -np.inf,
            "It matches multiplying a boolean mask by -inf: False * -inf is NaN, not 0; build the mask with "
            "np.where(blocked, -np.inf, 0.0)",
            detect=_has_nan,
        ),
    ),
)


def check_to_package_mask(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(attn_mask, key_padding_mask) -> mask``: ``nn.MultiheadAttention``'s two masks as one.

    ``attn_mask`` is None or (T, S), boolean (True = blocked) or float (added to
    the scores); ``key_padding_mask`` is None or a boolean (B, S) array, True
    at padding. ``mask`` is one mask for ``sa.self_attention`` that gives the
    module's attention: float (0 keeps, -inf blocks) or boolean (True = may
    attend), of a shape that broadcasts against the (B, T, S) scores.
    See chapter 3, exercise 2.
    """
    return TO_PACKAGE_MASK.check(fn)


# --- Exercise 3: the queries that left padding leaves with no key -------------------------------------


def _no_key_cases(rng: np.random.Generator) -> CaseList:
    return [
        ("lengths [5, 3], S=5", (np.array([5, 3]), 5)),
        ("lengths [1], S=4", (np.array([1]), 4)),
        ("lengths [2, 6, 4], S=6", (np.array([2, 6, 4]), 6)),
        ("lengths [7, 1, 3, 5], S=7", (np.array([7, 1, 3, 5]), 7)),
    ]


def _queries_without_keys(lengths: np.ndarray, S: int, shift: int = 0) -> np.ndarray:
    """(B, S): True where query i of a left-padded sequence has only padding at or before it."""
    first_real = S - np.asarray(lengths)[:, None]  # (B, 1): position of the first real token
    return np.arange(S)[None, :] < first_real + shift


def _compare_no_key(got: Any, expected: np.ndarray) -> str | None:
    answer, problem = shaped_answer(got, expected, "answer", shape_note=" (B, S)")
    if problem:
        return problem
    if answer.dtype != np.bool_:
        return f"the answer should be boolean (True = the query has no key); got dtype {answer.dtype}"
    if not np.array_equal(answer, expected):
        b, i = np.argwhere(answer != expected)[0]
        return f"sequence {b}, query {i}: expected {bool(expected[b, i])}, got {bool(answer[b, i])}"
    return None


QUERIES_WITHOUT_KEYS = Exercise(
    name="queries with no key",
    kind="derive",
    concept="padding and the causal mask together",
    chapter=3,
    number=3,
    cases=_no_key_cases,
    reference=_queries_without_keys,
    compare=_compare_no_key,
    mistakes=(
        Mistake(
            lambda lengths, S: np.zeros((len(lengths), S), dtype=bool),
            "It matches no query left keyless, as with right padding, where key 0 is real. With left padding "
            "the padding comes first, and a causal query sees only keys at or before it",
        ),
        Mistake(
            partial(_queries_without_keys, shift=1),
            "It matches an off-by-one: the first real token, at position S - length, may attend to itself",
        ),
        Mistake(
            lambda lengths, S: ~_queries_without_keys(lengths, S),
            "It matches the answer with True and False swapped: True should mark the queries that have no key",
        ),
        Mistake(
            lambda lengths, S: np.arange(S)[None, :] < np.asarray(lengths)[:, None],
            "It matches marking the first `length` queries: the padding is S - length tokens long, not length",
        ),
    ),
    float32=False,  # integer lengths in, a boolean array out: nothing to compute in float32
)


def check_queries_without_keys(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(lengths, S) -> no_key``: which queries of a left-padded, causally masked batch see no key.

    Each sequence ``b`` has ``lengths[b]`` real tokens, left-padded to ``S``
    (the padding comes first). Under the causal mask, query ``i`` may see keys
    ``0 .. i``, and padding keys are blocked. ``no_key`` is a boolean
    (B, S) array, True where every key of query ``i`` is blocked.
    See chapter 3, exercise 3.
    """
    return QUERIES_WITHOUT_KEYS.check(fn)
