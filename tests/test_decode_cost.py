"""decode_step_cost: the bytes and flops of one decode step, by hand and for Llama-2-7B."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from selfattention import decode_step_cost
from selfattention.decode_cost import LLAMA2_7B


def test_a_tiny_model_counted_by_hand():
    cost = decode_step_cost(
        num_layers=1,
        d_model=4,
        num_heads=2,
        num_kv_heads=1,
        head_dim=2,
        dim_feedforward=8,
        vocab_size=10,
        gated=False,
        bytes_per_value=4,
        batch=3,
        context=5,
    )
    weights = (4 * 4 + 4 * 2 + 4 * 2 + 4 * 4) + 2 * 4 * 8 + 10 * 4  # Wq, Wk, Wv, Wo; two FFN matrices; output
    assert cost["weights"] == weights == 152
    assert cost["weight_bytes"] == 4 * 152
    assert cost["kv_bytes"] == 4 * 2 * 1 * 1 * 2 * 5 * 3  # bytes * (K and V) * layers * Hkv * Dh * context * batch
    assert cost["flops"] == 2 * 152 * 3 + 4 * 1 * 2 * 2 * 5 * 3
    assert cost["intensity"] == cost["flops"] / cost["bytes"]


def test_llama2_7b():
    mha = decode_step_cost(**LLAMA2_7B, context=4096)
    gqa = decode_step_cost(**{**LLAMA2_7B, "num_kv_heads": 8}, context=4096)
    assert round(mha["weights"] / 1e9, 2) == 6.61  # 6.74 B parameters with the embedding table and norms
    assert mha["kv_bytes"] == 2 * 2**30  # 2 GiB of cache at 4096 tokens, batch 1
    assert mha["kv_bytes"] == 4 * gqa["kv_bytes"]  # the cache shrinks by H / Hkv
    assert round(mha["bytes"] / gqa["bytes"], 2) == 1.27  # the step's bytes: far less than 4
    assert round(mha["bytes"] / (mha["weight_bytes"] + gqa["kv_bytes"]), 2) == 1.12  # the cache's change alone
    assert 0.99 < mha["intensity"] < 1.01  # batch 1: about one flop per byte


@given(
    batch=st.integers(1, 512),
    context=st.integers(1, 2**15),
    groups=st.sampled_from([1, 2, 4, 8, 32]),
)
def test_gqa_saves_at_most_h_over_hkv_and_more_with_batch_and_context(batch, context, groups):
    mha = decode_step_cost(**LLAMA2_7B, batch=batch, context=context)
    gqa = decode_step_cost(**{**LLAMA2_7B, "num_kv_heads": 32 // groups}, batch=batch, context=context)
    saving = mha["bytes"] / gqa["bytes"]
    assert 1 <= saving <= groups + 1e-12
    bigger = decode_step_cost(**{**LLAMA2_7B, "num_kv_heads": 32 // groups}, batch=2 * batch, context=context)
    assert decode_step_cost(**LLAMA2_7B, batch=2 * batch, context=context)["bytes"] / bigger["bytes"] >= saving - 1e-12
    assert 0 < mha["kv_share"] < 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_kv_heads": 5}, r"num_heads must be a multiple of num_kv_heads .* got 32 and 5"),
        ({"batch": 0}, r"batch must be a positive integer; got 0"),
        ({"context": 1.5}, r"context must be a positive integer"),
        ({"d_model": 2**41}, r"d_model must be at most"),
        ({"gated": 1}, r"gated must be True or False"),
        ({"bytes_per_value": True}, r"bytes_per_value must be a positive integer"),
    ],
)
def test_bad_input(change, message):
    with pytest.raises(ValueError, match=message):
        decode_step_cost(**{**LLAMA2_7B, **change})
