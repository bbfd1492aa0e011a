"""A Llama model's weights in Hugging Face's layout, and transformers' ``LlamaForCausalLM`` built from them.

The reference chapter 14 checks its NumPy model against: the same numbers in
PyTorch's ``(d_out, d_in)`` layout under Hugging Face's names
(``model.layers.0.self_attn.q_proj.weight``, ...), loaded into
``transformers.LlamaForCausalLM``. The weights are read by attribute (an
object shaped like :class:`selfattention.llm.LlamaWeights`), so this module
needs nothing from :mod:`selfattention.llm`. torch and transformers are
imported on first use.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .layout import linear_to_torch

__all__ = ["llama_state_dict", "transformers_llama"]

_LINEARS = (
    ("self_attn.q_proj", "attention", "q"),
    ("self_attn.k_proj", "attention", "k"),
    ("self_attn.v_proj", "attention", "v"),
    ("self_attn.o_proj", "attention", "out"),
    ("mlp.gate_proj", None, "gate"),
    ("mlp.up_proj", None, "up"),
    ("mlp.down_proj", None, "down"),
)
_CONFIG_FIELDS = (
    "vocab_size",
    "d_model",
    "d_ff",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "context_length",
    "rms_norm_eps",
    "rope_base",
)


def llama_state_dict(weights: Any) -> dict[str, np.ndarray]:
    """The weights under Hugging Face's ``LlamaForCausalLM`` names, in PyTorch's layout (copies).

    Parameters
    ----------
    weights : LlamaWeights
        With ``embedding``, ``blocks`` (each with ``attention_norm``,
        ``attention.q/k/v/out``, ``mlp_norm``, ``gate``, ``up``, ``down``)
        and ``final_norm``; query and key columns in the half-split RoPE order.

    Returns
    -------
    dict of str to numpy.ndarray
        ``lm_head.weight`` is left out: the output layer is tied to the embedding.

    Raises
    ------
    ValueError
        If ``weights`` lacks one of those parts.

    Notes
    -----
    See chapter 14 (checking against transformers).
    """
    try:
        state = {
            "model.embed_tokens.weight": np.array(weights.embedding),
            "model.norm.weight": np.array(weights.final_norm),
        }
        for i, block in enumerate(weights.blocks):
            p = f"model.layers.{i}."
            state[p + "input_layernorm.weight"] = np.array(block.attention_norm)
            state[p + "post_attention_layernorm.weight"] = np.array(block.mlp_norm)
            for name, group, part in _LINEARS:
                layer = getattr(block.attention if group else block, part)
                state[p + name + ".weight"] = linear_to_torch(layer)[0]
    except (AttributeError, TypeError) as exc:  # a part missing, or blocks that are not a sequence
        raise ValueError(f"weights must be shaped like selfattention.llm.LlamaWeights; {exc}") from None
    return state


def transformers_llama(weights: Any) -> Any:
    """``transformers.LlamaForCausalLM`` with the same weights, in their dtype, eval mode, fused attention (sdpa).

    Parameters
    ----------
    weights : LlamaWeights
        As for :func:`llama_state_dict`, with a ``config`` (a
        :class:`selfattention.llm.LlamaConfig`).

    Returns
    -------
    transformers.LlamaForCausalLM

    Raises
    ------
    ValueError
        If ``weights`` lacks a part or the state dict does not fit the model.

    Notes
    -----
    See chapter 14. Building it from the NumPy arrays takes about a second;
    loading transformers' own GGUF reader takes far longer (tests compare the two).
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    c = getattr(weights, "config", None)
    if c is None:
        raise ValueError("weights must be shaped like selfattention.llm.LlamaWeights; it has no config")
    absent = [name for name in _CONFIG_FIELDS if not hasattr(c, name)]
    if absent:
        raise ValueError(f"weights.config must be a selfattention.llm.LlamaConfig; it has no {', '.join(absent)}")
    state = llama_state_dict(weights)
    config = LlamaConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.d_model,
        intermediate_size=c.d_ff,
        num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_kv_heads,
        head_dim=c.head_dim,
        max_position_embeddings=c.context_length,
        rms_norm_eps=c.rms_norm_eps,
        rope_theta=c.rope_base,
        tie_word_embeddings=True,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        attn_implementation="sdpa",
    )
    dtype = torch.float64 if state["model.norm.weight"].dtype == np.float64 else torch.float32
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    tensors = {name: torch.from_numpy(array) for name, array in state.items()}
    try:
        missing, unexpected = model.load_state_dict(tensors, strict=False, assign=True)
    except RuntimeError as exc:  # torch's size mismatch: the arrays do not have the config's shapes
        raise ValueError(f"the weights do not have the shapes their config states: {exc}") from None
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise ValueError(f"the state dict does not fit LlamaForCausalLM: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.model.rotary_emb = type(model.model.rotary_emb)(config=config)  # its inv_freq buffer, off the meta device
    return model.to(dtype).eval()
