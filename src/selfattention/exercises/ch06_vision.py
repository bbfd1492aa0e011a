"""Chapter 6 exercises: einops-order patch weights in a Conv2d, BigGAN's pooled keys, and a score scale moved into q."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np

from ..scores import softmax
from ..vision import t2t_attention_forward
from ._framework import CaseList, CheckResult, Exercise, Mistake, answer_array, compare_array

__all__ = ["check_conv_patch_weight", "check_biggan_attention", "check_fold_qk_scale"]


def _slips(reference: Callable[..., Any], hints: dict[str, str]) -> tuple[Mistake, ...]:
    """One :class:`Mistake` per known slip: ``reference`` run with ``slip=name`` computes it."""
    return tuple(Mistake(partial(reference, slip=name), hint) for name, hint in hints.items())


# --- Exercise 1: a Linear weight on (p1 p2 c) patches, as a Conv2d kernel ----------------------


def _conv_kernel(w: np.ndarray, channels: int, patch_size: int, *, slip: str = "") -> np.ndarray:
    """The (D, C, p, p) kernel of the Linear ``w`` (p*p*C, D) on einops-order patches; ``slip`` a known mistake."""
    C, p, D = channels, patch_size, w.shape[-1]
    if slip == "chapter":  # the chapter's line, which assumes (c p1 p2) patches
        return w.T.reshape(D, C, p, p)
    if slip == "no_transpose":  # w read as if it were already (D, p*p*C)
        return w.reshape(D, p, p, C).transpose(0, 3, 1, 2)
    kernel = w.T.reshape(D, p, p, C)  # (D, p1, p2, c): row d of w.T, in the order einops flattened it
    if slip == "channels_last":
        return kernel
    return kernel.transpose(0, 3, 2, 1) if slip == "swapped" else kernel.transpose(0, 3, 1, 2)  # (D, C, p, p)


def _conv_weight_cases(rng: np.random.Generator) -> CaseList:
    shapes = [(3, 4, 8), (2, 3, 5), (1, 2, 4), (4, 1, 3), (3, 2, 1)]  # (C, p, D): C = 1 and p = 1 hide the bug
    dtypes = [np.float64] * 4 + [np.float32]  # the last case, D = 1, also has float32 weights
    return [
        (
            f"C={C}, p={p}, D={D}{', float32 weights' if dtype == np.float32 else ''}",
            (rng.normal(size=(p * p * C, D)).astype(dtype), C, p),
        )
        for (C, p, D), dtype in zip(shapes, dtypes, strict=True)
    ]


CONV_PATCH_WEIGHT = Exercise(
    name="einops patch weights in a Conv2d",
    kind="extend",
    concept="the order of the numbers inside a patch",
    chapter=6,
    number=1,
    cases=_conv_weight_cases,
    reference=_conv_kernel,
    compare=compare_array("kernel", "no arithmetic is needed here, only a reshape and a transpose of w"),
    mistakes=_slips(
        _conv_kernel,
        {
            "chapter": (
                "It matches the chapter's w.T.reshape(D, C, p, p), which reads each patch as (channel, row, column); "
                "einops flattened it as (row, column, channel): reshape w.T to (D, p, p, C), then move the channel "
                "axis second (with C = 1 or p = 1 the two orders coincide, which is why such tests miss it)"
            ),
            "swapped": (
                "It matches each kernel transposed, rows and columns swapped: in '(p1 p2 c)' p1 is the row inside the "
                "patch and p2 the column, and a Conv2d kernel is (D, C, row, column)"
            ),
            "no_transpose": (
                "It matches reshaping w without transposing it: w is (p*p*C, D) in the x @ w layout, one column per "
                "output feature; a Conv2d weight puts the output feature first, so start from w.T"
            ),
            "channels_last": (
                "It matches the kernel left as (D, p, p, C); a Conv2d weight is (D, C, p, p): move the channel axis "
                "to second place"
            ),
        },
    ),
)


def check_conv_patch_weight(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(w, channels, patch_size) -> (D, C, p, p)``: a patch projection's weight as a Conv2d kernel.

    ``w`` is (p*p*C, D) in the ``x @ w`` layout, for patches flattened in
    einops' ``'(p1 p2 c)'`` order (row, column, channel); the kernel must make
    ``Conv2d(C, D, kernel_size=p, stride=p)`` compute the same tokens.
    See chapter 6, exercise 1.
    """
    return CONV_PATCH_WEIGHT.check(fn)


# --- Exercise 2: BigGAN's attention block, with 2 x 2 max-pooled keys and values -------------


def _pool(t: np.ndarray, how: str = "max") -> np.ndarray:
    """2 x 2 max pooling of (B, c, H, W) maps, as F.max_pool2d(t, 2); ``how`` names a known mistake instead."""
    B, c, H, W = t.shape
    if how == "none":
        return t
    if how == "strips":  # runs of 4 pixels of the flattened map, not 2 x 2 blocks
        return t.reshape(B, c, H * W // 4, 4).max(axis=-1)  # (B, c, N/4)
    blocks = t.reshape(B, c, H // 2, 2, W // 2, 2)  # (B, c, H/2, 2, W/2, 2): block (i, j) is [:, :, i, :, j, :]
    return blocks.mean(axis=(3, 5)) if how == "average" else blocks.max(axis=(3, 5))  # (B, c, H/2, W/2)


def _biggan_attention(x: np.ndarray, state: Mapping[str, np.ndarray], *, slip: str = "") -> np.ndarray:
    """BigGAN-PyTorch's ``layers.Attention`` forward (plain 1x1 convolutions); ``slip`` names a known mistake."""
    dtype = np.asarray(x).dtype
    x = np.asarray(x, dtype=float)  # computed in float64, returned in the input's precision
    B, C, H, W = x.shape

    def conv(name: str, t: np.ndarray) -> np.ndarray:  # a 1x1 convolution: channels mixed at every pixel
        return np.einsum("oc,bchw->bohw", np.asarray(state[f"{name}.weight"], dtype=float)[:, :, 0, 0], t)

    how = {"no_pool": "none", "average": "average", "strips": "strips"}.get(slip, "max")
    if slip == "pool_first":
        phi, g = conv("phi", _pool(x)), conv("g", _pool(x))
    else:
        phi, g = _pool(conv("phi", x), how), _pool(conv("g", x), how)  # (B, C/8, H/2, W/2), (B, C/2, H/2, W/2)
    q = conv("theta", x).reshape(B, C // 8, H * W).swapaxes(1, 2)  # (B, N, C/8): every pixel's query
    k = phi.reshape(B, C // 8, -1).swapaxes(1, 2)  # (B, S, C/8), S = N/4
    v = g.reshape(B, C // 2, -1).swapaxes(1, 2)  # (B, S, C/2)
    scores = q @ k.swapaxes(1, 2) / ((C // 8) ** 0.5 if slip == "scaled" else 1.0)  # (B, N, S), unscaled
    weights = softmax(scores, axis=-2 if slip == "query_axis" else -1)
    out = weights @ v  # (B, N, C/2)
    out = out.reshape(B, C // 2, H, W) if slip == "reshape" else out.swapaxes(1, 2).reshape(B, C // 2, H, W)
    gamma = 1.0 if slip == "no_gamma" else np.asarray(state["gamma"], dtype=float)
    return (gamma * conv("o", out) + x).astype(dtype if dtype.kind == "f" else float)


def _biggan_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for B, C, H, W, gamma, dtype, note in [
        (1, 16, 4, 4, 0.5, np.float64, ""),
        (2, 32, 4, 6, 1.0, np.float64, ""),
        (1, 8, 2, 2, 0.7, np.float64, ": one key"),
        (2, 16, 6, 4, -0.8, np.float32, ", float32"),
    ]:
        state = {  # the state dict of BigGAN's Attention(C) with plain Conv2d layers, as NumPy arrays
            "theta.weight": 2 * rng.normal(size=(C // 8, C, 1, 1)) / np.sqrt(C),
            "phi.weight": 2 * rng.normal(size=(C // 8, C, 1, 1)) / np.sqrt(C),
            "g.weight": rng.normal(size=(C // 2, C, 1, 1)) / np.sqrt(C),
            "o.weight": rng.normal(size=(C, C // 2, 1, 1)) / np.sqrt(C // 2),
            "gamma": np.array(gamma),
        }
        state = {name: value.astype(dtype) for name, value in state.items()}
        x = rng.normal(size=(B, C, H, W)).astype(dtype)
        cases.append((f"x {(B, C, H, W)}{note}, gamma={gamma}", (x, state)))
    return cases


BIGGAN_ATTENTION = Exercise(
    name="BigGAN's attention with pooled keys",
    kind="extend",
    concept="fewer keys than queries: pooled keys and values",
    chapter=6,
    number=2,
    cases=_biggan_cases,
    reference=_biggan_attention,
    compare=compare_array("output"),
    mistakes=_slips(
        _biggan_attention,
        {
            "no_pool": (
                "It matches attending to every pixel: BigGAN max-pools phi(x) and g(x) over 2 x 2 blocks, so the "
                "N queries see N/4 keys"
            ),
            "average": "It matches average pooling; BigGAN keeps the largest value of each 2 x 2 block",
            "pool_first": (
                "It matches pooling x before the 1 x 1 convolutions; BigGAN pools their outputs, phi(x) and g(x), "
                "and a maximum does not commute with a matrix product"
            ),
            "strips": (
                "It matches pooling runs of 4 consecutive pixels of the flattened map (1 x 4 strips); pool 2 x 2 "
                "blocks: reshape each map to (..., H/2, 2, W/2, 2) and take the maximum over the two 2-axes"
            ),
            "scaled": (
                "It matches scores divided by sqrt(C/8), as in the chapter's block; BigGAN does not scale its scores"
            ),
            "query_axis": (
                "It matches a softmax over the queries; each query's weights over its keys must sum to 1, so take "
                "the softmax over the key axis"
            ),
            "reshape": (
                "It matches reshaping (B, N, C/2) straight to (B, C/2, H, W); swap the pixel and channel axes first"
            ),
            "no_gamma": "It matches adding o's output without gamma: the block returns gamma * o + x",
        },
    ),
)


def check_biggan_attention(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(x, state) -> (B, C, H, W)``: BigGAN's attention block in NumPy, output only.

    ``x`` is (B, C, H, W) with H and W even. ``state`` holds ``theta.weight``
    and ``phi.weight`` (C/8, C, 1, 1), ``g.weight`` (C/2, C, 1, 1),
    ``o.weight`` (C, C/2, 1, 1) and the scalar ``gamma``, the names of
    BigGAN-PyTorch's ``layers.Attention``; no biases. phi(x) and g(x) are
    2 x 2 max-pooled, the scores are not scaled, and the output is
    ``gamma * o(attention) + x``. See chapter 6, exercise 2.
    """
    return BIGGAN_ATTENTION.check(fn)


# --- Exercise 3: a T2T module's score scale, moved into its query weights --------------------


class _State(dict):
    """A T2T state dict that remembers its head count, so that the comparison can run it."""

    num_heads: int = 1


def _fold(state: Mapping[str, np.ndarray], num_heads: int, qk_scale: float, *, slip: str = "") -> _State:
    """``state`` (trained with scores scaled by ``qk_scale``) for the default scale head_dim**-0.5.

    ``slip`` names a known mistake instead.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # the inverted ratio of a 0 scale is inf
        return _folded(state, num_heads, qk_scale, slip)


def _folded(state: Mapping[str, np.ndarray], num_heads: int, qk_scale: float, slip: str) -> _State:
    chan = state["proj.weight"].shape[0]
    width = {"chan": chan, "dim": state["qkv.weight"].shape[1]}.get(slip, chan // num_heads)
    factor = np.float64(qk_scale) * width**0.5  # the scores need qk_scale; the module applies width**-0.5
    factor = 1 / factor if slip == "inverted" else 1.0 if slip == "unchanged" else factor
    folded = _State({name: np.array(value, copy=True) for name, value in state.items()})
    folded.num_heads = num_heads
    if slip == "proj":
        folded["proj.weight"] = folded["proj.weight"] * factor
        return folded
    rows = {"whole": slice(None), "q_and_k": slice(0, 2 * chan)}.get(slip, slice(0, chan))
    if slip == "columns":  # (3*chan, dim) read as (dim, 3*chan): q's block taken as the first chan columns
        folded["qkv.weight"][:, :chan] = folded["qkv.weight"][:, :chan] * factor
    else:
        folded["qkv.weight"][rows] = folded["qkv.weight"][rows] * factor  # PyTorch's (out, in): q is rows 0..chan-1
    if "qkv.bias" in folded and slip != "no_bias":
        folded["qkv.bias"][rows] = folded["qkv.bias"][rows] * factor
    return folded


def _fold_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for dim, chan, H, bias, qk_scale, scale_text, dtype in [
        (49, 64, 4, True, 0.3, "0.3", np.float64),
        (147, 64, 1, False, 147**-0.5, "147**-0.5 (T2T-ViT's first stage)", np.float64),
        (49, 64, 1, True, 49**-0.5, "49**-0.5", np.float64),
        (12, 8, 2, False, 1.0, "1.0", np.float32),
        (6, 4, 4, True, 0.0, "0 (uniform attention)", np.float64),
    ]:
        state = {"qkv.weight": rng.normal(size=(3 * chan, dim)) / np.sqrt(dim)}  # PyTorch's (out, in) layout
        if bias:
            state["qkv.bias"] = 0.5 * rng.normal(size=3 * chan)
        state["proj.weight"] = rng.normal(size=(chan, chan)) / np.sqrt(chan)
        state["proj.bias"] = 0.1 * rng.normal(size=chan)
        state = {name: value.astype(dtype) for name, value in state.items()}
        heads = "one head" if H == 1 else f"{H} heads of {chan // H}"
        details = f"{', with qkv.bias' if bias else ''}{', float32' if dtype == np.float32 else ''}"
        cases.append((f"dim={dim}, chan={chan}, {heads}{details}, qk_scale={scale_text}", (state, H, qk_scale)))
    return cases


_FOLD_NAN_HINT = "did you divide by qk_scale? It can be 0, and the factor the queries need is then 0 too"


def _compare_folded(got: Any, expected: _State) -> str | None:
    """Run both state dicts in the default-scale module on the same tokens, and compare the outputs."""
    if not isinstance(got, Mapping):
        return f"should return a state dict (a dict of arrays); got {type(got).__name__}"
    missing = sorted(expected.keys() - got.keys())
    extra = sorted(map(str, got.keys() - expected.keys()))
    if missing:
        return f"the state dict has no {', '.join(missing)}; return every entry of the module's state dict"
    if extra:
        return f"the state dict has entries the module has not: {', '.join(extra)}; strict loading refuses them"
    arrays = {}
    for name, want in expected.items():
        array = answer_array(got[name])
        if array is None or array.shape != want.shape:
            form = type(got[name]).__name__ if array is None else f"shape {array.shape}"
            return f"{name} should be an array of shape {want.shape}, as in the module; got {form}"
        if not np.isfinite(array).all():
            return f"{name} contains NaN or inf: {_FOLD_NAN_HINT}"
        arrays[name] = array.astype(np.float64)
    dtypes = {answer_array(got[name]).dtype for name in expected}
    lowest = next((d for d in (np.float16, np.float32) if d in dtypes), np.float64)  # the answer's precision
    tokens = np.random.default_rng(expected["qkv.weight"].shape[1]).normal(size=(2, 5, expected["qkv.weight"].shape[1]))
    mine, _ = t2t_attention_forward(tokens, arrays, expected.num_heads)
    want, _ = t2t_attention_forward(tokens, expected, expected.num_heads)
    mine = mine.astype(lowest)  # a float32 answer is held to float32's tolerance
    return compare_array("module's output", _FOLD_NAN_HINT)(mine, want)


FOLD_QK_SCALE = Exercise(
    name="a score scale moved into the weights",
    kind="derive",
    concept="folding a score scale into q's weights, leaving V (the skip) alone",
    chapter=6,
    number=3,
    cases=_fold_cases,
    reference=_fold,
    compare=_compare_folded,
    mistakes=_slips(
        _fold,
        {
            "unchanged": (
                "It matches the weights unchanged: the module scales the scores by head_dim**-0.5, the weights "
                "were trained with qk_scale, so q (or k) must carry the ratio qk_scale / head_dim**-0.5"
            ),
            "whole": (
                "It matches scaling all of qkv: V is both the values and the skip connection, and must stay as it "
                "is; only the scores need the factor, so scale q's rows alone (or k's)"
            ),
            "q_and_k": (
                "It matches scaling both q and k by the factor: each score is a product of the two, so it gets the "
                "factor squared; scale one of them, or each by the factor's square root"
            ),
            "inverted": (
                "It matches the ratio upside down: the module multiplies the scores by head_dim**-0.5 and they need "
                "qk_scale, so q needs qk_scale / head_dim**-0.5 = qk_scale * sqrt(head_dim)"
            ),
            "no_bias": (
                "It matches scaling q's weights but not q's bias: q = x W_q^T + b_q, so the bias carries the factor "
                "too (the first chan entries of qkv.bias)"
            ),
            "chan": (
                "It matches using chan where head_dim belongs: the module's default scale is head_dim**-0.5, with "
                "head_dim = chan / num_heads"
            ),
            "dim": (
                "It matches using the input width dim: the official code's scale is dim**-0.5, but the module's "
                "default is head_dim**-0.5, with head_dim = chan / num_heads"
            ),
            "columns": (
                "It matches scaling the first chan columns of qkv.weight: PyTorch stores a Linear weight as "
                "(out, in) = (3*chan, dim), so q's block is the first chan rows"
            ),
            "proj": (
                "It matches rescaling proj: the scale acts inside the softmax, on the scores, so it belongs in q "
                "(or k); proj acts after the softmax, and no factor there changes which keys the softmax favours"
            ),
        },
    ),
)


def check_fold_qk_scale(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(state, num_heads, qk_scale) -> state``: a T2T module's score scale moved into its weights.

    ``state`` is a ``T2TAttention(dim, chan, num_heads, qk_scale=qk_scale)``
    state dict in NumPy (``qkv.weight`` (3*chan, dim), ``qkv.bias`` when the
    module has one, ``proj.weight``, ``proj.bias``). The answer is a new
    state dict with the same entries and shapes that makes
    ``T2TAttention(dim, chan, num_heads)``, whose scale is ``head_dim**-0.5``,
    compute the same outputs; ``state`` itself stays unchanged.
    See chapter 6, exercise 3.
    """
    return FOLD_QK_SCALE.check(fn)
