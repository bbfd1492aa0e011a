"""The bug zoo's exercises: for each bug, write the function as it should have been, and the checker runs it.

Each exercise takes the signature of one function of :mod:`selfattention.bugs`;
its cases include the smallest input on which the bug shows (the one the
property test finds), and its first named mistake is the original bug itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import bugs
from ..attention import scaled_dot_product_attention
from ..bugs._common import scores, softmax_quiet, weighted_values
from ..bugs.references import REFERENCE
from ..decoding import TinyDecoder
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array, compare_verdict

__all__ = [*(f"check_{name}" for name in bugs.__all__), "check_rows_sum_to_one_test"]

_ORIGINAL = "It matches the original bug: "


def _keep(rng: np.random.Generator, shape: tuple[int, ...], *, empty_row: int | None = None) -> np.ndarray:
    """A random boolean mask that leaves each query a key (or, with ``empty_row``, none for that query)."""
    keep = rng.random(shape) < 0.5
    keep[..., 0] |= ~keep.any(axis=-1)  # a query with no key gets key 0
    if empty_row is not None:
        keep[..., empty_row, :] = False
    return keep


def _qkv(rng: np.random.Generator, T: int, S: int, Dk: int = 4, batch: tuple[int, ...] = ()) -> list[np.ndarray]:
    return [rng.standard_normal((*batch, n, Dk)) for n in (T, S, S)]


def _masked_cases(rng: np.random.Generator, *, empty_row: bool = False) -> CaseList:
    cases = [
        ("one query, two keys, the second blocked", (*_qkv(rng, 1, 2), np.array([[True, False]]))),
        ("T=3, S=5, a random mask", (*_qkv(rng, 3, 5), _keep(rng, (3, 5)))),
        ("a batch of 2, T=4, S=4", (*_qkv(rng, 4, 4, batch=(2,)), _keep(rng, (2, 4, 4)))),
    ]
    q, k, v = _qkv(rng, 2, 3)
    keep = np.array([[True, False, True]] * 2)
    dominant = (np.array([[1.0]]), np.array([[0.0], [2e4]]), np.array([[1.0], [-1.0]]), np.array([[True, False]]))
    cases.append(("a blocked key scoring 20,000 above the kept one", dominant))
    cases.append(("scores in the hundreds of thousands", (q * 3e5, k, v, keep)))
    cases.append(("scores near 1e12: any finite push leaks", (q * 1e12, k, v, keep)))
    if empty_row:
        cases.append(("query 0 may attend to no key", (*_qkv(rng, 3, 4), _keep(rng, (3, 4), empty_row=0))))
        batch = (*_qkv(rng, 4, 3, batch=(2,)), _keep(rng, (2, 4, 3), empty_row=2))
        cases.append(("a batch of 2, query 2 of each may attend to no key", batch))
    return cases


def _bias_cases(rng: np.random.Generator) -> CaseList:
    def bias(keep: np.ndarray) -> np.ndarray:
        return np.where(keep, 0.0, -np.inf)

    return [
        ("one query, one key, kept", (*_qkv(rng, 1, 1), np.zeros((1, 1)))),
        ("T=3, S=5, a random mask", (*_qkv(rng, 3, 5), bias(_keep(rng, (3, 5))))),
        ("a causal mask, T=S=4", (*_qkv(rng, 4, 4), bias(np.tril(np.ones((4, 4), dtype=bool))))),
        ("a batch of 2, T=2, S=3", (*_qkv(rng, 2, 3, batch=(2,)), bias(_keep(rng, (2, 2, 3))))),
    ]


def _causal_cases(rng: np.random.Generator) -> CaseList:
    return [
        ("T=2", tuple(_qkv(rng, 2, 2))),
        ("T=5", tuple(_qkv(rng, 5, 5))),
        ("a batch of 2, T=3", tuple(_qkv(rng, 3, 3, batch=(2,)))),
    ]


def _cached_causal_cases(rng: np.random.Generator) -> CaseList:
    return [
        ("one new token after 1 cached (T=1, S=2)", tuple(_qkv(rng, 1, 2))),
        ("one new token after 5 cached (T=1, S=6)", tuple(_qkv(rng, 1, 6))),
        ("3 new tokens after 4 cached (T=3, S=7)", tuple(_qkv(rng, 3, 7))),
        ("no cache (T=S=4)", tuple(_qkv(rng, 4, 4))),
        ("a batch of 2, 2 new tokens after 3 cached", tuple(_qkv(rng, 2, 5, batch=(2,)))),
    ]


def _plain_cases(rng: np.random.Generator) -> CaseList:
    return [
        ("T=1, S=2, Dk=1", tuple(_qkv(rng, 1, 2, Dk=1))),
        ("T=3, S=4, Dk=8", tuple(_qkv(rng, 3, 4, Dk=8))),
        ("a batch of 2, T=S=3, Dk=2", tuple(_qkv(rng, 3, 3, Dk=2, batch=(2,)))),
        ("T=2, S=3, Dk=4, values 6 wide", (*_qkv(rng, 2, 3)[:2], rng.standard_normal((3, 6)))),
    ]


def _scaled(qkv: list[np.ndarray], *rest: Any) -> tuple[Any, ...]:
    """Queries 10^5 times larger: a finite stand-in for -inf leaks at such scores."""
    q, k, v = qkv
    return (q * 1e5, k, v, *(np.asarray(r) for r in rest))


def _padded_cases(rng: np.random.Generator) -> CaseList:
    return [
        ("one sequence, 1 real token of 2", (*_qkv(rng, 2, 2, batch=(1,)), np.array([1]))),
        ("lengths 3 and 5, padded to 5", (*_qkv(rng, 5, 5, batch=(2,)), np.array([3, 5]))),
        ("lengths 2, 4 and 1, padded to 4", (*_qkv(rng, 4, 4, batch=(3,)), np.array([2, 4, 1]))),
        ("lengths 1 and 3, scores in the hundreds of thousands", _scaled(_qkv(rng, 3, 3, batch=(2,)), [1, 3])),
    ]


def _head_mask_cases(rng: np.random.Generator) -> CaseList:
    def case(B: int, H: int, T: int, S: int) -> tuple[Any, ...]:
        return (*_qkv(rng, T, S, batch=(B, H)), _keep(rng, (B, T, S)))

    big = case(2, 2, 2, 3)
    return [
        ("B=1, H=3", case(1, 3, 3, 4)),
        ("B=2, H=2", case(2, 2, 3, 3)),
        ("B=3, H=2", case(3, 2, 2, 4)),
        ("B=2, H=2, scores in the hundreds of thousands", (big[0] * 1e5, *big[1:])),
    ]


def _grouped_mask_cases(rng: np.random.Generator) -> CaseList:
    def case(B: int, H: int, Hkv: int, T: int, S: int | None = None) -> tuple[Any, ...]:
        S = T if S is None else S
        q = rng.standard_normal((B, H, T, 4))
        k, v = (rng.standard_normal((B, Hkv, S, 4)) for _ in range(2))
        return (q, k, v, _keep(rng, (B, 1, T, S)))

    big = case(2, 4, 2, 3)
    return [
        ("B=1, H=4, Hkv=2", case(1, 4, 2, 3)),
        ("B=2, H=4, Hkv=2", case(2, 4, 2, 3)),
        ("B=3, H=6, Hkv=2", case(3, 6, 2, 2)),
        ("B=2, H=3, Hkv=1, one new token after 2 cached (T=1, S=3)", case(2, 3, 1, 1, 3)),
        ("B=2, H=8, Hkv=4", case(2, 8, 4, 2)),
        ("B=2, H=4, Hkv=2, scores in the hundreds of thousands", (big[0] * 1e5, *big[1:])),
    ]


def _width_cases(rng: np.random.Generator) -> CaseList:
    def case(T: int, D: int, Dh: int, Dv: int) -> tuple[Any, ...]:
        x, w_q, w_k = rng.standard_normal((T, D)), rng.standard_normal((D, Dh)), rng.standard_normal((D, Dh))
        return (x, w_q, w_k, rng.standard_normal((D, Dv)))

    return [
        ("D=2, Dh=1 (2 heads)", case(2, 2, 1, 1)),
        ("D=16, Dh=4 (4 heads)", case(5, 16, 4, 4)),
        ("D=Dh=4 (1 head)", case(3, 4, 4, 4)),
        ("D=8, Dh=2, values 3 wide", case(4, 8, 2, 3)),
        ("a batch of 2 sequences, D=8, Dh=4", (rng.standard_normal((2, 3, 8)), *case(3, 8, 4, 4)[1:])),
    ]


def _merge_cases(rng: np.random.Generator) -> CaseList:
    shapes = [(1, 2, 2, 1), (2, 3, 4, 2), (4, 5, 3), (2, 1, 3, 2)]
    return [(f"x {s}", (rng.standard_normal(s),)) for s in shapes]


def _rope_cases(rng: np.random.Generator) -> CaseList:
    cases = [(f"T={T}, Dh={Dh}", tuple(rng.standard_normal((2, T, Dh)))) for T, Dh in [(2, 4), (5, 8), (3, 2)]]
    return [*cases, ("a batch of 2, T=3, Dh=6", tuple(rng.standard_normal((2, 2, 3, 6))))]


def _permutation_cases(rng: np.random.Generator) -> CaseList:
    def w(heads: int, Dh: int) -> np.ndarray:
        return rng.standard_normal((6, heads * Dh))

    return [
        ("W_Q, 4 heads of 4", (w(4, 4), 4)),
        ("W_K, 2 query heads per key head, 2 key heads", (w(2, 4), 4, 2)),
        ("W_K, 4 query heads per key head, 2 key heads", (w(2, 4), 8, 2)),
        ("W_K, 8 query heads per key head, 4 key heads (TinyLlama's 32 and 4)", (w(4, 4), 32, 4)),
        ("W_K, 2 query heads per key head, 3 key heads of 8", (w(3, 8), 6, 3)),
        ("W_Q, 2 heads of 6", (w(2, 6), 2)),
    ]


def _decoding_cases(rng: np.random.Generator) -> CaseList:
    model = TinyDecoder.random(8, 8, 2, 1, 1, 16, seed=int(rng.integers(1000)))
    block = model.blocks[0]
    return [
        (f"T={T}, prefill={p}", (rng.standard_normal((T, 8)), block, 2, p)) for T, p in [(2, 1), (4, 2), (3, 3), (5, 1)]
    ]


def _window_cases(rng: np.random.Generator) -> CaseList:
    return [(f"T={T}, window={w}", (T, w)) for T, w in [(2, 1), (5, 2), (6, 3), (3, 5), (12, 6)]]


def _renormalised(q: np.ndarray, k: np.ndarray, v: np.ndarray, keep: np.ndarray) -> np.ndarray:
    weights = softmax_quiet(scores(q, k)) * keep  # softmax first, then the blocked weights zeroed
    with np.errstate(all="ignore"):
        return weighted_values(weights / weights.sum(axis=-1, keepdims=True), v)


def _finite_key_fill(q: np.ndarray, k: np.ndarray, v: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    real = np.arange(q.shape[1]) < lengths[:, None]
    return weighted_values(softmax_quiet(np.where(real[:, None, :], scores(q, k), -10_000.0)), v)


def _rows_and_columns(q: np.ndarray, k: np.ndarray, v: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    real = np.arange(q.shape[1]) < lengths[:, None]
    return scaled_dot_product_attention(q, k, v, mask=real[:, :, None] & real[:, None, :])[0]


def _same_as(bug: Callable[..., Any]) -> Callable[[Any, tuple[Any, ...]], bool]:
    """Recognise the bug's own answer, NaN and inf included (the comparison refuses a non-finite answer)."""

    def detect(got: Any, args: tuple[Any, ...]) -> bool:
        with np.errstate(all="ignore"):
            want = bug(*args)
            got = np.asarray(got, dtype=want.dtype)
            return got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)

    return detect


_RENORMALISED = Mistake(
    _renormalised,
    "It matches zeroing the blocked weights after the softmax and renormalising: when a blocked score "
    "dominates, the kept weights underflow to 0 and 0/0 is NaN; mask the scores before the softmax",
    _same_as(_renormalised),
)


def _declare(
    bug: Callable[..., Any],
    number: int,
    cases: Callable[..., CaseList],
    concept: str,
    hint: str,
    *extra: Mistake,
    name: str = "output",
    nan_hint: str = "0 * -inf is NaN (a mask multiplied by -inf), a row's softmax may divide 0 by 0, or -inf may be "
    "written into the weights",
) -> Exercise:
    return Exercise(
        name=f"fix {bug.__name__}",
        kind="debug",
        concept=concept,
        chapter=90,
        number=number,
        cases=cases,
        reference=REFERENCE[bug.__name__],
        compare=compare_array(name, nan_hint),
        mistakes=(Mistake(bug, _ORIGINAL + hint, _same_as(bug)), *extra),
    )


_EXERCISES = [
    _declare(
        bugs.weak_mask_value,
        1,
        _masked_cases,
        "blocking a key with -inf",
        "a finite fill (here -10,000) only pushes a blocked score down; use -inf (np.where(keep, scores, -np.inf))",
    ),
    _declare(
        bugs.mask_after_softmax,
        2,
        _masked_cases,
        "masking scores before the softmax",
        "the mask is written into probabilities; mask the scores, then take the softmax",
        _RENORMALISED,
    ),
    _declare(
        bugs.masked_fill_result_dropped,
        3,
        _masked_cases,
        "keeping the masked copy",
        "the masked copy is thrown away; assign it (scores = np.where(...))",
        _RENORMALISED,
    ),
    _declare(
        bugs.nan_for_fully_masked_rows,
        4,
        lambda rng: _masked_cases(rng, empty_row=True),
        "a query with no key to attend to",
        "a row with no key is 0/0; give such a row weights 0 and output 0",
    ),
    _declare(
        bugs.additive_mask_cast_to_bool,
        5,
        _bias_cases,
        "additive and boolean masks",
        "casting 0/-inf to bool inverts it; keep = (bias == 0)",
    ),
    _declare(
        bugs.blocked_mask_passed_as_keep,
        6,
        _causal_cases,
        "a mask's polarity",
        "True marks the future, and this API keeps True; pass ~blocked",
    ),
    _declare(
        bugs.causal_mask_top_left,
        7,
        _cached_causal_cases,
        "causal alignment after a KV cache",
        "the diagonal starts top-left; the T queries are the last T of S positions (np.tril(..., k=S - T))",
    ),
    _declare(
        bugs.sliding_window_one_too_wide,
        8,
        _window_cases,
        "a sliding window's width",
        "each query keeps window + 1 keys; i - j <= window - 1",
        name="mask",
        nan_hint="it looks like an additive 0/-inf mask; return a boolean one (True = may attend)",
    ),
    _declare(
        bugs.padding_mask_on_query_axis,
        9,
        _padded_cases,
        "a padding mask covers key columns",
        "the padding mask blocks query rows; block the padding's key columns, (B, 1, T)",
        Mistake(
            _finite_key_fill,
            "It matches blocking the padding's keys with -10,000: right axis, but with scores 1e5 apart a finite "
            "fill still leaks (bug 1); block with -inf",
        ),
        Mistake(
            _rows_and_columns,
            "It matches blocking the padding's rows as well as its columns: its rows then see no key and come out "
            "0. The reference follows PyTorch's key-padding mask, which blocks columns only, so the padding's own "
            "rows attend to the real tokens (exercise 10 is about what those rows then hold)",
        ),
    ),
    _declare(
        bugs.mean_over_padded_rows,
        10,
        _padded_cases,
        "pooling only the real tokens",
        "the padding's rows are averaged in; average the first lengths[b] rows of sequence b",
    ),
    _declare(
        bugs.batch_mask_on_head_axis,
        11,
        _head_mask_cases,
        "a per-example mask and the head axis",
        "the (B, T, S) mask meets the head axis; give it a head axis, keep[:, None]",
    ),
    _declare(
        bugs.batch_mask_on_kv_head_axis,
        12,
        _grouped_mask_cases,
        "a mask and grouped-query attention's axes",
        "the (B, 1, T, S) mask meets the key/value heads; make it (B, 1, 1, T, S)",
    ),
    _declare(
        bugs.scale_by_model_width,
        13,
        _width_cases,
        "the scale is the head's width",
        "it divides by sqrt(D), the model's width; a head's scores are divided by sqrt(Dh) = sqrt(w_k.shape[1])",
    ),
    _declare(
        bugs.scale_after_softmax,
        14,
        _plain_cases,
        "scaling the scores, not the weights",
        "it scales the weights after the softmax; scale the scores before it",
    ),
    _declare(
        bugs.softmax_over_queries,
        15,
        _plain_cases,
        "the softmax's axis",
        "it normalises over the queries; each query's row of weights must sum to 1 (axis=-1)",
    ),
    _declare(
        bugs.merge_heads_by_reshape,
        16,
        _merge_cases,
        "merging heads keeps tokens together",
        "a reshape alone mixes tokens; swap the head and token axes first",
    ),
    _declare(
        bugs.rope_half_split_on_interleaved_pairs,
        17,
        _rope_cases,
        "which features RoPE pairs",
        "it rotates (i, i + Dh/2); these weights pair neighbours (2i, 2i + 1)",
        name="scores",
    ),
    _declare(
        bugs.rope_permutation_wrong_head_count,
        18,
        _permutation_cases,
        "reordering W_K by its own heads",
        "W_K is reordered in n_head // n_head_kv blocks; it has n_head_kv heads",
        name="weights",
    ),
    _declare(
        bugs.cached_positions_restart,
        19,
        _decoding_cases,
        "positions after a KV cache",
        "each call numbers its tokens from 0; a call starts at the number of tokens already cached",
    ),
]
EXERCISE = {exercise.name[len("fix ") :]: exercise for exercise in _EXERCISES}


def _checker(bug: str) -> Callable[[Callable[..., Any]], CheckResult]:
    def check(fn: Callable[..., Any]) -> CheckResult:
        return EXERCISE[bug].check(fn)

    check.__name__ = check.__qualname__ = f"check_{bug}"
    check.__doc__ = (
        f"Check ``fn``, your fixed version of :func:`{getattr(bugs, bug).__module__}.{bug}`, with its signature.\n\n"
        f"    See the bug zoo, exercise {EXERCISE[bug].number}.\n"
    )
    return check


globals().update({f"check_{name}": _checker(name) for name in bugs.__all__})


# --- Exercise 20: a property with no reference ---------------------------------------------------------------


def _loop_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Right, written as loops over the queries, in the inputs' own dtype."""
    out = np.zeros(q.shape[:-1] + v.shape[-1:], dtype=np.result_type(q, k, v))
    for i in np.ndindex(q.shape[:-1]):
        s = k[i[:-1]] @ q[i] / q.shape[-1] ** 0.5
        w = np.exp(s - s.max())
        out[i] = (w / w.sum()) @ v[i[:-1]]
    return out


def _in_float32(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    return _loop_attention(*(np.asarray(a, dtype=np.float32) for a in (q, k, v)))


def _unscaled(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Wrong (no scale), but every row of weights still sums to 1: this property cannot see it."""
    return scaled_dot_product_attention(q, k, v, scale=1.0)[0]


_SDPA = REFERENCE["scale_after_softmax"]
_PROPERTY_CASES = [  # (attention, what it is, the verdict of a test of the property)
    (_SDPA, "the package's attention", True),
    (bugs.scale_after_softmax, "bugs.scale_after_softmax", False),
    (bugs.softmax_over_queries, "bugs.softmax_over_queries", False),
    (_loop_attention, "right, written with loops", True),
    (_unscaled, "wrong, but its rows of weights sum to 1", True),
    (_in_float32, "right, in float32", True),
]


def _rows_sum_to_one(
    attention: Callable[..., Any], *, T: int = 3, S: int = 4, Dk: int = 4, exact: bool = False
) -> bool:
    """The property: if every value is the same vector c, every output is c (each row of weights sums to 1)."""
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((T, Dk)), rng.standard_normal((S, Dk))
    c = rng.standard_normal(3)
    out = np.asarray(attention(q, k, np.tile(c, (S, 1))), dtype=float)
    if exact:
        return bool(np.array_equal(out, np.broadcast_to(c, out.shape)))
    return out.shape == (T, 3) and bool(np.allclose(out, c, rtol=1e-4, atol=1e-5))


def _wrong_on(case: int) -> Callable[[Any, tuple[Any, ...]], bool]:
    """Recognise a wrong verdict on the case that hands the test ``_PROPERTY_CASES[case]``'s attention."""
    attention, _, verdict = _PROPERTY_CASES[case]
    return lambda got, args: args[0] is attention and isinstance(got, (bool, np.bool_)) and bool(got) != verdict


ROWS_SUM_TO_ONE = Exercise(
    name="a property with no reference",
    kind="test",
    concept="testing what attention must do without a reference to compare with",
    chapter=90,
    number=20,
    cases=lambda rng: [(what, (attention,)) for attention, what, _ in _PROPERTY_CASES],
    reference=_rows_sum_to_one,
    compare=compare_verdict,
    mistakes=(
        Mistake(
            lambda attention: _rows_sum_to_one(attention, Dk=1),
            "It matches a test with Dk = 1, where 1/sqrt(Dk) = 1 and scaling after the softmax changes nothing",
            _wrong_on(1),
        ),
        Mistake(
            lambda attention: _rows_sum_to_one(attention, T=1, S=1),
            "It matches a test with one query and one key, where any normalisation gives the weight 1",
            _wrong_on(2),
        ),
        Mistake(
            lambda attention: _rows_sum_to_one(attention, exact=True),
            "It matches comparing without a tolerance: attention computed another way (in float32, or in "
            "another order) differs in the last bits; use np.allclose",
            lambda got, args: args[0] in (_SDPA, _loop_attention, _in_float32) and got is not True,
        ),
    ),
    float32=False,  # the answer is a verdict; the test chooses its own inputs
    passes="gives the right verdict",
)


def check_rows_sum_to_one_test(test: Callable[..., Any]) -> CheckResult:
    """Check ``test(attention) -> bool``: True when ``attention(q, k, v)`` keeps a value that all keys share.

    The test may use no reference implementation: it calls ``attention`` on
    inputs it chooses, with every value row the same vector, and checks that
    every output row is that vector. The checker hands it six attentions, two
    of them bugs of the zoo.

    See the bug zoo, exercise 20.
    """
    return ROWS_SUM_TO_ONE.check(test)
