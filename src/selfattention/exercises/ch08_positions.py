"""Chapter 8 exercises: RoPE weights for the other layout, the NTK-aware base, and values for chosen outputs."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array

# Reordering only moves columns, so a NaN or inf in the answer was computed, not moved.
_MOVED_HINT = "a reordering only moves columns, so no new NaN or inf can appear: index the columns, compute nothing"
# The NTK-aware base is the old base times the factor to a power near 1: a NaN or inf is a division by zero.
_BASE_HINT = "check for a division by zero (Dh - 2 is never 0 here) or an exponent that grew with the base"

__all__ = ["check_rope_weights", "check_ntk_base", "check_values_for_outputs"]


# --- Exercise 1: interleaved weights for rotate-half code -------------------------------------------------


def _to_rotate_half(weight: np.ndarray, num_heads: int, *, whole_width: bool = False) -> np.ndarray:
    """Reorder a projection's output columns, head by head, from interleaved pairs to rotate-half pairs."""
    width = weight.shape[-1] if whole_width else weight.shape[-1] // num_heads
    order = np.concatenate([np.arange(0, width, 2), np.arange(1, width, 2)])  # (2i, 2i+1) -> (i, i + width/2)
    columns = np.concatenate([order + h * width for h in range(weight.shape[-1] // width)])
    return weight[..., columns]


def _from_rotate_half(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """The inverse reordering: what applying the conversion in the wrong direction gives."""
    width = weight.shape[-1] // num_heads
    order = np.argsort(np.concatenate([np.arange(0, width, 2), np.arange(1, width, 2)]))
    return weight[..., np.concatenate([order + h * width for h in range(num_heads)])]


def _convert_pair(
    w_q: np.ndarray, w_k: np.ndarray, num_heads: int, num_kv_heads: int, *, key_heads: str = "own", **how: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Both projections reordered; ``key_heads`` says how many heads W_K is cut into (the mistakes miscount)."""
    heads = {"own": num_kv_heads, "query": num_heads, "per group": num_heads // num_kv_heads}[key_heads]
    convert = _from_rotate_half if how.get("backwards") else partial(_to_rotate_half, **how)
    return convert(w_q, num_heads), convert(w_k, heads)


def _conversion_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for D, H, Hkv, Dh, dtype in [
        (4, 1, 1, 4, np.float64),
        (8, 2, 2, 4, np.float64),
        (16, 4, 2, 8, np.float64),  # 4 // 2 == 2: cutting W_K by query heads per group happens to be right
        (16, 8, 2, 8, np.float64),
        (8, 4, 1, 6, np.float32),
        (6, 3, 3, 2, np.float64),
    ]:
        w_q, w_k = rng.normal(size=(D, H * Dh)).astype(dtype), rng.normal(size=(D, Hkv * Dh)).astype(dtype)
        heads = f"{H} head{'s' * (H > 1)} of {Dh}" if H == Hkv else f"{H} query heads, {Hkv} key head{'s' * (Hkv > 1)}"
        cases.append((f"D={D}, {heads}, Dh={Dh}" + (", float32" if dtype == np.float32 else ""), (w_q, w_k, H, Hkv)))
    return cases


def _compare_converted(got: Any, expected: tuple[np.ndarray, np.ndarray]) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"should return a pair (w_q_new, w_k_new); got {type(got).__name__}"
    return compare_array("converted W_Q", _MOVED_HINT)(got[0], expected[0]) or compare_array(
        "converted W_K", _MOVED_HINT
    )(got[1], expected[1])


ROPE_WEIGHTS = Exercise(
    name="interleaved weights for rotate-half code",
    kind="extend",
    concept="loading RoPE weights: the reordering within each head, and W_K's own head count",
    chapter=8,
    number=1,
    cases=_conversion_cases,
    reference=_convert_pair,
    compare=_compare_converted,
    mistakes=(
        Mistake(
            partial(_convert_pair, whole_width=True),
            "It matches reordering the whole width at once; each head rotates its own features, so reorder "
            "within every head's columns",
        ),
        Mistake(
            partial(_convert_pair, key_heads="query"),
            "It matches cutting W_K into num_heads heads; W_K has num_kv_heads heads of the same width Dh, so "
            "reorder it in num_kv_heads blocks",
        ),
        Mistake(
            partial(_convert_pair, key_heads="per group"),
            "It matches cutting W_K into num_heads // num_kv_heads blocks (the slip llama.cpp's conversion "
            "script made); that count is the query heads per key head, right only when it happens to equal "
            "num_kv_heads. W_K has num_kv_heads heads",
        ),
        Mistake(
            partial(_convert_pair, backwards=True),
            "It matches the reordering run backwards (rotate-half to interleaved); new column i must be old "
            "column 2i, and new column i + Dh/2 old column 2i + 1",
        ),
        Mistake(
            lambda w_q, w_k, num_heads, num_kv_heads: (w_q, w_k),
            "It matches the weights unchanged; the rotate-half code pairs feature i with i + Dh/2, so the "
            "columns must move",
        ),
    ),
)


def check_rope_weights(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(w_q, w_k, num_heads, num_kv_heads) -> (w_q_new, w_k_new)``: weights for rotate-half RoPE.

    ``w_q`` is (D, num_heads * Dh) and ``w_k`` (D, num_kv_heads * Dh), in the
    ``x @ w`` layout, heads side by side, trained for RoPE that pairs
    features (2i, 2i + 1) of each head (interleaved). The new weights must
    give, under rotate-half RoPE (pairs (i, i + Dh/2)), the same scores.
    See chapter 8, exercise 1.
    """
    return ROPE_WEIGHTS.check(fn)


# --- Exercise 2: the NTK-aware base ---------------------------------------------------------------------


def _ntk_base(base: float, head_dim: int, factor: float, *, exponent: str = "right") -> np.floating:
    """The base under which RoPE's slowest pair, i = Dh/2 - 1, turns ``factor`` times slower.

    Pair i turns at base^(-2i/Dh), so the slowest turns at base^(-(Dh-2)/Dh);
    new_base^(-(Dh-2)/Dh) = base^(-(Dh-2)/Dh) / factor gives
    new_base = base * factor^(Dh/(Dh-2)). ``exponent`` names the mistakes.
    """
    power = {
        "right": head_dim / (head_dim - 2),
        "pair Dh/2": 1.0,  # as if the slowest pair were base^-1
        "pair 1": head_dim / 2,  # slows pair 1, the second fastest, by the factor
        "upside down": (head_dim - 2) / head_dim,
        "base^(-i/Dh)": 2 * head_dim / (head_dim - 2),  # frequencies base^(-i/Dh)
        "none": 0.0,
        "divided": -1.0,
    }[exponent]
    return np.asarray(base * factor**power)[()]  # a NumPy scalar, float32 when base and factor are


def _ntk_cases(rng: np.random.Generator) -> CaseList:
    cases = [
        (f"base {base:,g}, Dh={Dh}, factor {factor:g}", (base, Dh, factor))
        for base, Dh, factor in [
            (10000.0, 128, 4.0),
            (10000.0, 64, 2.0),
            (500000.0, 128, 8.0),  # Llama 3's base
            (10000.0, 4, 3.0),  # the narrowest head with a pair to keep and a pair to slow
            (10000.0, 16, 1.0),  # no stretch: the base stays
            (10000.0, 8, 2.5),
        ]
    ]
    return [*cases, ("base 10,000, Dh=32, factor 1.5, as float32", (np.float32(10000.0), 32, np.float32(1.5)))]


_NTK_SLIPS = [
    (
        "none",
        "It matches the base unchanged; position interpolation leaves the base alone and divides the "
        "positions, NTK-aware scaling raises the base instead",
    ),
    (
        "divided",
        "It matches base / factor; a smaller base makes every pair turn faster. To slow the slow pairs, raise the base",
    ),
    (
        "pair Dh/2",
        "It matches base * factor, which slows a pair turning at base^(-1) by the factor; that would be "
        "pair Dh/2, which does not exist. The slowest pair is i = Dh/2 - 1, turning at base^(-(Dh-2)/Dh)",
    ),
    (
        "pair 1",
        "It matches base * factor^(Dh/2), which slows pair 1 by the factor; the pair to slow by the "
        "factor is the slowest, i = Dh/2 - 1",
    ),
    (
        "upside down",
        "It matches base * factor^((Dh-2)/Dh), the exponent upside down: solve new_base^(-(Dh-2)/Dh) = "
        "base^(-(Dh-2)/Dh) / factor by raising both sides to the power -Dh/(Dh-2)",
    ),
    (
        "base^(-i/Dh)",
        "It matches frequencies base^(-i/Dh); pair i turns at base^(-2i/Dh) radians per position",
    ),
]

NTK_BASE = Exercise(
    name="the NTK-aware RoPE base",
    kind="derive",
    concept="NTK-aware scaling: a larger base that slows the slowest pair by the factor and leaves pair 0",
    chapter=8,
    number=2,
    cases=_ntk_cases,
    reference=_ntk_base,
    compare=compare_array("new base", _BASE_HINT),
    mistakes=tuple(Mistake(partial(_ntk_base, exponent=slip), hint) for slip, hint in _NTK_SLIPS),
)


def check_ntk_base(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(base, head_dim, factor) -> float``: the NTK-aware RoPE base.

    The new base must make RoPE's slowest pair (i = Dh/2 - 1) turn ``factor``
    times slower than under ``base``, while pair 0 keeps turning one radian
    per position. ``head_dim`` is even and at least 4; ``factor`` is at
    least 1. See chapter 8, exercise 2.
    """
    return NTK_BASE.check(fn)


# --- Exercise 3: values for chosen outputs -----------------------------------------------------------------


def _values_for(y: np.ndarray, slope: float, *, slip: str = "") -> np.ndarray:
    """The values under which a causal head with equal scores and an ALiBi slope outputs ``y`` (T, Dv).

    Query p weights key j <= p by decay^(p - j), decay = e^(-slope), divided
    by Z_p, the sum of decay^d for d = 0 ... p. Its sum before the division,
    Z_p y_p = v_p + decay * Z_(p-1) y_(p-1), so v_p is the difference.
    ``slip`` names a mistake.
    """
    y = np.asarray(y)
    if slip == "outputs":
        return y
    dtype = np.result_type(y, np.float32)  # float32 outputs: the whole computation in float32
    slope = 0.0 if slip in ("no slope", "running sum") else slope
    decay = np.exp((1.0 if slip == "growing" else -1.0) * np.asarray(slope, dtype=dtype))
    Z = np.cumsum(decay ** np.arange(len(y), dtype=dtype))  # (T,): Z_p, each query's total weight
    if slip == "one key":
        Z = Z - decay ** np.arange(len(y), dtype=dtype)  # p terms: the query's own key left out
    if slip == "running sum":
        Z = np.ones_like(Z)  # as if the outputs were sums, not means
    totals = Z[:, None] * y  # (T, Dv): sum over j <= p of decay^(p - j) v_j
    if slip == "subtraction":
        return totals
    return totals - decay * np.concatenate([np.zeros_like(totals[:1]), totals[:-1]])  # (T, Dv)


def _values_cases(rng: np.random.Generator) -> CaseList:
    p = np.arange(8.0)[:, None]
    return [
        ("the chapter's example: outputs 1/(p+1), slope 0, T=6", (1 / (p[:6] + 1), 0.0)),
        ("outputs 0, 1, 2, ... (each query's own position), slope 0, T=5", (p[:5].copy(), 0.0)),
        ("random outputs, slope 1/2, T=6, Dv=2", (rng.normal(size=(6, 2)), 0.5)),
        ("one token, slope 1/2, Dv=3", (rng.normal(size=(1, 3)), 0.5)),
        ("random outputs, a shallow head: slope 1/256, T=7", (rng.normal(size=(7, 1)), 2.0**-8)),
        ("random outputs, a steep head: slope 3, T=5, Dv=2", (rng.normal(size=(5, 2)), 3.0)),
        ("float32 outputs, slope 1/8, T=8, Dv=2", (rng.normal(size=(8, 2)).astype(np.float32), 0.125)),
    ]


_VALUES_SLIPS = [
    (
        "outputs",
        "It matches values equal to the outputs; each output is a weighted mean of the values up to it, "
        "not the latest value alone",
    ),
    (
        "running sum",
        "It matches undoing a running sum (y_p - y_(p-1)); the head takes a mean, so multiply each "
        "output by its query's total weight before subtracting",
    ),
    (
        "subtraction",
        "It matches each query's weighted sum, Z_p y_p, with nothing subtracted; that sum still holds "
        "the earlier values: subtract e^(-slope) times the previous query's sum",
    ),
    (
        "one key",
        "It matches a normaliser of p terms; query p sees p + 1 keys, itself included, so Z_p sums "
        "e^(-slope d) for d = 0 ... p",
    ),
    (
        "no slope",
        "It matches the answer for equal weights, (p + 1) y_p - p y_(p-1), whatever the slope; with "
        "ALiBi key j gets weight e^(-slope (p - j)), so the earlier sum is damped by e^(-slope)",
    ),
    (
        "growing",
        "It matches weights that grow with the distance, e^(+slope (p - j)); ALiBi subtracts slope "
        "times the distance from the scores, so distant keys weigh less",
    ),
]

VALUES_FOR_OUTPUTS = Exercise(
    name="values for chosen outputs",
    kind="search",
    concept="with equal scores a causal head takes a running mean (with ALiBi, a decaying one): it can output "
    "each token's position",
    chapter=8,
    number=3,
    cases=_values_cases,
    reference=_values_for,
    compare=compare_array(
        "values",
        "a slope of 0 makes 1 - e^(-slope) zero, so a formula that divides by it fails there: query p's "
        "normaliser is the finite sum of e^(-slope d) for d = 0 ... p, which is p + 1 at slope 0",
    ),
    mistakes=tuple(Mistake(partial(_values_for, slip=slip), hint) for slip, hint in _VALUES_SLIPS),
    passes="the head outputs the chosen numbers",
)


def check_values_for_outputs(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(y, slope) -> (T, Dv)``: values under which a causal head outputs ``y``.

    Every query and key of the head is the same vector, so its scores are
    equal; it has a causal mask and an ALiBi bias of slope ``slope >= 0``
    (0: none), so query ``p`` weights key ``j <= p`` by ``e^(-slope (p - j))``,
    normalised. ``y`` is (T, Dv): the outputs wanted, one row per position.
    See chapter 8, exercise 3.
    """
    return VALUES_FOR_OUTPUTS.check(fn)
