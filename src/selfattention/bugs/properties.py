r"""Property tests that catch the bug zoo's bugs: what must hold for every input, checked on generated ones.

Each property is a function of an implementation and a few small integers
(sizes, a seed for the numbers, a switch); it returns what is wrong, or None.
:func:`falsify` hands it to Hypothesis, which generates the integers, and
when the property fails, shrinks them to the smallest failing case it can
find. The search is derandomised, so it finds the same case on every run.
The package's own functions are the references (``references.REFERENCE``).

The properties are the tests the projects could have had: most compare with
a reference; some need none, and only say what must not change (padding, the
future, the batch around an example).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from .._validation import check_positive_int
from ..attention import scaled_dot_product_attention
from ..decoding import TinyDecoder
from ..masks import sliding_window_mask
from ..multihead import merge_heads
from ..positions import apply_rope
from . import batching, heads, masking, positions
from .references import REFERENCE

__all__ = ["Verdict", "falsify", "code", "PROPERTY"]

SIZES = st.integers(1, 4)  # tokens, widths, heads: small, so that the smallest failing case is easy to read
SEEDS = st.integers(0, 1000)  # the seed of the random numbers in q, k, v and the masks
Problem = str | None


def _normal(seed: int, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for shape in shapes]


def _keep(seed: int, T: int, S: int) -> np.ndarray:
    """A random (T, S) mask that leaves every query at least one key."""
    rng = np.random.default_rng(seed + 1)
    keep = rng.random((T, S)) < 0.5
    keep[np.arange(T), rng.integers(0, S, T)] = True
    return keep


def _differs(got: Any, want: np.ndarray, reference: str = "the reference") -> Problem:
    """What is wrong with ``got``, or None when it matches ``want`` (``reference``) to its own dtype's rounding."""
    if hasattr(got, "detach"):  # a torch tensor
        got = got.detach().cpu().numpy()
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"it returns shape {got.shape}, not {want.shape}"
    if np.isfinite(want).all() and not np.isfinite(got).all():
        return f"it returns NaN or inf where {reference} is finite"
    low = got.dtype in (np.float32, np.float16)  # rounded to about 1e-7 (float32) on the way: judged as such
    rtol, atol = (1e-3, 1e-5) if got.dtype == np.float16 else (1e-4, 1e-6) if low else (1e-6, 1e-9)
    if not np.allclose(got, want, rtol=rtol, atol=atol * max(1.0, float(np.abs(want).max(initial=0.0)))):
        return f"it differs from {reference}"
    return None


def masked_attention_matches_the_reference(impl: Callable, scale: int, T: int, S: int, Dk: int, seed: int) -> Problem:
    """Every mask that leaves each query a key, scores of any size (q times 10**scale): the package's output."""
    q, k, v = _normal(seed, (T, Dk), (S, Dk), (S, 2))
    q = q * 10.0**scale
    keep = _keep(seed, T, S)
    return _differs(impl(q, k, v, keep), scaled_dot_product_attention(q, k, v, mask=keep)[0])


def additive_mask_matches_the_reference(impl: Callable, T: int, S: int, Dk: int, seed: int) -> Problem:
    """The same with the mask given as 0 (attend) and -inf (blocked)."""
    q, k, v = _normal(seed, (T, Dk), (S, Dk), (S, 2))
    bias = np.where(_keep(seed, T, S), 0.0, -np.inf)
    return _differs(impl(q, k, v, bias), scaled_dot_product_attention(q, k, v, mask=bias)[0])


def a_query_with_no_key_gets_zeros(impl: Callable, T: int, S: int, Dk: int, seed: int, block_first: bool) -> Problem:
    """Also when a query may attend to no key at all (its row of the mask is all False): output 0, as PyTorch's."""
    q, k, v = _normal(seed, (T, Dk), (S, Dk), (S, 2))
    keep = _keep(seed, T, S)
    keep[0] &= not block_first
    return _differs(impl(q, k, v, keep), scaled_dot_product_attention(q, k, v, mask=keep)[0])


def the_future_cannot_change_the_past(impl: Callable, T: int, Dk: int, seed: int, t: int) -> Problem:
    """Causal attention: changing the keys and values after position t leaves the outputs up to t as they were."""
    t = min(t, T - 1)
    q, k, v, k2, v2 = _normal(seed, (T, Dk), (T, Dk), (T, 2), (T, Dk), (T, 2))
    k2[: t + 1], v2[: t + 1] = k[: t + 1], v[: t + 1]  # the same past, a different future
    return _differs(impl(q, k2, v2)[: t + 1], np.asarray(impl(q, k, v))[: t + 1], "the outputs before the change")


def newest_queries_match_the_full_pass(impl: Callable, S: int, T: int, Dk: int, seed: int) -> Problem:
    """Causal attention for the newest T of S tokens (after a KV cache): the last T rows of the full pass."""
    T = min(T, S)
    q, k, v = _normal(seed, (S, Dk), (S, Dk), (S, 2))
    full = scaled_dot_product_attention(q, k, v, is_causal=True)[0]
    return _differs(impl(q[S - T :], k, v), full[S - T :])


def the_window_matches_the_reference(impl: Callable, T: int, window: int) -> Problem:
    """A sliding-window mask: each query keeps its own key and the window - 1 before it, as the package's."""
    return _differs(impl(T, window), sliding_window_mask(T, window, dtype=bool))


def padding_does_not_change_a_sequence(impl: Callable, scale: int, T: int, D: int, seed: int, pad: int) -> Problem:
    """A sequence padded on the right with junk gives its real tokens (or its pooled vector) what it gives alone."""
    q, k, v = _normal(seed, (1, T + pad, D), (1, T + pad, D), (1, T + pad, D))
    q = q * 10.0**scale
    padded = np.asarray(impl(q, k, v, np.array([T])))
    alone = np.asarray(impl(q[:, :T], k[:, :T], v[:, :T], np.array([T])))
    return _differs(padded[:, :T] if padded.ndim == 3 else padded, alone, "the sequence alone")


def each_example_gets_what_it_gets_alone(impl: Callable, B: int, H: int, T: int, S: int, seed: int) -> Problem:
    """Multi-head attention with a per-example (B, T, S) mask: example b of a batch is example b run alone."""
    q, k, v = _normal(seed, (B, H, T, 2), (B, H, S, 2), (B, H, S, 2))
    keep = np.stack([_keep(seed + b, T, S) for b in range(B)])
    batch = np.asarray(impl(q, k, v, keep))
    alone = np.concatenate(
        [np.asarray(impl(q[b : b + 1], k[b : b + 1], v[b : b + 1], keep[b : b + 1])) for b in range(B)]
    )
    return _differs(batch, alone, "the examples run alone")


def each_grouped_example_gets_what_it_gets_alone(
    impl: Callable, B: int, Hkv: int, group: int, T: int, seed: int
) -> Problem:
    """The same for grouped-query attention (H = Hkv * group query heads) with a (B, 1, T, T) mask."""
    q, k, v = _normal(seed, (B, Hkv * group, T, 2), (B, Hkv, T, 2), (B, Hkv, T, 2))
    keep = np.stack([_keep(seed + b, T, T) for b in range(B)])[:, None]
    batch = np.asarray(impl(q, k, v, keep))
    alone = np.concatenate(
        [np.asarray(impl(q[b : b + 1], k[b : b + 1], v[b : b + 1], keep[b : b + 1])) for b in range(B)]
    )
    return _differs(batch, alone, "the examples run alone")


def attention_matches_the_reference(impl: Callable, T: int, S: int, Dk: int, seed: int) -> Problem:
    """Attention without a mask: the package's scaled dot-product attention."""
    q, k, v = _normal(seed, (T, Dk), (S, Dk), (S, 2))
    return _differs(impl(q, k, v), scaled_dot_product_attention(q, k, v)[0])


def a_head_matches_the_reference(impl: Callable, T: int, H: int, Dh: int, seed: int) -> Problem:
    """One head of an H-head layer (width D = H * Dh): attention on its projections, scaled by its own width."""
    x, w_q, w_k, w_v = _normal(seed, (T, H * Dh), (H * Dh, Dh), (H * Dh, Dh), (H * Dh, Dh))
    return _differs(impl(x, w_q, w_k, w_v), scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)[0])


def merging_matches_the_reference(impl: Callable, B: int, H: int, T: int, Dh: int, seed: int) -> Problem:
    """Merging heads: token t's row is [head 1's row t | head 2's row t | ...], as the package's merge_heads."""
    (x,) = _normal(seed, (B, H, T, Dh))
    return _differs(impl(x), merge_heads(x))


def rope_scores_match_the_reference(impl: Callable, T: int, pairs: int, seed: int) -> Problem:
    """Rotary scores for weights that pair neighbouring features: the package's interleaved RoPE."""
    q, k = _normal(seed, (T, 2 * pairs), (T, 2 * pairs))
    q_rot, k_rot = apply_rope(q, interleaved=True), apply_rope(k, interleaved=True)
    return _differs(impl(q, k), q_rot @ k_rot.T / np.sqrt(2 * pairs))


def reordered_weights_keep_the_scores(impl: Callable, Hkv: int, group: int, pairs: int, T: int, seed: int) -> Problem:
    """Reorder W_Q (H heads) and W_K (Hkv heads) for half-split RoPE: every head's scores stay the same."""
    H, Dh, D = Hkv * group, 2 * pairs, 3
    x, w_q, w_k = _normal(seed, (T, D), (D, H * Dh), (D, Hkv * Dh))

    def head_scores(w_q: np.ndarray, w_k: np.ndarray, interleaved: bool) -> np.ndarray:
        w_q, w_k = np.asarray(w_q), np.asarray(w_k)
        x_ = x.astype(np.result_type(w_q, w_k))  # float32 weights give float32 scores, judged as float32
        q = apply_rope((x_ @ w_q).reshape(T, H, Dh).transpose(1, 0, 2), interleaved=interleaved)  # (H, T, Dh)
        k = apply_rope((x_ @ w_k).reshape(T, Hkv, Dh).transpose(1, 0, 2), interleaved=interleaved)
        return q @ np.repeat(k, group, axis=0).transpose(0, 2, 1)  # query head h reads key head h // group

    want = head_scores(w_q, w_k, interleaved=True)
    return _differs(head_scores(impl(w_q, H), impl(w_k, H, Hkv), interleaved=False), want)


def cached_decoding_matches_uncached(impl: Callable, T: int, prefill: int, seed: int) -> Problem:
    """A decoder block fed its tokens in calls through a KV cache: the outputs of one uncached call."""
    prefill = min(prefill, T)
    block = TinyDecoder.random(8, 8, 2, 1, 1, 16, seed=seed).blocks[0]
    (x,) = _normal(seed, (T, 8))
    return _differs(impl(x, block, 2, prefill), REFERENCE["cached_positions_restart"](x, block, 2, prefill))


#: Each bug's property, with the sizes Hypothesis draws for it.
PROPERTY: dict[str, tuple[Callable[..., Problem], dict[str, st.SearchStrategy]]] = {}


def _register(names: tuple[Callable, ...], prop: Callable[..., Problem], **strategies: st.SearchStrategy) -> None:
    for bug in names:
        PROPERTY[bug.__name__] = (prop, strategies)


_ATTENTION = {"T": SIZES, "S": SIZES, "Dk": SIZES, "seed": SEEDS}
_register(
    (masking.weak_mask_value, masking.mask_after_softmax, masking.masked_fill_result_dropped),
    masked_attention_matches_the_reference,
    scale=st.integers(0, 12),  # drawn first, so the shrinker lowers it before the seed
    **_ATTENTION,
)
_register((masking.nan_for_fully_masked_rows,), a_query_with_no_key_gets_zeros, **_ATTENTION, block_first=st.booleans())
_register((masking.additive_mask_cast_to_bool,), additive_mask_matches_the_reference, **_ATTENTION)
_register(
    (masking.blocked_mask_passed_as_keep,),
    the_future_cannot_change_the_past,
    T=SIZES,
    Dk=SIZES,
    seed=SEEDS,
    t=st.integers(0, 3),
)
_register((masking.causal_mask_top_left,), newest_queries_match_the_full_pass, **_ATTENTION)
_register((masking.sliding_window_one_too_wide,), the_window_matches_the_reference, T=st.integers(1, 8), window=SIZES)
_register(
    (batching.padding_mask_on_query_axis, batching.mean_over_padded_rows),
    padding_does_not_change_a_sequence,
    scale=st.integers(0, 12),
    T=SIZES,
    D=SIZES,
    seed=SEEDS,
    pad=st.integers(0, 3),
)
_BATCH = {"B": SIZES, "T": SIZES, "seed": SEEDS}
_register((batching.batch_mask_on_head_axis,), each_example_gets_what_it_gets_alone, **_BATCH, H=SIZES, S=SIZES)
_register(
    (batching.batch_mask_on_kv_head_axis,),
    each_grouped_example_gets_what_it_gets_alone,
    **_BATCH,
    Hkv=SIZES,
    group=SIZES,
)
_register((heads.scale_by_model_width,), a_head_matches_the_reference, T=SIZES, H=SIZES, Dh=SIZES, seed=SEEDS)
_register((heads.scale_after_softmax, heads.softmax_over_queries), attention_matches_the_reference, **_ATTENTION)
_register(
    (heads.merge_heads_by_reshape,), merging_matches_the_reference, B=SIZES, H=SIZES, T=SIZES, Dh=SIZES, seed=SEEDS
)
_register(
    (positions.rope_half_split_on_interleaved_pairs,), rope_scores_match_the_reference, T=SIZES, pairs=SIZES, seed=SEEDS
)
_register(
    (positions.rope_permutation_wrong_head_count,),
    reordered_weights_keep_the_scores,
    Hkv=SIZES,
    group=SIZES,
    pairs=st.integers(2, 4),  # Dh of at least 4: Llama's is 64 (a width-2 head cannot be read as two)
    T=SIZES,
    seed=SEEDS,
)
_register((positions.cached_positions_restart,), cached_decoding_matches_uncached, T=SIZES, prefill=SIZES, seed=SEEDS)


@dataclass(frozen=True, repr=False)
class Verdict:
    """What :func:`falsify` found; truthy when the property held on every generated case.

    Attributes
    ----------
    prop : str
        The property's name.
    examples : int
        How many cases Hypothesis was allowed to try.
    case : dict or None
        The smallest failing case it found (the drawn integers), or None.
    problem : str or None
        What was wrong with the implementation's answer on that case.
    """

    prop: str
    examples: int
    case: dict[str, Any] | None = None
    problem: str | None = None

    def __bool__(self) -> bool:
        return self.case is None

    def __repr__(self) -> str:
        if self.case is None:
            return f"HOLDS {self.prop}: on every one of up to {self.examples} generated cases"
        case = ", ".join(f"{k}={v}" for k, v in self.case.items())
        return f"FAILS {self.prop}\n  smallest failing case: {case}\n  {self.problem}"


def falsify(bug: str, impl: Callable[..., Any], max_examples: int = 100) -> Verdict:
    """Run bug ``bug``'s property on ``impl``; return the smallest failing case Hypothesis finds, if any.

    Parameters
    ----------
    bug : str
        A name from ``selfattention.bugs.__all__``: which property to run.
    impl : callable
        The implementation to test, with that bug's signature (the buggy
        function, a fixed one, or the reference).
    max_examples : int, default 100
        Cases to generate (a failure found earlier stops the search).

    Raises
    ------
    ValueError
        If ``bug`` is not a bug's name, ``impl`` is not callable, or
        ``max_examples`` is not a positive integer.
    """
    if not isinstance(bug, str) or bug not in PROPERTY:
        raise ValueError(f"bug must be one of {sorted(PROPERTY)}; got {bug!r}")
    bug_function = getattr(_MODULES[bug], bug)
    required = [p for p in inspect.signature(bug_function).parameters.values() if p.default is p.empty]
    try:
        if not callable(impl) or isinstance(impl, type):
            raise TypeError
        inspect.signature(impl).bind(*required)
    except (TypeError, ValueError):
        raise ValueError(
            f"impl must be a function with the signature of bugs.{bug}, "
            f"({', '.join(p.name for p in required)}); got {impl!r}"
        ) from None
    max_examples = check_positive_int(max_examples, "max_examples", at_most=10_000)
    prop, strategies = PROPERTY[bug]
    failures: list[tuple[dict[str, Any], str]] = []

    @settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate, Phase.shrink),  # no explain phase: the case is the story
    )
    @given(**strategies)
    def check(**case: Any) -> None:
        try:
            problem = prop(impl, **case)
        except Exception as exc:  # a crash is a failure too; name it, as Hypothesis would
            problem = f"it raises {type(exc).__name__}: {exc}"
        if problem is not None:
            failures.append((case, problem))  # the last one recorded is the shrunk case, replayed at the end
            raise AssertionError(problem)

    try:
        check()
    except AssertionError:
        case, problem = failures[-1]
        return Verdict(prop.__name__, max_examples, case, problem)
    except Flaky:  # the same case failed once and passed once
        case, _ = failures[-1]
        problem = "it gives different answers on the same input (is it random, or does it keep state?)"
        return Verdict(prop.__name__, max_examples, case, problem)
    return Verdict(prop.__name__, max_examples)


def code(bug: str) -> str:
    """The code of bug ``bug``'s function as the page shows it, runnable when pasted into a notebook.

    It opens with the imports of the names the function uses, and leaves out
    the docstring and the comments that name the bug.

    Raises
    ------
    ValueError
        If ``bug`` is not a bug's name.
    """
    if not isinstance(bug, str) or bug not in PROPERTY:
        raise ValueError(f"bug must be one of {sorted(PROPERTY)}; got {bug!r}")
    module = _MODULES[bug]
    function = getattr(module, bug)
    source = inspect.getsource(function)
    start = source.index('"""')
    end = source.index('"""', start + 3) + 3
    source = source[:start].rstrip(" ") + source[end:].lstrip("\n")
    lines = [re.sub(r"\s*# the bug\b.*$", "", line) for line in source.splitlines()]
    used = sorted(set(re.findall(r"\b[A-Za-z_]\w*\b", "\n".join(lines))) & set(vars(module)) - {bug, "np"})
    imports = ["import numpy as np"]
    typing = [name for name in used if name == "Any"]
    if typing:
        imports.append("from typing import Any")
    names = [name for name in used if name != "Any" and not inspect.ismodule(vars(module)[name])]
    if names:
        imports.append(f"from {module.__name__} import {', '.join(names)}")
    return "\n".join([*imports, "", "", *lines])


_MODULES = {name: module for module in (masking, batching, heads, positions) for name in module.__all__}
