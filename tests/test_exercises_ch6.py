"""Chapter 6's exercise references agree with the modules they describe, and the checkers judge fairly.

The generic tests in test_exercises.py run every checker on its reference, a
stub, float32 answers and each declared mistake. These tie the references to
PyTorch: the einops-order kernel to a ``Conv2d``, the BigGAN block to a port
of BigGAN-PyTorch's ``layers.Attention``, the folded scale to ``T2TAttention``
with ``qk_scale``. They also check that correct answers written differently
from the references pass, and that plausible wrong ones, not declared as
mistakes, fail.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import selfattention as sa
from selfattention.exercises import check_biggan_attention, check_conv_patch_weight, check_fold_qk_scale
from selfattention.exercises.ch06_vision import BIGGAN_ATTENTION, CONV_PATCH_WEIGHT, FOLD_QK_SCALE


def _cases(exercise):
    return [args for _, args in exercise.cases(np.random.default_rng(0))]


# --- Exercise 1 --------------------------------------------------------------------------


def _einops_patches(images, p):
    """'b c (h p1) (w p2) -> b (h w) (p1 p2 c)', written out."""
    B, C, H, W = images.shape
    grid = images.reshape(B, C, H // p, p, W // p, p).transpose(0, 2, 4, 3, 5, 1)  # (B, rows, cols, p1, p2, C)
    return grid.reshape(B, (H // p) * (W // p), p * p * C)


def test_the_kernel_makes_a_conv2d_compute_the_einops_tokens():
    rng = np.random.default_rng(0)
    for w, C, p in _cases(CONV_PATCH_WEIGHT):
        w = w.astype(np.float64)
        images = rng.normal(size=(2, C, 3 * p, 2 * p))
        conv = nn.Conv2d(C, w.shape[1], kernel_size=p, stride=p, bias=False).double()
        with torch.no_grad():
            conv.weight.copy_(torch.from_numpy(CONV_PATCH_WEIGHT.reference(w, C, p)))
            tokens = conv(torch.from_numpy(images)).flatten(2).transpose(1, 2).numpy()  # (B, N, D)
        np.testing.assert_allclose(tokens, _einops_patches(images, p) @ w, rtol=1e-12, atol=1e-12)


def test_the_cases_include_those_where_the_chapter_s_line_is_right():
    shapes = [(C, p) for _, C, p in _cases(CONV_PATCH_WEIGHT)]
    assert (1, 2) in shapes and (4, 1) in shapes  # C = 1 and p = 1: (c p1 p2) and (p1 p2 c) coincide
    assert any(w.dtype == np.float32 for w, _, _ in _cases(CONV_PATCH_WEIGHT))


def _kernel_by_loops(w, channels, patch_size):
    kernel = np.zeros((w.shape[1], channels, patch_size, patch_size), dtype=w.dtype)
    for i in range(patch_size):
        for j in range(patch_size):
            for c in range(channels):
                kernel[:, c, i, j] = w[(i * patch_size + j) * channels + c]  # einops: c varies fastest
    return kernel


def _kernel_in_torch(w, channels, patch_size):
    t = torch.from_numpy(w).T.reshape(-1, patch_size, patch_size, channels)
    return t.permute(0, 3, 1, 2)  # a tensor, not contiguous


# --- Exercise 2 --------------------------------------------------------------------------


class BigGANAttention(nn.Module):
    """BigGAN-PyTorch's ``layers.Attention`` (ajbrock/BigGAN-PyTorch, layers.py), with plain Conv2d layers."""

    def __init__(self, ch: int) -> None:
        super().__init__()
        self.ch = ch
        self.theta = nn.Conv2d(ch, ch // 8, kernel_size=1, padding=0, bias=False)
        self.phi = nn.Conv2d(ch, ch // 8, kernel_size=1, padding=0, bias=False)
        self.g = nn.Conv2d(ch, ch // 2, kernel_size=1, padding=0, bias=False)
        self.o = nn.Conv2d(ch // 2, ch, kernel_size=1, padding=0, bias=False)
        self.gamma = nn.Parameter(torch.tensor(0.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, _, H, W = x.shape
        theta = self.theta(x).view(B, self.ch // 8, H * W)
        phi = F.max_pool2d(self.phi(x), [2, 2]).view(B, self.ch // 8, H * W // 4)
        g = F.max_pool2d(self.g(x), [2, 2]).view(B, self.ch // 2, H * W // 4)
        beta = F.softmax(torch.bmm(theta.transpose(1, 2), phi), -1)  # (B, N, N/4), unscaled
        o = self.o(torch.bmm(g, beta.transpose(1, 2)).view(B, self.ch // 2, H, W))
        return self.gamma * o + x


@pytest.mark.parametrize("index", range(4))
def test_the_reference_is_biggan_s_block(index):
    x, state = _cases(BIGGAN_ATTENTION)[index]
    module = BigGANAttention(x.shape[1]).double()
    module.load_state_dict({name: torch.from_numpy(value.astype(np.float64)) for name, value in state.items()})
    with torch.no_grad():
        want = module(torch.from_numpy(x.astype(np.float64))).numpy()
    got = BIGGAN_ATTENTION.reference(x, state)
    assert got.dtype == x.dtype
    rtol, atol = (1e-12, 1e-12) if x.dtype == np.float64 else (1e-6, 1e-6)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def test_the_biggan_cases_have_one_key_non_square_maps_and_float32():
    shapes = [x.shape for x, _ in _cases(BIGGAN_ATTENTION)]
    assert (1, 8, 2, 2) in shapes  # one key: every weight is 1
    assert any(H != W for _, _, H, W in shapes) and any(B > 1 for B, *_ in shapes)
    assert any(x.dtype == np.float32 for x, _ in _cases(BIGGAN_ATTENTION))


def _biggan_by_loops(x, state):
    """One image, one query at a time, pooling by explicit blocks, keys in column-major block order."""
    B, C, H, W = x.shape
    w = {name: state[f"{name}.weight"][:, :, 0, 0] for name in ("theta", "phi", "g", "o")}
    out = np.array(x, dtype=np.float64)
    for b in range(B):
        pixels = x[b].reshape(C, H * W).T  # (N, C)
        phi, g = (pixels @ w[name].T for name in ("phi", "g"))  # (N, C/8), (N, C/2)
        keys, values = [], []
        for j in range(0, W, 2):  # a different key order: attention does not care, if values follow
            for i in range(0, H, 2):
                block = [r * W + c for r in (i, i + 1) for c in (j, j + 1)]
                keys.append(phi[block].max(axis=0))
                values.append(g[block].max(axis=0))
        keys, values = np.array(keys), np.array(values)
        for n in range(H * W):
            weights = sa.softmax(keys @ (w["theta"] @ pixels[n]))  # (N/4,)
            out[b, :, n // W, n % W] += state["gamma"] * (w["o"] @ (weights @ values))
    return out


def _biggan_in_torch(x, state):
    module = BigGANAttention(x.shape[1]).to(torch.float32)
    module.load_state_dict({name: torch.as_tensor(value, dtype=torch.float32) for name, value in state.items()})
    return module(torch.as_tensor(x, dtype=torch.float32))  # float32, with gradients


# --- Exercise 3 --------------------------------------------------------------------------


def _module(state, num_heads, qk_scale=None):
    chan, dim = state["proj.weight"].shape[0], state["qkv.weight"].shape[1]
    module = sa.T2TAttention(dim, chan, num_heads, qkv_bias="qkv.bias" in state, qk_scale=qk_scale).double()
    module.load_state_dict({name: torch.from_numpy(np.asarray(v, dtype=np.float64)) for name, v in state.items()})
    return module.eval()


@pytest.mark.parametrize("index", range(5))
def test_the_folded_weights_reproduce_the_module_with_qk_scale(index):
    state, H, qk_scale = _cases(FOLD_QK_SCALE)[index]
    tokens = torch.from_numpy(np.random.default_rng(index).normal(size=(3, 7, state["qkv.weight"].shape[1])))
    with torch.no_grad():
        want = _module(state, H, qk_scale)(tokens)
        got = _module(FOLD_QK_SCALE.reference(state, H, qk_scale), H)(tokens)
    torch.testing.assert_close(got, want, rtol=1e-6 if state["qkv.weight"].dtype == np.float32 else 1e-12, atol=1e-12)


def test_the_fold_cases_cover_one_head_several_a_zero_scale_and_float32():
    cases = _cases(FOLD_QK_SCALE)
    assert {H for _, H, _ in cases} >= {1, 2, 4} and any(s == 0 for *_, s in cases)
    assert any(s == 147**-0.5 and st["qkv.weight"].shape == (192, 147) for st, _, s in cases)  # T2T-ViT's stage 1
    assert any("qkv.bias" in st for st, _, _ in cases) and any("qkv.bias" not in st for st, _, _ in cases)
    assert any(st["qkv.weight"].dtype == np.float32 for st, _, _ in cases)


def _fold_keys(state, num_heads, qk_scale):
    """The factor on k's rows instead of q's: the scores are the same."""
    chan = state["proj.weight"].shape[0]
    factor = qk_scale * (chan // num_heads) ** 0.5
    folded = {name: value.copy() for name, value in state.items()}
    folded["qkv.weight"][chan : 2 * chan] *= factor
    if "qkv.bias" in folded:
        folded["qkv.bias"][chan : 2 * chan] *= factor
    return folded


def _fold_split(state, num_heads, qk_scale):
    """Each of q and k multiplied by the square root of the factor, in float32 and as torch tensors."""
    chan = state["proj.weight"].shape[0]
    root = np.sqrt(qk_scale * (chan // num_heads) ** 0.5)
    folded = {name: torch.tensor(value, dtype=torch.float32) for name, value in state.items()}
    folded["qkv.weight"][: 2 * chan] *= root
    if "qkv.bias" in folded:
        folded["qkv.bias"][: 2 * chan] *= root
    return folded


# --- Any correct answer passes; plausible undeclared wrong answers fail ----------------------


def _strided_pool(x, state):
    """Pools pixels (i, j), (i + H/2, j), ... : a (2, H/2) reshape where (H/2, 2) belongs."""
    B, C, H, W = x.shape
    w = {name: state[f"{name}.weight"][:, :, 0, 0] for name in ("theta", "phi", "g", "o")}
    pixels = x.reshape(B, C, H * W).swapaxes(1, 2)  # (B, N, C)
    q, phi, g = (pixels @ w[name].T for name in ("theta", "phi", "g"))

    def pool(t):  # (B, N, c) -> (B, N/4, c), over the wrong 4 pixels
        return t.reshape(B, 2, H // 2, 2, W // 2, -1).max(axis=(1, 3)).reshape(B, H * W // 4, -1)

    weights = sa.softmax(q @ pool(phi).swapaxes(1, 2))
    out = (weights @ pool(g)) @ w["o"].T  # (B, N, C)
    return state["gamma"] * out.swapaxes(1, 2).reshape(B, C, H, W) + x


def _keys_and_values_pooled_differently(x, state):
    """Keys pooled by blocks, values by strips: the keys no longer line up with their values."""
    B, C, H, W = x.shape
    w = {name: state[f"{name}.weight"][:, :, 0, 0] for name in ("theta", "phi", "g", "o")}
    pixels = x.reshape(B, C, H * W).swapaxes(1, 2)
    q, phi, g = (pixels @ w[name].T for name in ("theta", "phi", "g"))
    k = phi.reshape(B, H // 2, 2, W // 2, 2, -1).max(axis=(2, 4)).reshape(B, H * W // 4, -1)
    v = g.reshape(B, H * W // 4, 4, -1).max(axis=2)
    out = (sa.softmax(q @ k.swapaxes(1, 2)) @ v) @ w["o"].T
    return state["gamma"] * out.swapaxes(1, 2).reshape(B, C, H, W) + x


def _chapter_block_with_pooling(x, state):
    """The chapter's SAGAN-style block with pooling added, but values of width C and no o."""
    B, C, H, W = x.shape
    pixels = x.reshape(B, C, H * W).swapaxes(1, 2)
    q = pixels @ state["theta.weight"][:, :, 0, 0].T
    k = pixels @ state["phi.weight"][:, :, 0, 0].T
    k = k.reshape(B, H // 2, 2, W // 2, 2, -1).max(axis=(2, 4)).reshape(B, H * W // 4, -1)
    v = pixels.reshape(B, H // 2, 2, W // 2, 2, C).max(axis=(2, 4)).reshape(B, H * W // 4, C)
    out = sa.softmax(q @ k.swapaxes(1, 2)) @ v
    return state["gamma"] * out.swapaxes(1, 2).reshape(B, C, H, W) + x


def _fold_q_weight_by_head_dim_of_dim(state, num_heads, qk_scale):
    """The official code's head width, dim // num_heads, used for the module's default."""
    chan, dim = state["proj.weight"].shape[0], state["qkv.weight"].shape[1]
    factor = qk_scale * (dim // num_heads) ** 0.5
    folded = {name: value.copy() for name, value in state.items()}
    folded["qkv.weight"][:chan] *= factor
    if "qkv.bias" in folded:
        folded["qkv.bias"][:chan] *= factor
    return folded


def _fold_into_v(state, num_heads, qk_scale):
    """The factor put on V's rows: it changes the values and the skip, not the scores."""
    chan = state["proj.weight"].shape[0]
    folded = {name: value.copy() for name, value in state.items()}
    folded["qkv.weight"][2 * chan :] *= qk_scale * (chan // num_heads) ** 0.5
    return folded


def _fold_with_a_scale_entry(state, num_heads, qk_scale):
    """A correct fold plus an extra entry, which strict loading refuses."""
    return {**FOLD_QK_SCALE.reference(state, num_heads, qk_scale), "scale": np.array(qk_scale)}


def _fold_first_head_only(state, num_heads, qk_scale):
    """Only head 0's queries rescaled."""
    chan = state["proj.weight"].shape[0]
    head_dim = chan // num_heads
    folded = {name: value.copy() for name, value in state.items()}
    folded["qkv.weight"][:head_dim] *= qk_scale * head_dim**0.5
    if "qkv.bias" in folded:
        folded["qkv.bias"][:head_dim] *= qk_scale * head_dim**0.5
    return folded


# (the checker, an answer unlike the reference, whether it is right): a right one passes; a wrong one, which
# no declared mistake describes, fails on case 1 with the difference and no hint
ANSWERS = [
    (check_conv_patch_weight, _kernel_by_loops, True),
    (check_conv_patch_weight, _kernel_in_torch, True),
    (check_conv_patch_weight, lambda w, C, p: w.reshape(p, p, C, -1).transpose(3, 2, 0, 1), True),
    (check_conv_patch_weight, lambda w, C, p: CONV_PATCH_WEIGHT.reference(w.astype(np.float32), C, p), True),
    (check_conv_patch_weight, lambda w, C, p: w.T.reshape(-1, C, p, p).transpose(0, 1, 3, 2), False),
    (check_conv_patch_weight, lambda w, C, p: w.T.reshape(-1, p, C, p).transpose(0, 2, 1, 3), False),
    (check_conv_patch_weight, lambda w, C, p: w.reshape(-1, C, p, p), False),
    (check_biggan_attention, _biggan_by_loops, True),
    (check_biggan_attention, _biggan_in_torch, True),
    (check_biggan_attention, _strided_pool, False),
    (check_biggan_attention, _keys_and_values_pooled_differently, False),
    (check_biggan_attention, _chapter_block_with_pooling, False),
    (check_fold_qk_scale, _fold_keys, True),
    (check_fold_qk_scale, _fold_split, True),
    (check_fold_qk_scale, _fold_q_weight_by_head_dim_of_dim, False),
    (check_fold_qk_scale, _fold_into_v, False),
    (check_fold_qk_scale, _fold_first_head_only, False),
]


@pytest.mark.parametrize(("check", "answer", "right"), ANSWERS)
def test_a_right_answer_in_another_form_passes_and_an_undeclared_wrong_one_fails(check, answer, right):
    result = repr(check(answer))
    if right:
        assert result.startswith("PASS "), result
    else:
        difference = (
            r"FAIL [^:]+: case 1 \(.*\): the [\w' ]+ does not match the reference; the largest difference is \S+"
        )
        assert re.fullmatch(difference, result), result


def test_a_state_dict_with_wrong_entries_is_told_so():
    extra = repr(check_fold_qk_scale(_fold_with_a_scale_entry))
    assert extra.endswith("the state dict has entries the module has not: scale; strict loading refuses them")
    missing = repr(check_fold_qk_scale(lambda s, H, k: {n: v for n, v in s.items() if n != "proj.bias"}))
    assert "the state dict has no proj.bias; return every entry" in missing
    not_a_dict = repr(check_fold_qk_scale(lambda s, H, k: s["qkv.weight"]))
    assert not_a_dict.endswith("should return a state dict (a dict of arrays); got ndarray")


def test_dividing_by_a_zero_scale_is_named():
    def divides(state, num_heads, qk_scale):  # right, except that it divides by qk_scale on the way
        folded = FOLD_QK_SCALE.reference(state, num_heads, qk_scale)
        with np.errstate(divide="ignore", invalid="ignore"):
            folded["qkv.weight"] = folded["qkv.weight"] * (np.float64(qk_scale) / np.float64(qk_scale))
        return dict(folded)

    result = check_fold_qk_scale(divides)
    assert not result and "case 5" in repr(result) and "did you divide by qk_scale?" in repr(result), repr(result)
