"""What one decode step reads and computes: weights, KV cache and arithmetic intensity.

Taught in chapter 9. Generating one token per sequence, a decoder multiplies
each new token by every weight matrix once and reads every cached key and
value once. A step of a large model on a batch of B sequences therefore
reads all its weights (shared by the batch) and B caches, and does about
2 flops per weight per sequence plus the attention's own 4·H·Dh flops per
cached token. When the bytes dominate, a step waits for memory, and
shrinking the cache (multi-query or grouped-query attention) speeds it up
only by the share of the bytes that the cache is.
"""

from __future__ import annotations

from typing import Any

from ._validation import check_bool, check_positive_int

__all__ = ["decode_step_cost"]

#: Llama-2-7B's shapes (Touvron et al. 2023, arXiv:2307.09288): 32 layers of width 4096, 32 heads of width 128 (no GQA),
#: a gated feed-forward layer of width 11008, a vocabulary of 32000, weights and cache in 16 bits.
LLAMA2_7B = {
    "num_layers": 32,
    "d_model": 4096,
    "num_heads": 32,
    "num_kv_heads": 32,
    "head_dim": 128,
    "dim_feedforward": 11008,
    "vocab_size": 32000,
    "gated": True,
    "bytes_per_value": 2,
}


def decode_step_cost(
    *,
    num_layers: int,
    d_model: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    dim_feedforward: int,
    vocab_size: int,
    gated: bool = True,
    bytes_per_value: int = 2,
    batch: int = 1,
    context: int = 1,
) -> dict[str, Any]:
    """Flops and bytes of one decode step: ``batch`` sequences, each adding one token after ``context``.

    Counted: the weight matrices (query, key, value and output projections,
    whose key and value sizes follow ``num_kv_heads``; the feed-forward layer,
    three matrices if ``gated`` else two; the output layer over the
    vocabulary), read once per step for the whole batch; and each sequence's
    KV cache, ``2 · layers · Hkv · Dh · context`` numbers, read once. Not
    counted: norms, biases, the embedding row and activations, which are
    small next to these.

    Parameters
    ----------
    num_layers, d_model, num_heads, num_kv_heads, head_dim, dim_feedforward, vocab_size : int
        The model's shapes; ``num_heads`` must be a multiple of ``num_kv_heads``.
    gated : bool, default True
        A gated (SwiGLU) feed-forward layer: three matrices instead of two.
    bytes_per_value : int, default 2
        2 for float16 or bfloat16 weights and cache, 4 for float32.
    batch, context : int
        Sequences per step, and the tokens already cached in each.

    Returns
    -------
    dict
        ``weight_bytes``, ``kv_bytes`` and ``bytes`` (their sum), ``flops``
        (2 per weight per sequence, plus 4·H·Dh per cached token per layer per
        sequence), ``intensity`` (flops per byte) and ``kv_share`` (the
        cache's share of the bytes).

    Raises
    ------
    ValueError
        If a size is not a positive integer, ``num_heads`` is not a multiple of
        ``num_kv_heads``, or ``gated`` is not a bool.

    Notes
    -----
    See chapter 9, :cite:`shazeer2019fast` and :cite:`ainslie2023gqa`.
    """
    sizes = {
        "num_layers": num_layers,
        "d_model": d_model,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
        "dim_feedforward": dim_feedforward,
        "vocab_size": vocab_size,
        "bytes_per_value": bytes_per_value,
        "batch": batch,
        "context": context,
    }
    n = {name: check_positive_int(value, name, at_most=2**40) for name, value in sizes.items()}
    gated = check_bool(gated, "gated")
    if n["num_heads"] % n["num_kv_heads"]:
        raise ValueError(
            f"num_heads must be a multiple of num_kv_heads (each key/value head serves a group of query heads); "
            f"got {n['num_heads']} and {n['num_kv_heads']}"
        )
    D, H, Hkv, Dh = n["d_model"], n["num_heads"], n["num_kv_heads"], n["head_dim"]
    attention_weights = D * H * Dh * 2 + D * Hkv * Dh * 2  # W_Q and W_O; W_K and W_V
    ffn_weights = (3 if gated else 2) * D * n["dim_feedforward"]
    weights = n["num_layers"] * (attention_weights + ffn_weights) + n["vocab_size"] * D
    kv_values = 2 * n["num_layers"] * Hkv * Dh * n["context"] * n["batch"]
    attention_flops = 4 * n["num_layers"] * H * Dh * n["context"] * n["batch"]  # Q K^T and P V, per new token
    flops = 2 * weights * n["batch"] + attention_flops
    weight_bytes = weights * n["bytes_per_value"]
    kv_bytes = kv_values * n["bytes_per_value"]
    total = weight_bytes + kv_bytes
    return {
        "weights": weights,
        "weight_bytes": weight_bytes,
        "kv_bytes": kv_bytes,
        "bytes": total,
        "flops": flops,
        "intensity": flops / total,
        "kv_share": kv_bytes / total,
    }
