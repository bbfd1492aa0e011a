"""Chapter 12's checkers: their references against the package and torch, and wrong answers no mistake names.

The generic tests in test_exercises.py run every reference, stub and declared
mistake; here the references are checked against independent computations
(a loop over patches, ``sa.attention_rollout``, torch's FLOP counter), other
correct answers (loops, float32, bfloat16, soft weights) must pass, and
plausible wrong answers that match no declared mistake must still fail.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import selfattention as sa
from selfattention import exercises as ex
from selfattention.exercises import ch12_vision_training as ch12


def _shuffle_by_loops(images, order, p):
    """Patch by patch, in image coordinates: patch j (row by row) takes patch order[j]."""
    out = np.empty_like(images)
    cols = images.shape[-1] // p
    for j, source in enumerate(np.asarray(order)):
        (r, c), (sr, sc) = divmod(j, cols), divmod(int(source), cols)
        out[..., r * p : (r + 1) * p, c * p : (c + 1) * p] = images[..., sr * p : (sr + 1) * p, sc * p : (sc + 1) * p]
    return out


def _torch_shuffle(images, order, p):
    """With torch's unfold and fold: another correct answer, returned as a tensor."""
    x = torch.as_tensor(images)
    B, C, H, W = x.shape
    columns = nn.functional.unfold(x, kernel_size=p, stride=p)  # (B, C*p*p, N), patches row by row
    return nn.functional.fold(columns[:, :, torch.as_tensor(order)], (H, W), kernel_size=p, stride=p)


def test_the_shuffle_reference_moves_whole_patches_as_patchify_numbers_them():
    for _, (images, order, p) in ch12._shuffle_cases(np.random.default_rng(0)):
        out = ch12._shuffle(images, order, p)
        np.testing.assert_array_equal(out, _shuffle_by_loops(images, order, p))
        np.testing.assert_array_equal(sa.patchify(out, p), sa.patchify(images, p)[:, order])
        assert out.dtype == images.dtype


def test_the_attention_share_matches_torchs_flop_counter():
    for _, (s, p, D, F, H) in ch12.ATTENTION_SHARE.cases(np.random.default_rng(0))[:3]:
        T = (s // p) ** 2 + 1
        attention, mlp = nn.MultiheadAttention(D, H, batch_first=True), nn.Sequential(nn.Linear(D, F), nn.Linear(F, D))
        x = torch.zeros(1, T, D)
        with FlopCounterMode(display=False) as counted_attention:
            attention(x, x, x, need_weights=True)  # the explicit path, whose matmuls the counter sees
        with FlopCounterMode(display=False) as counted_mlp:
            mlp(x)
        a, m = counted_attention.get_total_flops(), counted_mlp.get_total_flops()
        assert a / (a + m) == pytest.approx(ch12._share(s, p, D, F, H), rel=1e-12)


def test_the_maps_checker_reads_rollout_as_the_package_computes_it():
    rng = np.random.default_rng(0)
    for T, H in [(3, 1), (17, 4), (6, 2)]:
        weights = sa.softmax(rng.normal(scale=3.0, size=(2, H, T, T)))
        last, rollout = ch12._class_rows(weights)
        np.testing.assert_allclose(rollout, sa.attention_rollout(weights)[0], rtol=1e-12)
        np.testing.assert_allclose(last, weights[1, :, 0].mean(axis=0), rtol=1e-12)
    for _, args in ch12.DISAGREEING_MAPS.cases(rng):
        design = ch12._design(*args)
        T, H, a, b = args
        assert np.argmax(sa.attention_rollout(design)[0, 1:]) == a and np.argmax(design[1].mean(0)[0, 1:]) == b


def _soft_maps(num_tokens, num_heads, rollout_patch, last_patch):
    """A softmax-made answer, every weight positive, in float32, with the heads all different."""
    a, b = rollout_patch + 1, last_patch + 1
    rng = np.random.default_rng(num_tokens)
    logits = rng.normal(size=(2, num_heads, num_tokens, num_tokens)) + 8.0 * np.eye(num_tokens)
    logits[0, :, 0, a] += 12.0
    logits[0, :, b, a] += 12.0
    logits[1, :, 0, b] += 12.0
    return torch.softmax(torch.tensor(logits, dtype=torch.float32), dim=-1).numpy()


@pytest.mark.parametrize(
    ("check", "answer"),
    [
        (ex.check_shuffle_patches, _shuffle_by_loops),
        (ex.check_shuffle_patches, _torch_shuffle),
        (ex.check_shuffle_patches, lambda x, order, p: _shuffle_by_loops(x.astype(np.float32), order, p)),
        (ex.check_attention_share, lambda s, p, D, F, H: 2 * ch12._share(s, p, D, F, H) / 2),  # FLOPs = 2 MACs
        (ex.check_attention_share, lambda s, p, D, F, H: np.float32(ch12._share(s, p, D, F, H))),
        (
            ex.check_attention_share,
            lambda s, p, D, F, H: torch.tensor((2 * D + (s / p) ** 2 + 1) / (2 * D + (s / p) ** 2 + 1 + F)),
        ),
        (ex.check_disagreeing_maps, _soft_maps),
        (ex.check_disagreeing_maps, lambda *args: torch.from_numpy(ch12._design(*args)).bfloat16()),
        (ex.check_disagreeing_maps, lambda *args: ch12._design(*args).astype(np.float16)),
    ],
)
def test_other_correct_answers_pass(check, answer):
    result = check(answer)
    assert result, repr(result)


def _design_in(T, H, a, b, *, rows=None):
    weights = ch12._design(T, H, a, b)
    if rows is not None:
        weights = rows(weights)
    return weights


def _naive_maps(T, H, a, b):
    """Layer 1's class token reads a, layer 2's reads b; the other rows uniform, not themselves."""
    first, second = np.full((T, T), 1.0 / T), np.full((T, T), 1.0 / T)
    first[0], second[0] = np.eye(T)[a + 1], np.eye(T)[b + 1]
    return np.stack([np.repeat(first[None], H, 0), np.repeat(second[None], H, 0)])


def _negative_row(T, H, a, b):
    weights = ch12._design(T, H, a, b)
    weights[1, :, 0] = 0.0
    weights[1, :, 0, b + 1], weights[1, :, 0, 1 if b else 2] = 1.2, -0.2  # sums to 1, but not attention
    return weights


def _square_grid_only(images, order, p):
    B, C, H, W = images.shape
    side = int(round(np.sqrt(len(order))))  # assumes a square grid
    patches = sa.patchify(images, p)[:, order]
    return patches.reshape(B, side, side, C, p, p).transpose(0, 3, 1, 4, 2, 5).reshape(B, C, H, W)


def _height_for_width(images, order, p):
    B, C, H, W = images.shape
    rows, cols = W // p, H // p  # the grid's sides swapped
    patches = sa.patchify(images, p)[:, order]
    return patches.reshape(B, rows, cols, C, p, p).transpose(0, 3, 1, 4, 2, 5).reshape(B, C, H, W)


def _softmax_counted(s, p, D, F, H):
    T = (s // p) ** 2 + 1
    attention = 4 * T * D * D + 2 * T * T * D + H * T * T  # one exponential per score: left out by the task
    return attention / (attention + 2 * T * D * F)


def _embedding_counted(s, p, D, F, H):
    T, C = (s // p) ** 2 + 1, 3
    attention = 4 * T * D * D + 2 * T * T * D + (T - 1) * C * p * p * D  # the patch embedding is not in a block
    return attention / (attention + 2 * T * D * F)


# Wrong answers a learner might write that match no declared mistake: each must still fail.
WRONG = [
    (ex.check_shuffle_patches, lambda images, order, p: images, r"case 1 .*do not match the reference"),
    (ex.check_shuffle_patches, lambda images, order, p: images[:, :, ::-1], r"case 1 .*do not match"),
    (
        ex.check_shuffle_patches,
        lambda images, order, p: ch12._shuffle(images, order[order], p),
        r"case 1 .*do not match",
    ),
    (
        ex.check_shuffle_patches,
        lambda images, order, p: ch12._shuffle(images, order, p).swapaxes(-1, -2),
        r"case \d .*",
    ),
    (ex.check_shuffle_patches, _square_grid_only, r"case 2 .*raised ValueError"),
    (ex.check_shuffle_patches, _height_for_width, r"case 2 .*do not match"),
    (ex.check_shuffle_patches, lambda images, order, p: sa.patchify(images, p)[:, order], r"should have shape"),
    (ex.check_attention_share, _softmax_counted, r"case 1 .*share does not match"),
    (ex.check_attention_share, _embedding_counted, r"case 1 .*share does not match"),
    (ex.check_attention_share, lambda s, p, D, F, H: ch12._share(s, p, D, 4 * D, H), r"case 1 .*share does not match"),
    (
        ex.check_attention_share,
        lambda s, p, D, F, H: (2 * D + (s // p) ** 2) / (2 * D + (s // p) ** 2 + F + 1),
        r"case 1 ",
    ),
    (ex.check_attention_share, lambda s, p, D, F, H: 0.5, r"case 1 .*share does not match"),
    (
        ex.check_disagreeing_maps,
        lambda T, H, a, b: np.full((2, H, T, T), 1.0 / T),
        r"case 1 .*layer 2's .* favours patch 0, not patch 10",
    ),
    (ex.check_disagreeing_maps, _naive_maps, r"case 1 .*rollout's row 0 favours patch 5 by only 0;"),
    (ex.check_disagreeing_maps, _negative_row, r"case 1 .*non-negative and summing to 1"),
    (ex.check_disagreeing_maps, lambda *args: _design_in(*args).transpose(1, 0, 2, 3), r"should have shape"),
    (
        ex.check_disagreeing_maps,
        lambda *args: _design_in(*args, rows=lambda w: w.swapaxes(-1, -2)),
        r"case 1 .*summing to 1",
    ),
    (ex.check_disagreeing_maps, lambda *args: _design_in(*args, rows=lambda w: 2 * w), r"case 1 .*summing to 1"),
]


@pytest.mark.parametrize(("check", "wrong", "message"), WRONG)
def test_wrong_answers_no_mistake_names_still_fail(check, wrong, message):
    result = check(wrong)
    assert result.status == "FAIL" and re.search(message, repr(result)), repr(result)
    assert ". It matches" not in repr(result), repr(result)  # no declared mistake claims it
