"""Chapter 12 exercises: shuffled patches, attention's share of a ViT block, a rollout at odds with layer 2."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from .._validation import precision_of, row_sum_tolerance
from ..vision import patchify
from ._framework import CaseList, CheckResult, Exercise, Mistake, answer_array, compare_array

__all__ = ["check_shuffle_patches", "check_attention_share", "check_disagreeing_maps"]


def _shuffle(images: np.ndarray, order: np.ndarray, p: int, slip: str = "") -> np.ndarray:
    """Images whose patch j (row by row) is the input's patch order[j]; ``slip`` names a mistake to make instead."""
    B, C, H, W = images.shape
    rows, cols = H // p, W // p
    if slip == "scatter":  # old patch j moved to place order[j]: the inverse permutation
        order = np.argsort(order)
    patches = patchify(images, p)  # (B, N, C*p*p), patches row by row
    if slip == "columns":  # patches numbered column by column instead
        by_column = patches.reshape(B, rows, cols, -1).swapaxes(1, 2).reshape(B, rows * cols, -1)
        patches = by_column[:, order].reshape(B, cols, rows, -1).swapaxes(1, 2).reshape(B, rows * cols, -1)
    else:
        patches = patches[:, order]
    if slip == "reshape":  # the patches poured back into (B, C, H, W) without moving any axis
        return patches.reshape(B, C, H, W)
    if slip == "channels_last":  # each patch read as (row, column, channel)
        grid = patches.reshape(B, rows, cols, p, p, C).transpose(0, 5, 1, 3, 2, 4)
    else:
        grid = patches.reshape(B, rows, cols, C, p, p)  # (B, rows, cols, C, p, p)
        axes = (0, 3, 1, 5, 2, 4) if slip == "transposed" else (0, 3, 1, 4, 2, 5)  # transposed: pixel columns first
        grid = grid.transpose(axes)  # (B, C, rows, p, cols, p)
    return grid.reshape(B, C, H, W)


def _shuffle_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for shape, p in [((2, 1, 8, 8), 2), ((2, 3, 6, 9), 3), ((1, 3, 4, 8), 2), ((1, 2, 4, 6), 1), ((3, 1, 4, 4), 4)]:
        rows, cols = shape[2] // p, shape[3] // p
        images = rng.normal(size=shape)
        if shape[1] == 3 and p == 2:
            images = images.astype(np.float32)  # a float32 batch: moving pixels must not change them
        order = rng.permutation(rows * cols)
        cases.append((f"images {shape} {images.dtype}, {rows}x{cols} patches of {p}x{p}", (images, order, p)))
    return cases


_SHUFFLE_SLIPS = [
    (
        "scatter",
        "It matches moving patch j to place order[j], the inverse permutation; gather instead, as x[order] does: "
        "new patch j is old patch order[j]",
    ),
    (
        "columns",
        "It matches numbering the patches column by column; patchify numbers them row by row, so patch j sits at "
        "grid row j // cols, column j % cols",
    ),
    (
        "reshape",
        "It matches reshaping the shuffled (B, N, C*p*p) patches straight to (B, C, H, W); undo patchify's axis "
        "order: reshape to (B, rows, cols, C, p, p), move C first and each p after its grid axis, then reshape",
    ),
    (
        "transposed",
        "It matches every patch transposed (its pixel rows and columns swapped); a patch's pixel-row axis goes "
        "right after the grid's row axis: (B, C, rows, p_row, cols, p_col)",
    ),
    (
        "channels_last",
        "It matches reading each flattened patch as (row, column, channel); patchify flattens it as "
        "(channel, row, column), the order of a Conv2d weight",
    ),
]

SHUFFLE_PATCHES = Exercise(
    name="shuffled patches",
    kind="extend",
    concept="patches back into an image, and what only the position table knows",
    chapter=12,
    number=1,
    cases=_shuffle_cases,
    reference=_shuffle,
    compare=compare_array("shuffled images", "no NaN or inf belongs here: the answer only moves pixels"),
    mistakes=tuple(Mistake(partial(_shuffle, slip=slip), hint) for slip, hint in _SHUFFLE_SLIPS),
)


def check_shuffle_patches(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(images, order, patch_size) -> (B, C, H, W)``: the images with their patches rearranged.

    ``images`` is (B, C, H, W); ``order`` is a permutation of the N patch
    indices, numbered row by row as :func:`~selfattention.patchify` numbers
    them. Patch ``j`` of every returned image must hold what patch
    ``order[j]`` held, pixels and channels unchanged. See chapter 12, exercise 1.
    """
    return SHUFFLE_PATCHES.check(fn)


def _share(image_size: int, patch_size: int, d_model: int, d_ff: int, num_heads: int, slip: str = "") -> float:
    """The fraction of one encoder block's multiply-adds spent in self-attention; ``slip`` names a mistake."""
    side = image_size // patch_size
    T = side + 1 if slip == "one_row" else side**2 + (0 if slip == "no_class" else 1)
    D, F = d_model, d_ff
    projections = {"no_out": 3, "no_projections": 0}.get(slip, 4) * T * D * D  # Q, K, V and the output
    mixing = {"per_head": 2 * num_heads, "scores_only": 1}.get(slip, 2) * T * T * D  # Q K^T and P V, all heads
    mlp = (1 if slip == "mlp_once" else 2) * T * D * F  # D -> F and F -> D
    attention = projections + mixing
    if slip == "ratio":
        return np.float64(attention / mlp)
    return np.float64(
        (mlp if slip == "mlp_share" else attention) / (attention + mlp) * (100 if slip == "percent" else 1)
    )


_SHARE_SLIPS = [
    ("no_class", "It matches leaving out the class token: a block processes N + 1 tokens, T = (size / p)^2 + 1"),
    ("one_row", "It matches counting one row of patches; the grid is (size / p) by (size / p)"),
    (
        "per_head",
        "It matches multiplying the scores by the number of heads; H heads of width D / H cost T * T * (D / H) "
        "each, T * T * D together, so the heads do not change the count",
    ),
    ("scores_only", "It matches counting the scores Q K^T but not the weighted sum P V, which costs as much"),
    ("no_out", "It matches three projections; attention has four, W_q, W_k, W_v and the output W_out"),
    ("no_projections", "It matches counting only Q K^T and P V; the four D x D projections belong to attention"),
    ("mlp_once", "It matches counting one layer of the MLP; it has two, D -> F and F -> D"),
    ("ratio", "It matches attention divided by the MLP; return attention's share of the two together"),
    ("mlp_share", "It matches the MLP's share; return attention's"),
    ("percent", "It matches a percentage; return a fraction between 0 and 1"),
]

ATTENTION_SHARE = Exercise(
    name="attention's share of a ViT block",
    kind="derive",
    concept="where a ViT block's arithmetic goes, as the patches shrink",
    chapter=12,
    number=2,
    cases=lambda rng: [
        (f"{name}: {s}x{s} image, p={p}, D={D}, F={F}, H={H}", (s, p, D, F, H))
        for name, s, p, D, F, H in [
            ("the digits' TinyViT", 8, 2, 32, 64, 4),
            ("ViT-B/16", 224, 16, 768, 3072, 12),
            ("ViT-B/16 at 384", 384, 16, 768, 3072, 12),
            ("ViT-L/14", 224, 14, 1024, 4096, 16),
            ("one patch, one head", 32, 32, 64, 256, 1),
            ("one-pixel patches", 8, 1, 16, 64, 2),
        ]
    ],
    reference=_share,
    compare=compare_array("share", "check for a division by zero"),
    mistakes=tuple(Mistake(partial(_share, slip=slip), hint) for slip, hint in _SHARE_SLIPS),
)


def check_attention_share(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(image_size, patch_size, d_model, d_ff, num_heads) -> float``.

    The fraction of one encoder block's multiply-adds that self-attention
    takes (the Q, K, V and output projections, the scores and the weighted
    sum), against the MLP (D -> F -> D), for a square image cut into square
    patches plus a class token. Biases, the softmax, the norms and the
    activation are left out. See chapter 12, exercise 2.
    """
    return ATTENTION_SHARE.check(fn)


MARGIN = 0.05  # how far the favoured patch must lead every other, in both maps


def _two_layers(first: np.ndarray, second: np.ndarray, H: int) -> np.ndarray:
    """Two layers' (T, T) weights, every head alike: (2, H, T, T)."""
    return np.repeat(np.stack([first, second])[:, None], H, axis=1)


def _design(T: int, H: int, rollout_patch: int, last_patch: int, first_patch_token: int = 1) -> np.ndarray:
    """One answer of many: in layer 2 the class token reads patch b, which read patch a in layer 1, as it did.

    Every other token attends to itself. ``first_patch_token`` is the token
    index of patch 0: 1, after the class token (0 is the mistake of reading
    patch indices as token indices).
    """
    a, b = rollout_patch + first_patch_token, last_patch + first_patch_token  # token indices
    first, second = np.eye(T), np.eye(T)
    first[0], first[b], second[0] = np.eye(T)[[a, a, b]]
    return _two_layers(first, second, H)


def _reversed_design(T: int, H: int, rollout_patch: int, last_patch: int) -> np.ndarray:
    """A design that works if rollout multiplied the first layer on the left."""
    a, b = rollout_patch + 1, last_patch + 1
    first, second = np.eye(T), np.eye(T)
    first[0], second[0] = np.eye(T)[a], np.eye(T)[b]
    return _two_layers(first, second, H)


def _no_residual_design(T: int, H: int, rollout_patch: int, last_patch: int) -> np.ndarray:
    """A design that works if rollout had no residual: the class token keeps half of what it was."""
    a, b = rollout_patch + 1, last_patch + 1
    first, second = np.eye(T), np.eye(T)
    first[b], second[0] = np.eye(T)[a], np.eye(T)[b]
    return _two_layers(first, second, H)


def _class_rows(
    weights: np.ndarray, *, later_left: bool = True, residual: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Layer 2's class-token row (heads averaged) and rollout's row 0, both over all T tokens."""
    T = weights.shape[-1]
    first, second = (layer.mean(axis=0) for layer in weights)  # (T, T) each: the heads averaged
    last = second[0]
    if residual:
        first, second = (0.5 * a + 0.5 * np.eye(T) for a in (first, second))
    return last, (second @ first if later_left else first @ second)[0]


def _lead(row: np.ndarray, patch: int, first_patch_token: int = 1) -> tuple[int, float]:
    """The patch ``row`` favours, and how far ``patch`` leads every other (negative when it does not)."""
    patches = row[first_patch_token : first_patch_token + len(row) - 1]
    others = np.delete(patches, patch)
    return int(np.argmax(patches)), float(patches[patch] - others.max()) if others.size else 1.0


def _weights_problem(got: Any, shape: tuple[int, ...]) -> tuple[np.ndarray | None, str | None]:
    """The answer as float64 weights, or what keeps it from being (L, H, T, T) attention weights."""
    weights = answer_array(got)
    if weights is None:
        return None, f"the weights should be an array of numbers; got {type(got).__name__}"
    if weights.shape != shape:
        return None, f"the weights should have shape {shape} (layers, H, T, T); got {weights.shape}"
    eps, dtype_name = precision_of(got)  # before the conversion, which reads bfloat16 as float32
    weights = weights.astype(np.float64)
    if not np.isfinite(weights).all():
        return None, "the weights contain NaN or inf; attention weights are finite"
    tolerance = row_sum_tolerance(shape[-1], eps)
    sums = weights.sum(axis=-1)
    if weights.min() < -tolerance or np.abs(sums - 1).max() > tolerance:
        return None, (
            f"every row must be attention weights, non-negative and summing to 1 (within {tolerance:.2g} for "
            f"{dtype_name}); found row sums from {sums.min():.6g} to {sums.max():.6g} and a smallest weight of "
            f"{weights.min():.3g}"
        )
    return weights, None


def _shown(row: np.ndarray) -> list[float]:
    return np.round(row[1:], 3).tolist()


def _judge_maps(got: Any, expected: np.ndarray) -> str | None:
    """What is wrong with proposed weights: their form, their rows, or what the two maps favour."""
    weights, problem = _weights_problem(got, expected.shape)
    if problem:
        return problem
    targets = [int(np.argmax(row[1:])) for row in _class_rows(expected)]  # read off the reference design
    names = ("layer 2's class-token row, heads averaged,", "rollout's row 0")
    for name, row, target in zip(names, _class_rows(weights), targets, strict=True):
        best, lead = _lead(row, target)
        if best != target:
            return f"{name} favours patch {best}, not patch {target} (its weights on the patches: {_shown(row)})"
        if lead < MARGIN:
            return (
                f"{name} favours patch {target} by only {lead:.3g}; it must lead every other patch by {MARGIN} "
                f"(its weights on the patches: {_shown(row)})"
            )
    return None


def _holds(got: Any, args: tuple[int, int, int, int], **reading: Any) -> bool:
    """Whether both maps would favour their patches by the margin, read as a mistaken learner reads them."""
    T, H, a, b = args
    weights, problem = _weights_problem(got, (2, H, T, T))
    if problem:
        return False
    first_patch_token = reading.pop("first_patch_token", 1)
    if reading.pop("swapped", False):
        weights = weights[::-1]
    last, rollout = _class_rows(weights, **reading)
    return all(
        best == target and lead >= MARGIN
        for (best, lead), target in ((_lead(last, b, first_patch_token), b), (_lead(rollout, a, first_patch_token), a))
    )


DISAGREEING_MAPS = Exercise(
    name="a rollout that disagrees with layer 2",
    kind="search",
    concept="rollout follows what the attended tokens attended to",
    chapter=12,
    number=3,
    cases=lambda rng: [
        (f"{desc}T={T}, H={H}, rollout on patch {a}, layer 2 on patch {b}", (T, H, a, b))
        for desc, T, H, a, b in [
            ("the digits' 17 tokens: ", 17, 4, 5, 10),
            ("", 3, 1, 0, 1),
            ("", 5, 2, 3, 0),
            ("one head: ", 10, 1, 8, 2),
        ]
    ],
    reference=_design,
    compare=_judge_maps,
    mistakes=(
        Mistake(
            lambda T, H, a, b: _design(T, H, a, b, first_patch_token=0),
            "It matches reading patch indices as token indices; token 0 is the class token, so patch j is token j + 1",
            detect=lambda got, args: _holds(got, args, first_patch_token=0),
        ),
        Mistake(
            lambda T, H, a, b: _design(T, H, a, b)[::-1],
            "It matches the layers swapped; weights[0] is layer 1, weights[1] layer 2",
            detect=lambda got, args: _holds(got, args, swapped=True),
        ),
        Mistake(
            _reversed_design,
            "It matches a design that would work if rollout put the first layer on the left; R = A2_hat @ A1_hat: "
            "the class token's row of A2_hat picks layer-1 outputs, and each of those is a row of A1_hat over the "
            "patches",
            detect=lambda got, args: _holds(got, args, later_left=False),
        ),
        Mistake(
            _no_residual_design,
            "It matches rollout without the residual; with it, half of every row of A_hat stays on the token "
            "itself, so the class token keeps half its own layer-1 row: make that row favour the rollout patch too",
            detect=lambda got, args: _holds(got, args, residual=False),
        ),
    ),
    passes="both maps favour their patch by the margin",
)


def check_disagreeing_maps(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(num_tokens, num_heads, rollout_patch, last_patch) -> (2, H, T, T)``: two layers' weights.

    Token 0 is the class token and patch ``j`` is token ``j + 1``; every row
    must be non-negative and sum to 1. Rollout's row 0 (heads averaged,
    ``0.5 * A + 0.5 * I`` per layer, layer 2 on the left) must favour
    ``rollout_patch`` and layer 2's class-token row, heads averaged, must
    favour ``last_patch``, each leading every other patch by at least 0.05.
    Many answers pass. See chapter 12, exercise 3.
    """
    return DISAGREEING_MAPS.check(fn)
