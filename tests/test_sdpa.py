"""interop.sdpa: PyTorch's fused kernel on 4-D input, and which kernel a call runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import selfattention as sa


def qkv(shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype) for _ in range(3))


def kernel_seen_by_the_profiler(*tensors, is_causal=False):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.nn.functional.scaled_dot_product_attention(*tensors, is_causal=is_causal)
    names = {event.key for event in prof.key_averages()}
    return "flash" if "aten::_scaled_dot_product_flash_attention_for_cpu" in names else "math"


@pytest.mark.parametrize("shape", [(16, 8), (3, 16, 8), (1, 3, 16, 8), (2, 2, 3, 16, 8)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_kernel_used_matches_what_torch_ran(shape, is_causal):
    tensors = [torch.from_numpy(a) for a in qkv(shape)]
    kernel, reason = sa.sdpa_kernel_used(*tensors, is_causal=is_causal)
    assert kernel == kernel_seen_by_the_profiler(*tensors, is_causal=is_causal)
    assert kernel == ("flash" if len(shape) == 4 else "math")
    assert ("4 dimensional" in reason) == (len(shape) != 4)


@pytest.mark.parametrize("kernel", ["flash", "math"])
@pytest.mark.parametrize("shape", [(16, 8), (3, 16, 8), (2, 3, 16, 8)])
def test_torch_sdpa_matches_the_numpy_reference(kernel, shape):
    q, k, v = qkv(shape, dtype=np.float64)
    out = sa.torch_sdpa(q, k, v, kernel=kernel, is_causal=True)
    reference, _ = sa.scaled_dot_product_attention(q, k, v, is_causal=True)  # T = S: both alignments agree
    assert out.shape == shape
    np.testing.assert_allclose(out, reference, rtol=1e-12, atol=1e-12)


def test_as_4d_tensors_shares_memory():
    q, k, v = qkv((2, 3, 16, 8))
    tq, _, _ = sa.as_4d_tensors(q, k, v)
    assert tuple(tq.shape) == (1, 6, 16, 8)
    assert np.shares_memory(tq.numpy(), q)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: sa.torch_sdpa(*qkv((3, 4)), kernel="fast"), r"kernel must be one of"),
        (lambda: sa.torch_sdpa(*qkv((3, 4)), is_causal=1), r"is_causal must be True or False"),
        (
            lambda: sa.torch_sdpa(np.ones(3), np.ones(3), np.ones(3)),
            r"q must have at least 2 axes \(\.\.\., T, D\); got shape \(3,\)",
        ),
        (lambda: sa.torch_sdpa(*qkv((3, 4), dtype=np.float16)), r"q must be float32 or float64 .* got float16"),
        (lambda: sa.torch_sdpa(np.ones((2, 3, 4)), np.ones((3, 4)), np.ones((3, 4))), r"same batch axes"),
        (lambda: sa.torch_sdpa(np.ones((3, 4)), np.ones((3, 5)), np.ones((3, 4))), r"must fit together"),
        (lambda: sa.torch_sdpa(np.ones((3, 4)), np.ones((3, 4), np.float32), np.ones((3, 4))), r"share a dtype"),
        (lambda: sa.sdpa_kernel_used(*qkv((3, 4)), is_causal="no"), r"is_causal must be True or False"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()
